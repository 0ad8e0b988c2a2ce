"""CAFT's sentence chunking: a long caption -> N sub-captions (papers/caft.txt, Sec. 3.2 and App. B.2).

A caption is split into sentences S_1 .. S_L (``explorer.core.sentences.split_sentences``),
and consecutive sentences are grouped into N chunks (N = 4 in the paper).
A chunk's text is its sentences joined by one space.

Inference: *balanced* chunking. Each chunk first receives floor(L / N)
sentences and the L mod N remaining ones go to the earlier chunks, one each,
in order: L = 6 -> [2, 2, 1, 1], L = 11 -> [3, 3, 3, 2], L = 4 -> [1, 1, 1, 1].
With fewer sentences than chunks the same rule leaves the last chunks empty
(L = 2 -> [1, 1, 0, 0], L = 1 -> [1, 0, 0, 0]); the paper gives no other rule
for inference, and an empty chunk is masked out downstream (CAFT's
whole-caption transformer and its part-level score skip it). Inference never
discards a sentence (the paper's cap of 3 is a training rule): L = 13 gives
[4, 3, 3, 3], and a chunk longer than the 77-token context is cut by the
tokenizer, which says so.

Training: *random* chunking. Each chunk holds 1, 2 or 3 consecutive
sentences, the number drawn at random, under the paper's two constraints
(at least one, at most three per chunk):

- N <= L <= 3N: every sentence is used exactly once. Chunk k draws its size
  uniformly among the sizes in [1, 3] that still let the chunks after it
  hold the rest (each of them needs at least 1 and can take at most 3), so
  the sizes always add up to L.
- L > 3N: the excess sentences are discarded. Every chunk then holds 3, the
  first 3N sentences are kept and the last L - 3N dropped (the paper does
  not say which ones go; keeping the head keeps the caption's opening,
  which usually states the main content).
- L < N: the L sentences fill the first L chunks, one each, and every
  remaining chunk gets one sentence resampled uniformly, with replacement,
  from the L (the paper: "randomly resampled with replacement until all
  chunks are filled").
- L = 0: there is nothing to chunk (an error).

Draws come from a ``torch.Generator`` or a ``random.Random`` passed in
(the global torch generator when None), so a seed fixes the chunks.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Sequence

import torch

from explorer.core.sentences import split_sentences

N_CHUNKS = 4  # the paper's N
MAX_PER_CHUNK = 3  # training: 1..3 sentences per chunk

Generator = torch.Generator | random.Random | None


# ---- inference ----------------------------------------------------------------------------------


def balanced_sizes(n_sentences: int, n_chunks: int = N_CHUNKS) -> list[int]:
    """How many sentences each chunk gets: floor(L/N) each, the remainder to the earlier chunks."""
    if n_sentences < 0 or n_chunks < 1:
        raise ValueError(f"cannot chunk {n_sentences} sentences into {n_chunks} chunks")
    base, extra = divmod(n_sentences, n_chunks)
    return [base + (1 if k < extra else 0) for k in range(n_chunks)]


def split_by_sizes(sentences: Sequence[str], sizes: Sequence[int]) -> list[list[str]]:
    """Consecutive groups of ``sentences`` with the given sizes (which must add up to at most L)."""
    if sum(sizes) > len(sentences):
        raise ValueError(f"sizes {list(sizes)} need more than the {len(sentences)} sentences given")
    groups, start = [], 0
    for size in sizes:
        groups.append(list(sentences[start:start + size]))
        start += size
    return groups


def balanced_chunks(sentences: Sequence[str], n_chunks: int = N_CHUNKS) -> list[list[str]]:
    """Inference chunking: N consecutive groups, balanced; empty groups when L < N."""
    return split_by_sizes(sentences, balanced_sizes(len(sentences), n_chunks))


# ---- training -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class ChunkPlan:
    """Which sentences (indices into S_1..S_L, 0-based) each chunk holds, and what was left out."""

    chunks: list[list[int]]
    discarded: list[int]  # sentences no chunk holds (only when L > 3N)
    resampled: list[int]  # chunks filled by resampling (only when L < N)

    @property
    def sizes(self) -> list[int]:
        return [len(chunk) for chunk in self.chunks]


def _randrange(n: int, generator: Generator) -> int:
    """A uniform integer in [0, n)."""
    if n <= 1:
        return 0
    if isinstance(generator, random.Random):
        return generator.randrange(n)
    return int(torch.randint(n, (1,), generator=generator).item())


def random_chunk_plan(n_sentences: int, n_chunks: int = N_CHUNKS, max_per_chunk: int = MAX_PER_CHUNK,
                      generator: Generator = None) -> ChunkPlan:
    """Training chunking of L sentences into N chunks (rules in the module docstring)."""
    if n_sentences < 1:
        raise ValueError("random chunking needs at least one sentence")
    if n_chunks < 1 or max_per_chunk < 1:
        raise ValueError(f"cannot chunk into {n_chunks} chunks of at most {max_per_chunk}")
    if n_sentences < n_chunks:
        chunks = [[i] for i in range(n_sentences)]
        resampled = list(range(n_sentences, n_chunks))
        chunks += [[_randrange(n_sentences, generator)] for _ in resampled]
        return ChunkPlan(chunks=chunks, discarded=[], resampled=resampled)
    used = min(n_sentences, n_chunks * max_per_chunk)
    chunks, start, remaining = [], 0, used
    for k in range(n_chunks):
        after = n_chunks - k - 1  # chunks still to fill after this one
        low = max(1, remaining - after * max_per_chunk)
        high = min(max_per_chunk, remaining - after)
        size = low + _randrange(high - low + 1, generator)
        chunks.append(list(range(start, start + size)))
        start, remaining = start + size, remaining - size
    return ChunkPlan(chunks=chunks, discarded=list(range(used, n_sentences)), resampled=[])


def random_chunks(sentences: Sequence[str], n_chunks: int = N_CHUNKS, max_per_chunk: int = MAX_PER_CHUNK,
                  generator: Generator = None) -> list[list[str]]:
    """Training chunking: N groups of 1..``max_per_chunk`` sentences (none empty)."""
    plan = random_chunk_plan(len(sentences), n_chunks, max_per_chunk, generator)
    return [[sentences[i] for i in chunk] for chunk in plan.chunks]


# ---- texts --------------------------------------------------------------------------------------


def chunk_texts(chunks: Sequence[Sequence[str]]) -> list[str]:
    """Each chunk's sentences joined by a space ("" for an empty chunk)."""
    return [" ".join(chunk) for chunk in chunks]


def chunk_caption(caption: str, n_chunks: int = N_CHUNKS, training: bool = False,
                  generator: Generator = None) -> list[str]:
    """A caption's N sub-captions: balanced (inference) or random (training)."""
    sentences = split_sentences(caption)
    if training:
        return chunk_texts(random_chunks(sentences, n_chunks, generator=generator))
    return chunk_texts(balanced_chunks(sentences, n_chunks))
