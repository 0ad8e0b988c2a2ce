"""Metrics: retrieval (Recall@K) and grounding (mask IoU, pointing game, hard negatives, FLISM regions).

Plain functions over arrays and tensors; no model, no UI. Masks from maps come
from ``explorer.masks`` (Otsu).
"""

from __future__ import annotations

from .grounding_metrics import (RegionAccuracy, box_iou, flism_region_accuracy, hard_negative_accuracy, mask_iou,
                                mean_iou, pointing_game, pointing_hits)
from .retrieval_metrics import DEFAULT_KS, RetrievalRecall, recall_at_k

__all__ = ["DEFAULT_KS", "RegionAccuracy", "RetrievalRecall", "box_iou", "flism_region_accuracy",
           "hard_negative_accuracy", "mask_iou", "mean_iou", "pointing_game", "pointing_hits", "recall_at_k"]
