"""VectorIndex: exact top-k agrees with a brute-force sort (ties by id), FAISS kinds agree with it,
IVF measures its own recall, and the edges (empty, k > n, bad k, wrong dim, no FAISS) behave."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from explorer.retrieval import vector_index
from explorer.retrieval.vector_index import EXACT_LIMIT, IVF_THRESHOLD, VectorIndex, choose_kind, top_k
from explorer.core.errors import ExplorerError

needs_faiss = pytest.mark.skipif(vector_index.faiss_module() is None, reason="faiss is not installed")


def unit(rows: np.ndarray) -> np.ndarray:
    return rows / np.linalg.norm(rows, axis=1, keepdims=True)


def brute_force(gallery: np.ndarray, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Best first, ties by lower id: a stable sort of the negated scores."""
    scores = unit(queries).astype(np.float32) @ unit(gallery).astype(np.float32).T
    ids = np.argsort(-scores, axis=1, kind="stable")[:, :k]
    return np.take_along_axis(scores, ids, axis=1), ids


def clustered(n: int, d: int, clusters: int, seed: int = 0, spread: float = 0.3) -> np.ndarray:
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((clusters, d))
    return (centres[rng.integers(0, clusters, n)] + spread * rng.standard_normal((n, d))).astype(np.float32)


def test_exact_matches_brute_force():
    rng = np.random.default_rng(1)
    gallery, queries = rng.standard_normal((700, 32)), rng.standard_normal((9, 32))
    scores, ids = VectorIndex(gallery, kind="exact").search(queries, 15)
    want_scores, want_ids = brute_force(gallery, queries, 15)
    assert scores.dtype == torch.float32 and ids.dtype == torch.int64 and ids.shape == (9, 15)
    assert np.array_equal(ids.numpy(), want_ids)
    assert np.allclose(scores.numpy(), want_scores, atol=1e-5)


def test_ties_go_to_the_lower_id():
    base = np.eye(4, dtype=np.float32)
    gallery = base[[2, 0, 1, 0, 3, 0, 0, 1]]  # rows 1, 3, 5, 6 equal e0; rows 2, 7 equal e1
    query = np.array([1.0, 0.5, 0, 0], dtype=np.float32)
    scores, ids = VectorIndex(gallery, kind="exact").search(query, 5)
    assert ids.tolist() == [[1, 3, 5, 6, 2]]  # all of e0 in id order, then the first e1
    scores, ids = VectorIndex(gallery, kind="exact").search(query, 3)  # cut inside the tie
    assert ids.tolist() == [[1, 3, 5]]


def test_top_k_is_deterministic_on_a_constant_matrix():
    values, ids = top_k(torch.zeros(3, 50), 4)
    assert ids.tolist() == [[0, 1, 2, 3]] * 3 and values.abs().sum() == 0
    scores = torch.tensor([[0.5, 0.9, 0.5, 0.9, 0.1]])
    assert top_k(scores, 3)[1].tolist() == [[1, 3, 0]]
    assert top_k(scores[0], 2)[1].tolist() == [1, 3]  # 1-D in, 1-D out


def test_top_k_orders_ties_inside_the_selection():
    """torch.topk returns equal values in no set order (here [7, 500, 999, 5]); top_k sorts them by id."""
    scores = torch.randn(2, 1000, generator=torch.Generator().manual_seed(0))
    scores[:, [999, 5, 500, 7]] = 10.0
    values, ids = top_k(scores, 6)
    assert ids[:, :4].tolist() == [[5, 7, 500, 999]] * 2 and (values[:, :4] == 10).all()
    assert (values[:, 4:] < 10).all()


def test_exact_fp16_storage_halves_memory_and_keeps_the_order():
    rng = np.random.default_rng(2)
    gallery = rng.standard_normal((2000, 64)).astype(np.float32)
    full, half = VectorIndex(gallery, kind="exact"), VectorIndex(gallery, kind="exact", storage="fp16")
    assert half.nbytes() * 2 == full.nbytes() == 2000 * 64 * 4
    queries = gallery[:20] + 0.05 * rng.standard_normal((20, 64)).astype(np.float32)
    assert torch.equal(half.search(queries, 1)[1], full.search(queries, 1)[1])
    assert half.search(queries, 1)[1].flatten().tolist() == list(range(20))


def test_exact_batches_queries_within_the_score_budget(monkeypatch):
    monkeypatch.setattr(vector_index, "SCORE_BUDGET", 300)  # 1 query per block of 256 vectors
    monkeypatch.setattr(vector_index, "GALLERY_CHUNK", 100)  # and fp16 upcast in 3 pieces
    rng = np.random.default_rng(3)
    gallery, queries = rng.standard_normal((256, 16)), rng.standard_normal((5, 16))
    for storage in ("fp32", "fp16"):
        ids = VectorIndex(gallery, kind="exact", storage=storage).search(queries, 7)[1]
        assert np.array_equal(ids.numpy(), brute_force(gallery, queries, 7)[1])


