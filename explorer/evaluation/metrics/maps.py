"""How well per-sentence maps agree with the truth: pure functions on arrays.

- ``mask_iou`` / ``mean_iou``: intersection over union of a predicted mask
  (e.g. the Otsu mask of a sentence map, ``explorer.grounding.masks``) with the
  ground-truth mask of the sentence's object; mean over sentences.
  Two empty masks agree perfectly: IoU 1 (nothing to find, nothing found).
- ``pointing_game``: a map points where it peaks; a hit when the peak lies in
  the truth (Zhang et al., "Top-down neural attention by excitation
  backprop"). When the maximum is reached at several pixels, all of them must
  lie inside, so a flat map hits only if the truth covers the whole image.
  ``tolerance`` (pixels) grows the truth by a disk first, as the original
  protocol does with 15 px.
- ``score_maps``: both of the above for a stack of sentence maps against their
  true masks, with the handling of NaN, flat maps and empty truth that the
  benchmark and the Grounding view share (written down at the function).
- ``pixel_auroc``: how well a map ranks the pixels of the named object above
  other pixels (the background, or the scene's other objects): the area under
  the ROC curve, i.e. the chance that a random object pixel outscores a random
  other pixel (ties count half). 0.5 = no preference; threshold-free, so it
  says whether a map knows where the object is even when its Otsu mask is poor.
- ``score_sentences``: ``score_maps`` for a caption's sentences, some without truth (the page's scores).

Boxes (IoU, the box a map picks, FLISM's regions) are ``metrics.boxes``; caption scores against their
hard negatives ``metrics.classification``.

Masks and maps are numpy arrays or tensors; masks and maps that are compared
must have the same shape (upsample a grid map to the image first).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from explorer.core.tensors import is_tensor


def mask_iou(predicted, truth) -> float:
    """IoU of two boolean masks of the same shape (1.0 when both are empty)."""
    p, t = _as_bool(predicted), _as_bool(truth)
    _same_shape(p, t, "predicted mask", "truth mask")
    union = np.logical_or(p, t).sum()
    if union == 0:
        return 1.0
    return float(np.logical_and(p, t).sum() / union)


def mean_iou(predicted, truth) -> float:
    """Mean over sentences of ``mask_iou``: stacks [M, H, W] of predicted and true masks."""
    p, t = _as_bool(predicted), _as_bool(truth)
    _same_shape(p, t, "predicted masks", "truth masks")
    if p.ndim < 3 or len(p) == 0:
        raise ValueError(f"expected stacks of masks [M, H, W], got shape {p.shape}")
    return float(np.mean([mask_iou(a, b) for a, b in zip(p, t)]))


def pointing_hits(maps, truth, tolerance: int = 0) -> np.ndarray:
    """[M] bool: whether each map's peak lies in its true mask (stacks [M, H, W])."""
    values = as_float(maps)
    masks = _as_bool(truth)
    if values.ndim == 2:
        values, masks = values[None], masks[None]
    _same_shape(values, masks, "maps", "truth masks")
    if np.isnan(values).any():
        raise ValueError("a map holds NaN; the pointing game needs a peak")
    if tolerance > 0:
        from skimage.morphology import dilation, disk

        footprint = disk(int(tolerance))
        masks = np.stack([dilation(mask, footprint) for mask in masks])
    hits = np.empty(len(values), dtype=bool)
    for i, (one, mask) in enumerate(zip(values, masks)):
        peak = one == one.max()
        hits[i] = bool(mask[peak].all())
    return hits


def pointing_game(maps, truth, tolerance: int = 0) -> float:
    """Share of maps whose peak lies in the true mask."""
    return float(pointing_hits(maps, truth, tolerance).mean())


def otsu_masks(maps) -> np.ndarray:
    """bool [M, H, W]: each map's Otsu mask, empty for a map with no finite value (``score_maps``'s masks)."""
    from explorer.grounding.masks import otsu_mask

    values = as_float(maps)
    return np.stack([otsu_mask(one)[0] if np.isfinite(one).any() else np.zeros(one.shape, dtype=bool)
                     for one in values]) if len(values) else np.zeros(values.shape, dtype=bool)


def score_maps(maps, truth, predicted=None) -> tuple[list[float], list[bool]]:
    """(IoU, pointing hit) of each map of a stack [M, H, W] against its true mask [M, H, W].

    The IoU is that of ``predicted`` ([M, H, W] bool: a threshold the user chose, a box) or, when
    it is None, of each map's Otsu mask (``explorer.grounding.masks``); the hit is the pointing
    game on the map itself. The benchmark (``explorer.evaluation``) and the Grounding view
    (``explorer.grounding.truth.score_sentences``) both score through here.
    """
    # Maps without a clear peak, decided once (the benchmark computed its published numbers so):
    # - NaN is "no value": it is never in the Otsu mask and ranks below every value, -inf
    #   included, when the peak is sought (+-inf are clipped to the largest finite values, so
    #   they still rank at the ends).
    # - A map with no finite value (all NaN, say) selects nothing and, for the pointing game, is
    #   flat: its peak is every pixel, so it hits only when the truth covers the whole image. That
    #   is what a constant map scores too (Otsu finds one class: an empty mask). Such a map is
    #   scored as the miss it is, never left out of the means: leaving it out would let a method
    #   raise its pointing score by answering NaN where it is unsure. (The Grounding view used to
    #   leave an all-NaN map out of its pointing mean; it now counts it, as the benchmark does.)
    # - An empty truth mask: IoU 1 when the predicted mask is empty too (nothing to find, nothing
    #   found: ``mask_iou``), else 0; the pointing game misses (no peak pixel lies inside it).
    values, masks = as_float(maps), _as_bool(truth)
    if values.ndim != 3:
        raise ValueError(f"expected a stack of maps [M, H, W], got shape {values.shape}")
    _same_shape(values, masks, "maps", "truth masks")
    if predicted is None:
        predicted = otsu_masks(values)
    else:
        predicted = _as_bool(predicted)
        _same_shape(predicted, masks, "predicted masks", "truth masks")
    ious = [mask_iou(guess, mask) for guess, mask in zip(predicted, masks)]
    hits = pointing_hits(np.nan_to_num(values, nan=-np.inf), masks)
    return ious, [bool(hit) for hit in hits]


