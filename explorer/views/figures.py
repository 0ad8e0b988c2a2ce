"""Paper figures: a view's panels laid out with matplotlib, saved as PDF, SVG or PNG.

The page and the CLI both render a view to a ``PanelGrid`` from the same settings and hand it
here, so an export from the page and ``explorer figure`` give the same file. The look (fonts, sizes,
width) is a ``FigureStyle`` (``figure_style``). The layout is computed in inches with every piece of
text measured in the font and size it is drawn in, so the figure is as wide as asked with no
padding, text is never scaled after layout, nothing overlaps and nothing leaves the page: a header
too long for its column is wrapped, then cut with an ellipsis; a figure too narrow for its columns
wraps them into bands, the picture repeated in each. A venue with a most height a page (a column) gets
its panels shrunk a little, and a view split across pages (``split_pages``, ``save_pages``: pages of one
PDF, or numbered PNG/SVG files). Files are byte-for-byte reproducible (no dates in PDF/SVG, fixed SVG ids).
A PDF holds each panel's own pixels, its heat maps stored as JPEG (``pdf_images``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np
from matplotlib.cm import ScalarMappable
from matplotlib.colors import Normalize
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle

from explorer.core.errors import ExplorerError
from explorer.views.figure_matrix import bar_ticks, draw_matrix
from explorer.views.figure_style import GAP, PAD, SLACK, FigureStyle, figure_style
from explorer.views.panels import Panel, PanelGrid
from explorer.views.pdf_images import compress_pdf_images


class FigureError(ExplorerError, ValueError):
    """A figure that cannot be made as asked (format, size)."""


FORMATS = (".png", ".pdf", ".svg")
MIN_PANEL = 0.25  # inches: below this a panel is a smudge
MIN_PAGE_PANEL = 0.55  # inches: panels shrink to fit a page's most height no further (more pages, not smaller maps)
ROW_PAGE_PANEL = 1.0  # inches: the same for a figure split by rows (regions, kinds, PCA, retrieval)
NARROW = 4.0  # inches: a figure this narrow (a column) puts its row labels above the rows
MIN_MATRIX = 1.2  # inches for a similarity matrix with its labels and colour bar
HEADER_EMS = 5.5  # a column headed by a sentence is at least this many ems wide, else the columns wrap into bands
NOTE_LINES = 3  # the note under a panel is cut past this many lines
BODY_LINES = 9  # a text cell (a retrieved caption) is cut past this many lines
TITLE_LINES = 3  # a line across the figure (a query, a sentence) is cut past this many lines
LABEL_LINES = 8  # a row label beside its row (a sentence) is cut past this many lines
TEXT_CELL_EDGE = "#b0b0b0"
# Fixed metadata: no creation dates, so the same settings give the same bytes.
METADATA = {".png": {"Software": None}, ".pdf": {"CreationDate": None, "Producer": None}, ".svg": {"Date": None}}


def check_format(out: str | Path) -> Path:
    out = Path(out)
    if out.suffix.lower() not in FORMATS:
        raise FigureError(f"a figure is one of {', '.join(FORMATS)}, not {out.suffix or 'a file without extension'!r}")
    return out


def as_style(style: FigureStyle | float | None) -> FigureStyle:
    """A style, or a width in inches (the default style at that width)."""
    if isinstance(style, FigureStyle):
        return style
    return FigureStyle() if style is None else FigureStyle(width=float(style))


def save_figure(grid: PanelGrid, out: str | Path, width: float | None = None, dpi: int = 300,
                style: FigureStyle | None = None) -> Path:
    """Lay ``grid`` out in ``style`` (or the default style ``width`` inches wide) and save it; the suffix
    of ``out`` picks the format."""
    out = check_format(out)
    _check_grid(grid)
    style = style or as_style(width)
    with figure_style(style):
        fig = build_figure(grid, style)
        out.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(out, dpi=dpi, metadata=METADATA[out.suffix.lower()])
    if out.suffix.lower() == ".pdf":
        compress_pdf_images(out)
    return out


def _check_grid(grid: PanelGrid) -> None:
    if not grid.rows or not any(grid.rows):
        raise FigureError("there is nothing to draw: the view has no panels")


# ---- the plan: every size in inches, every text wrapped, before anything is drawn --------------------


@dataclass
class Layout:
    style: FigureStyle
    label: float  # left column for row labels
    panel: float  # width of one panel
    matrix: float  # width given to a row's similarity matrix (0: none)
    bands: list[list[int]]  # the columns of each band, in order
    width: float = 0.0  # of the content (the figure's width, unless a slide's panels were shrunk to fit)
    labels_on_top: bool = False  # a label column would break a model's name: each label goes above its row
    inset: float = 0.0  # panels shrunk to a page's height keep the width for text, and sit centred in it

    @property
    def columns(self) -> int:
        return max(len(band) for band in self.bands)


@dataclass
class Block:
    """A horizontal slice of the figure: its height, and how to draw it given its top (inches from the
    bottom) and the left edge of the content."""

    height: float
    draw: Callable[[Figure, float, float, float], None]  # (figure, top, left, figure height)


@dataclass
class Plan:
    layout: Layout
    blocks: list[Block] = field(default_factory=list)

    @property
    def height(self) -> float:
        return sum(block.height for block in self.blocks)


def build_figure(grid: PanelGrid, style: FigureStyle | float | None = None) -> Figure:
    """The figure (call inside ``figure_style(style)`` to draw with its fonts; ``save_figure`` does)."""
    style = as_style(style)
    _check_grid(grid)
    plan = fitted_plan(grid, style)
    height = style.height or plan.height
    # matplotlib's object API: no pyplot, so no backend to choose, no global figure list to close
    fig = Figure(figsize=(style.width, height))
    fig.patch.set_facecolor("white")
    left = (style.width - plan.layout.width) / 2  # a slide's content is centred; a paper's fills the width
    top = height - (height - plan.height) / 2
    for block in plan.blocks:
        block.draw(fig, top, left, height)
        top -= block.height
    return fig


def fitted_plan(grid: PanelGrid, style: FigureStyle, least: float | None = None) -> Plan:
    """The plan at the style's width; on a slide (a fixed height) the panels shrink until it fits; under a
    venue's most height a page they shrink down to ``MIN_PAGE_PANEL`` (``split_pages`` puts fewer sentences on a
    page), and a page that does not fit even so is as tall as it takes. ``least``: the narrowest panels may go
    (default: ``MIN_PANEL`` on a slide, ``MIN_PAGE_PANEL`` under a most height; ``split_pages`` asks for its own
    before it takes another page)."""
    layout = plan(grid, style)
    full = make_plan(grid, layout)
    limit = style.page_height
    if limit is None or full.height <= limit:
        return full
    if least is None:
        least = MIN_PANEL if style.height else MIN_PAGE_PANEL
    least = min(layout.panel, least)
    shrunk = _shrunk_plan(grid, layout, limit, least, keep_width=style.height is None)
    if shrunk is not None:
        return shrunk
    if style.height is None:
        return make_plan(grid, _with_panel(layout, least, keep_width=True, label_room=_label_room(grid, style)))
    raise FigureError(f"the figure does not fit on a {style.width:g} x {style.height:g} in slide even with one "
                      "row a slide: show fewer models, or give --width to let it grow taller")


def page_plan_height(grid: PanelGrid, style: FigureStyle, least: float | None = None) -> float:
    """Inches ``fitted_plan`` takes (infinite for a slide it cannot fit): what ``split_pages`` compares."""
    try:
        return fitted_plan(grid, style, least).height
    except FigureError:
        return math.inf


def _shrunk_plan(grid: PanelGrid, layout: Layout, limit: float, least: float, keep_width: bool) -> Plan | None:
    """The plan with the widest panels (down to ``least`` inches) that is at most ``limit`` inches tall; with
    ``keep_width`` texts keep the figure's width (a slide's content shrinks with its panels, and is centred)."""
    # Narrower panels may wrap their notes onto more lines, so the height is not monotone in the panel
    # width: try widths from the widest down, and take the first that fits.
    steps = 48
    for step in range(1, steps + 1):
        panel = layout.panel - (layout.panel - least) * step / steps
        candidate = make_plan(grid, _with_panel(layout, panel, keep_width, _label_room(grid, layout.style)))
        if candidate.height <= limit:
            return candidate
    return None


def figure_height(grid: PanelGrid, style: FigureStyle) -> float:
    """Inches the figure of ``grid`` takes in ``style`` (a slide's fixed height, else its content's)."""
    return style.height or fitted_plan(grid, style).height


def split_pages(count: int, grid_of: Callable[[list[int]], PanelGrid], style: FigureStyle,
                least: float = MIN_PAGE_PANEL) -> list[list[int]]:
    """Items ``0..count-1`` (a view's sentences, or a figure's rows) in the fewest pages that each fit the
    style's page (``fitted_plan``: a column's or a page's most height, a slide's height), as evenly as their
    number allows; ``grid_of`` draws a page of them. Panels shrink to ``least`` inches (``ROW_PAGE_PANEL`` for a
    figure split by rows: a region's boxes stay readable) before another page is taken, and further only when
    one item a page is still too tall. When none fits, the split
    with the lowest pages (the caller says they are too tall). One page when the style has no such height."""
    limit = style.page_height
    if limit is None or count < 2:
        return [list(range(count))]
    lowest, least_height = even_pages(count, count), math.inf
    for number in range(1, count + 1):
        pages = even_pages(count, number)
        smallest = least if number < count else None  # one item a page: as small as a panel may be
        height = max(page_plan_height(grid_of(page), style, smallest) for page in pages)
        if height <= limit + 1e-9:
            return pages
        if height < least_height:
            lowest, least_height = pages, height
    return lowest


def grid_rows(grid: PanelGrid, rows: list[int]) -> PanelGrid:
    """The figure's rows ``rows`` (0-based, in order) with everything that belongs to them (labels, titles,
    matrices), and the headers, colour bar and caption every page repeats: a page of a figure split by rows."""

    def pick(values: list) -> list:
        return [values[r] for r in rows if r < len(values)] if values else []

    titles = pick(grid.row_titles)
    if titles and not titles[0]:  # a page that starts inside a group of rows (a sentence's) repeats its title
        earlier = [title for title in grid.row_titles[:rows[0]] if title]
        titles[0] = f"{earlier[-1]} (continued)" if earlier else ""
    return PanelGrid(rows=[grid.rows[r] for r in rows], row_labels=pick(grid.row_labels), caption=grid.caption,
                     colorbar=grid.colorbar, extras=pick(grid.extras), headers=grid.headers,
                     row_titles=titles, repeat=grid.repeat)


def even_pages(count: int, pages: int) -> list[list[int]]:
    """``0..count-1`` in ``pages`` pages (at most ``count``), their sizes differing by one at most."""
    pages = max(1, min(pages, count))
    size, extra = divmod(count, pages)
    bounds = [0]
    for page in range(pages):
        bounds.append(bounds[-1] + size + (page < extra))
    return [list(range(start, end)) for start, end in zip(bounds, bounds[1:])]


def page_file(out: Path, page: int) -> Path:
    """Where page ``page`` (from 1) of a PNG or SVG figure goes: ``out`` itself, then maps-2.png, maps-3.png..."""
    return out if page == 1 else out.with_name(f"{out.stem}-{page}{out.suffix}")


def save_pages(grids: list[PanelGrid], out: str | Path, dpi: int = 300, style: FigureStyle | None = None) -> list[Path]:
    """Each grid a page: the pages of one PDF (``out``), or one PNG/SVG file each (``page_file``); the files
    written. One grid is ``save_figure``'s file."""
    out = check_format(out)
    style = style or as_style(None)
    if len(grids) == 1 or out.suffix.lower() != ".pdf":
        return [save_figure(grid, page_file(out, n), dpi=dpi, style=style) for n, grid in enumerate(grids, 1)]
    from matplotlib.backends.backend_pdf import PdfPages

    for grid in grids:
        _check_grid(grid)
    out.parent.mkdir(parents=True, exist_ok=True)
    with figure_style(style), PdfPages(out, metadata=METADATA[".pdf"]) as pdf:
        for grid in grids:
            pdf.savefig(build_figure(grid, style), dpi=dpi)
    compress_pdf_images(out)
    return [out]


