"""Retrieval evaluation, search and background indexing (explorer/retrieval/: evaluate, search, truncation,
indexing; explorer/evaluation/metrics/retrieval: recall_from_ranks, rank_statistics).

A tiny synthetic world (12 scenes, 64 px, every one in the test split) and the demo models. The
exact evaluation is checked against ``explorer eval`` itself (``evaluate_model``), the shortlist path
against the exact one, and everything per query against a score matrix computed here from the model
(``model.similarity``) and ``recall_at_k``. Every cache lives under the test's own temporary folder.
"""

from __future__ import annotations

import csv
import os
import threading
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch

from explorer.core.errors import CaptionError, ImageError
from explorer.core.images import load_image
from explorer.data import read_dataset, write_dataset
from explorer.data.retrieval_sets import RetrievalSet, read_retrieval_set
from explorer.data.retrieval_sets.base import Skipped, skipped_by_reason
from explorer.evaluation import runner
from explorer.evaluation.metrics.retrieval import rank_statistics, recall_at_k, recall_from_ranks
from explorer.evaluation.runner import evaluate_model
from explorer.retrieval import embedding_store
from explorer.retrieval.embedding_store import EmbeddingStore
from explorer.evaluation.retrieval import (evaluate_retrieval, results_csv_text, results_document, results_rows,
                                         worst_queries, write_results_csv)
from explorer.retrieval.indexing import Indexer
from explorer.retrieval.search import Searcher
from explorer.retrieval.truncation import truncation_report
from explorer.retrieval.vector_index import VectorIndex
from explorer.zoo import Zoo
from explorer.core.errors import ExplorerError

REPO = Path(__file__).resolve().parents[1]
N_SCENES = 12


@pytest.fixture(scope="module", autouse=True)
def one_thread_per_worker():
    """Under pytest-xdist the workers already share the cores: one torch thread each, so that OpenMP's
    waiting threads do not double the CPU time (the tiny models gain nothing from more). Restored after."""
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        yield
        return
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def load(name: str):
    """A model object of its own (a fresh zoo: nothing shared with, or patched for, another test)."""
    return Zoo(REPO / "checkpoints").load(name)


