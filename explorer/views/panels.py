"""Panels: the pictures a view is made of, and the page's preview of a grid of them.

A view renders to a ``PanelGrid`` (rows of RGB panels with titles). The page shows it as one
composite picture (``compose``, fast: numpy and PIL only, panels shrunk for the screen);
``explorer.views.figures`` lays the same panels out with matplotlib for PDF/SVG/PNG, drawn at the
size they print at, so the figure shows what the page showed, sharper.
"""

from __future__ import annotations

import textwrap
from dataclasses import dataclass, field
from functools import lru_cache

import cv2
import numpy as np
from PIL import Image, ImageDraw, ImageFont

from explorer.views.render import overlay

CONTOUR_RGB = (255, 255, 255)
CONTOUR_EDGE_RGB = (0, 0, 0)


@dataclass
class Panel:
    pixels: np.ndarray | None  # [H, W, 3] uint8; None: an empty cell (a model without that map kind)
    title: str  # short: what and which threshold (the page's preview prints it above the panel)
    text: str = ""  # the sentence the panel shows (the page lists it in its table; figures in the caption)
    key: list[str] = field(default_factory=list)  # lines a figure prints under the panel (e.g. FLISM's region key)
    scores: str = ""  # a figure's note under the panel: what a reader compares (IoU, hit, a retrieval score)
    details: str = ""  # the rest of the note, shown only with --annotate all (thresholds)
    body: str = ""  # text set in the cell instead of a picture (a retrieved caption)
    frame: str = ""  # a colour to frame the panel in (the right answer of a retrieval)
    sentence: int | None = None  # which sentence it shows (0-based), so a click on it can pick that sentence


@dataclass
class Header:
    """A column's header: ``label`` (S1, a map kind) and, for a sentence, its ``text``."""

    label: str
    text: str = ""


@dataclass
class Colorbar:
    cmap: str
    low: float
    high: float
    label: str


@dataclass
class PanelGrid:
    rows: list[list[Panel]]
    row_labels: list[str]
    caption: str = ""
    colorbar: Colorbar | None = None
    extras: list = field(default_factory=list)  # view-specific figure parts (e.g. FLISM similarity matrices)
    headers: list[Header] = field(default_factory=list)  # one per column, set once above the columns
    row_titles: list[str] = field(default_factory=list)  # a line across the figure above a row ("" for none)
    repeat: int = 0  # leading columns (the picture) repeated in each band when a narrow figure wraps columns


# ---- building panels ------------------------------------------------------------------------------------


