"""Paper figures: a view's panels laid out with matplotlib, saved as PDF, SVG or PNG (300 dpi).

The page and the CLI both render a view to a ``PanelGrid`` from the same settings and hand it
here, so an export from the page and ``explorer figure`` give the same file. The layout is computed in inches, so the figure
is as wide as asked (e.g. 7 in for a two-column paper) with no padding around the content,
and the files are byte-for-byte reproducible (no dates in PDF/SVG, fixed SVG ids).
"""

from __future__ import annotations

import math
import textwrap
from dataclasses import dataclass
from pathlib import Path

import matplotlib
import numpy as np
from matplotlib.cm import ScalarMappable
from matplotlib.colors import Normalize
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle

from explorer.core.errors import ExplorerError
from explorer.views.panels import PanelGrid


class FigureError(ExplorerError, ValueError):
    """A figure that cannot be made as asked (format, size)."""


FORMATS = (".png", ".pdf", ".svg")
MIN_PANEL = 0.25  # inches: below this a panel is a smudge
MIN_MATRIX = 1.2  # inches for a similarity matrix with its labels and colour bar
FONT_SIZE = 6.5  # points: legible at a paper's column width
GAP = 0.04  # inches between panels
LINE = FONT_SIZE * 1.3 / 72  # inches per line of text
# Fixed metadata: no creation dates, so the same settings give the same bytes.
METADATA = {".png": {"Software": None}, ".pdf": {"CreationDate": None, "Producer": None}, ".svg": {"Date": None}}


@dataclass
class Layout:
    width: float  # inches
    label: float  # left column for row labels
    panel: float  # width of one panel
    matrix: float  # width given to a row's similarity matrix (0: none)


def check_format(out: str | Path) -> Path:
    out = Path(out)
    if out.suffix.lower() not in FORMATS:
        raise FigureError(f"a figure is one of {', '.join(FORMATS)}, not {out.suffix or 'a file without extension'!r}")
    return out


def save_figure(grid: PanelGrid, out: str | Path, width: float = 7.0, dpi: int = 300) -> Path:
    """Lay ``grid`` out ``width`` inches wide and save it; the suffix of ``out`` picks the format."""
    out = check_format(out)
    if not grid.rows or not any(grid.rows):
        raise FigureError("there is nothing to draw: the view has no panels")
    fig = build_figure(grid, width)
    out.parent.mkdir(parents=True, exist_ok=True)
    with matplotlib.rc_context({"svg.hashsalt": "explorer", "pdf.compression": 6}):
        fig.savefig(out, dpi=dpi, metadata=METADATA[out.suffix.lower()])
    return out


def build_figure(grid: PanelGrid, width: float = 7.0) -> Figure:
    layout = plan(grid, width)
    rows = [(row, _title_lines(row, layout), _row_height(row, layout)) for row in grid.rows]
    caption = textwrap.wrap(grid.caption, _chars(width)) if grid.caption else []
    colorbar = 0.42 if grid.colorbar else 0.0
    height = sum(h for *_, h in rows) + GAP * (len(rows) - 1) + colorbar + len(caption) * LINE
    # matplotlib's object API: no pyplot, so no backend to choose, no global figure list to close
    fig = Figure(figsize=(width, height))
    fig.patch.set_facecolor("white")
    top = height
    for index, (row, titles, row_height) in enumerate(rows):
        _draw_row(fig, layout, row, titles, top, row_height, height,
                  grid.row_labels[index] if index < len(grid.row_labels) else "",
                  grid.extras[index] if index < len(grid.extras) else None)
        top -= row_height + GAP
    top += GAP
    if grid.colorbar:
        _draw_colorbar(fig, grid.colorbar, width, top, height)
        top -= colorbar
    if caption:
        fig.text(0, top / height, "\n".join(caption), ha="left", va="top", fontsize=FONT_SIZE, linespacing=1.15)
    return fig


def panel_pixels(grid: PanelGrid, width: float, dpi: int) -> int:
    """How many pixels a panel's longer side takes in the saved figure (at least 16)."""
    return max(16, math.ceil(plan(grid, width).panel * dpi))


def plan(grid: PanelGrid, width: float) -> Layout:
    """Inches for the label column, each panel and the similarity matrices; too narrow a figure is
    refused with the width it needs."""
    label = 0.85 if any(grid.row_labels) else 0.0
    matrix = 0.5 * (width - label) if grid.extras else 0.0
    columns = max(len(row) for row in grid.rows)
    panel = (width - label - matrix - GAP * (columns - 1)) / columns
    if panel < MIN_PANEL or (matrix and matrix < MIN_MATRIX):
        needed = max(label + columns * MIN_PANEL + GAP * (columns - 1), label + 2 * MIN_MATRIX if matrix else 0)
        raise FigureError(f"{width:g} in is too narrow for {columns} panel(s) per row"
                          f"{' and a similarity matrix' if matrix else ''}: make the figure at least "
                          f"{math.ceil(needed * 10) / 10:g} in wide, or show fewer sentences per page")
    return Layout(width=width, label=label, panel=panel, matrix=matrix)


def _chars(inches: float) -> int:
    return max(8, int(inches * 72 / (FONT_SIZE * 0.56)))


