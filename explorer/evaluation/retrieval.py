"""Recall@K of a model on a retrieval dataset, both ways, as the papers and clip_benchmark count it.

    store = EmbeddingStore(model, read_retrieval_set("data/urban1k"))
    store.update()
    entry = evaluate_retrieval(model, store)          # {"t2i_R@1": 0.81, ..., "truncation": {...}}

- text -> image: each caption is a query; right when its own image is in the top K.
- image -> text: each image is a query; right when any of its captions is in the top K.
- Ranks are 0-based in the arrays and 1-based in what people read (``mean_rank``, ``median_rank``,
  the per-query records: 1 = top); ties count against the model (``metrics.retrieval``).

Scores are the method's own (``Model.similarity``: FineLIP*, CAFT++, SEPS's late interaction, ...):

- exact, when the dataset has at most ``exact_pairs`` image-caption pairs (5,000 x 5,000 by default):
  every pair is scored, exactly as ``explorer eval`` scores them (``evaluation.runner.score_captions``,
  64 captions at a time, the pictures' features from the cache) -- so the synthetic world's numbers
  are ``explorer eval``'s;
- past that, a shortlist: the ``shortlist`` best candidates of each query by the cosine of the global
  embeddings (``VectorIndex``), re-ranked by the method's score. A right answer outside its shortlist
  keeps its global-cosine rank (at least ``shortlist``), so R@K for K <= ``shortlist`` counts exactly
  what a user of the shortlist would see. A method whose score is the global cosine needs no re-ranking.
"""

from __future__ import annotations

import csv
import io
import time
from pathlib import Path
from typing import Callable, Sequence

import numpy as np
import torch

from explorer.core.errors import ExplorerError, InputError
from explorer.core.files import write_text_atomic
from explorer.data.retrieval_sets.base import skipped_by_reason
from explorer.evaluation.metrics.retrieval import rank_statistics, recall_at_k, recall_from_ranks, rsum
from explorer.evaluation.runner import DEFAULT_CAPTION_CHUNK, score_captions
from explorer.retrieval.embedding_store import EmbeddingStore, StoreError
from explorer.retrieval.search import DEFAULT_SHORTLIST
from explorer.retrieval.truncation import truncation_report
from explorer.retrieval.vector_index import VectorIndex, top_k

DEFAULT_KS = (1, 5, 10, 25, 50)
EXACT_PAIRS = 25_000_000  # image-caption pairs scored exactly by the method (DOCCI's 5,000 x 5,000)
DEFAULT_TOP = 10  # candidates kept per query in the per-query records
FORMAT = "explorer-retrieval"
VERSION = 1


def evaluate_retrieval(model, store: EmbeddingStore, ks: Sequence[int] = DEFAULT_KS, *,
                       exact_pairs: int = EXACT_PAIRS, shortlist: int = DEFAULT_SHORTLIST, top: int = DEFAULT_TOP,
                       queries: bool = True, progress: Callable[[int, int, str], None] | None = None) -> dict:
    """Recall@K, ranks and RSUM of ``model`` on ``store``'s dataset (indexed first: ``store.update``)."""
    ks = sorted({int(k) for k in ks})
    if not ks or ks[0] < 1:
        raise InputError("every K must be at least 1")
    if not store.status().complete:
        raise StoreError(f"{store.dataset.summary()}: not fully embedded yet; run the indexing first "
                         f"(`explorer index`)")
    dataset = store.usable_set()
    if not dataset.captions:
        raise StoreError(f"{dataset.summary()}: there is nothing to retrieve (no readable image with a caption)")
    owner = np.asarray(dataset.caption_image)
    started = time.perf_counter()
    pairs = len(dataset.images) * len(dataset.captions)
    if pairs <= exact_pairs:
        t2i, i2t, queries_of, t2i_top, i2t_top = _exact(model, store, dataset, owner, top, progress)
        mode = f"exact: every pair scored by {model.score_label}"
    else:
        if shortlist < ks[-1]:
            raise InputError(f"the shortlist ({shortlist}) must hold at least the largest K ({ks[-1]})")
        t2i, i2t, queries_of, t2i_top, i2t_top = _shortlisted(model, store, dataset, owner, shortlist, top, progress)
        how = "global cosine" if model.global_score else f"re-ranked by {model.score_label}"
        mode = f"shortlist: the {shortlist} best by global cosine per query, {how}"
    entry = {"name": getattr(model, "name", ""), "method": getattr(model, "method_name", ""),
             "score": str(getattr(model, "score_label", "")), "context_length": int(model.context_length),
             "mode": mode, "images": len(dataset.images), "captions": len(dataset.captions)}
    t2i_recall, i2t_recall = recall_from_ranks(t2i, ks), recall_from_ranks(i2t, ks)
    entry.update({f"t2i_R@{k}": v for k, v in t2i_recall.items()})
    entry.update({f"i2t_R@{k}": v for k, v in i2t_recall.items()})
    entry.update({f"t2i_{name}": v for name, v in rank_statistics(t2i).items()})
    entry.update({f"i2t_{name}": v for name, v in rank_statistics(i2t).items()})
    entry["rsum"] = rsum(t2i, i2t)  # as the papers sum it: R@1 + R@5 + R@10 both ways, whatever Ks were asked
    entry["truncation"] = truncation_report(model, dataset.captions).as_dict()
    entry["seconds"] = round(time.perf_counter() - started, 3)
    if queries:
        entry["queries"] = {
            "t2i": [{"caption": j, "image": int(owner[j]), "rank": int(t2i[j]) + 1, "top": t2i_top[j]}
                    for j in range(len(t2i))],
            "i2t": [{"image": int(i), "captions": [int(c) for c in np.flatnonzero(owner == i)],
                     "rank": int(r) + 1, "top": i2t_top[n]} for n, (i, r) in enumerate(zip(queries_of, i2t))]}
    return entry


