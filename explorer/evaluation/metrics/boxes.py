"""Box grounding from a map: the expression picks one box among the picture's proposals.

The protocol is ReCLIP's (Subramanian et al., "ReCLIP: A Strong Zero-Shot Baseline for Referring
Expression Comprehension", ACL 2022; sanjayss34/reclip, ``executor.py`` and ``main.py``) as SEPS (Table 4)
applies it to a map: every proposal is scored, the best one is the pick, and a pick is right when its IoU
with the referred box is above 0.5 (strictly: ``main.py`` counts ``iou(...) > 0.5``); accuracy is the share
of right picks.

A proposal's score is ReCLIP's ``sum / area ** alpha`` (``ClipGradcamExecutor``): the sum of the map over
the box's pixels, ``map[int(top):int(bottom), int(left):int(right)]`` with the box scaled to the map's size
(the map is at the picture's size when the picture is no larger than the working size, as COCO's are), over
the box's area in those pixels to the power ``alpha``. ReCLIP's README runs alpha = 0.5 (``DEFAULT_ALPHA``);
alpha = 1 is the mean over the box (what this project counted before). Slice bounds are kept inside the map
(ReCLIP's detections never start left of or above the picture; a negative start would wrap around there).
NaN values are left out of the sum; a box whose pixels are all NaN scores -inf; a box thinner than a map
pixel sums nothing and scores 0, as ReCLIP's empty slice does. Ties go to the first proposal, in the order
the proposals come (COCO's annotation order, or the detections file's), as ReCLIP's ``argmax``.

``min_area`` > 0 lets only a box larger than that share of the picture be the answer: ReCLIP's method
step ``--box_area_threshold`` (0.05 in its ``main.py``, applied by ``Environment.filter`` in
``interpreter.py``: ``box.area / image_area > threshold``; when no box passes, every box competes). It is off
by default (``DEFAULT_MIN_AREA`` 0): it belongs to ReCLIP's own method (``methods/baseline.py``, which also
multiplies in the scores of the expression's head noun chunk from spaCy's parse, not done here), not to how
a map scores a box, and on small objects it decides the answer whatever the map says (75% of the refer
twin's referred objects are under 5% of their picture). ``--min-box-area 0.05`` applies it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from explorer.core.errors import InputError
from explorer.evaluation.metrics.maps import as_float

HIT_IOU = 0.5  # a hit is IoU > HIT_IOU (ReCLIP's main.py)
HIT_RULE = "iou > 0.5"
DEFAULT_ALPHA = 0.5  # ReCLIP's README: --gradcam_alpha 0.5 0.5
ALPHA_RANGE = (0.0, 2.0)  # (low, high]: 1 is the mean, 0 would be the bare sum (the largest box always wins)
DEFAULT_MIN_AREA = 0.0  # every box may answer; ReCLIP's method uses 0.05 (--box_area_threshold, module docstring)
SCORE_RULE = "sum / area ** alpha"


@dataclass(frozen=True)
class BoxRule:
    """How a map picks its box: ``alpha`` of the score, ``min_area`` (share of the picture) an answer exceeds."""

    alpha: float = DEFAULT_ALPHA
    min_area: float = DEFAULT_MIN_AREA


RECLIP = BoxRule()


def box_rule(alpha=DEFAULT_ALPHA, min_area=DEFAULT_MIN_AREA) -> BoxRule:
    """A checked ``BoxRule`` (an ``InputError`` naming the range of a value out of it)."""
    try:
        share = float(min_area)
    except (TypeError, ValueError):
        share = math.nan
    if not 0 <= share < 1:
        raise InputError(f"--min-box-area must lie in [0, 1) (a share of the picture; 0, the default, lets every "
                         f"box answer; ReCLIP's method uses 0.05), not {min_area}")
    return BoxRule(check_alpha(alpha), share)


def check_alpha(alpha) -> float:
    """``alpha`` as a float in (0, 2], or an ``InputError`` naming the range."""
    try:
        value = float(alpha)
    except (TypeError, ValueError):
        value = math.nan
    if not ALPHA_RANGE[0] < value <= ALPHA_RANGE[1]:
        raise InputError(f"--box-alpha must lie in (0, 2] (ReCLIP's 0.5 by default; 1 is the mean over the box), "
                         f"not {alpha}")
    return value


def is_hit(iou: float) -> bool:
    """Whether a pick of IoU ``iou`` with the referred box counts as right (ReCLIP: strictly above 0.5)."""
    return iou > HIT_IOU


def pair_iou(a, b) -> float:
    """IoU of two (x0, y0, x1, y1) boxes in continuous coordinates (0 for two empty boxes), as ReCLIP's
    ``interpreter.iou`` counts it (no +1 on the sides)."""
    return float(box_iou(a, b)[0, 0])


def box_score(values: np.ndarray, box, scale: tuple[float, float], alpha: float) -> float:
    """``sum / area ** alpha`` of one (x0, y0, x1, y1) box in frame pixels over a map [H, W]; ``scale``:
    the map's pixels per frame pixel (x, y)."""
    height, width = values.shape
    x0, y0, x1, y1 = box[0] * scale[0], box[1] * scale[1], box[2] * scale[0], box[3] * scale[1]
    rows = slice(min(max(int(y0), 0), height), min(max(int(y1), 0), height))
    cols = slice(min(max(int(x0), 0), width), min(max(int(x1), 0), width))
    inside = values[rows, cols]
    finite = np.isfinite(inside)
    if inside.size and not finite.any():
        return -math.inf
    area = (x1 - x0) * (y1 - y0)
    return float(inside[finite].sum()) / area ** alpha if area > 0 else -math.inf