def pixel_auroc(values, positive, negative) -> float | None:
    """P(a pixel of ``positive`` outscores a pixel of ``negative``) under ``values`` (ties: half).

    ``values`` [H, W] a map; ``positive`` / ``negative`` [H, W] bool masks (disjoint). None when either
    is empty (nothing to compare). NaN ranks below every value, as in ``score_maps``. This is the
    Mann-Whitney U statistic over n_pos * n_neg, the area under the pixel ROC curve.
    """
    from scipy.stats import rankdata

    values = as_float(values)
    positive, negative = _as_bool(positive), _as_bool(negative)
    _same_shape(values, positive, "map", "positive mask")
    _same_shape(values, negative, "map", "negative mask")
    if (positive & negative).any():
        raise ValueError("the positive and negative pixels overlap")
    n_pos, n_neg = int(positive.sum()), int(negative.sum())
    if n_pos == 0 or n_neg == 0:
        return None
    scores = np.nan_to_num(np.concatenate([values[positive], values[negative]]), nan=-np.inf)
    ranks = rankdata(scores)  # average ranks: ties count half
    u = ranks[:n_pos].sum() - n_pos * (n_pos + 1) / 2.0
    return float(u / (n_pos * n_neg))





@dataclass
class SentenceScore:
    index: int  # 0-based position of the sentence in the caption
    iou: float | None  # IoU of the predicted mask with the truth; None: no truth for this sentence
    hit: bool | None  # pointing game: the map's peak lies in the truth; None: no truth for this sentence


def score_sentences(maps, predicted, truth) -> tuple[list[SentenceScore], dict]:
    """Per-sentence IoU and pointing hit, and the summary ``{"miou", "pointing", "n"}``.

    ``maps`` [M, H, W] float, ``predicted`` [M, H, W] bool (Otsu or a threshold), ``truth`` a
    ``grounding.truth.Truth`` (its ``masks``: one truth mask, or None, per sentence). Sentences without truth
    score None and are left out of the means; the means are None when no sentence has truth. ``n`` counts the
    sentences with truth.
    NaN pixels, flat maps and empty masks score as in the benchmark (``score_maps``).
    """
    values = as_float(maps)
    guesses = predicted.detach().cpu().numpy() if is_tensor(predicted) else np.asarray(predicted)
    if values.ndim != 3:
        raise ValueError(f"expected a stack of maps [M, H, W], got shape {values.shape}")
    if guesses.shape != values.shape:
        raise ValueError(f"predicted masks {guesses.shape} and maps {values.shape} differ in shape")
    if len(truth.masks) != len(values):
        raise ValueError(f"{len(values)} maps for {len(truth.masks)} truth entries")
    scores = [SentenceScore(index=i, iou=None, hit=None) for i in range(len(values))]
    known = [i for i, mask in enumerate(truth.masks) if mask is not None]
    if known:
        ious, hits = score_maps(values[known], np.stack([np.asarray(truth.masks[i]) for i in known]),
                                guesses[known])
        for i, iou, hit in zip(known, ious, hits):
            scores[i] = SentenceScore(index=i, iou=iou, hit=hit)
    ious = [s.iou for s in scores if s.iou is not None]
    hits = [s.hit for s in scores if s.hit is not None]
    summary = {"miou": float(np.mean(ious)) if ious else None,
               "pointing": float(np.mean(hits)) if hits else None,
               "n": len(ious)}
    return scores, summary


# ---- inputs ---------------------------------------------------------------------------------------


def as_float(values) -> np.ndarray:
    """Maps, boxes or scores as a float64 array (a tensor read exactly, on the CPU)."""
    if is_tensor(values):
        values = values.detach().double().cpu().numpy()  # float64 directly: exact for every float dtype
    return np.asarray(values, dtype=np.float64)


def _as_bool(values) -> np.ndarray:
    if is_tensor(values):
        values = values.detach().cpu().numpy()
    array = np.asarray(values)
    if array.dtype != bool:
        if not np.isin(array, (0, 1)).all():
            raise ValueError("a mask must be boolean (or hold only 0 and 1)")
        array = array.astype(bool)
    return array


def _same_shape(a: np.ndarray, b: np.ndarray, name_a: str, name_b: str) -> None:
    if a.shape != b.shape:
        raise ValueError(f"{name_a} {a.shape} and {name_b} {b.shape} differ in shape")