def first_images(dataset, n: int):
    """The first ``n`` pictures of ``dataset`` with their captions (``explorer eval`` takes the first scenes)."""
    if n < 1:
        raise ExplorerError(f"--limit must be at least 1, not {n}")
    return dataset.keep_images(range(min(n, len(dataset.images))),
                               note=f"only the first {n} of {len(dataset.images)} pictures (--limit)")


def read_evaluation_set(path: str | Path, split: str | None = None, layout: str | None = None,
                        limit: int | None = None):
    """The dataset ``explorer eval-retrieval`` and an evaluation job measure: read in its layout, cut to
    the first ``limit`` pictures; a missing path is said as such."""
    from explorer.data.retrieval_sets import read_retrieval_set

    if not Path(path).exists():
        raise ExplorerError(f"no dataset at {path}: the path does not exist")
    dataset = read_retrieval_set(Path(path), split=split, layout=layout)
    return dataset if limit is None else first_images(dataset, limit)


def dataset_record(dataset) -> dict:
    """What a results file says about the dataset it measured (left-out items counted by reason)."""
    return {"layout": dataset.layout, "root": str(dataset.root), "split": dataset.split,
            "images": len(dataset.images), "captions": len(dataset.captions), "skipped": len(dataset.skipped),
            "skipped_by_reason": skipped_by_reason(dataset.skipped),
            "skipped_examples": [vars(s) for s in dataset.skipped[:20]], "notes": list(dataset.notes)}


def results_document(dataset, ks: Sequence[int], entries: dict[str, dict]) -> dict:
    """The results file of ``explorer eval-retrieval`` and the page's export: the dataset measured (the
    usable set the entries count in), the Ks, and ``evaluate_retrieval``'s entry per model."""
    return {"format": FORMAT, "version": VERSION, "dataset": dataset_record(dataset), "ks": list(ks),
            "models": dict(entries)}


def worst_queries(entry: dict, direction: str = "t2i", n: int = 10) -> list[dict]:
    """The ``n`` queries whose right answer ranked lowest (largest rank first)."""
    records = entry.get("queries", {}).get(direction, [])
    return sorted(records, key=lambda record: -record["rank"])[:n]


def results_rows(results: dict, ks: Sequence[int] | None = None) -> list[dict]:
    """One flat row per model (for CSV and the page's table): R@K both ways, ranks, RSUM, cut captions."""
    rows = []
    for name, entry in results["models"].items():
        wanted = ks or [int(key.split("@")[1]) for key in entry if key.startswith("t2i_R@")]
        row = {"model": name, "score": entry["score"]}
        row.update({f"t2i_R@{k}": entry[f"t2i_R@{k}"] for k in wanted})
        row.update({f"i2t_R@{k}": entry[f"i2t_R@{k}"] for k in wanted})
        row.update({key: entry[key] for key in ("t2i_median_rank", "i2t_median_rank", "rsum")})
        row["captions_cut"] = entry["truncation"]["cut"]
        rows.append(row)
    return rows


def results_csv_text(results: dict, ks: Sequence[int] | None = None) -> str:
    """``results_rows`` as CSV: a header, then one line per model."""
    rows, text = results_rows(results, ks), io.StringIO()
    writer = csv.DictWriter(text, fieldnames=list(rows[0]) if rows else ["model"], lineterminator="\n")
    writer.writeheader()
    writer.writerows(rows)
    return text.getvalue()


def write_results_csv(results: dict, path: str | Path, ks: Sequence[int] | None = None) -> Path:
    """``results_csv_text`` written atomically to ``path``."""
    return write_text_atomic(path, results_csv_text(results, ks))


# ---- exact: every pair ------------------------------------------------------------------------------


def _exact(model, store, dataset, owner, top, progress):
    features = store.image_features().to(model.device)
    scores = score_captions(model, features, list(dataset.captions), DEFAULT_CAPTION_CHUNK)  # [I, T]
    recall = recall_at_k(scores, owner, ks=(1,))
    k = min(top, scores.shape[0])
    values, ids = top_k(scores.T, k)
    t2i_top = [_pairs(ids[j], values[j]) for j in range(scores.shape[1])]
    k = min(top, scores.shape[1])
    values, ids = top_k(scores[torch.as_tensor(recall.i2t_queries)], k)
    i2t_top = [_pairs(ids[n], values[n]) for n in range(len(recall.i2t_queries))]
    if progress:
        progress(1, 1, "scores")
    return recall.t2i_ranks, recall.i2t_ranks, recall.i2t_queries, t2i_top, i2t_top