def box_scores(values: np.ndarray, boxes, frame: tuple[int, int], alpha: float = DEFAULT_ALPHA) -> np.ndarray:
    """Each box's score (module docstring) on a map [H, W]; boxes in ``frame`` (width, height) pixels."""
    height, width = values.shape
    scale = (width / frame[0], height / frame[1])
    return np.array([box_score(values, box, scale, alpha) for box in boxes], dtype=np.float64)


def candidates(boxes, frame: tuple[int, int], min_area: float) -> list[int]:
    """Indices of the boxes larger than ``min_area`` of the picture; all of them when none is."""
    picture = frame[0] * frame[1]
    large = [i for i, box in enumerate(boxes) if (box[2] - box[0]) * (box[3] - box[1]) / picture > min_area]
    return large or list(range(len(boxes)))


def pick_box(values: np.ndarray, boxes, frame: tuple[int, int], rule: BoxRule = RECLIP) -> int | None:
    """Index of the proposal the map picks (highest score by ``rule.alpha`` among the boxes larger than
    ``rule.min_area`` of the picture; the first on ties), None without proposals."""
    if not len(boxes):
        return None
    allowed = candidates(boxes, frame, rule.min_area)
    scores = box_scores(values, [boxes[i] for i in allowed], frame, rule.alpha)
    return allowed[int(np.argmax(scores))]


def picked_iou(values: np.ndarray, boxes, target, frame: tuple[int, int], rule: BoxRule = RECLIP) -> float | None:
    """IoU of the picked proposal with the ``target`` box: None without a target (no box grounding), 0 when
    the picture has no proposal (a miss: the denominator stays every expression, as the papers count; a
    detections file gives such a picture the whole picture as its one box when it is read)."""
    if target is None:
        return None
    index = pick_box(values, boxes, frame, rule)
    return 0.0 if index is None else pair_iou(boxes[index], target)


def protocol(rule: BoxRule) -> dict:
    """What the box numbers counted, for the results JSON."""
    return {"box_score": SCORE_RULE, "box_alpha": rule.alpha, "min_box_area": rule.min_area, "hit": HIT_RULE,
            "pixels": "map[int(top):int(bottom), int(left):int(right)], the box scaled to the map",
            "ties": "the first proposal", "head_noun": "not used (ReCLIP's baseline multiplies in its scores)"}


