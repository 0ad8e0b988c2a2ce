"""Rasterising a scene at its target size: background, anti-aliased textured shapes, instance labels.

Shapes are drawn straight at the size the picture is asked for (no
downscaling of a big render, so 64 px pictures stay crisp): each object's
coverage and texture are computed on a 4x supersampled patch around it and
box-filtered down, which is exact area anti-aliasing. Only the pixels near an
object are touched, so a scene costs little more than its background.

An object's instance mask is where its coverage is at least one half. Objects
live in distinct cells of the 3 x 3 layout and never leave their cell, so the
masks are disjoint; a mask is never empty (at worst the pixel the shape covers
most).
"""

from __future__ import annotations

import math
from functools import lru_cache

import cv2
import numpy as np
from PIL import Image, ImageDraw

from explorer.data.scene import Background, SceneObject
from explorer.data.vocabulary import BACKGROUND_COLOURS, COLOURS, gradient_end, shade_of

SUPERSAMPLE = 4
MIN_PERIOD_PX = 5.0  # a texture's period never gets finer than this, whatever the picture's size
PERIODS_ACROSS = 3.5  # about this many stripes / dot rows / checker pairs across an object
NOISE_GRID = 5  # the low-frequency part of a noisy background: a 5 x 5 grid of offsets, smoothly upsampled


def background_colours(background: Background) -> list[tuple[int, int, int]]:
    """The colours a background shows (both ends of a gradient), for contrast checks."""
    base = BACKGROUND_COLOURS[background.colour]
    return [base, gradient_end(background.colour)] if background.kind == "gradient" else [base]


def texture_colour(colour: str) -> tuple[int, int, int]:
    """The second colour of a textured object: a contrasting shade of its own colour."""
    return shade_of(COLOURS[colour], 0.5)[0]


# -- background ---------------------------------------------------------------------------------------------

def draw_background(background: Background, size: int, rng: np.random.Generator) -> np.ndarray:
    """float32 [size, size, 3] in 0..255. ``rng`` is only used by noisy backgrounds."""
    base = np.array(BACKGROUND_COLOURS[background.colour], dtype=np.float32)
    if background.kind == "plain":
        return np.broadcast_to(base, (size, size, 3)).copy()
    if background.kind == "gradient":
        end = np.array(gradient_end(background.colour), dtype=np.float32)
        ramp = np.linspace(0.0, 1.0, size, dtype=np.float32)
        if background.direction == "vertical":
            t = np.broadcast_to(ramp[:, None], (size, size))
        elif background.direction == "horizontal":
            t = np.broadcast_to(ramp[None, :], (size, size))
        else:
            t = (ramp[:, None] + ramp[None, :]) / 2.0
        if background.reverse:
            t = 1.0 - t
        return base * (1.0 - t[..., None]) + end * t[..., None]
    if background.kind == "noise":
        # Draw the size-independent part first, so a scene's blotches sit in the same places at any size.
        coarse = rng.normal(0.0, 18.0, (NOISE_GRID, NOISE_GRID)).astype(np.float32)
        fine = rng.normal(0.0, 6.0, (size, size)).astype(np.float32)
        smooth = cv2.resize(coarse, (size, size), interpolation=cv2.INTER_CUBIC)
        return np.clip(base + (smooth + fine)[..., None], 0.0, 255.0)
    raise ValueError(f"unknown background kind {background.kind!r}")


# -- shapes -------------------------------------------------------------------------------------------------

def _fit_unit_box(points: np.ndarray) -> np.ndarray:
    """Scale and centre a polygon so its bounding box is the square [-0.5, 0.5]^2 (aspect kept)."""
    low, high = points.min(axis=0), points.max(axis=0)
    centre, side = (low + high) / 2.0, float((high - low).max())
    return (points - centre) / side


@lru_cache(maxsize=None)
def unit_polygon(shape: str) -> np.ndarray | None:
    """[N, 2] (x, y) vertices in the unit square, y down; None for the shapes drawn as ellipses."""
    if shape in ("circle", "ring"):
        return None
    if shape == "square":
        points = [(-1, -1), (1, -1), (1, 1), (-1, 1)]
    elif shape == "triangle":
        points = [(0, -1), (1, 1), (-1, 1)]
    elif shape == "diamond":
        points = [(0, -1), (0.72, 0), (0, 1), (-0.72, 0)]
    elif shape == "cross":
        a = 1.0 / 3.0
        points = [(-a, -1), (a, -1), (a, -a), (1, -a), (1, a), (a, a), (a, 1), (-a, 1), (-a, a), (-1, a),
                  (-1, -a), (-a, -a)]
    elif shape == "star":
        points = []
        for i in range(10):
            radius = 1.0 if i % 2 == 0 else 0.42
            angle = -math.pi / 2 + i * math.pi / 5
            points.append((radius * math.cos(angle), radius * math.sin(angle)))
    elif shape == "heart":
        t = np.linspace(0.0, 2.0 * math.pi, 64, endpoint=False)
        x = 16.0 * np.sin(t) ** 3
        y = -(13.0 * np.cos(t) - 5.0 * np.cos(2 * t) - 2.0 * np.cos(3 * t) - np.cos(4 * t))
        points = np.stack([x, y], axis=1)
    else:
        raise ValueError(f"unknown shape {shape!r}")
    return _fit_unit_box(np.asarray(points, dtype=np.float64))


RING_INNER = 0.56  # inner radius of a ring, as a fraction of its outer radius


