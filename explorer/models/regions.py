"""A box's embedding pooled from the patch grid of the whole picture (FG-CLIP's region features).

FG-CLIP's FG-OVD evaluation (qihoo360/FG-CLIP, ``fgclip/eval/fgovd_eval.py`` and
``get_image_box_roi_features`` in ``fgclip/model/clip_strc/fgclip.py``) reads a region without cutting it
out: the whole picture is resized to the model's square input, every patch token goes through the final
LayerNorm and the visual projection, and the box's embedding is RoIAlign of that projected grid to one
cell: output 1 x 1, ``spatial_scale`` 1 (the box is given in patch units: ``x / width * columns``),
``sampling_ratio`` -1 (adaptive: ceil(box side) samples per side), ``aligned`` True (a patch's centre
sits at +0.5). ``roi_pool`` is that, on the projected patch tokens a method already returns
(``ImageFeatures.patches``); ``Method.region_features`` calls it unless a method has a box head of its own.
"""

from __future__ import annotations

import math
from typing import Sequence

import torch

from explorer.models.features import ImageFeatures

# RoIAlign's settings in FG-CLIP's get_image_box_roi_features: one output cell, boxes in grid units, adaptive
# sampling, pixel centres at +0.5.
OUTPUT_SIZE = (1, 1)
SPATIAL_SCALE = 1.0
SAMPLING_RATIO = -1
ALIGNED = True


def has_patch_grid(image: ImageFeatures) -> bool:
    """Whether ``image`` carries projected patch tokens laid out on its ``grid_hw`` (a method whose image
    side is no patch grid returns none, or a number of tokens that is not rows x cols)."""
    patches = getattr(image, "patches", None)
    if patches is None or not torch.is_tensor(patches) or patches.ndim != 3 or patches.shape[1] == 0:
        return False
    rows, cols = (int(v) for v in image.grid_hw)
    return rows * cols == patches.shape[1]


def grid_boxes(boxes: Sequence[Sequence[float]], grid_hw: tuple[int, int]) -> torch.Tensor:
    """RoIAlign's rows [N, 5] (picture index, x0, y0, x1, y1 in patch units) from ``boxes``: rows of (picture
    index, x0, y0, x1, y1) as fractions of the picture's width and height (FG-CLIP: ``x / width * 14``)."""
    rows, cols = (int(v) for v in grid_hw)
    scale = torch.tensor([1.0, cols, rows, cols, rows], dtype=torch.float32)
    return torch.tensor([[float(v) for v in box] for box in boxes], dtype=torch.float32).reshape(-1, 5) * scale


def roi_pool(image: ImageFeatures, boxes: torch.Tensor) -> torch.Tensor | None:
    """[N, D] float32: each box's RoIAlign of ``image``'s projected patch grid to one cell (module docstring);
    ``boxes`` [N, 5] as ``grid_boxes`` gives them. None when ``image`` has no patch grid."""
    if not has_patch_grid(image):
        return None
    rows, cols = (int(v) for v in image.grid_hw)
    patches = image.patches.float()
    grid = patches.reshape(patches.shape[0], rows, cols, patches.shape[2])  # [B, rows, cols, D]
    pooled = [_align_one_cell(grid[int(index)], (x0, y0, x1, y1))
              for index, x0, y0, x1, y1 in boxes.detach().to("cpu", torch.float64).tolist()]
    return torch.stack(pooled) if pooled else grid.new_zeros(0, grid.shape[-1])


def _align_one_cell(grid: torch.Tensor, box: tuple[float, float, float, float]) -> torch.Tensor:
    """RoIAlign (Mask R-CNN's, as torchvision's ``roi_align`` computes it) of one box to one cell: the mean of
    ceil(width) x ceil(height) sample points spread evenly over the box, each read bilinearly between the four
    nearest patch centres. A sample's weight on the grid is the product of one weight along each axis, so the
    mean is one weighted sum of the grid: the rows' weights times the columns'. Written out here: torchvision's
    ``roi_align`` on a CPU build without its compiled ops is a ``torch.compile`` of Python, which ran a C
    compiler at the first region of every evaluation process (seconds, and nothing where no compiler is)."""
    x0, y0, x1, y1 = (v * SPATIAL_SCALE for v in box)
    offset = 0.5 if ALIGNED else 0.0
    width, height = x1 - x0, y1 - y0
    if not ALIGNED:  # the unaligned RoIAlign makes every box at least one patch across
        width, height = max(width, 1.0), max(height, 1.0)
    along_rows = _axis_weights(y0 - offset, height, grid.shape[0])
    along_cols = _axis_weights(x0 - offset, width, grid.shape[1])
    samples = max(_samples(height) * _samples(width), 1)
    return torch.einsum("h,w,hwd->d", along_rows.to(grid), along_cols.to(grid), grid) / samples


def _samples(side: float) -> int:
    """Sample points along a box side of ``side`` patches pooled to one cell: the fixed ratio, or adaptive
    ceil(side) (a side of no length: none, and the box reads zero)."""
    return SAMPLING_RATIO if SAMPLING_RATIO > 0 else max(math.ceil(side), 0)


def _axis_weights(start: float, side: float, size: int) -> torch.Tensor:
    """[size] float64: the summed linear-interpolation weights, along one axis of ``size`` patches, of the
    sample points of a box side from ``start`` over ``side``. A point more than one patch outside the grid
    reads nothing (its weight is zero along this axis, so the point adds nothing); one just outside reads the
    border patch; one past the last centre reads the last patch alone."""
    weights = torch.zeros(size, dtype=torch.float64)
    count = _samples(side)
    for k in range(count):
        at = start + (k + 0.5) * side / count
        if at < -1.0 or at > size:
            continue
        at = max(at, 0.0)
        low = int(at)
        if low >= size - 1:
            weights[size - 1] += 1.0
            continue
        weights[low] += 1.0 - (at - low)
        weights[low + 1] += at - low
    return weights


__all__ = ["ALIGNED", "OUTPUT_SIZE", "SAMPLING_RATIO", "SPATIAL_SCALE", "grid_boxes", "has_patch_grid", "roi_pool"]
