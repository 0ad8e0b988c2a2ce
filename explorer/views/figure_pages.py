"""A view written as a figure that fits its venue: split across pages when a page would be taller than the
preset allows (a column: 4.5 in; a page: 9 in; a slide: 7.5 in), with a line for each page saying what it holds.
The sentence maps split by sentences ("sentences 4-6 went to page 2 of maps.pdf"); every other view (regions,
kinds, PCA, retrieval) by its rows ("rows 3-4 (demo-caft, demo-flair) went to page 2 of regions.pdf").

A PDF gets more pages; a PNG or SVG more files (maps.png, maps-2.png, ...). One settings file beside the
first (maps.png.json) writes them all again: the split is computed from the settings, never stored.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from explorer.views.settings import ViewSettings

PLAN_SIDE = 64  # pixels: the panels a page split is measured on (only their shape and texts count)


@dataclass
class WrittenFigure:
    figure: Path  # the first (or only) file
    settings_file: Path
    files: list[Path]  # every figure file, the first one first
    pages: list[str] = field(default_factory=list)  # "sentences 4-6 went to page 2 of maps.pdf": a page after the first
    over: list[str] = field(default_factory=list)  # pages still taller than the venue allows (they say so)

    @property
    def lines(self) -> list[str]:
        return self.pages + self.over


def write_figure_pages(view, settings: ViewSettings, out: str | Path) -> WrittenFigure:
    """The view as a figure (``out``'s suffix picks PDF/SVG/PNG) on as many pages as its venue needs, and its
    settings beside the first file (``out``.json).

    Panels are drawn at the size they print at (panel width x dpi), so one-pixel mask outlines
    stay whole in the file instead of being thinned out by resampling.
    """
    from explorer.views.figures import check_format, figure_height, save_pages
    from explorer.views.maps_view import MapsView

    out = check_format(out)
    style = settings.style()
    if isinstance(view, MapsView):
        pages = _sentence_pages(view, settings, style)
        grids = [_page_grid(view, settings, style, page) for page in pages]
        said = [_sentences(page) for page in pages[1:]]
    else:
        grids, said = _row_page_grids(view, settings, style)
    files = save_pages(grids, out, dpi=settings.dpi, style=style)
    settings_file = files[0].with_name(files[0].name + ".json")
    settings_file.write_text(settings.to_json())
    written = WrittenFigure(files[0], settings_file, files)
    for number, what in enumerate(said, start=2):
        where = f"page {number} of {out.name}" if len(files) == 1 else files[number - 1].name
        written.pages.append(f"{what} went to {where}")
    limit = style.max_height
    for number, grid in enumerate(grids, start=1):
        height = figure_height(grid, style)
        if limit is not None and height > limit + 1e-6:
            name = files[min(number, len(files)) - 1].name + (f", page {number}" if len(files) < len(grids) else "")
            written.over.append(f"{name} is {height:.2f} in tall, over the {settings.preset} preset's {limit:g} in "
                                "even with its panels shrunk: show fewer models, or use a wider preset")
    return written


def _sentence_pages(view, settings: ViewSettings, style) -> list[list[int] | None]:
    """The sentences of each page (0-based; None: the view as its settings show it, on one page)."""
    from explorer.views.figures import split_pages
    from explorer.views.maps_view import render_maps_figure

    if style.page_height is None:
        return [None]
    shown = list(view.page_indices(settings.page, settings.per_page))
    pages = split_pages(len(shown), lambda page: render_maps_figure(view, settings, PLAN_SIDE,
                                                                    [shown[i] for i in page]), style)
    return [None] if len(pages) == 1 else [[shown[i] for i in page] for page in pages]


def _page_grid(view, settings: ViewSettings, style, sentences: list[int] | None):
    """A page's panels, drawn again at the size they print at when that is smaller than the working size."""
    from explorer.views import pipeline
    from explorer.views.figures import panel_pixels
    from explorer.views.maps_view import render_maps_figure

    def render(side=None):
        if sentences is None:
            return pipeline.render_view(view, settings, side)
        return render_maps_figure(view, settings, side, sentences)

    grid = render()
    side = panel_pixels(grid, style, settings.dpi)
    if side < _largest_side(grid):
        grid = render(side)
    return grid


def _row_page_grids(view, settings: ViewSettings, style) -> tuple[list, list[str]]:
    """The pages of a figure that splits by rows (every view but the sentence maps), each drawn at the size
    its panels print at, and what each page after the first holds."""
    from explorer.views import pipeline
    from explorer.views.figures import ROW_PAGE_PANEL, grid_rows, panel_pixels, split_pages

    whole = pipeline.render_view(view, settings)
    pages = split_pages(len(whole.rows), lambda rows: grid_rows(whole, rows), style, ROW_PAGE_PANEL)
    side = max(panel_pixels(grid_rows(whole, page), style, settings.dpi) for page in pages)
    if side < _largest_side(whole):
        whole = pipeline.render_view(view, settings, side)
    grids = [whole] if len(pages) == 1 else [grid_rows(whole, page) for page in pages]
    return grids, [_rows(whole, page) for page in pages[1:]]


def _largest_side(grid) -> int:
    return max((max(p.pixels.shape[:2]) for row in grid.rows for p in row if p.pixels is not None), default=0)


def _rows(grid, page: list[int]) -> str:
    """ "row 3 (demo-caft)" or "rows 3-4 (demo-caft, demo-flair)": numbers from 1, named by their labels."""
    first, last = page[0] + 1, page[-1] + 1
    names = [grid.row_labels[r].split("\n")[0] for r in page if r < len(grid.row_labels)]
    named = f" ({', '.join(name for name in names if name)})" if any(names) else ""
    return (f"row {first}" if first == last else f"rows {first}-{last}") + named


def _sentences(page: list[int]) -> str:
    """ "sentence 4" or "sentences 4-6" (numbers from 1), as the figure's rows are numbered."""
    first, last = page[0] + 1, page[-1] + 1
    return f"sentence {first}" if first == last else f"sentences {first}-{last}"


__all__ = ["WrittenFigure", "write_figure_pages"]
