"""The truth of a picture's units as masks at the working size the maps are drawn at.

Masks (DCI, PNG) are read from the layout's files at the annotation frame's size, united per unit and
resized with nearest-neighbour sampling (a label stays a label: no blended edge pixels). Boxes become
masks at the working size directly: a pixel is in when its centre lies in the box scaled to that size
(a box smaller than a pixel keeps the pixel under its centre, so no truth vanishes).
"""

from __future__ import annotations

import numpy as np
from PIL import Image

from explorer.data.errors import DatasetError
from explorer.data.grounding_sets.base import BOX, GroundingSet

RESIZE_NOTE = "truth masks resized nearest-neighbour to the working size; boxes scaled to it"


def box_mask(boxes, frame: tuple[int, int], size: tuple[int, int]) -> np.ndarray:
    """bool [H, W] at ``size`` (width, height): the union of ``boxes`` given in ``frame`` (width, height) pixels."""
    width, height = size
    sx, sy = width / frame[0], height / frame[1]
    xs, ys = np.arange(width) + 0.5, np.arange(height) + 0.5
    mask = np.zeros((height, width), dtype=bool)
    for x0, y0, x1, y1 in boxes:
        inside_x = (xs >= x0 * sx) & (xs < x1 * sx)
        inside_y = (ys >= y0 * sy) & (ys < y1 * sy)
        if not inside_x.any():
            inside_x[min(int((x0 + x1) / 2 * sx), width - 1)] = True
        if not inside_y.any():
            inside_y[min(int((y0 + y1) / 2 * sy), height - 1)] = True
        mask |= inside_y[:, None] & inside_x[None, :]
    return mask


def resize_mask(mask: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    """``mask`` (bool [h, w]) at ``size`` (width, height), nearest neighbour."""
    if mask.shape[::-1] == tuple(size):
        return mask
    image = Image.fromarray(mask.astype(np.uint8) * 255)
    return np.asarray(image.resize(tuple(size), Image.NEAREST)) > 127


def unit_truths(dataset: GroundingSet, picture: int, size: tuple[int, int]) -> list[np.ndarray]:
    """bool [H, W] at ``size`` for each unit of ``picture`` (``units_of`` order). A ``DatasetError`` when the
    picture's masks cannot be read (the caller skips its units, with the reason)."""
    info = dataset.pictures[picture]
    units = [dataset.units[i] for i in dataset.units_of(picture)]
    keys = list(dict.fromkeys(k for u in units if u.truth != BOX for k in u.segments))
    if keys and dataset.read_masks is None:
        raise DatasetError(f"the {dataset.layout} set holds mask units but its reader gave no way to read masks")
    masks = dataset.read_masks(info, keys) if keys else {}
    truths = []
    for unit in units:
        if unit.truth == BOX:
            truths.append(box_mask(unit.boxes, info.size, size))
        else:
            union = np.logical_or.reduce([masks[k] for k in unit.segments])
            truths.append(resize_mask(union, size))
    return truths


__all__ = ["RESIZE_NOTE", "box_mask", "resize_mask", "unit_truths"]
