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
    from explorer.core.runtime import prepare_libraries

    prepare_libraries()  # torchvision's ops need their schemas declared on a CPU-only build
    from torchvision.ops import roi_align

    rows, cols = (int(v) for v in image.grid_hw)
    patches = image.patches.float()
    grid = patches.reshape(patches.shape[0], rows, cols, patches.shape[2]).permute(0, 3, 1, 2)
    pooled = roi_align(grid, boxes.to(grid.device, torch.float32), OUTPUT_SIZE, SPATIAL_SCALE, SAMPLING_RATIO,
                       ALIGNED)
    return pooled[:, :, 0, 0]


__all__ = ["ALIGNED", "OUTPUT_SIZE", "SAMPLING_RATIO", "SPATIAL_SCALE", "grid_boxes", "has_patch_grid", "roi_pool"]