def _with_panel(layout: Layout, panel: float, keep_width: bool = False, label_room: float = 0.0) -> Layout:
    """``layout`` with ``panel``-inch panels; ``keep_width``: the figure keeps its width. Beside a label column
    the labels take what they need of the room the smaller panels leave (up to ``label_room``, their unwrapped
    width) and the rest goes to the margins, the content centred (``build_figure``): the sentence sits next to
    its picture (centred panels left a one-model page a third of its width empty between them). With no label
    column the panels are centred in the width."""
    columns = layout.columns
    width = layout.label + columns * panel + GAP * (columns - 1) + layout.matrix
    if keep_width and layout.label > 0:
        label = min(max(layout.label, label_room), layout.label + layout.width - width)
        return Layout(layout.style, label, panel, layout.matrix, layout.bands, width + label - layout.label,
                      layout.labels_on_top, 0.0)
    inset = (layout.width - width) / 2 if keep_width else 0.0
    return Layout(layout.style, layout.label, panel, layout.matrix, layout.bands,
                  layout.width if keep_width else width, layout.labels_on_top, inset)


def _label_room(grid: PanelGrid, style: FigureStyle) -> float:
    """Inches the row labels take on one line each (the widest), gaps included."""
    lines = [line for label in grid.row_labels for line in label.split("\n") if line.strip()]
    return max((style.measure().width(line) for line in lines), default=0.0) + 2 * GAP + SLACK