def box_iou(a, b) -> np.ndarray:
    """[N, R] IoU of boxes (x0, y0, x1, y1) in the same units; empty boxes overlap nothing."""
    a, b = _boxes(a), _boxes(b)
    x0 = np.maximum(a[:, None, 0], b[None, :, 0])
    y0 = np.maximum(a[:, None, 1], b[None, :, 1])
    x1 = np.minimum(a[:, None, 2], b[None, :, 2])
    y1 = np.minimum(a[:, None, 3], b[None, :, 3])
    inter = np.clip(x1 - x0, 0, None) * np.clip(y1 - y0, 0, None)
    area_a = np.clip(a[:, 2] - a[:, 0], 0, None) * np.clip(a[:, 3] - a[:, 1], 0, None)
    area_b = np.clip(b[:, 2] - b[:, 0], 0, None) * np.clip(b[:, 3] - b[:, 1], 0, None)
    union = area_a[:, None] + area_b[None, :] - inter
    return np.divide(inter, union, out=np.zeros_like(inter), where=union > 0)


@dataclass
class RegionAccuracy:
    accuracy: float  # hits / scored (NaN when no sentence could be scored)
    hits: int
    scored: int  # sentences whose box overlaps some region
    skipped: int  # sentences whose box overlaps no region (no right answer)
    targets: np.ndarray  # [M] index of the best-overlapping region, -1 where none


def flism_region_accuracy(predicted_regions, sentence_boxes, region_boxes) -> RegionAccuracy:
    """Sentence-to-region accuracy: the region chosen for each sentence vs the one its object box overlaps most.

    ``predicted_regions`` [M] region index chosen per sentence (FLISM: each sentence's best
    region); ``sentence_boxes`` [M, 4] the object box each sentence describes;
    ``region_boxes`` [R, 4] the proposals. Boxes in the same units.
    """
    chosen = np.asarray(predicted_regions, dtype=np.int64).reshape(-1)
    overlap = box_iou(sentence_boxes, region_boxes)  # [M, R]
    if overlap.shape[0] != chosen.shape[0]:
        raise ValueError(f"{chosen.shape[0]} predicted regions for {overlap.shape[0]} sentence boxes")
    if overlap.shape[1] == 0:
        raise ValueError("no region boxes")
    if ((chosen < 0) | (chosen >= overlap.shape[1])).any():
        raise ValueError(f"predicted regions must index 0..{overlap.shape[1] - 1}")
    best = overlap.max(axis=1)
    scorable = best > 0
    targets = np.where(scorable, overlap.argmax(axis=1), -1)
    hit = scorable & (overlap[np.arange(len(chosen)), chosen] == best)
    scored = int(scorable.sum())
    return RegionAccuracy(accuracy=float(hit.sum() / scored) if scored else float("nan"), hits=int(hit.sum()),
                          scored=scored, skipped=int((~scorable).sum()), targets=targets)


def _boxes(values) -> np.ndarray:
    boxes = as_float(values)
    if boxes.ndim == 1:
        boxes = boxes[None]
    if boxes.ndim != 2 or boxes.shape[1] != 4:
        raise ValueError(f"boxes must be [N, 4] (x0, y0, x1, y1), got shape {boxes.shape}")
    return boxes


__all__ = ["ALPHA_RANGE", "DEFAULT_ALPHA", "DEFAULT_MIN_AREA", "HIT_IOU", "HIT_RULE", "RECLIP", "BoxRule",
           "RegionAccuracy", "box_iou", "box_rule", "box_score", "box_scores", "candidates", "check_alpha",
           "flism_region_accuracy", "is_hit", "pair_iou", "pick_box", "picked_iou", "protocol"]