@needs_faiss
def test_flat_equals_exact():
    rng = np.random.default_rng(4)
    gallery, queries = rng.standard_normal((3000, 48)), rng.standard_normal((12, 48))
    flat, exact = VectorIndex(gallery, kind="flat"), VectorIndex(gallery, kind="exact")
    assert flat.kind == "flat" and flat.recall_note is None
    scores, ids = flat.search(queries, 10)
    assert torch.equal(ids, exact.search(queries, 10)[1])
    assert torch.allclose(scores, exact.search(queries, 10)[0], atol=1e-5)


@needs_faiss
def test_flat_fp16_storage():
    gallery = np.random.default_rng(5).standard_normal((1500, 64)).astype(np.float32)  # near-orthogonal
    full, half = VectorIndex(gallery, kind="flat"), VectorIndex(gallery, kind="flat", storage="fp16")
    assert abs(half.nbytes() / full.nbytes() - 0.5) < 0.01
    assert half.search(gallery[:300], 1)[1].flatten().tolist() == list(range(300))
    assert "fp16" in half.describe()


@needs_faiss
def test_ivf_measures_its_recall():
    gallery = clustered(5000, 32, clusters=40, seed=6)
    index = VectorIndex(gallery, kind="ivf", nlist=32, seed=0)
    assert index.kind == "ivf" and index.nlist == 32
    assert index.recall_note.startswith("IVF (nlist 32, nprobe ") and "recall@10" in index.recall_note
    assert index.recall_note in index.describe()
    queries = gallery[::50] + 0.1 * np.random.default_rng(7).standard_normal((100, 32)).astype(np.float32)
    found = index.search(queries, 10)[1]
    truth = VectorIndex(gallery, kind="exact").search(queries, 10)[1]
    assert vector_index.recall_at(found, truth) >= 0.9


@needs_faiss
def test_ivf_given_nprobe_is_kept_and_measured():
    gallery = clustered(3000, 16, clusters=30, seed=8)
    low = VectorIndex(gallery, kind="ivf", nlist=30, nprobe=1)
    everything = VectorIndex(gallery, kind="ivf", nlist=30, nprobe=30)
    assert low.nprobe == 1 and "nprobe 1)" in low.recall_note
    assert "recall@10 1.000" in everything.recall_note  # every cluster scanned: exact


def test_auto_picks_exact_for_a_small_gallery():
    assert 0 < EXACT_LIMIT < IVF_THRESHOLD
    assert VectorIndex(np.ones((10, 4))).kind == "exact"
    assert choose_kind(EXACT_LIMIT) == "exact" and choose_kind(IVF_THRESHOLD + 1) == "ivf"
    assert choose_kind(EXACT_LIMIT + 1, "fp16") == "flat"


def test_k_beyond_n_and_1d_queries():
    gallery = np.random.default_rng(9).standard_normal((6, 8))
    scores, ids = VectorIndex(gallery).search(gallery[2], 100)
    assert ids.shape == scores.shape == (1, 6) and ids[0, 0] == 2
    assert sorted(ids[0].tolist()) == list(range(6))


def test_empty_gallery():
    index = VectorIndex(np.zeros((0, 8), dtype=np.float32))
    scores, ids = index.search(np.ones((3, 8)), 5)
    assert len(index) == 0 and index.dim == 8 and scores.shape == ids.shape == (3, 0)
    assert index.nbytes() == 0


def test_zero_vectors_stay_zero():
    gallery = np.array([[0.0, 0.0], [3.0, 4.0]], dtype=np.float16)
    scores, ids = VectorIndex(gallery).search(np.array([0.0, 1.0]), 2)
    assert ids.tolist() == [[1, 0]] and torch.allclose(scores, torch.tensor([[0.8, 0.0]]))


def test_bad_k_and_wrong_dim():
    index = VectorIndex(np.ones((4, 8)))
    for k in (0, -1):
        with pytest.raises(ExplorerError, match="k must be"):
            index.search(np.ones(8), k)
    with pytest.raises(ExplorerError, match="dimension 5.*dimension 8"):
        index.search(np.ones((2, 5)), 1)
    with pytest.raises(ExplorerError, match="kind"):
        VectorIndex(np.ones((4, 8)), kind="hnsw")


def test_without_faiss_falls_back_to_exact(monkeypatch):
    monkeypatch.setattr(vector_index, "faiss_module", lambda: None)
    gallery = np.random.default_rng(10).standard_normal((50, 8))
    for kind in ("flat", "ivf"):
        index = VectorIndex(gallery, kind=kind)
        assert index.kind == "exact" and index.recall_note is None
        assert "faiss is not installed" in index.describe() and kind in index.describe()
        assert index.search(gallery[7], 1)[1].tolist() == [[7]]