def resize_maps(maps: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    """[M, H, W] float maps to ``size`` = (width, height), area-averaged when shrinking."""
    return np.stack([cv2.resize(m.astype(np.float32), size, interpolation=cv2.INTER_AREA) for m in maps])


def resize_masks(masks: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    if (masks.shape[2], masks.shape[1]) == size:
        return masks
    return np.stack([cv2.resize(m.astype(np.uint8), size, interpolation=cv2.INTER_NEAREST) > 0 for m in masks])


def fit_size(size: tuple[int, int], side: int | None) -> tuple[int, int]:
    """``size`` = (width, height) shrunk to at most ``side`` pixels (None or larger: unchanged)."""
    width, height = size
    if side is None or max(width, height) <= side:
        return (width, height)
    scale = side / max(width, height)
    return (max(1, round(width * scale)), max(1, round(height * scale)))


def picture_panel(picture: Image.Image, title: str) -> Panel:
    return Panel(np.asarray(picture.convert("RGB")), title)


def outline(mask: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(inner, outer) one-pixel rings of a mask: its own edge pixels, and the pixels just outside."""
    cross = np.ones((3, 3), np.uint8)
    pixels = mask.astype(np.uint8)
    inner = (pixels - cv2.erode(pixels, cross, borderType=cv2.BORDER_REPLICATE)).astype(bool)
    outer = (cv2.dilate(pixels, cross, borderType=cv2.BORDER_REPLICATE) - pixels).astype(bool)
    return inner, outer


def draw_contour(pixels: np.ndarray, rings: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
    """The mask's outline in white with a dark edge, so it reads on any colour map."""
    inner, outer = rings
    out = pixels.copy()
    out[outer] = CONTOUR_EDGE_RGB
    out[inner] = CONTOUR_RGB
    return out


HATCH_RGB = np.array([255, 255, 255], np.float32)


def hatch(pixels: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """Light diagonal stripes over the mask's pixels: the side a mask lies on, where it is the background
    (``MaskSide.outside``). The stripes' spacing follows the panel's size, so they read at print and at screen."""
    height, width = mask.shape
    spacing = max(4, min(height, width) // 24)
    rows, columns = np.mgrid[:height, :width]
    stripes = (((rows + columns) % spacing) < max(1, spacing // 4)) & mask
    out = pixels.copy()
    out[stripes] = (0.35 * out[stripes] + 0.65 * HATCH_RGB).astype(np.uint8)
    return out


def mask_pixels(mask: np.ndarray) -> np.ndarray:
    """The binary mask itself: white inside, black outside."""
    return np.repeat((mask.astype(np.uint8) * 255)[..., None], 3, axis=2)


def map_panels(picture: Image.Image, values: np.ndarray, mask, settings, low, high, title: str, text: str,
               mask_title: str = "mask", outside: bool = False) -> list[Panel]:
    """One sentence drawn as ``settings.mask`` says: the overlay with the mask's contour, the binary
    mask alone, both side by side, or the bare overlay. ``mask`` is (mask, (inner, outer) rings);
    ``outside``: the mask is the outline's outer side (the background), hatched on the overlay."""
    pixels = np.asarray(overlay(picture, values, cmap=settings.cmap, opacity=settings.opacity, low=low, high=high))
    if mask is None or settings.mask == "none":
        return [Panel(pixels, title, text)]
    binary, rings = mask
    if settings.mask == "mask":
        return [Panel(mask_pixels(binary), title, text)]
    panels = [Panel(draw_contour(hatch(pixels, binary) if outside else pixels, rings), title, text)]
    if settings.mask == "both":
        panels.append(Panel(mask_pixels(binary), mask_title, text))
    return panels


# ---- the page's preview ---------------------------------------------------------------------------------

TITLE_HEIGHT = 18
LABEL_WIDTH = 120
GAP = 4


@lru_cache(maxsize=4)
def ui_font(size: int) -> ImageFont.ImageFont:
    return ImageFont.load_default(size=size)


def _cell_size(rows) -> tuple[int, int]:
    """(width, height) of one panel's picture in ``compose``'s layout: the largest of the grid's."""
    cell_w = max((p.pixels.shape[1] for row in rows for p in row if p.pixels is not None), default=1)
    cell_h = max((p.pixels.shape[0] for row in rows for p in row if p.pixels is not None), default=1)
    return cell_w, cell_h


def compose(grid: PanelGrid) -> Image.Image:
    """All panels in one picture: a label column, then the panels, each with its title above."""
    rows = grid.rows
    if not rows or not any(rows):
        return Image.new("RGB", (1, 1), "white")
    cell_w, cell_h = _cell_size(rows)
    columns = max(len(row) for row in rows)
    width = LABEL_WIDTH + columns * (cell_w + GAP)
    height = len(rows) * (cell_h + TITLE_HEIGHT + GAP)
    canvas = Image.new("RGB", (width, height), "white")
    draw = ImageDraw.Draw(canvas)
    font, label_font = ui_font(12), ui_font(13)
    for r, row in enumerate(rows):
        top = r * (cell_h + TITLE_HEIGHT + GAP)
        label = grid.row_labels[r] if r < len(grid.row_labels) else ""
        lines = [piece for line in label.split("\n") for piece in textwrap.wrap(line, 16)] or [""]
        draw.multiline_text((4, top + TITLE_HEIGHT + 4), "\n".join(lines[:6]), fill="black", font=label_font)
        for c, panel in enumerate(row):
            left = LABEL_WIDTH + c * (cell_w + GAP)
            draw.text((left, top + 2), _fit(panel.title, cell_w, font), fill="black", font=font)
            if panel.pixels is not None:
                canvas.paste(Image.fromarray(panel.pixels), (left, top + TITLE_HEIGHT))
    return canvas


def panel_at(grid: PanelGrid, x: float, y: float) -> Panel | None:
    """The panel under pixel (x, y) of ``compose(grid)`` (None: a label, a gap or outside)."""
    rows = [row for row in grid.rows if row]
    if not rows:
        return None
    cell_w, cell_h = _cell_size(rows)
    r, inside_y = divmod(y, cell_h + TITLE_HEIGHT + GAP)
    c, inside_x = divmod(x - LABEL_WIDTH, cell_w + GAP)
    if x < LABEL_WIDTH or not 0 <= r < len(grid.rows) or inside_x >= cell_w or inside_y < TITLE_HEIGHT \
            or inside_y >= TITLE_HEIGHT + cell_h or not 0 <= c < len(grid.rows[int(r)]):
        return None
    return grid.rows[int(r)][int(c)]


def _fit(text: str, width: int, font) -> str:
    """Shorten ``text`` with an ellipsis so it fits ``width`` pixels."""
    if font.getlength(text) <= width:
        return text
    while text and font.getlength(text + "…") > width:
        text = text[:-1]
    return text + "…"
