"""Turning maps into pictures: colour maps, opacity, overlays.

Rendering is separate from computing so that a colour-map or opacity change
re-renders cached maps and never re-runs a model. OpenCV and matplotlib are imported where a map is drawn:
the command line and the page read ``COLORMAPS`` from here without them.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np
from PIL import Image

from explorer.core.errors import InputError

COLORMAPS = ("turbo", "viridis", "jet")


def normalise(values: np.ndarray, low: float | None = None, high: float | None = None) -> np.ndarray:
    """Scale to [0, 1] by the map's own range (or a shared ``low``/``high`` for comparable colours)."""
    low = float(values.min()) if low is None else low
    high = float(values.max()) if high is None else high
    if high - low < 1e-12:
        return np.zeros_like(values, dtype=np.float32)
    return np.clip((values - low) / (high - low), 0.0, 1.0).astype(np.float32)


@lru_cache(maxsize=16)
def colour_table(cmap: str) -> np.ndarray:
    """The colour map sampled at 256 levels, [256, 3] uint8: indexing it is much faster than calling it."""
    from matplotlib import colormaps

    if cmap not in colormaps:
        raise InputError(f"unknown colour map {cmap!r}; try one of {COLORMAPS}")
    return (colormaps[cmap](np.linspace(0.0, 1.0, 256))[:, :3] * 255).round().astype(np.uint8)


def colorize(unit: np.ndarray, cmap: str = "turbo") -> np.ndarray:
    """[H, W] in [0, 1] -> [H, W, 3] uint8 (256 levels, as any 8-bit picture shows them)."""
    import cv2

    levels = (np.clip(unit, 0.0, 1.0) * 255 + 0.5).astype(np.uint8)
    return cv2.LUT(cv2.merge([levels, levels, levels]), colour_table(cmap)[:, None, :])


def overlay(image: Image.Image, values: np.ndarray, cmap: str = "turbo", opacity: float = 0.5,
            low: float | None = None, high: float | None = None) -> Image.Image:
    """The map in colour over the picture; ``values`` must be at the picture's resolution."""
    if values.shape != (image.height, image.width):
        raise ValueError(f"map {values.shape} does not match the image {(image.height, image.width)}")
    import cv2

    colour = colorize(normalise(values, low, high), cmap)
    base = np.asarray(image.convert("RGB"))
    return Image.fromarray(cv2.addWeighted(base, 1.0 - opacity, colour, opacity, 0.0))
