"""Box grounding from a map: the expression picks one box among the picture's proposals.

The protocol is ReCLIP's (Subramanian et al., "ReCLIP: A Strong Zero-Shot Baseline for Referring
Expression Comprehension", ACL 2022) as SEPS (Table 4) applies it to a map: every proposal is scored,
the best one is the pick, and a pick is right when its IoU with the referred box is at least 0.5;
accuracy is the share of right picks. Here a proposal's score is the mean map value inside it (its
pixels are those whose centre lies in the box scaled to the map's size, as ``truth.box_mask`` draws
boxes; NaN values are left out; a box with no finite value scores -inf). Ties go to the first proposal,
in the order the proposals come (COCO's annotation order, or the detections file's).
"""

from __future__ import annotations

import numpy as np

from explorer.data.grounding_sets.truth import box_mask

HIT_IOU = 0.5


def box_iou(a, b) -> float:
    """IoU of two (x0, y0, x1, y1) boxes in continuous coordinates (0 for two empty boxes)."""
    width = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
    height = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
    inter = width * height
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - inter
    return float(inter / union) if union > 0 else 0.0


def box_scores(values: np.ndarray, boxes, frame: tuple[int, int]) -> np.ndarray:
    """The mean map value inside each box (given in ``frame`` (width, height) pixels) of a map [H, W]."""
    height, width = values.shape
    scores = np.full(len(boxes), -np.inf)
    for index, box in enumerate(boxes):
        inside = values[box_mask([box], frame, (width, height))]
        inside = inside[np.isfinite(inside)]
        if inside.size:
            scores[index] = float(inside.mean())
    return scores


def pick_box(values: np.ndarray, boxes, frame: tuple[int, int]) -> int | None:
    """Index of the proposal the map picks (highest mean inside; the first on ties), None without proposals."""
    if not len(boxes):
        return None
    return int(np.argmax(box_scores(values, boxes, frame)))


def picked_iou(values: np.ndarray, boxes, target, frame: tuple[int, int]) -> float | None:
    """IoU of the picked proposal with the ``target`` box: None without a target (no box grounding), 0 when
    the picture has no proposal (a miss: the denominator stays every expression, as the papers count)."""
    if target is None:
        return None
    index = pick_box(values, boxes, frame)
    return 0.0 if index is None else box_iou(boxes[index], target)


__all__ = ["HIT_IOU", "box_iou", "box_scores", "pick_box", "picked_iou"]