def shape_coverage(shape: str, centre_px: tuple[float, float], extent_px: float, origin: tuple[int, int],
                   patch_hw: tuple[int, int], s: int = SUPERSAMPLE) -> np.ndarray:
    """float32 [h*s, w*s] in {0, 1}: the shape drawn on an s-times supersampled patch at ``origin`` (x0, y0)."""
    h, w = patch_hw
    canvas = Image.new("L", (w * s, h * s), 0)
    draw = ImageDraw.Draw(canvas)
    cx, cy = (centre_px[0] - origin[0]) * s, (centre_px[1] - origin[1]) * s
    half = extent_px * s / 2.0
    polygon = unit_polygon(shape)
    if polygon is None:
        # PIL's ellipse box is inclusive of its far edge: pull it in by half a (supersampled) pixel.
        draw.ellipse([cx - half, cy - half, cx + half - 1, cy + half - 1], fill=255)
        if shape == "ring":
            inner = half * RING_INNER
            draw.ellipse([cx - inner, cy - inner, cx + inner - 1, cy + inner - 1], fill=0)
    else:
        points = polygon * (2.0 * half) + (cx, cy)
        draw.polygon([tuple(p) for p in points.tolist()], fill=255)
    return np.asarray(canvas, dtype=np.float32) / 255.0


def texture_mask(texture: str, xs: np.ndarray, ys: np.ndarray, period: float, angle: int,
                 phase: tuple[float, float]) -> np.ndarray | None:
    """bool: where the second colour shows, at coordinates (pixels, relative to the object's centre)."""
    u, v = xs / period + phase[0], ys / period + phase[1]
    if texture == "solid":
        return None
    if texture == "striped":
        theta = math.radians(angle)
        across = u * math.sin(theta) + v * math.cos(theta)
        return (across - np.floor(across)) < 0.5
    if texture == "dotted":
        du, dv = u - np.floor(u) - 0.5, v - np.floor(v) - 0.5
        return du * du + dv * dv < 0.28 * 0.28
    if texture == "checkered":
        return ((np.floor(2.0 * u) + np.floor(2.0 * v)) % 2) == 0
    raise ValueError(f"unknown texture {texture!r}")


def _block_mean(values: np.ndarray, s: int) -> np.ndarray:
    """Mean over s x s blocks (an exact box filter: INTER_AREA with an integer factor)."""
    h, w = values.shape[0] // s, values.shape[1] // s
    return cv2.resize(values.astype(np.float32, copy=False), (w, h), interpolation=cv2.INTER_AREA)


def draw_object(canvas: np.ndarray, labels: np.ndarray, obj: SceneObject, size: int,
                s: int = SUPERSAMPLE) -> None:
    """Composite one object onto ``canvas`` (float [H, W, 3]) and write its label into ``labels``."""
    cx, cy = obj.centre[0] * size, obj.centre[1] * size
    extent = obj.extent * size
    x0, y0 = max(0, math.floor(cx - extent / 2) - 1), max(0, math.floor(cy - extent / 2) - 1)
    x1, y1 = min(size, math.ceil(cx + extent / 2) + 1), min(size, math.ceil(cy + extent / 2) + 1)
    h, w = y1 - y0, x1 - x0
    coverage = shape_coverage(obj.shape, (cx, cy), extent, (x0, y0), (h, w), s)
    period = max(MIN_PERIOD_PX, extent / PERIODS_ACROSS)
    sub = (np.arange(w * s, dtype=np.float32) + 0.5) / s + x0 - cx
    rows = (np.arange(h * s, dtype=np.float32) + 0.5) / s + y0 - cy
    second = texture_mask(obj.texture, sub[None, :], rows[:, None], period, obj.pattern_angle, obj.pattern_phase)
    alpha = _block_mean(coverage, s)
    primary = np.array(COLOURS[obj.colour], dtype=np.float32)
    if second is None:
        paint = alpha[..., None] * primary
    else:
        secondary_alpha = _block_mean(coverage * second, s)
        secondary = np.array(texture_colour(obj.colour), dtype=np.float32)
        paint = (alpha - secondary_alpha)[..., None] * primary + secondary_alpha[..., None] * secondary
    region = canvas[y0:y1, x0:x1]
    region *= 1.0 - alpha[..., None]
    region += paint
    inside = alpha >= 0.5
    if not inside.any():  # a shape too small to cover half a pixel still owns its best pixel
        inside = alpha == alpha.max()
    labels[y0:y1, x0:x1][inside] = obj.index + 1


def box_of(mask: np.ndarray) -> tuple[int, int, int, int]:
    """Tight (x0, y0, x1, y1) of a non-empty bool mask, x1 / y1 exclusive."""
    rows, cols = np.flatnonzero(mask.any(axis=1)), np.flatnonzero(mask.any(axis=0))
    return int(cols[0]), int(rows[0]), int(cols[-1]) + 1, int(rows[-1]) + 1


def render(objects: tuple[SceneObject, ...], background: Background, size: int,
           rng: np.random.Generator) -> tuple[Image.Image, np.ndarray]:
    """The RGB picture and uint8 [size, size] instance labels of a scene."""
    canvas = draw_background(background, size, rng)
    labels = np.zeros((size, size), dtype=np.uint8)
    for obj in objects:
        draw_object(canvas, labels, obj, size)
    pixels = np.clip(np.rint(canvas), 0, 255).astype(np.uint8)
    return Image.fromarray(pixels, "RGB"), labels
