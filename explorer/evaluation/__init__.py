"""Metrics: retrieval (Recall@K) and grounding (mask IoU, pointing game, hard negatives, FLISM regions).

Plain functions over arrays and tensors; no model, no UI. Masks from maps come
from ``explorer.grounding.masks`` (Otsu).
"""

from __future__ import annotations

from explorer.evaluation.retrieval_metrics import DEFAULT_KS, RetrievalRecall, recall_at_k
from explorer.grounding.metrics import (
    RegionAccuracy,
    box_iou,
    flism_region_accuracy,
    hard_negative_accuracy,
    mask_iou,
    mean_iou,
    pointing_game,
    pointing_hits,
)

__all__ = ["DEFAULT_KS", "RegionAccuracy", "RetrievalRecall", "box_iou", "flism_region_accuracy",
           "hard_negative_accuracy", "mask_iou", "mean_iou", "pointing_game", "pointing_hits", "recall_at_k"]