@pytest.fixture(scope="module")
def world(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("world")
    write_dataset(root, n_scenes=N_SCENES, seed=0, image_size=64, split_fractions=(0, 0, 1))
    return root


@pytest.fixture(scope="module")
def scenes(world):
    return read_dataset(world, "test")


@pytest.fixture(scope="module")
def synthetic(world) -> RetrievalSet:
    dataset = read_retrieval_set(world, "test")
    assert len(dataset.images) == len(dataset.captions) == N_SCENES
    return dataset


@pytest.fixture(scope="module")
def multi(synthetic, scenes) -> RetrievalSet:
    """The same pictures, several captions each, out of order: every long caption, then every short one,
    then the dense caption of every third scene. The last picture has none (a distractor, never a query)."""
    captioned = range(N_SCENES - 1)
    pairs = [(s.long_caption, i) for i, s in enumerate(scenes) if i in captioned]
    pairs += [(s.short_caption, i) for i, s in enumerate(scenes) if i in captioned]
    pairs += [(scenes[i].dense_caption, i) for i in captioned if i % 3 == 0]
    return replace(synthetic, layout="hand-made", captions=tuple(c for c, _ in pairs),
                   caption_image=tuple(i for _, i in pairs))


SENTENCE_10 = "Dog " + " ".join(["dog"] * 8) + "."  # 10 CLIP tokens
SENTENCE_30 = "Cat " + " ".join(["cat"] * 28) + "."  # 30 CLIP tokens
# caption -> (tokens with SOT and EOT, sentences, sentence in which a 77-token context cuts it or None)
KNOWN_LENGTHS = {
    " ".join([SENTENCE_10] * 7): (72, 7, None),
    " ".join([SENTENCE_10] * 7) + " Dog dog dog dog.": (77, 8, None),  # exactly the context: not cut
    " ".join([SENTENCE_10] * 7) + " Dog dog dog dog dog.": (78, 8, 8),
    " ".join([SENTENCE_10] * 8): (82, 8, 8),
    " ".join([SENTENCE_30] * 3): (92, 3, 3),
    " ".join([SENTENCE_10] * 12): (122, 12, 8),
}


@pytest.fixture(scope="module")
def lengths(synthetic) -> RetrievalSet:
    """The synthetic pictures with captions of known token lengths (the first six), short ones after."""
    captions = list(KNOWN_LENGTHS) + [f"A small picture, the {n}th of the set." for n in range(6, N_SCENES)]
    return replace(synthetic, layout="hand-made", captions=tuple(captions), caption_image=tuple(range(N_SCENES)))


class Indexed:
    """Models loaded once per module and their stores, embedded once (each under its own folder)."""

    def __init__(self, root: Path):
        self.root, self.models, self.stores = root, {}, {}

    def model(self, name: str):
        if name not in self.models:
            self.models[name] = load(name)
        return self.models[name]

    def store(self, name: str, dataset: RetrievalSet) -> EmbeddingStore:
        key = (name, dataset.layout, dataset.captions)
        if key not in self.stores:
            store = EmbeddingStore(self.model(name), dataset, root=self.root / f"emb-{len(self.stores)}")
            assert store.update().complete
            self.stores[key] = store
        return self.stores[key]


@pytest.fixture(scope="module")
def indexed(tmp_path_factory) -> Indexed:
    return Indexed(tmp_path_factory.mktemp("caches"))


def score_matrix(model, dataset: RetrievalSet) -> torch.Tensor:
    """[images, captions] scores computed here, from the pictures on disk, in one pass."""
    pictures = [load_image(path).image for path in dataset.images]
    return model.similarity(model.encode_image(pictures), list(dataset.captions))


def ranks(entry: dict, direction: str) -> list[int]:
    return [record["rank"] for record in entry["queries"][direction]]


# ---- exact evaluation is explorer eval's --------------------------------------------------------------


@pytest.mark.parametrize("name", ["demo-caft", "demo-finelip", "demo-seps", "demo-longclip", "tiny-untrained"])
def test_exact_evaluation_equals_explorer_eval(name, indexed, synthetic, scenes, monkeypatch):
    model = indexed.model(name)
    entry = evaluate_retrieval(model, indexed.store(name, synthetic), ks=(1, 5))
    assert entry["mode"].startswith("exact")
    assert (entry["images"], entry["captions"]) == (N_SCENES, N_SCENES)

    # explorer eval's retrieval numbers (hard negatives are not what is compared here: skipped for time),
    # and the ranks behind them (its first recall_at_k call is the long captions')
    monkeypatch.setattr(runner, "hard_negative_metrics", lambda *args, **kwargs: ({}, {}))
    computed = []
    monkeypatch.setattr(runner, "recall_at_k", lambda *args, **kwargs: computed.append(recall_at_k(*args, **kwargs))
                        or computed[-1])
    metrics = evaluate_model(model, scenes, grounding_limit=0)["metrics"]
    for direction in ("t2i", "i2t"):
        for k in (1, 5):
            assert entry[f"{direction}_R@{k}"] == metrics[f"long_{direction}_R@{k}"], (direction, k)
    long = computed[0]
    assert ranks(entry, "t2i") == (long.t2i_ranks + 1).tolist()
    assert ranks(entry, "i2t") == (long.i2t_ranks + 1).tolist()


# ---- the shortlist path ----------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["demo-finelip", "demo-seps", "demo-longclip", "tiny-untrained"])
def test_shortlist_holding_everything_equals_exact(name, indexed, synthetic):
    model, store = indexed.model(name), indexed.store(name, synthetic)
    exact = evaluate_retrieval(model, store, ks=(1, 5))
    short = evaluate_retrieval(model, store, ks=(1, 5), exact_pairs=0, shortlist=N_SCENES)
    assert short["mode"].startswith("shortlist")
    assert short["mode"].endswith("global cosine") == model.global_score
    for direction in ("t2i", "i2t"):
        assert ranks(short, direction) == ranks(exact, direction)
        for k in (1, 5):
            assert short[f"{direction}_R@{k}"] == exact[f"{direction}_R@{k}"]
        for ours, theirs in zip(short["queries"][direction], exact["queries"][direction]):
            assert [i for i, _ in ours["top"]] == [i for i, _ in theirs["top"]]
            assert [s for _, s in ours["top"]] == pytest.approx([s for _, s in theirs["top"]], abs=1e-5)
    assert short["rsum"] == exact["rsum"]


@pytest.mark.parametrize("name", ["demo-longclip", "tiny-untrained"])
def test_small_shortlist_of_a_global_method_keeps_recall(name, indexed, synthetic):
    """The shortlist by global cosine IS a global-cosine method's ranking: R@K for K <= shortlist is exact,
    and a right answer past the shortlist keeps its rank by the same cosine."""
    model, store = indexed.model(name), indexed.store(name, synthetic)
    assert model.global_score
    exact = evaluate_retrieval(model, store, ks=(1, 2, 3))
    short = evaluate_retrieval(model, store, ks=(1, 2, 3), exact_pairs=0, shortlist=3)
    for direction in ("t2i", "i2t"):
        for k in (1, 2, 3):
            assert short[f"{direction}_R@{k}"] == exact[f"{direction}_R@{k}"]
        assert ranks(short, direction) == ranks(exact, direction)
        assert all(len(record["top"]) == 3 for record in short["queries"][direction])
    if name == "tiny-untrained":  # random weights: some right answers fall past the shortlist
        assert max(ranks(exact, "t2i")) > 3


def test_shortlist_smaller_than_the_largest_k_is_refused(indexed, synthetic):
    model, store = indexed.model("demo-finelip"), indexed.store("demo-finelip", synthetic)
    with pytest.raises(ExplorerError, match="shortlist"):
        evaluate_retrieval(model, store, ks=(1, 5, 10), exact_pairs=0, shortlist=5)
    with pytest.raises(ExplorerError):
        evaluate_retrieval(model, store, ks=(0, 1))


# ---- several captions per picture ------------------------------------------------------------------------


@pytest.mark.parametrize("name, path", [("tiny-untrained", "exact"), ("tiny-untrained", "shortlist"),
                                        ("demo-finelip", "shortlist")])  # global cosine; re-ranked
def test_image_to_text_counts_any_of_its_captions(name, path, indexed, multi):
    model = indexed.model(name)
    ks = (1, 2, 5)
    options = {} if path == "exact" else {"exact_pairs": 0, "shortlist": len(multi.captions)}
    entry = evaluate_retrieval(model, indexed.store(name, multi), ks=ks, **options)
    scores = score_matrix(model, multi)  # [12, 26]
    owner = np.asarray(multi.caption_image)
    recall = recall_at_k(scores, owner, ks=ks)
    assert recall.i2t_queries.tolist() == list(range(N_SCENES - 1))  # the captionless picture is no query
    assert [r["image"] for r in entry["queries"]["i2t"]] == recall.i2t_queries.tolist()
    for k in ks:
        assert entry[f"t2i_R@{k}"] == pytest.approx(recall.text_to_image[k])
        assert entry[f"i2t_R@{k}"] == pytest.approx(recall.image_to_text[k])
        # by hand: a picture is right when any of its captions is among its K best
        hits = [np.isin(np.argsort(-scores[i].numpy(), kind="stable")[:k], np.flatnonzero(owner == i)).any()
                for i in range(N_SCENES - 1)]
        assert entry[f"i2t_R@{k}"] == pytest.approx(np.mean(hits))
    for record in entry["queries"]["i2t"]:
        i = record["image"]
        own = np.flatnonzero(owner == i)
        assert record["captions"] == own.tolist() and len(own) >= 2
        # rank of its best caption: wrong captions scoring at least as high, + 1
        best = scores[i, torch.as_tensor(own)].max()
        assert record["rank"] == int(((scores[i] >= best) & torch.as_tensor(owner != i)).sum()) + 1


# ---- per-query records, worst queries, result rows --------------------------------------------------------


def test_per_query_records(indexed, multi):
    model = indexed.model("tiny-untrained")
    entry = evaluate_retrieval(model, indexed.store("tiny-untrained", multi), ks=(1, 5), top=4)
    scores = score_matrix(model, multi)
    owner = np.asarray(multi.caption_image)
    recall = recall_at_k(scores, owner, ks=(1, 5))
    t2i, i2t = entry["queries"]["t2i"], entry["queries"]["i2t"]
    assert len(t2i) == len(multi.captions) and len(i2t) == N_SCENES - 1
    assert [r["rank"] for r in t2i] == (recall.t2i_ranks + 1).tolist()
    assert [r["rank"] for r in i2t] == (recall.i2t_ranks + 1).tolist()
    assert [(r["caption"], r["image"]) for r in t2i] == list(enumerate(multi.caption_image))
    for record in t2i:
        column = scores[:, record["caption"]]
        top = record["top"]
        assert len(top) == 4
        assert [s for _, s in top] == sorted((s for _, s in top), reverse=True)
        assert [i for i, _ in top] == torch.argsort(column, descending=True, stable=True)[:4].tolist()
        assert [s for _, s in top] == pytest.approx(column[[i for i, _ in top]].tolist(), abs=1e-5)
    for record in i2t:
        top = record["top"]
        assert len(top) == 4 and [s for _, s in top] == sorted((s for _, s in top), reverse=True)
        assert [s for _, s in top] == pytest.approx(scores[record["image"], [j for j, _ in top]].tolist(), abs=1e-5)
    for direction, records in (("t2i", t2i), ("i2t", i2t)):
        worst = worst_queries(entry, direction, n=5)
        assert len(worst) == 5
        assert [r["rank"] for r in worst] == sorted((r["rank"] for r in records), reverse=True)[:5]
        stats = rank_statistics([r["rank"] - 1 for r in records])
        assert entry[f"{direction}_mean_rank"] == pytest.approx(stats["mean_rank"])
        assert entry[f"{direction}_median_rank"] == pytest.approx(stats["median_rank"])
    assert worst_queries(entry, "t2i", n=100) == sorted(t2i, key=lambda r: -r["rank"])
    assert "queries" not in evaluate_retrieval(model, indexed.store("tiny-untrained", multi), ks=(1,), queries=False)


def test_results_rows_and_rsum(indexed, synthetic, tmp_path):
    entries = {name: evaluate_retrieval(indexed.model(name), indexed.store(name, synthetic), ks=(1, 5))
               for name in ("tiny-untrained", "demo-longclip")}
    for entry in entries.values():  # RSUM as the papers sum it: R@1 + R@5 + R@10 both ways, whatever Ks were asked
        full = {d: recall_from_ranks([r["rank"] - 1 for r in entry["queries"][d]], (1, 5, 10)) for d in ("t2i", "i2t")}
        assert entry["rsum"] == pytest.approx(100 * sum(sum(recalls.values()) for recalls in full.values()))
        assert all(full[d][k] == entry[f"{d}_R@{k}"] for d in full for k in (1, 5))
    rows = results_rows({"models": entries})
    assert [row["model"] for row in rows] == list(entries)
    for row, entry in zip(rows, entries.values()):
        assert set(row) == {"model", "score", "t2i_R@1", "t2i_R@5", "i2t_R@1", "i2t_R@5", "t2i_median_rank",
                            "i2t_median_rank", "rsum", "captions_cut"}
        assert all(row[key] == entry[key] for key in row if key not in ("model", "captions_cut"))
        assert row["captions_cut"] == entry["truncation"]["cut"]
    narrow = results_rows({"models": entries}, ks=[1])
    assert not any(key.endswith("@5") for key in narrow[0]) and "t2i_R@1" in narrow[0]
    # the results file (the CLI's and the page's) and its CSV: one row per model, results_rows' values
    document = results_document(synthetic, (1, 5), entries)
    assert document["format"] == "explorer-retrieval" and document["ks"] == [1, 5]
    assert document["dataset"]["images"] == N_SCENES and document["models"] == entries
    written = list(csv.DictReader(write_results_csv(document, tmp_path / "r.csv", (1, 5)).open()))
    assert [row["model"] for row in written] == list(entries)
    assert all(float(row[key]) == pytest.approx(want[key]) for row, want in zip(written, rows)
               for key in want if key not in ("model", "score"))
    assert results_csv_text(document, (1,)).splitlines()[0].split(",")[:3] == ["model", "score", "t2i_R@1"]


def test_keeping_some_pictures_keeps_the_set_consistent():
    images = tuple(Path(f"/data/{n}.png") for n in range(4))
    dataset = RetrievalSet("folder", Path("/data"), "all", images, ("a", "b0", "b1", "c", "d"), (0, 1, 1, 2, 3),
                           image_ids=("a", "b", "c", "d"), skipped=(Skipped("/data/e.png", "image missing"),))
    kept = dataset.keep_images([3, 1], note="two of them", skipped=[Skipped("/data/0.png", "image unreadable: x"),
                                                                    Skipped("/data/2.png", "image unreadable: y")])
    assert kept.images == (images[1], images[3]) and kept.image_ids == ("b", "d")
    assert kept.captions == ("b0", "b1", "d") and kept.caption_image == (0, 0, 1)
    assert kept.notes == ("two of them",) and len(kept.skipped) == 3
    assert skipped_by_reason(kept.skipped) == {"image missing": 1, "image unreadable": 2}
    assert "3 left out (1 image missing, 2 image unreadable)" in kept.summary()
    assert dataset.keep_images(range(4), note="all of them") is dataset  # nothing dropped: the set itself
    with pytest.raises(ExplorerError):
        dataset.keep_images([4])


# ---- truncation ---------------------------------------------------------------------------------------------


def test_truncation_of_captions_of_known_lengths(indexed, lengths):
    clip = indexed.model("demo-clip-base")
    assert clip.context_length == 77 and not clip.reads_whole_caption
    entry = evaluate_retrieval(clip, indexed.store("demo-clip-base", lengths), ks=(1,))
    report = entry["truncation"]
    expected = {index: known for index, known in enumerate(KNOWN_LENGTHS.values()) if known[2] is not None}
    assert report["cut"] == len(expected) == 4 and report["captions"] == N_SCENES
    assert report["share_cut"] == pytest.approx(4 / N_SCENES)
    assert [example["caption"] for example in report["examples"]] == sorted(expected)
    for example in report["examples"]:
        tokens, sentences, sentence = expected[example["caption"]]
        assert (example["tokens"], example["lost"]) == (tokens, tokens - 77)
        assert (example["sentence"], example["sentences"]) == (sentence, sentences)
        assert 0 < example["read_share"] < 1
    assert report["max_tokens"] == 122
    assert "4 of 12 captions" in report["summary"] and "cut at 77 tokens" in report["summary"]
    direct = truncation_report(clip, lengths.captions)
    assert direct.cut == 4 and direct.summary() == report["summary"]

    caft = indexed.model("demo-caft")
    assert caft.context_length == 77 and caft.reads_whole_caption
    report = truncation_report(caft, lengths.captions).as_dict()
    assert report["cut"] == 0 and report["examples"] == [] and report["reads_whole_caption"]
    assert report["summary"].startswith("nothing cut") and report["max_tokens"] == 122

    long = truncation_report(indexed.model("demo-longclip"), lengths.captions)  # 248 tokens: all fit
    assert long.cut == 0 and long.summary().startswith("nothing cut at 248 tokens")


# ---- the searcher ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["demo-seps", "tiny-untrained"])  # re-ranked by its own score; global cosine
def test_text_query_of_a_dataset_caption_finds_its_truth_at_the_evaluated_rank(name, indexed, synthetic):
    model, store = indexed.model(name), indexed.store(name, synthetic)
    entry = evaluate_retrieval(model, store, ks=(1,))
    searcher = Searcher(model, store)
    t2i, i2t = entry["queries"]["t2i"], entry["queries"]["i2t"]
    if not model.global_score:  # each query scores the gallery with the method: the worst ranks and a few others
        t2i = sorted(t2i, key=lambda r: -r["rank"])[:3] + t2i[:2]
        i2t = sorted(i2t, key=lambda r: -r["rank"])[:2] + i2t[:1]
    assert max(r["rank"] for r in t2i) > 1 and max(r["rank"] for r in i2t) > 1
    for record in t2i:
        result = searcher.text(synthetic.captions[record["caption"]], k=5)
        assert result.direction == "t2i" and result.truth == [record["image"]]
        assert result.truth_rank == record["rank"] and result.truth_in_shortlist
        assert (result.ranked, result.gallery) == (N_SCENES, N_SCENES)
        assert len(result.hits) == 5
        assert [h.score for h in result.hits] == sorted((h.score for h in result.hits), reverse=True)
        assert [h.is_truth for h in result.hits] == [h.index == record["image"] for h in result.hits]
        assert [h.index for h in result.hits] == [i for i, _ in record["top"][:5]]
        assert result.score_label == ("cosine" if model.global_score else model.score_label)
    for record in i2t:
        result = searcher.image(record["image"], k=3)
        assert result.direction == "i2t" and result.truth == record["captions"]
        assert result.truth_rank == record["rank"]


def test_image_query_truth_is_every_caption_of_the_picture(indexed, multi):
    model, store = indexed.model("tiny-untrained"), indexed.store("tiny-untrained", multi)
    entry = evaluate_retrieval(model, store, ks=(1,))
    searcher = Searcher(model, store)
    for record in entry["queries"]["i2t"]:
        result = searcher.image(np.int64(record["image"]), k=len(multi.captions))
        assert result.truth == record["captions"] and len(result.truth) >= 2
        assert result.truth_rank == record["rank"]
        assert {h.index for h in result.hits if h.is_truth} == set(record["captions"])
    lonely = searcher.image(N_SCENES - 1)  # the picture with no caption: nothing is right
    assert lonely.truth == [] and lonely.truth_rank is None
    with pytest.raises(ImageError):
        searcher.image(N_SCENES)
    own = searcher.image(load_image(multi.images[0]).image)  # a picture of the user's: no truth
    assert own.truth == [] and own.truth_rank is None and not any(h.is_truth for h in own.hits)


def test_free_text_and_empty_queries(indexed, synthetic):
    model, store = indexed.model("demo-finelip"), indexed.store("demo-finelip", synthetic)
    searcher = Searcher(model, store)
    result = searcher.text("a violin made of glass floating above a frozen lake", k=4)
    assert result.truth == [] and result.truth_rank is None and result.truth_in_shortlist
    assert len(result.hits) == 4 and not any(h.is_truth for h in result.hits) and result.notes == []
    for empty in ("", "   \n\t"):
        with pytest.raises(CaptionError):
            searcher.text(empty)
    # a caption typed with other spacing is still the dataset's caption
    spaced = "  " + synthetic.captions[3].replace(" ", "  ") + " "
    assert searcher.text(spaced).truth == [synthetic.caption_image[3]]


def test_a_query_past_the_context_says_it_is_cut(indexed, lengths, synthetic):
    long_caption, short_caption = lengths.captions[5], lengths.captions[0]  # 122 and 72 tokens
    clip = Searcher(indexed.model("demo-clip-base"), indexed.store("demo-clip-base", lengths))
    notes = clip.text(long_caption).notes
    assert len(notes) == 1 and "cut at 77 tokens" in notes[0] and "45 tokens" in notes[0]
    assert clip.text(short_caption).notes == []
    caft = Searcher(indexed.model("demo-caft"), indexed.store("demo-caft", synthetic))  # any gallery will do
    assert caft.text(long_caption).notes == []


@pytest.mark.parametrize("name", ["demo-seps", "tiny-untrained"])
def test_truth_outside_a_small_shortlist(name, indexed, synthetic):
    model, store = indexed.model(name), indexed.store(name, synthetic)
    shortlist = 2
    searcher = Searcher(model, store, shortlist=shortlist, rerank_all=0)
    cosine = store.image_vectors() @ store.caption_vectors().T  # [images, captions]
    owner = np.asarray(synthetic.caption_image)
    cosine_rank = [int((cosine[:, j] >= cosine[owner[j], j]).sum()) for j in range(N_SCENES)]  # 1-based, ties against
    outside = [j for j in range(N_SCENES) if cosine_rank[j] > shortlist]
    inside = [j for j in range(N_SCENES) if cosine_rank[j] <= shortlist]
    assert outside and inside  # the seeded world has both
    for j in outside:
        result = searcher.text(synthetic.captions[j], k=5)
        assert result.ranked == shortlist and len(result.hits) == shortlist
        assert not result.truth_in_shortlist and result.truth_rank == cosine_rank[j] > shortlist
        assert not any(h.is_truth for h in result.hits)
    for j in inside:
        result = searcher.text(synthetic.captions[j], k=5)
        assert result.truth_in_shortlist and 1 <= result.truth_rank <= shortlist
        assert any(h.is_truth for h in result.hits)


@pytest.mark.parametrize("name", ["demo-seps", "tiny-untrained"])
def test_an_ivf_gallery_that_returns_fewer_candidates(name, indexed, synthetic):
    """IVF scans only ``nprobe`` of its cells: fewer hits than asked for come back (id -1 marks the rest).
    None of those places is a candidate, and a right answer in no probed cell still gets a rank (a bound)."""
    model, store = indexed.model(name), indexed.store(name, synthetic)
    searcher = Searcher(model, store, shortlist=8, rerank_all=0)
    searcher.images = VectorIndex(store.image_vectors(), kind="ivf", nlist=4, nprobe=1)  # a 12-picture IVF
    unseen = 0
    for j, caption in enumerate(synthetic.captions):
        found = int((searcher.images.search(store.caption_vectors([j]), N_SCENES)[1] >= 0).sum())
        assert found < 8  # the 12 pictures in 4 cells, one probed
        result = searcher.text(caption, k=10)
        assert result.ranked == found and len(result.hits) == found
        assert all(0 <= h.index < N_SCENES for h in result.hits) and result.truth == [j]
        if not result.truth_in_shortlist:
            unseen += 1
            assert result.truth_rank == found + 1
            assert any("not among the" in note and "IVF index returned" in note for note in result.notes)
        else:
            assert 1 <= result.truth_rank <= found
            assert not any("not among the" in note for note in result.notes)
        assert any(note.startswith("IVF (nlist 4, nprobe 1): recall@10") for note in result.notes)  # stated
    assert unseen  # the seeded world has right answers outside the probed cell


# ---- background indexing --------------------------------------------------------------------------------------


class Gate:
    """Wraps ``model.encode_image``: each call says it has started (``entered``), then waits for a permit."""

    def __init__(self, model, monkeypatch, error: Exception | None = None):
        self.entered, self.permits = threading.Semaphore(0), threading.Semaphore(0)
        self.pictures = 0
        original = model.encode_image

        def encode(images, *args, **kwargs):
            self.entered.release()
            if not self.permits.acquire(timeout=60):
                raise RuntimeError("the test never let this batch through")
            if error is not None:
                raise error
            self.pictures += len(images)
            return original(images, *args, **kwargs)

        monkeypatch.setattr(model, "encode_image", encode)

    def wait_entered(self) -> None:
        assert self.entered.acquire(timeout=60), "the indexer never started the next batch"

    def let_through(self, n: int = 1) -> None:
        self.permits.release(n)


def wait_until(condition, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


@pytest.fixture
def indexer():
    indexer = Indexer()
    yield indexer
    indexer.shutdown()


@pytest.fixture
def small_batches(monkeypatch):
    monkeypatch.setattr(embedding_store, "IMAGE_BATCH", 4)  # 12 pictures: 3 batches, so progress moves


def test_indexer_runs_in_the_background_with_progress(indexer, synthetic, tmp_path, monkeypatch, small_batches):
    model = load("tiny-untrained")
    gate = Gate(model, monkeypatch)
    store = EmbeddingStore(model, synthetic, root=tmp_path / "emb")
    try:
        task = indexer.submit(store)  # returns while the first batch waits at the gate
        assert task.active and task.state in ("queued", "running")
        gate.wait_entered()
        assert task.state == "running" and (task.phase, task.done, task.total) == ("images", 0, N_SCENES)
        assert indexer.submit(store) is task
        assert indexer.submit(EmbeddingStore(model, synthetic, root=tmp_path / "emb")) is task  # same folder
        assert indexer.task(store.folder) is task and indexer.tasks() == [task]
        for done in (4, 8):
            gate.let_through()
            gate.wait_entered()
            assert (task.done, task.total) == (done, N_SCENES) and "embedding images" in task.line()
        gate.let_through()
        wait_until(lambda: not task.active)
    finally:
        gate.let_through(100)
    assert task.state == "done" and task.error == "" and task.finished is not None
    assert task.status.complete and task.status.images_done == N_SCENES and task.fraction == 1.0
    assert task.phase == "captions" and f"{N_SCENES}/{N_SCENES} images" in task.line()
    assert gate.pictures == N_SCENES and EmbeddingStore(model, synthetic, root=tmp_path / "emb").status().complete
    again = indexer.submit(store)  # a finished task is not active: a new one, with nothing left to embed
    wait_until(lambda: not again.active)
    assert again is not task and again.state == "done" and gate.pictures == N_SCENES


def test_a_failing_task_keeps_its_error_and_the_worker_goes_on(indexer, synthetic, tmp_path, monkeypatch):
    broken = load("tiny-untrained")

    def encode(images, *args, **kwargs):
        raise RuntimeError("the encoder broke:\n out of memory")

    monkeypatch.setattr(broken, "encode_image", encode)
    failing = indexer.submit(EmbeddingStore(broken, synthetic, root=tmp_path / "a"))
    following = indexer.submit(EmbeddingStore(load("tiny-untrained"), synthetic, root=tmp_path / "b"))
    wait_until(lambda: not following.active)
    assert failing.state == "failed" and failing.error == "the encoder broke: out of memory"
    assert failing.status is None and "failed: the encoder broke" in failing.line()
    assert following.state == "done" and following.status.complete


def test_stop_keeps_what_was_embedded_and_resumes(indexer, synthetic, tmp_path, monkeypatch, small_batches):
    model = load("tiny-untrained")
    gate = Gate(model, monkeypatch)
    folder = tmp_path / "emb"
    try:
        task = indexer.submit(EmbeddingStore(model, synthetic, root=folder))
        queued = indexer.submit(EmbeddingStore(model, synthetic, root=tmp_path / "other"))
        gate.wait_entered()
        gate.let_through()
        gate.wait_entered()  # the second batch is being encoded
        assert queued.state == "queued"
        indexer.stop(task)
        indexer.stop(queued)  # stopped before it starts: it never runs
        gate.let_through()
        wait_until(lambda: not task.active and not queued.active)
    finally:
        gate.let_through(100)
    assert task.state == "stopped" and task.done == 8
    assert task.status.images_done == 8 and not task.status.complete
    assert queued.state == "stopped" and queued.done == 0 and queued.finished is not None
    status = EmbeddingStore(load("tiny-untrained"), synthetic, root=folder).status()  # on disk, as a new store reads it
    assert (status.images_done, status.captions_done) == (8, 0)
    gate.let_through(100)
    resumed = indexer.submit(EmbeddingStore(model, synthetic, root=folder))
    wait_until(lambda: not resumed.active)
    assert resumed.state == "done" and resumed.status.complete
    assert gate.pictures == N_SCENES  # 8 before the stop, the 4 left after it: nothing twice


# ---- the metrics the evaluation is built on ---------------------------------------------------------------------


def test_recall_from_ranks_and_rank_statistics_on_hand_made_ranks():
    ranks = [0, 1, 4, 10, 0]  # 0-based: 0 = top
    assert recall_from_ranks(ranks, ks=(10, 1, 5, 5)) == {1: 0.4, 5: 0.8, 10: 0.8}
    assert recall_from_ranks(np.asarray(ranks), ks=(11,)) == {11: 1.0}
    stats = rank_statistics(ranks)
    assert stats == {"mean_rank": pytest.approx(4.0), "median_rank": 2.0}  # 1-based: (1+2+5+11+1)/5, median 2
    assert rank_statistics([3]) == {"mean_rank": 4.0, "median_rank": 4.0}
    assert rank_statistics([0, 1]) == {"mean_rank": 1.5, "median_rank": 1.5}
    empty = rank_statistics([])
    assert np.isnan(empty["mean_rank"]) and np.isnan(empty["median_rank"])
    assert np.isnan(recall_from_ranks([], ks=(1,))[1])
    # the same as recall_at_k's own recalls, from its ranks
    scores = torch.tensor([[0.9, 0.1, 0.5], [0.2, 0.8, 0.7], [0.3, 0.95, 0.1]])  # [images, captions]
    recall = recall_at_k(scores, ks=(1, 2))
    assert recall.t2i_ranks.tolist() == [0, 1, 2] and recall.i2t_ranks.tolist() == [0, 0, 2]
    assert recall_from_ranks(recall.t2i_ranks, ks=(1, 2)) == recall.text_to_image
    assert recall_from_ranks(recall.i2t_ranks, ks=(1, 2)) == recall.image_to_text


# ---- review fixes: search agrees with the Recall table; a changed dataset is a new gallery; kill leftovers --


@pytest.mark.parametrize("name", ["demo-seps", "demo-caft"])
def test_every_query_ranks_its_truth_where_the_recall_table_does(name, synthetic, tmp_path):
    """A gallery the Recall table scores pair by pair is ranked the same way by a query (both directions)."""
    model = load(name)
    store = EmbeddingStore(model, synthetic, root=tmp_path / "emb")
    store.update()
    entry = evaluate_retrieval(model, store, ks=(1,))
    searcher = Searcher(model, store)
    for record in entry["queries"]["t2i"][:4]:
        result = searcher.text(synthetic.captions[record["caption"]], k=1)
        assert result.truth_rank == record["rank"] and result.truth_in_shortlist
    for record in entry["queries"]["i2t"][:4]:
        assert searcher.image(record["image"], k=1).truth_rank == record["rank"]


def test_a_changed_dataset_is_searched_as_it_is_now(synthetic, tmp_path):
    model = load("demo-longclip")
    store = EmbeddingStore(model, synthetic, root=tmp_path / "emb")
    store.update()
    assert len(Searcher(model, store).images) == N_SCENES
    fewer = replace(synthetic, images=synthetic.images[:-1], captions=synthetic.captions[:-1],
                    caption_image=synthetic.caption_image[:-1], image_ids=synthetic.image_ids[:-1])
    smaller = EmbeddingStore(model, fewer, root=tmp_path / "emb")  # same folder, same cache: one picture less
    assert smaller.folder == store.folder and smaller.status().complete
    searcher = Searcher(model, smaller)
    assert len(searcher.images) == N_SCENES - 1
    assert searcher.text(fewer.captions[-1], k=3).truth_rank is not None  # no IndexError, the truth is found


def test_a_temporary_file_left_by_a_kill_is_removed_on_the_next_update(synthetic, tmp_path):
    model = load("demo-longclip")
    store = EmbeddingStore(model, synthetic, root=tmp_path / "emb")
    store.update()
    leftover = store.folder / ".images-000001.safetensors.0123456789ab.tmp"  # what a SIGKILL mid-write leaves
    leftover.write_bytes(b"\0" * 64)
    store.update()
    assert not leftover.exists() and store.status().complete
