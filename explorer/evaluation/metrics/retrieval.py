"""Recall@K for image-text retrieval, exact, from a similarity matrix.

The gallery may hold several captions per image (COCO, Flickr30k: five):
``text_to_image[j]`` is the index of the image caption ``j`` describes.

- text -> image: each caption is a query; it is right when its own image is
  among the K best-scoring images.
- image -> text: each image is a query; it is right when at least one of its
  captions is among the K best-scoring captions (the COCO/Flickr protocol).
  Images with no caption have no right answer and are not queries (they stay
  in the gallery of the text -> image direction as distractors).

Rank of a query = how many *wrong* candidates score at least as high as its
best right candidate, so rank 0 is the top and R@K = mean(rank < K). Ties go
against the model: a wrong candidate with exactly the right candidate's score
counts as ranked above it (a constant similarity matrix scores R@1 = 0 rather
than a lucky draw). Everything is computed exactly with torch, in blocks of
rows so that a large matrix needs no second copy of itself in memory.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

import numpy as np
import torch

DEFAULT_KS = (1, 5, 10)
RSUM_KS = (1, 5, 10)  # what the papers' RSUM sums, both ways
_BLOCK = 1 << 22  # elements compared at once


@dataclass
class RetrievalRecall:
    text_to_image: dict[int, float]  # K -> recall of caption queries
    image_to_text: dict[int, float]  # K -> recall of image queries
    t2i_ranks: np.ndarray = field(repr=False)  # [n_texts] rank of each caption's image
    i2t_ranks: np.ndarray = field(repr=False)  # [n_image_queries] rank of each image's best caption
    i2t_queries: np.ndarray = field(repr=False)  # [n_image_queries] which images were queries

    @property
    def rsum(self) -> float:
        """The papers' RSUM (``rsum``): R@1 + R@5 + R@10 both ways, in percent, whatever Ks were asked."""
        return rsum(self.t2i_ranks, self.i2t_ranks)

    def as_dict(self) -> dict[str, float]:
        out = {f"t2i_R@{k}": v for k, v in self.text_to_image.items()}
        out.update({f"i2t_R@{k}": v for k, v in self.image_to_text.items()})
        out["rsum"] = self.rsum
        return out


def recall_at_k(similarity, text_to_image: Sequence[int] | None = None,
                ks: Sequence[int] = DEFAULT_KS) -> RetrievalRecall:
    """Recall@K both ways from ``similarity`` [n_images, n_texts] (higher is more similar).

    ``text_to_image`` [n_texts] maps each caption to its image; None means one caption per
    image, in order (the matrix is square and its diagonal holds the pairs).
    """
    scores = _as_tensor(similarity)
    if scores.ndim != 2:
        raise ValueError(f"the similarity matrix must be [n_images, n_texts], got shape {tuple(scores.shape)}")
    n_images, n_texts = scores.shape
    if text_to_image is None:
        if n_images != n_texts:
            raise ValueError(f"a {n_images} x {n_texts} matrix needs text_to_image (which image each caption is of)")
        owner = torch.arange(n_texts)
    else:
        owner = torch.as_tensor(np.asarray(text_to_image), dtype=torch.long).flatten()
        if owner.numel() != n_texts:
            raise ValueError(f"text_to_image has {owner.numel()} entries for {n_texts} captions")
        if n_texts and (owner.min() < 0 or owner.max() >= n_images):
            raise ValueError(f"text_to_image must index images 0..{n_images - 1}")
    if torch.isnan(scores).any():
        raise ValueError("the similarity matrix holds NaN")
    ks = sorted({int(k) for k in ks})
    if not ks or ks[0] < 1:
        raise ValueError("every K must be at least 1")

    t2i = _text_to_image_ranks(scores, owner)
    queries, i2t = _image_to_text_ranks(scores, owner)
    return RetrievalRecall(
        text_to_image={k: _recall(t2i, k) for k in ks},
        image_to_text={k: _recall(i2t, k) for k in ks},
        t2i_ranks=t2i.numpy(), i2t_ranks=i2t.numpy(), i2t_queries=queries.numpy(),
    )


def _text_to_image_ranks(scores: torch.Tensor, owner: torch.Tensor) -> torch.Tensor:
    n_images, n_texts = scores.shape
    ranks = torch.empty(n_texts, dtype=torch.long)
    step = max(1, _BLOCK // max(n_images, 1))
    for start in range(0, n_texts, step):
        block = scores[:, start:start + step]  # [I, b]
        columns = torch.arange(block.shape[1])
        right = block[owner[start:start + step], columns]  # [b]
        # images scoring >= the right one, minus the right image itself
        ranks[start:start + step] = (block >= right[None, :]).sum(dim=0) - 1
    return ranks


def _image_to_text_ranks(scores: torch.Tensor, owner: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    n_images, n_texts = scores.shape
    has_caption = torch.zeros(n_images, dtype=torch.bool)
    has_caption[owner] = True
    queries = torch.nonzero(has_caption).flatten()
    ranks = torch.empty(len(queries), dtype=torch.long)
    step = max(1, _BLOCK // max(n_texts, 1))
    for start in range(0, len(queries), step):
        rows = queries[start:start + step]
        block = scores[rows]  # [b, T]
        right = owner[None, :] == rows[:, None]  # [b, T] the query's own captions
        best = block.masked_fill(~right, float("-inf")).max(dim=1).values  # best right score per query
        ranks[start:start + step] = ((block >= best[:, None]) & ~right).sum(dim=1)
    return queries, ranks


def _recall(ranks: torch.Tensor, k: int) -> float:
    if ranks.numel() == 0:
        return float("nan")
    return float((ranks < k).double().mean())


def recall_from_ranks(ranks, ks: Sequence[int] = DEFAULT_KS) -> dict[int, float]:
    """R@K from 0-based ranks of the right answers (as ``recall_at_k`` computes them): mean(rank < K)."""
    ranks = torch.as_tensor(np.asarray(ranks), dtype=torch.long)
    return {int(k): _recall(ranks, int(k)) for k in sorted(set(ks))}


def rsum(t2i_ranks, i2t_ranks) -> float:
    """RSUM as the papers sum it: R@1 + R@5 + R@10 of both directions, in percent (at most 600),
    from the 0-based ranks of the right answers."""
    return 100.0 * sum(sum(recall_from_ranks(ranks, RSUM_KS).values()) for ranks in (t2i_ranks, i2t_ranks))


def rank_statistics(ranks) -> dict[str, float]:
    """Mean and median rank of the right answers, 1-based as the papers' MeanR / MedR (1 = top)."""
    ranks = np.asarray(ranks, dtype=np.float64)
    if ranks.size == 0:
        return {"mean_rank": float("nan"), "median_rank": float("nan")}
    return {"mean_rank": float(ranks.mean() + 1), "median_rank": float(np.median(ranks) + 1)}


def _as_tensor(values) -> torch.Tensor:
    # Comparisons are exact in any floating dtype, so a float32 matrix is kept as it is (no copy on CPU).
    tensor = values.detach() if isinstance(values, torch.Tensor) else torch.as_tensor(np.asarray(values))
    if not tensor.is_floating_point():
        tensor = tensor.double()
    return tensor.cpu()