# ---- shortlist: global cosine, then the method's score ---------------------------------------------


def _shortlisted(model, store, dataset, owner, shortlist, top, progress):
    image_vectors, caption_vectors = store.image_vectors(), store.caption_vectors()
    n_images, n_captions = len(image_vectors), len(caption_vectors)
    t2i_scores, t2i_ids = VectorIndex(image_vectors).search(caption_vectors, min(shortlist, n_images))
    queries = np.unique(owner)
    i2t_scores, i2t_ids = VectorIndex(caption_vectors).search(image_vectors[torch.as_tensor(queries)],
                                                              min(shortlist, n_captions))
    if (t2i_ids < 0).any() or (i2t_ids < 0).any():  # an IVF index returns only what its probed cells hold
        raise InputError("the gallery's approximate index returned fewer candidates than the shortlist; "
                         "use a smaller shortlist")
    if not model.global_score:
        t2i_scores, i2t_scores = _rerank(model, store, dataset, t2i_ids, i2t_ids, queries, progress)
    t2i_ranks = np.empty(n_captions, dtype=np.int64)
    t2i_top = []
    for j in range(n_captions):
        candidates, scores = t2i_ids[j], t2i_scores[j]
        t2i_ranks[j] = _rank(candidates, scores, candidates == int(owner[j]),
                             lambda: image_vectors @ caption_vectors[j], [int(owner[j])])
        t2i_top.append(_best(candidates, scores, top))
    i2t_ranks = np.empty(len(queries), dtype=np.int64)
    i2t_top = []
    for n, image in enumerate(queries):
        candidates, scores = i2t_ids[n], i2t_scores[n]
        own = np.flatnonzero(owner == image)
        i2t_ranks[n] = _rank(candidates, scores, torch.as_tensor(np.isin(candidates.numpy(), own)),
                             lambda: caption_vectors @ image_vectors[int(image)], own.tolist())
        i2t_top.append(_best(candidates, scores, top))
    return t2i_ranks, i2t_ranks, queries, t2i_top, i2t_top


def _rerank(model, store, dataset, t2i_ids, i2t_ids, queries, progress):
    """The method's scores of every shortlisted pair, computed caption chunk by caption chunk: each chunk's
    captions are encoded once and scored against the pictures that any of its pairs needs."""
    n_captions = len(dataset.captions)
    wanted: dict[int, set[int]] = {}  # caption -> pictures it must be scored with
    for j in range(n_captions):
        wanted.setdefault(j, set()).update(int(i) for i in t2i_ids[j])
    for n, image in enumerate(queries):
        for j in i2t_ids[n].tolist():
            wanted.setdefault(int(j), set()).add(int(image))
    pair_scores: dict[tuple[int, int], float] = {}
    for start in range(0, n_captions, DEFAULT_CAPTION_CHUNK):
        chunk = list(range(start, min(n_captions, start + DEFAULT_CAPTION_CHUNK)))
        pictures = sorted(set().union(*(wanted.get(j, set()) for j in chunk)))
        if not pictures:
            continue
        scores = model.similarity(store.image_features(pictures).to(model.device), [dataset.captions[j] for j in chunk])
        for row, image in enumerate(pictures):
            for column, j in enumerate(chunk):
                if image in wanted.get(j, ()):
                    pair_scores[(image, j)] = float(scores[row, column])
        if progress:
            progress(chunk[-1] + 1, n_captions, "re-ranking")
    t2i = torch.tensor([[pair_scores[(int(i), j)] for i in t2i_ids[j]] for j in range(n_captions)])
    i2t = torch.tensor([[pair_scores[(int(image), int(j))] for j in i2t_ids[n]] for n, image in enumerate(queries)])
    return t2i, i2t


def _rank(candidates, scores, right, global_scores, right_ids) -> int:
    """0-based rank of the best right candidate among the shortlist (ties against the model); when no right
    candidate made the shortlist, its rank by the global cosine over the whole gallery."""
    right = torch.as_tensor(right, dtype=torch.bool)
    if right.any():
        best = scores[right].max()
        return int(((scores >= best) & ~right).sum())
    everything = global_scores()
    mask = torch.zeros(len(everything), dtype=torch.bool)
    mask[torch.as_tensor(right_ids)] = True
    best = everything[mask].max()
    return max(int(((everything >= best) & ~mask).sum()), len(candidates))


def _best(candidates, scores, top) -> list[list]:
    values, order = top_k(scores[None], min(top, len(scores)))
    return _pairs(candidates[order[0]], values[0])


def _pairs(ids, values) -> list[list]:
    return [[int(i), round(float(v), 6)] for i, v in zip(ids, values)]
