"""Image regions as boxes: the four quadrants and the centre box, clipping, whole-pixel boxes.

Plain geometry used by FAST-GOAL's training pairs (models), FLISM (grounding) and
the evaluation's baselines, so it sits below all of them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

Box = tuple[float, float, float, float]  # (x0, y0, x1, y1) in pixels, x1 > x0, y1 > y0
SOURCES = ("detector", "quadrant", "centre")
QUADRANT_LABELS = ("top-left", "top-right", "bottom-left", "bottom-right")


@dataclass(frozen=True)
class Region:
    box: Box  # (x0, y0, x1, y1) in pixels of the image the regions were proposed on
    source: str  # "detector", "quadrant" or "centre"
    label: str = ""  # detector class name (and score), or the quadrant's name

    def __post_init__(self):
        if self.source not in SOURCES:
            raise ValueError(f"a region's source is one of {SOURCES}, not {self.source!r}")

    @property
    def width(self) -> float:
        return self.box[2] - self.box[0]

    @property
    def height(self) -> float:
        return self.box[3] - self.box[1]

    def unit_box(self, image_width: float, image_height: float) -> Box:
        """The box in [0, 1] coordinates of the whole image (what ``TrainingBatch.local_boxes`` holds)."""
        x0, y0, x1, y1 = self.box
        return (x0 / image_width, y0 / image_height, x1 / image_width, y1 / image_height)


def spatial_regions(width: float, height: float) -> list[Region]:
    """The four quadrants (top-left, top-right, bottom-left, bottom-right), then the centre box."""
    if width <= 0 or height <= 0:
        raise ValueError(f"an image has a positive size, not {width} x {height}")
    w2, h2 = width / 2, height / 2
    corners = ((0.0, 0.0), (w2, 0.0), (0.0, h2), (w2, h2))
    regions = [Region((x, y, x + w2, y + h2), "quadrant", name) for (x, y), name in zip(corners, QUADRANT_LABELS)]
    # The quadrants' midpoints are (w/4, h/4), (3w/4, h/4), (w/4, 3h/4), (3w/4, 3h/4): they span this box.
    regions.append(Region((width / 4, height / 4, 3 * width / 4, 3 * height / 4), "centre", "centre"))
    return regions


def clip_box(box: Sequence[float], width: float, height: float) -> Box | None:
    """The box inside the image, or None if nothing of it is left."""
    x0, y0, x1, y1 = (float(v) for v in box)
    x0, x1 = max(0.0, min(x0, x1)), min(float(width), max(x0, x1))
    y0, y1 = max(0.0, min(y0, y1)), min(float(height), max(y0, y1))
    if x1 <= x0 or y1 <= y0:
        return None
    return (x0, y0, x1, y1)


def pixel_box(box: Box, width: int, height: int) -> tuple[int, int, int, int]:
    """Whole pixels covering the box (floor the start, ceil the end), at least one pixel wide and high."""
    x0, y0 = max(0, math.floor(box[0])), max(0, math.floor(box[1]))
    x1, y1 = min(width, math.ceil(box[2])), min(height, math.ceil(box[3]))
    x1, y1 = max(x1, min(width, x0 + 1)), max(y1, min(height, y0 + 1))
    return (x0, y0, x1, y1)
