"""The benchmark's reference rows: what a model that sees no text would score.

``baselines(scenes)`` gives them, computed once per dataset on the grounding scenes:

- ``centre-box``: every sentence's mask is the central box (pixels whose centres lie in the
  middle third of the width and of the height); its pointing map peaks at the image centre
  (the centre pixel, or the 2 or 4 pixels around the centre of an even side); for FLISM it
  always picks the centre region. Its AUROCs are those of the same centre-peaked map.
- ``uniform``: a flat map. Otsu finds no two classes in a flat map, so its mask is empty
  (``explorer.grounding.masks``): mIoU 0 against any non-empty object; its peak is the whole image,
  so it points right only when an object covers the whole image: 0. Its AUROCs are 0.5.
- ``chance``: the expected value of random scores: R@K = K / N, hard negatives
  1 / (1 + negatives of the scene), FLISM (best regions) / (regions) per sentence.

Masks and maps are scored as the models' are (``explorer.evaluation.metrics.maps.score_maps``).
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from explorer.core.regions import spatial_regions
from explorer.evaluation.grounding_eval import map_aurocs, object_masks, object_sentences, sentence_boxes
from explorer.evaluation.results import ATTRIBUTES, METRIC_KEYS, finite_or_none
from explorer.evaluation.metrics.boxes import box_iou, flism_region_accuracy
from explorer.evaluation.metrics.maps import score_maps


def centre_box_mask(height: int, width: int) -> np.ndarray:
    """bool [H, W]: pixels whose centres lie in the middle third of the width and of the height."""
    def middle(n):
        centres = np.arange(n) + 0.5
        return (centres >= n / 3) & (centres < 2 * n / 3)

    return middle(height)[:, None] & middle(width)[None, :]


def centre_point_map(height: int, width: int) -> np.ndarray:
    """float [H, W] peaking at the image centre: minus the distance of each pixel centre to it."""
    ys = np.arange(height) + 0.5 - height / 2
    xs = np.arange(width) + 0.5 - width / 2
    return -np.hypot(ys[:, None], xs[None, :])


def baselines(scenes: Sequence, retrieval_scenes: Sequence | None = None) -> dict[str, dict]:
    """The reference rows of the module docstring, on ``scenes`` (grounding, FLISM) and
    ``retrieval_scenes`` (chance retrieval and hard negatives; default: ``scenes``)."""
    retrieval_scenes = list(scenes if retrieval_scenes is None else retrieval_scenes)
    centre_iou, centre_hits, flat_iou, flat_hits = [], [], [], []
    centre_flism: list[bool] = []
    centre_auroc: list[float] = []
    centre_auroc_others: list[float] = []
    chance_flism: list[float] = []
    for scene in scenes:
        sentences = object_sentences(scene)
        if not sentences:
            continue
        truth = object_masks(scene, sentences)
        height, width = truth.shape[1:]
        ious, hits = score_maps(np.broadcast_to(centre_point_map(height, width), truth.shape), truth,
                                predicted=np.broadcast_to(centre_box_mask(height, width), truth.shape))
        centre_iou.extend(ious)
        centre_hits.extend(hits)
        by_background, by_others = map_aurocs(np.broadcast_to(centre_point_map(height, width), truth.shape), truth)
        centre_auroc.extend(a for a in by_background if a is not None)
        centre_auroc_others.extend(a for a in by_others if a is not None)
        ious, hits = score_maps(np.zeros(truth.shape, dtype=np.float64), truth)
        flat_iou.extend(ious)
        flat_hits.extend(hits)
        regions = spatial_regions(width, height)
        centre = next(i for i, r in enumerate(regions) if r.source == "centre")
        boxes = sentence_boxes(scene, sentences)
        picked = flism_region_accuracy([centre] * len(sentences), boxes, [r.box for r in regions])
        overlap = box_iou(boxes, [r.box for r in regions])
        for row, target in zip(overlap, picked.targets):
            if target >= 0:
                chance_flism.append(float((row == row.max()).sum() / len(row)))
        centre_flism.extend([True] * picked.hits + [False] * (picked.scored - picked.hits))

    def mean(values):
        return float(np.mean(values)) if len(values) else None

    empty = {key: None for key in METRIC_KEYS}
    n = len(retrieval_scenes)
    with_negatives = [s for s in retrieval_scenes if s.hard_negatives]
    chance = dict(empty)
    if n:
        chance.update({"long_t2i_R@1": 1 / n, "long_t2i_R@5": min(5, n) / n, "long_i2t_R@1": 1 / n,
                       "long_i2t_R@5": min(5, n) / n, "short_t2i_R@1": 1 / n})
    if with_negatives:
        chance["hard_negative_acc"] = float(np.mean([1 / (1 + len(s.hard_negatives)) for s in with_negatives]))
        for attribute in ATTRIBUTES:
            if any(neg.attribute == attribute for s in with_negatives for neg in s.hard_negatives):
                chance[f"hard_negative_acc/{attribute}"] = chance[f"hard_negative_acc77/{attribute}"] = 0.5
    chance["flism_acc"] = mean(chance_flism)
    centre = {**empty, "miou_generic": mean(centre_iou), "pointing_generic": mean(centre_hits),
              "flism_acc": mean(centre_flism), "auroc_generic": mean(centre_auroc),
              "auroc_generic_others": mean(centre_auroc_others)}
    uniform = {**empty, "miou_generic": mean(flat_iou), "pointing_generic": mean(flat_hits)}
    if flat_iou:
        uniform.update({"auroc_generic": 0.5, "auroc_generic_others": 0.5})  # a flat map ranks nothing first
    return {
        "centre-box": {"metrics": {k: finite_or_none(v) for k, v in centre.items()},
                       "about": "central box (middle third of width and height); points at the image centre; "
                                "FLISM always picks the centre region"},
        "uniform": {"metrics": {k: finite_or_none(v) for k, v in uniform.items()},
                    "about": "flat map: Otsu finds one class, so the mask is empty; its peak is the whole image"},
        "chance": {"metrics": {k: finite_or_none(v) for k, v in chance.items()},
                   "about": "expected value of random scores"},
    }


__all__ = ["baselines", "centre_box_mask", "centre_point_map"]
