"""CAFT's chunking (papers/caft.txt, App. B.2): balanced at inference, random 1-3 per chunk in training."""

from __future__ import annotations

import itertools
import random

import pytest
import torch

from explorer.models.chunking import (balanced_chunks, balanced_sizes, chunk_caption, chunk_texts, random_chunk_plan,
                                      random_chunks)

S = [f"s{i}" for i in range(20)]


# ---- inference: balanced ------------------------------------------------------------------------


@pytest.mark.parametrize("n, sizes", [(6, [2, 2, 1, 1]), (11, [3, 3, 3, 2]), (4, [1, 1, 1, 1]),
                                      (2, [1, 1, 0, 0]), (1, [1, 0, 0, 0]), (0, [0, 0, 0, 0]),
                                      (13, [4, 3, 3, 3])])
def test_balanced_sizes(n, sizes):
    assert balanced_sizes(n, 4) == sizes


def test_balanced_chunks_are_consecutive_and_empty_when_short():
    assert balanced_chunks(S[:6]) == [["s0", "s1"], ["s2", "s3"], ["s4"], ["s5"]]
    assert balanced_chunks(S[:11]) == [["s0", "s1", "s2"], ["s3", "s4", "s5"], ["s6", "s7", "s8"], ["s9", "s10"]]
    assert balanced_chunks(S[:4]) == [["s0"], ["s1"], ["s2"], ["s3"]]
    assert balanced_chunks(S[:2]) == [["s0"], ["s1"], [], []]
    assert balanced_chunks(S[:1]) == [["s0"], [], [], []]


def test_chunk_caption_joins_sentences():
    caption = "A red cube. A blue ball. A green cone. A grey floor. A white wall. A lamp."
    assert chunk_caption(caption) == ["A red cube. A blue ball.", "A green cone. A grey floor.", "A white wall.",
                                      "A lamp."]
    assert chunk_caption("A red cube. A blue ball.") == ["A red cube.", "A blue ball.", "", ""]
    assert chunk_texts([["a", "b"], []]) == ["a b", ""]


# ---- training: random ---------------------------------------------------------------------------


def plans(n, seeds=range(300)):
    return [random_chunk_plan(n, 4, 3, torch.Generator().manual_seed(seed)) for seed in seeds]


@pytest.mark.parametrize("n", range(4, 13))
def test_random_chunks_use_every_sentence_once_in_order_when_they_fit(n):
    for plan in plans(n, range(60)):
        assert all(1 <= size <= 3 for size in plan.sizes)
        assert list(itertools.chain(*plan.chunks)) == list(range(n))  # consecutive, all used, none twice
        assert plan.discarded == [] and plan.resampled == []


def test_random_sizes_reach_every_allowed_composition():
    allowed = {c for c in itertools.product((1, 2, 3), repeat=4) if sum(c) == 8}
    assert len(allowed) == 19
    assert {tuple(plan.sizes) for plan in plans(8, range(400))} == allowed


@pytest.mark.parametrize("n", [13, 14, 20])
def test_excess_sentences_are_discarded(n):
    for plan in plans(n, range(20)):
        assert plan.sizes == [3, 3, 3, 3]
        assert list(itertools.chain(*plan.chunks)) == list(range(12))
        assert plan.discarded == list(range(12, n))


@pytest.mark.parametrize("n", [1, 2, 3])
def test_too_few_sentences_are_resampled_with_replacement(n):
    seen = set()
    for plan in plans(n, range(200)):
        assert plan.sizes == [1, 1, 1, 1]
        assert plan.chunks[:n] == [[i] for i in range(n)]  # every sentence once, in order
        assert plan.resampled == list(range(n, 4))
        extra = tuple(chunk[0] for chunk in plan.chunks[n:])
        assert all(0 <= i < n for i in extra)
        seen.add(extra)
    # every sentence can be drawn, and the same one more than once (with replacement)
    assert seen == set(itertools.product(range(n), repeat=4 - n))


def test_random_chunking_is_deterministic_under_a_seed():
    def draw(generator):
        return [random_chunk_plan(n, 4, 3, generator) for n in (2, 7, 9, 15)]

    assert draw(torch.Generator().manual_seed(3)) == draw(torch.Generator().manual_seed(3))
    assert draw(random.Random(3)) == draw(random.Random(3))
    runs = {str(draw(torch.Generator().manual_seed(seed))) for seed in range(10)}
    assert len(runs) > 1  # and it is random
    chunks = random_chunks(S[:7], generator=torch.Generator().manual_seed(1))
    plan = random_chunk_plan(7, generator=torch.Generator().manual_seed(1))
    assert chunks == [[S[i] for i in chunk] for chunk in plan.chunks]


def test_nothing_to_chunk():
    with pytest.raises(ValueError):
        random_chunk_plan(0)
