"""How often a model's scores pick the right answer among candidates: pure functions on arrays."""

from __future__ import annotations

from explorer.evaluation.metrics.maps import as_float


def hard_negative_accuracy(true_scores, negative_scores) -> float:
    """Share of items whose true caption outscores every hard negative.

    ``true_scores`` [N]; ``negative_scores`` [N] (one negative each) or [N, K] (K each).
    """
    positive = as_float(true_scores).reshape(-1)
    negative = as_float(negative_scores)
    if negative.ndim == 1:
        negative = negative[:, None]
    if negative.ndim != 2 or negative.shape[0] != positive.shape[0] or negative.shape[1] == 0:
        raise ValueError(f"negative scores must be [N] or [N, K] with N = {positive.shape[0]}, "
                         f"got shape {negative.shape}")
    if positive.size == 0:
        raise ValueError("no items to score")
    return float((positive[:, None] > negative).all(axis=1).mean())


__all__ = ["hard_negative_accuracy"]