def panel_pixels(grid: PanelGrid, style: FigureStyle | float | None, dpi: int) -> int:
    """How many pixels a panel's longer side takes in the saved figure (at least 16)."""
    style = as_style(style)
    try:
        panel = fitted_plan(grid, style).layout.panel
    except FigureError:  # a slide it cannot fit: its widest panels (build_figure says why it cannot be drawn)
        panel = plan(grid, style).panel
    return max(16, math.ceil(panel * dpi))


def plan(grid: PanelGrid, style: FigureStyle | float) -> Layout:
    """Inches for the label column, each panel and the similarity matrices, and the bands the columns
    wrap into; too narrow a figure is refused with the width it needs."""
    style = as_style(style)
    width = style.width
    label = _label_width(grid, style)
    # No room for a label column (a model's name would break), or a narrow figure that needs every inch for
    # its panels: each label goes above its row.
    on_top = label < 0 or (label > 0 and width < NARROW)
    label = 0.0 if on_top else label
    matrix = 0.5 * (width - label) if grid.extras else 0.0
    n = max(len(row) for row in grid.rows)
    least = _least_panel(grid, style)
    room = width - label - matrix
    fits = int((room + GAP) // (least + GAP))
    bands = [list(range(n))]
    repeat = min(grid.repeat, n - 1)
    if fits < n and not grid.extras and fits - repeat >= 1:
        per_band = fits - repeat
        count = math.ceil((n - repeat) / per_band)
        per_band = math.ceil((n - repeat) / count)  # as even as the count allows
        bands = [list(range(repeat)) + list(range(start, min(n, start + per_band)))
                 for start in range(repeat, n, per_band)]
    columns = max(len(band) for band in bands)
    panel = (room - GAP * (columns - 1)) / columns
    if panel < MIN_PANEL or (matrix and matrix < MIN_MATRIX):
        # the least that draws: the picture and one more column in a band, or (beside a similarity matrix,
        # which takes half the room) every column of the row
        least = n if grid.extras else min(n, repeat + 1)
        panels = least * MIN_PANEL + GAP * (least - 1)
        needed = label + (2 * max(panels, MIN_MATRIX) if grid.extras else panels)
        raise FigureError(f"{width:g} in is too narrow for {n} panel(s) per row"
                          f"{' and a similarity matrix' if matrix else ''}: make the figure at least "
                          f"{math.ceil(needed * 10) / 10:g} in wide, or show fewer sentences per page")
    return Layout(style=style, label=label, panel=panel, matrix=matrix, bands=bands,
                  width=label + columns * panel + GAP * (columns - 1) + matrix, labels_on_top=on_top)


def _label_width(grid: PanelGrid, style: FigureStyle) -> float:
    """As wide as the widest line of a row label (plus a gap), at most a quarter of the figure; -1 when a
    word of a label (a model's name) does not fit that quarter: the labels then go above their rows."""
    lines = [line for label in grid.row_labels for line in label.split("\n") if line.strip()]
    if not lines:
        return 0.0
    measure = style.measure()
    most = 0.25 * style.width
    if max(measure.width(word) for line in lines for word in line.split()) + 2 * GAP + SLACK > most:
        return -1.0
    return min(max(measure.width(line) for line in lines) + 2 * GAP + SLACK, most)


def _least_panel(grid: PanelGrid, style: FigureStyle) -> float:
    """The narrowest column its header allows: a sentence gets ``HEADER_EMS`` ems; a short label (a map
    kind, a rank) its own width, so it stays on one line."""
    least = MIN_PANEL
    if grid.headers:
        if style.header == "sentence" and any(header.text for header in grid.headers):
            least = max(least, HEADER_EMS * style.font_size / 72)
        measure = style.measure()
        words = [w for header in grid.headers for w in header.label.split()]
        if words:
            least = max(least, min(max(measure.width(w) for w in words), HEADER_EMS * style.font_size / 72))
    return least


# ---- blocks ------------------------------------------------------------------------------------------


def make_plan(grid: PanelGrid, layout: Layout) -> Plan:
    style = layout.style
    result = Plan(layout)
    for b, band in enumerate(layout.bands):
        if b:
            result.blocks.append(Block(3 * GAP, _nothing))
        for r, row in enumerate(grid.rows):
            title = grid.row_titles[r] if r < len(grid.row_titles) else ""
            label = grid.row_labels[r] if r < len(grid.row_labels) else ""
            if title:
                result.blocks.append(_title_block(title, layout, gap_above=bool(r) or b > 0))
            # Short headers (names, kinds) head the grid, each row's label below them; sentence headers stay on
            # their columns, the first row's label above them.
            heads_first = grid.headers and r == 0 and not any(header.text for header in grid.headers)
            if heads_first:
                result.blocks.append(_header_block(grid, layout, band))
            if layout.labels_on_top and label.strip():
                result.blocks.append(_title_block(", ".join(label.split("\n")), layout, gap_above=False))
                label = ""
            if grid.headers and r == 0 and not heads_first:
                result.blocks.append(_header_block(grid, layout, band))
            extra = grid.extras[r] if r < len(grid.extras) else None
            cells = [row[c] if c < len(row) else None for c in band]
            result.blocks.append(_row_block(cells, layout, label, extra, titled=not grid.headers))
            if r < len(grid.rows) - 1:
                result.blocks.append(Block(GAP, _nothing))
    if grid.colorbar:
        result.blocks.append(_colorbar_block(grid.colorbar, layout))
    caption = " ".join(part for part in (_legend(grid, style), grid.caption) if part)
    if caption:
        result.blocks.append(_caption_block(caption, layout))
    return result


def _nothing(fig, top, left, height) -> None:
    return None


def _x(layout: Layout, column: int) -> float:
    """The left edge of the ``column``-th panel of a band, from the content's left edge."""
    return layout.label + layout.inset + column * (layout.panel + GAP)


def header_lines(header, layout: Layout) -> list[str]:
    style = layout.style
    measure = style.measure()
    if style.header == "sentence" and header.text:
        return measure.wrap(header.text, layout.panel, style.header_lines)
    return [piece for line in header.label.split("\n") for piece in measure.wrap(line, layout.panel, 2)]


def _header_block(grid: PanelGrid, layout: Layout, band: list[int]) -> Block:
    style = layout.style
    measure = style.measure()
    texts = [header_lines(grid.headers[c], layout) if c < len(grid.headers) else [] for c in band]
    tallest = max((measure.height(len(lines)) for lines in texts), default=0.0)
    if not tallest:
        return Block(0.0, _nothing)

    def draw(fig, top, left, height):
        for column, lines in enumerate(texts):
            if lines:  # bottom-aligned: each header sits just above its column, however many lines
                fig.text((left + _x(layout, column)) / style.width, (top - tallest) / height, "\n".join(lines),
                         ha="left", va="bottom", fontsize=style.font_size)

    return Block(tallest + PAD, draw)


def _title_block(title: str, layout: Layout, gap_above: bool) -> Block:
    style = layout.style
    measure = style.measure()
    lines = measure.wrap(title, layout.width, TITLE_LINES)
    above = 2 * GAP if gap_above else 0.0

    def draw(fig, top, left, height):
        fig.text(left / style.width, (top - above) / height, "\n".join(lines), ha="left", va="top",
                 fontsize=style.font_size)

    return Block(above + measure.height(len(lines)) + PAD, draw)


def note_lines(panel: Panel, layout: Layout) -> list[str]:
    """What is printed under a panel: its scores (and its details with --annotate all), then its key."""
    style = layout.style
    small = style.measure(style.small)
    parts = {"none": [], "scores": [panel.scores], "all": [panel.details, panel.scores]}[style.annotate]
    note = ", ".join(part for part in parts if part)
    lines = small.wrap(note, layout.panel, NOTE_LINES) if note else []
    for line in panel.key:
        wrapped = small.wrap(line, layout.panel - 0.08) or [""]
        lines += [wrapped[0], *("  " + piece for piece in wrapped[1:])]
    return lines


def _body_lines(panel: Panel, layout: Layout) -> list[str]:
    style = layout.style
    return style.measure(style.small).wrap(panel.body, layout.panel - 2 * PAD, BODY_LINES)


def _cell_height(panel: Panel | None, layout: Layout) -> float:
    if panel is None:
        return 0.0
    if panel.body:
        style = layout.style
        return style.measure(style.small).height(len(_body_lines(panel, layout))) + 2 * PAD
    if panel.pixels is None:
        return 0.0
    h, w = panel.pixels.shape[:2]
    return layout.panel * h / w


def _row_block(cells: list[Panel | None], layout: Layout, label: str, matrix, titled: bool) -> Block:
    style = layout.style
    measure, small = style.measure(), style.measure(style.small)
    titles = [measure.wrap(cell.title, layout.panel) if titled and cell is not None and cell.title else []
              for cell in cells]
    title_height = max((measure.height(len(lines)) for lines in titles), default=0.0)
    title_height += PAD if title_height else 0.0
    notes = [note_lines(cell, layout) if cell is not None else [] for cell in cells]
    heights = [_cell_height(cell, layout) for cell in cells]
    below = [small.height(len(lines)) + PAD if lines else 0.0 for lines in notes]
    label_lines = [piece for line in label.split("\n") for piece in measure.wrap(line, layout.label - 2 * GAP)]
    if len(label_lines) > LABEL_LINES:
        label_lines = label_lines[:LABEL_LINES - 1] + [measure.ellipsis(label_lines[LABEL_LINES - 1],
                                                                         layout.label - 2 * GAP)]
    body = max([h + n for h, n in zip(heights, below)] + [measure.height(len(label_lines))])
    row_height = title_height + body

    def draw(fig, top, left, height):
        width = style.width
        panels_top = top - title_height
        if label_lines:
            fig.text(left / width, panels_top / height, "\n".join(label_lines), ha="left", va="top",
                     fontsize=style.font_size)
        for column, (cell, lines, cell_height, note) in enumerate(zip(cells, titles, heights, notes)):
            if cell is None:
                continue
            x = left + _x(layout, column)
            if lines:
                fig.text(x / width, top / height, "\n".join(lines), ha="left", va="top", fontsize=style.font_size)
            _draw_cell(fig, cell, layout, x, panels_top, cell_height, height)
            if note:
                fig.text(x / width, (panels_top - cell_height - PAD) / height, "\n".join(note), ha="left",
                         va="top", fontsize=style.small)
        if matrix is not None:
            draw_matrix(fig, layout, matrix, top, row_height, height, left)

    return Block(row_height, draw)


def _draw_cell(fig, cell: Panel, layout: Layout, x: float, top: float, cell_height: float, height: float) -> None:
    style = layout.style
    width = style.width
    box = [x / width, (top - cell_height) / height, layout.panel / width, cell_height / height]
    if cell.body:
        fig.add_artist(Rectangle(box[:2], box[2], box[3], transform=fig.transFigure, fill=False,
                                 edgecolor=cell.frame or TEXT_CELL_EDGE, linewidth=1.5 if cell.frame else 0.5))
        fig.text((x + PAD) / width, (top - PAD) / height, "\n".join(_body_lines(cell, layout)), ha="left", va="top",
                 fontsize=style.small)
        return
    if cell.pixels is None:
        return
    axis = fig.add_axes(box)
    # "none": a PDF or SVG holds the panel's own pixels (drawn at most at the size it prints at), not a copy
    # resampled to the figure's dpi; a PNG (Agg) draws it as "nearest" does
    axis.imshow(cell.pixels, interpolation="none", aspect="auto")
    axis.set_axis_off()
    if cell.frame:  # inside the panel's edge, so it never reaches the next panel
        fig.add_artist(Rectangle(box[:2], box[2], box[3], transform=fig.transFigure, fill=False,
                                 edgecolor=cell.frame, linewidth=2.0))


def _legend(grid: PanelGrid, style: FigureStyle) -> str:
    """With numbered headers, what each number stands for (the sentences are not above the columns)."""
    if style.header != "number":
        return ""
    return " ".join(f"{header.label}: {header.text}" for header in grid.headers if header.text)


def _caption_block(caption: str, layout: Layout) -> Block:
    style = layout.style
    measure = style.measure()
    lines = measure.wrap(caption, layout.width)

    def draw(fig, top, left, height):
        fig.text(left / style.width, (top - 2 * GAP) / height, "\n".join(lines), ha="left", va="top",
                 fontsize=style.font_size)

    return Block(2 * GAP + measure.height(len(lines)), draw)


def _colorbar_block(colorbar, layout: Layout) -> Block:
    style = layout.style
    measure, small = style.measure(), style.measure(style.small)
    bar = 0.1
    ticks = small.height(1) + 2 / 72  # tick length and padding
    inset = small.width("0.00") / 2 + GAP  # the end ticks' labels stay inside the figure
    bar_x = max(layout.label, inset)
    bar_width = min(max(0.5 * layout.width, min(2.5, layout.width - layout.label)), layout.width - bar_x - inset)
    lines = measure.wrap(colorbar.label, bar_width, 2)
    label = measure.height(len(lines)) + 1 / 72
    block = 2 * GAP + bar + ticks + label

    def draw(fig, top, left, height):
        width = style.width
        bar_left = left + bar_x
        axis = fig.add_axes([bar_left / width, (top - 2 * GAP - bar) / height, bar_width / width, bar / height])
        scale = fig.colorbar(ScalarMappable(Normalize(colorbar.low, colorbar.high), colorbar.cmap), cax=axis,
                             orientation="horizontal")
        scale.ax.tick_params(labelsize=style.small, length=2, pad=1)
        scale.ax.xaxis.set_major_locator(bar_ticks())
        # the label as a figure text (not the axis label), measured and fitted to the bar's width
        fig.text(bar_left / width, (top - 2 * GAP - bar - ticks) / height, "\n".join(lines), ha="left", va="top",
                 fontsize=style.font_size)

    return Block(block, draw)


__all__ = ["FigureError", "as_style", "build_figure", "check_format", "figure_height", "grid_rows", "page_file",
           "panel_pixels", "plan", "save_figure", "save_pages", "split_pages"]
