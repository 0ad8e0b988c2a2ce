"""Global cosine top-k over a gallery of embedding vectors: exact with torch, or through FAISS.

    index = VectorIndex(image_vectors)               # [n, d], numpy or torch, float16/32
    scores, ids = index.search(text_vectors, k=10)   # [q, k] float32, [q, k] int64, best first
    index.describe()                                 # "exact: 10,000 x 512 fp32, 19.5 MB"

The vectors are L2-normalised once at build (a zero vector stays zero), so the inner product is the
cosine. Three kinds, ``kind="auto"`` picking by gallery size (``choose_kind``):

- ``exact``: a torch matmul and ``top_k``. Exact, deterministic (ties go to the lower id), and on this
  project's 2-core machine the fastest way to scan a gallery in float32: it uses every core for one
  query, where FAISS's flat scan of a single query runs on one.
- ``flat``: FAISS ``IndexFlatIP`` (float32) or ``IndexScalarQuantizer`` fp16, also exact up to
  floating point. FAISS's SIMD fp16 scan beats torch's upcast of fp16 rows, so ``auto`` uses it for
  large fp16 galleries.
- ``ivf``: FAISS ``IndexIVFFlat`` (fp16: IVF with SQ fp16), inner product. Approximate: only
  ``nprobe`` of ``nlist`` clusters are scanned. Its loss is measured at build against the exact
  answer on a seeded sample of the gallery's own vectors (slightly perturbed, so that a query is not
  trivially itself), and ``nprobe`` is raised until recall@10 reaches ``RECALL_TARGET``; the result
  is kept as ``recall_note``.

FAISS is imported lazily (``faiss_module``), so this module imports without it; when it is missing,
a kind that needs it falls back to ``exact`` and says so in ``describe()``.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch

from explorer.core.errors import InputError

# How ``auto`` picks (``choose_kind``), measured on this project's machine (2 cores, AVX-512, torch 2.13,
# faiss-cpu 1.15.1): ms for one query against n random unit vectors, d = 512, k = 10 (best of repeats):
#   n        exact fp32   flat fp32 (IndexFlatIP)   exact fp16   flat fp16 (SQ fp16)
#   10k      0.7          1.1                       1.3          0.6
#   50k      2.9          7.6                       8.0          3.3
#   100k     9.0          18.1                      13.7         11.4
#   300k     30           59                        56           34
#   1M       84           171                       ~100         77
# Torch beats IndexFlatIP at every size (FAISS scans a single query on one core; in a batch of 64 it is
# 8x slower still, its BLAS path starting only at 128k queries), so fp32 stays exact until IVF. fp16 stays
# exact up to EXACT_LIMIT (under 8 ms, ties by id, and a batch shares the upcast: 2.4 ms a query in 64
# against FAISS's 6.6), then FAISS's fp16 scan is the faster. Past IVF_THRESHOLD one scan costs over
# 85 ms a query (bandwidth: 2 MB per 1,000 vectors), and IVF answers in ~4 ms (1.2M clustered vectors,
# nlist 2048, nprobe 32, recall@10 1.0) after a ~30 s build.
EXACT_LIMIT = 50_000
IVF_THRESHOLD = 1_000_000
RECALL_TARGET = 0.95  # the recall@10 that the default nprobe is raised to reach
RECALL_QUERIES = 200  # sample queries behind ``recall_note``
RECALL_NOISE = 0.1  # norm of the perturbation added to each sampled vector before re-normalising
NLIST_CAP = 2048  # k-means beyond this many clusters makes the build slow on 2 cores
TRAIN_PER_LIST = 64  # training points per cluster (FAISS asks for at least 39)
SCORE_BUDGET = 1 << 25  # float32 scores held at once by the exact path (128 MB)
GALLERY_CHUNK = 2048  # fp16 rows upcast at once (4 MB as float32, in cache); 1k-8k measured alike, 2k best
KINDS = ("auto", "exact", "flat", "ivf")
STORAGES = ("fp32", "fp16")


def faiss_module() -> Any | None:
    """The ``faiss`` module, or None when it is not installed (the caller falls back to exact)."""
    try:
        import faiss
    except ImportError:
        return None
    return faiss


def choose_kind(n: int, storage: str = "fp32") -> str:
    """The kind ``auto`` resolves to for ``n`` vectors (see the measurements above)."""
    if n > IVF_THRESHOLD:
        return "ivf"
    if n > EXACT_LIMIT and storage == "fp16":
        return "flat"
    return "exact"


def top_k(scores: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The ``min(k, n)`` best along the last dim: (values float32, indices int64), best first, ties
    to the lower index. Deterministic, unlike ``torch.topk``, whose order among equal values (and
    choice among those tied at the cut) is unspecified."""
    _check_k(k)
    scores = torch.as_tensor(scores).float()
    n = scores.shape[-1]
    lead = scores.shape[:-1]
    kk = min(k, n)
    if kk == 0 or scores.numel() == 0:
        return torch.empty(*lead, kk), torch.empty(*lead, kk, dtype=torch.int64)
    flat = scores.reshape(-1, n)
    values, ids = torch.topk(flat, kk, dim=-1)
    cut = values[:, -1:]
    tied_at_cut = (flat >= cut).sum(-1) > kk  # more candidates than places: the lowest ids must win
    if bool(tied_at_cut.any()):
        rows = tied_at_cut.nonzero().flatten()
        values[rows], ids[rows] = _stable_top(flat[rows], kk)
    values, ids = order_ties(values, ids)
    return values.reshape(*lead, kk), ids.reshape(*lead, kk)


