"""A FLISM similarity matrix in a paper figure (the regions view's right half): sentence x region cosines as
a heat map beside its row, the best region per sentence boxed in white, the best pair in red, the values
written in the cells where they fit, and a colour bar; every margin measured in the figure's fonts."""

from __future__ import annotations

import math

import numpy as np
from matplotlib.patches import Rectangle

from explorer.views.figure_style import GAP, PAD


def bar_ticks():
    """At most five ticks on a colour bar: their labels never crowd."""
    from matplotlib.ticker import MaxNLocator

    return MaxNLocator(nbins=4, min_n_ticks=2)


def draw_matrix(fig, layout, matrix, top: float, row_height: float, height: float, left: float) -> None:
    """A sentence x region heat map: best region per sentence boxed in white, the best pair in red."""
    style = layout.style
    small = style.small
    width = style.width
    margin_left = 0.15 + style.measure(small).width("S00")
    margin_bottom = 0.1 + style.measure(small).height(1)
    margin_top = style.measure().height(1) + 2 * PAD
    # the colour bar (0.04 in away, 0.07 in wide), its ticks and their labels, inside the figure
    bar_space = 0.04 + 0.07 + 3 / 72 + style.measure(small).width("−0.00") + GAP
    x = left + layout.width - layout.matrix + margin_left
    box_height = max(0.5, row_height - margin_bottom - margin_top)
    bottom = (top - margin_top - box_height) / height
    box_width = layout.matrix - margin_left - bar_space
    axis = fig.add_axes([x / width, bottom, box_width / width, box_height / height])
    bar_axis = fig.add_axes([(x + box_width + 0.04) / width, bottom, 0.07 / width, box_height / height])
    values = matrix.values
    image = axis.imshow(values, cmap="viridis", aspect="auto", interpolation="nearest")
    rows, cols = values.shape
    # every n-th tick label, so that neighbours never touch on a narrow figure
    across = math.ceil(cols * (style.measure(small).width(f"R{cols}") + 2 / 72) / box_width)
    down = math.ceil(rows * (style.measure(small).height(1) + 1 / 72) / box_height)
    axis.set_xticks(range(0, cols, across), [f"R{j + 1}" for j in range(0, cols, across)], fontsize=small)
    axis.set_yticks(range(0, rows, down), [f"S{i + 1}" for i in range(0, rows, down)], fontsize=small)
    axis.tick_params(length=0, pad=1)
    for i, j in enumerate(matrix.best_region):
        axis.add_patch(Rectangle((j - 0.5, i - 0.5), 1, 1, fill=False, edgecolor="white", linewidth=0.8))
    i, j = matrix.best_pair
    axis.add_patch(Rectangle((j - 0.5, i - 0.5), 1, 1, fill=False, edgecolor="red", linewidth=1.4))
    cell = min(box_width / cols, box_height / rows) * 72  # points
    if rows * cols <= 120 and cell >= 2.2 * (small - 1):  # the values only where they fit their cells
        middle = (values.max() + values.min()) / 2
        for (i, j), value in np.ndenumerate(values):
            axis.text(j, i, f"{value:.2f}", ha="center", va="center", fontsize=max(4.0, small - 1),
                      color="black" if value > middle else "white")
    fig.text(x / width, top / height, style.measure().fit(f"{matrix.title}: cosine, sentence x region",
                                                         layout.matrix - margin_left),
             ha="left", va="top", fontsize=style.font_size)
    bar = fig.colorbar(image, cax=bar_axis)
    bar.ax.tick_params(labelsize=small, length=1, pad=1)
    bar.ax.yaxis.set_major_locator(bar_ticks())


__all__ = ["bar_ticks", "draw_matrix"]