def _title_lines(row, layout: Layout) -> list[list[str]]:
    """Each panel's title wrapped to its width. (Sentences go in the caption, where they fit.)"""
    return [textwrap.wrap(panel.title.replace(" · ", "  "), _chars(layout.panel)) or [""] for panel in row]


def _key_lines(panel, layout: Layout) -> list[str]:
    """The panel's key (e.g. which sentences chose which FLISM region), wrapped to its width; printed
    under the picture, so nothing is written over it."""
    width = _chars(layout.panel)
    return [piece for line in getattr(panel, "key", []) or []
            for piece in textwrap.wrap(line, width, subsequent_indent="  ") or [""]]


def _key_height(panel, layout: Layout) -> float:
    lines = _key_lines(panel, layout)
    return GAP + len(lines) * LINE if lines else 0.0


def _panel_height(panel, layout: Layout) -> float:
    h, w = panel.pixels.shape[:2]
    return layout.panel * h / w


def _row_height(row, layout: Layout) -> float:
    title = max(len(lines) for lines in _title_lines(row, layout)) * LINE
    return title + max(_panel_height(panel, layout) + _key_height(panel, layout) for panel in row)


def _draw_row(fig, layout: Layout, row, titles, top: float, row_height: float, height: float, label: str,
              matrix) -> None:
    title_height = max(len(lines) for lines in titles) * LINE
    if label:
        lines = [piece for line in label.split("\n") for piece in textwrap.wrap(line, _chars(layout.label))]
        fig.text(0, (top - title_height) / height, "\n".join(lines), ha="left", va="top", fontsize=FONT_SIZE,
                 linespacing=1.15)
    for column, (panel, lines) in enumerate(zip(row, titles)):
        left = layout.label + column * (layout.panel + GAP)
        panel_height = _panel_height(panel, layout)
        axis = fig.add_axes([left / layout.width, (top - title_height - panel_height) / height,
                             layout.panel / layout.width, panel_height / height])
        axis.imshow(panel.pixels, interpolation="nearest", aspect="auto")
        axis.set_axis_off()
        fig.text(left / layout.width, top / height, "\n".join(lines), ha="left", va="top", fontsize=FONT_SIZE,
                 linespacing=1.15)
        key = _key_lines(panel, layout)
        if key:
            fig.text(left / layout.width, (top - title_height - panel_height - GAP) / height, "\n".join(key),
                     ha="left", va="top", fontsize=FONT_SIZE, linespacing=1.15)
    if matrix is not None:
        _draw_matrix(fig, layout, matrix, top, row_height, height)


def _draw_matrix(fig, layout: Layout, matrix, top: float, row_height: float, height: float) -> None:
    """A sentence x region heat map: best region per sentence boxed in white, the best pair in red."""
    margin_left, margin_bottom, margin_top = 0.35, 0.3, 2 * LINE
    bar_space = 0.45  # the colour bar and its tick labels, inside the figure
    left = layout.width - layout.matrix + margin_left
    box_height = max(0.5, row_height - margin_bottom - margin_top)
    bottom = (top - margin_top - box_height) / height
    box_width = layout.matrix - margin_left - bar_space
    axis = fig.add_axes([left / layout.width, bottom, box_width / layout.width, box_height / height])
    bar_axis = fig.add_axes([(left + box_width + 0.06) / layout.width, bottom, 0.07 / layout.width,
                             box_height / height])
    values = matrix.values
    image = axis.imshow(values, cmap="viridis", aspect="auto", interpolation="nearest")
    rows, cols = values.shape
    axis.set_xticks(range(cols), [f"R{j + 1}" for j in range(cols)], fontsize=FONT_SIZE - 1)
    axis.set_yticks(range(rows), [f"S{i + 1}" for i in range(rows)], fontsize=FONT_SIZE - 1)
    axis.tick_params(length=0, pad=1)
    for i, j in enumerate(matrix.best_region):
        axis.add_patch(Rectangle((j - 0.5, i - 0.5), 1, 1, fill=False, edgecolor="white", linewidth=0.8))
    i, j = matrix.best_pair
    axis.add_patch(Rectangle((j - 0.5, i - 0.5), 1, 1, fill=False, edgecolor="red", linewidth=1.4))
    if rows * cols <= 120:
        middle = (values.max() + values.min()) / 2
        for (i, j), value in np.ndenumerate(values):
            axis.text(j, i, f"{value:.2f}", ha="center", va="center", fontsize=FONT_SIZE - 2,
                      color="black" if value > middle else "white")
    axis.set_title(f"{matrix.title}: cosine, sentence x region", fontsize=FONT_SIZE, loc="left", pad=2)
    bar = fig.colorbar(image, cax=bar_axis)
    bar.ax.tick_params(labelsize=FONT_SIZE - 1, length=1)


def _draw_colorbar(fig, colorbar, width: float, top: float, height: float) -> None:
    axis = fig.add_axes([0.25 / width, (top - 0.16) / height, 0.5 - 0.25 / width, 0.1 / height])
    bar = fig.colorbar(ScalarMappable(Normalize(colorbar.low, colorbar.high), colorbar.cmap), cax=axis,
                       orientation="horizontal")
    bar.ax.tick_params(labelsize=FONT_SIZE - 1, length=2, pad=1)
    bar.set_label(colorbar.label, fontsize=FONT_SIZE, labelpad=1)