def order_ties(values: torch.Tensor, ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Re-order each row of a best-first result so that equal values go by ascending id."""
    by_id = ids.argsort(dim=-1, stable=True)
    values, ids = values.gather(-1, by_id), ids.gather(-1, by_id)
    by_value = values.argsort(dim=-1, descending=True, stable=True)
    return values.gather(-1, by_value), ids.gather(-1, by_value)


def _stable_top(rows: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Top k of each row by a stable descending sort (rare: only rows with ties at the cut), in blocks
    of rows so that the sort's index tensor stays within the score budget."""
    step = max(1, SCORE_BUDGET // max(1, rows.shape[-1]))
    values, ids = [], []
    for start in range(0, rows.shape[0], step):
        sorted_values, order = torch.sort(rows[start:start + step], dim=-1, descending=True, stable=True)
        values.append(sorted_values[:, :k])
        ids.append(order[:, :k])
    return torch.cat(values), torch.cat(ids)


def _check_k(k: int) -> None:
    if int(k) != k or k < 1:
        raise InputError(f"k must be a whole number >= 1 (got {k!r})")


def normalise(vectors, name: str = "vectors") -> torch.Tensor:
    """float32 [n, d] unit rows from numpy or torch (zero rows stay zero: no NaN)."""
    tensor = torch.as_tensor(np.asarray(vectors) if not isinstance(vectors, torch.Tensor) else vectors)
    if tensor.ndim != 2:
        raise ValueError(f"{name} must be [n, d] (got shape {tuple(tensor.shape)})")
    # Upcast first: squaring float16 overflows past 256.
    return torch.nn.functional.normalize(tensor.detach().cpu().float(), dim=-1)


class VectorIndex:
    """Top-k inner-product search over L2-normalised vectors [n, d] (cosine)."""

    def __init__(self, vectors, kind: str = "auto", storage: str = "fp32", nlist: int | None = None,
                 nprobe: int | None = None, seed: int = 0):
        if kind not in KINDS:
            raise InputError(f"kind must be one of {', '.join(KINDS)} (got {kind!r})")
        if storage not in STORAGES:
            raise InputError(f"storage must be one of {', '.join(STORAGES)} (got {storage!r})")
        unit = normalise(vectors)
        self._n, self._dim = unit.shape
        self.storage = storage
        self.recall_note: str | None = None
        self.fallback_note: str | None = None  # why a FAISS kind became exact
        self.nlist = self.nprobe = None
        self._tensor: torch.Tensor | None = None  # exact: the gallery, fp32 or fp16
        self._faiss_index = None  # flat and ivf
        self.kind = self._resolve(kind)
        if self.kind == "exact":
            self._tensor = unit.half() if storage == "fp16" else unit
        elif self.kind == "flat":
            self._faiss_index = self._build_flat(unit)
        else:
            self._faiss_index = self._build_ivf(unit, nlist, nprobe, seed)

    def _resolve(self, kind: str) -> str:
        wanted = choose_kind(self._n, self.storage) if kind == "auto" else kind
        if wanted == "exact":
            return wanted
        if self._n == 0:  # nothing to train or scan: exact answers with empty results
            self.fallback_note = f"{wanted} asked for an empty gallery: exact"
            return "exact"
        if faiss_module() is None:
            self.fallback_note = f"faiss is not installed: exact search instead of {wanted}"
            return "exact"
        return wanted

    # ---- build ------------------------------------------------------------------------------------

    def _build_flat(self, unit: torch.Tensor):
        faiss = faiss_module()
        if self.storage == "fp16":
            index = faiss.IndexScalarQuantizer(self._dim, faiss.ScalarQuantizer.QT_fp16, faiss.METRIC_INNER_PRODUCT)
        else:
            index = faiss.IndexFlatIP(self._dim)
        index.add(_as_faiss(unit))
        return index

    def _build_ivf(self, unit: torch.Tensor, nlist: int | None, nprobe: int | None, seed: int):
        faiss = faiss_module()
        self.nlist = min(int(nlist or default_nlist(self._n)), self._n)
        quantizer = faiss.IndexFlatIP(self._dim)
        if self.storage == "fp16":
            index = faiss.IndexIVFScalarQuantizer(quantizer, self._dim, self.nlist, faiss.ScalarQuantizer.QT_fp16,
                                                  faiss.METRIC_INNER_PRODUCT, False)  # no residual: plain fp16 codes
        else:
            index = faiss.IndexIVFFlat(quantizer, self._dim, self.nlist, faiss.METRIC_INNER_PRODUCT)
        index.cp.seed = seed
        index.cp.niter = 10  # k-means converges enough for the cells; 25 (FAISS's default) doubles the build
        rng = np.random.default_rng(seed)
        train = min(self._n, TRAIN_PER_LIST * self.nlist)
        sample = np.sort(rng.choice(self._n, train, replace=False)) if train < self._n else slice(None)
        index.train(_as_faiss(unit[sample]))
        index.add(_as_faiss(unit))
        self._faiss_index = index
        self._tune(unit, nprobe, rng)
        return index

    def _tune(self, unit: torch.Tensor, nprobe: int | None, rng: np.random.Generator) -> None:
        """Set ``nprobe`` (given, or the smallest power-of-two multiple of a start that reaches
        ``RECALL_TARGET``) and write what recall it measured into ``recall_note``."""
        queries = recall_queries(unit, rng)
        k = min(10, self._n)
        truth = exact_search(unit, queries, k)[1]
        candidates = [int(nprobe)] if nprobe else _nprobe_ladder(self.nlist)
        for probe in candidates:
            self.nprobe = self._faiss_index.nprobe = min(probe, self.nlist)
            recall = recall_at(self.search(queries, k)[1], truth)
            if recall >= RECALL_TARGET:
                break
        self.recall_note = (f"IVF (nlist {self.nlist}, nprobe {self.nprobe}): recall@{k} {recall:.3f} vs exact "
                            f"on {len(queries)} sample queries")

    # ---- search -----------------------------------------------------------------------------------

    def __len__(self) -> int:
        return self._n

    @property
    def dim(self) -> int:
        return self._dim

    def search(self, queries, k: int) -> tuple[torch.Tensor, torch.Tensor]:
        """(scores float32 [q, k'], ids int64 [q, k']) with k' = min(k, n), best first; ties to the
        lower id (FAISS kinds: among the hits it returns). A 1-D query is one query ([1, k']).
        ``ivf`` marks places it found no hit for (its probed clusters held fewer than k') with id -1
        and score -inf."""
        _check_k(k)
        q = self._queries(queries)
        kk = min(k, self._n)
        if kk == 0 or len(q) == 0:
            return torch.empty(len(q), kk), torch.empty(len(q), kk, dtype=torch.int64)
        if self._faiss_index is not None:
            return self._search_faiss(q, kk)
        return self._search_exact(q, kk)

    def _queries(self, queries) -> torch.Tensor:
        q = torch.as_tensor(np.asarray(queries) if not isinstance(queries, torch.Tensor) else queries)
        if q.ndim == 1:
            q = q[None]
        if q.ndim != 2 or q.shape[-1] != self._dim:
            got = q.shape[-1] if q.ndim == 2 else tuple(q.shape)
            raise InputError(f"queries have dimension {got}, the index holds vectors of dimension {self._dim}")
        return normalise(q, "queries")

    def _search_exact(self, q: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
        return exact_search(self._tensor, q, k)

    def _search_faiss(self, q: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
        scores, ids = self._faiss_index.search(_as_faiss(q), k)
        scores, ids = torch.from_numpy(scores), torch.from_numpy(ids).long()
        scores[ids < 0] = float("-inf")
        return order_ties(scores, ids)

    # ---- report -----------------------------------------------------------------------------------

    def nbytes(self) -> int:
        """Bytes the stored vectors take (ivf: with their ids and the cluster centroids)."""
        if self._tensor is not None:
            return self._tensor.numel() * self._tensor.element_size()
        index = self._faiss_index
        if self.kind == "flat":
            return int(index.sa_code_size()) * self._n
        return int(index.code_size) * self._n + 8 * self._n + 4 * self._dim * self.nlist

    def describe(self) -> str:
        """One line: kind, size, storage, memory, and the measured recall or fallback when any."""
        line = f"{self.kind}: {self._n:,} x {self._dim} {self.storage}, {_megabytes(self.nbytes())}"
        notes = [note for note in (self.recall_note, self.fallback_note) if note]
        return "; ".join([line, *notes])

    def __repr__(self) -> str:
        return f"VectorIndex({self.describe()})"


def exact_search(gallery: torch.Tensor, q: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``top_k`` of ``q @ gallery.T`` (gallery fp32 or fp16), queries in blocks so that a large batch
    never holds more than SCORE_BUDGET scores at once."""
    step = max(1, SCORE_BUDGET // max(1, len(gallery)))
    results = [top_k(_scores(gallery, q[start:start + step]), k) for start in range(0, len(q), step)]
    return torch.cat([r[0] for r in results]), torch.cat([r[1] for r in results])


def _scores(gallery: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    if gallery.dtype == torch.float32:
        return q @ gallery.T
    scores = torch.empty(len(q), len(gallery))
    for start in range(0, len(gallery), GALLERY_CHUNK):  # fp16: upcast a cache-sized block at a time
        block = gallery[start:start + GALLERY_CHUNK].float()
        torch.mm(q, block.T, out=scores[:, start:start + len(block)])
    return scores


def default_nlist(n: int) -> int:
    """About 4 sqrt(n) clusters, capped for build time, and at least TRAIN_PER_LIST points each."""
    return max(1, min(int(4 * math.sqrt(n)), NLIST_CAP, n // TRAIN_PER_LIST))


def _nprobe_ladder(nlist: int) -> list[int]:
    """nlist/64, doubling, up to nlist/4: data that needs more than a quarter of the clusters scanned
    has no cluster structure for IVF to use, and the note then says what recall it got."""
    probes, probe, top = [], max(1, nlist // 64), max(1, nlist // 4)
    while probe < top:
        probes.append(probe)
        probe *= 2
    return probes + [top]


def recall_queries(unit: torch.Tensor, rng: np.random.Generator) -> torch.Tensor:
    """A seeded sample of the gallery's own vectors, each moved by noise of norm RECALL_NOISE."""
    picks = np.sort(rng.choice(len(unit), min(RECALL_QUERIES, len(unit)), replace=False))
    noise = torch.from_numpy(rng.standard_normal((len(picks), unit.shape[1])).astype(np.float32))
    noise = RECALL_NOISE * torch.nn.functional.normalize(noise, dim=-1)
    return torch.nn.functional.normalize(unit[torch.from_numpy(picks)] + noise, dim=-1)


def recall_at(found: torch.Tensor, truth: torch.Tensor) -> float:
    """Mean over rows of |found ∩ truth| / |truth| (ids; -1 never counts)."""
    hits = (found[:, :, None] == truth[:, None, :]).any(-1) & (found >= 0)
    return float(hits.sum()) / max(1, truth.numel())


def _as_faiss(tensor: torch.Tensor) -> np.ndarray:
    return np.ascontiguousarray(tensor.numpy(), dtype=np.float32)  # FAISS wants contiguous float32


def _megabytes(count: int) -> str:
    return f"{count / (1 << 20):.1f} MB"
