"""How every figure looks: fonts embedded as TrueType, sizes for a venue's width, text measured as drawn.

One place sets matplotlib for every view and the page's exports (``figure_style``):
PDF and PS embed TrueType (Type 42) fonts, never Type 3 (IEEE PDF eXpress refuses those), and SVG
keeps its text as ``<text>`` so it can be edited in Inkscape or Illustrator. ``cm`` is matplotlib's own
Computer Modern (``cmr10``), so a figure matches a LaTeX paper with no TeX install.

A preset is a width (and, for slides, a height; for a column, the most a page may be tall) with the font
size meant for it; text is measured
with the font it is drawn in (``Measure``), so the layout wraps and cuts it at its final size.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from functools import lru_cache


FONTS = ("sans", "serif", "cm")
HEADERS = ("sentence", "number")  # a map's column header: its sentence, or S1.. with a legend under the grid
ANNOTATIONS = ("none", "scores", "all")  # under each map: nothing; IoU and hit when truth is known; + threshold
SLACK = 0.5 / 72  # inches kept free at the end of a line: rounding in the renderers
GAP = 0.04  # inches between panels
PAD = 0.03  # inches between a text and the panel it belongs to
HEADER_LINES = 4  # a sentence header is cut with an ellipsis past this many lines
PART_BREAKS = tuple("-_./")  # where a name's parts meet ("demo-clip-base"): a shortened name ends on one


@dataclass(frozen=True)
class Preset:
    width: float  # inches
    height: float | None  # inches; None: as tall as the content
    font_size: float  # points, for labels; notes under panels are one point smaller
    max_height: float | None = None  # inches a page may take at most (a taller figure goes on more pages)


# A single column (3.3 in: IEEE, CVPR, ACM; at most 4.5 in tall a page, so it sits in a column beside its
# text), a full page width (6.9 in; at most 9 in tall, a two-column paper's text block on letter or A4 paper),
# a 16:9 slide (13.3 x 7.5 in). A figure taller than its venue's page goes on more pages (more slides).
PRESETS = {"column": Preset(3.3, None, 8.0, 4.5), "page": Preset(6.9, None, 8.0, 9.0),
           "slide": Preset(13.3, 7.5, 14.0)}
DEFAULT_PRESET = "page"

# Each family is a list: a glyph the first font lacks (cmr10 has ASCII only) is taken from the next one,
# and embedded like it.
_FAMILIES = {
    "sans": {"font.family": ["DejaVu Sans"], "mathtext.fontset": "dejavusans"},
    "serif": {"font.family": ["DejaVu Serif", "DejaVu Sans"], "mathtext.fontset": "dejavuserif"},
    # cmr10 has no minus sign: tick labels go through mathtext (axes.formatter.use_mathtext), which has one.
    "cm": {"font.family": ["cmr10", "DejaVu Serif"], "mathtext.fontset": "cm", "axes.formatter.use_mathtext": True},
}


@dataclass(frozen=True)
class FigureStyle:
    """What a figure's text looks like and how wide the figure is; built from a view's settings."""

    width: float = PRESETS[DEFAULT_PRESET].width
    height: float | None = None
    font: str = "sans"
    font_size: float = 8.0
    header: str = "sentence"
    annotate: str = "scores"
    header_lines: int = HEADER_LINES
    max_height: float | None = None  # a page's most inches: the maps go on more pages, panels shrink a little

    @property
    def page_height(self) -> float | None:
        """The most inches a page (a slide) may take: a slide's height, else the venue's most height a page."""
        return self.height or self.max_height

    @property
    def small(self) -> float:
        """Notes under panels, tick labels: a point smaller, never under 5 pt."""
        return max(5.0, self.font_size - 1.0)

    @property
    def line(self) -> float:
        """Inches per line of label text (1.2 x the font size, as LaTeX sets it)."""
        return self.font_size * 1.2 / 72

    @property
    def small_line(self) -> float:
        return self.small * 1.2 / 72

    def rc(self) -> dict:
        return rc_params(self.font, self.font_size)

    def measure(self, size: float | None = None) -> "Measure":
        return Measure(self.font, size or self.font_size)


def resolve_style(preset: str = DEFAULT_PRESET, width: float | None = None, font: str = "sans",
                  font_size: float | None = None, header: str = "sentence", annotate: str = "scores",
                  header_lines: int = HEADER_LINES) -> FigureStyle:
    """The preset's width, height and font size, each overridden when given."""
    chosen = PRESETS[preset]
    # A width given by hand drops the slide's fixed height: the figure is then as tall as its content. A
    # column's most height a page stays: it is the venue's, whatever the width.
    height = chosen.height if width is None else None
    return FigureStyle(width=chosen.width if width is None else float(width), height=height, font=font,
                       font_size=chosen.font_size if font_size is None else float(font_size), header=header,
                       annotate=annotate, header_lines=header_lines, max_height=chosen.max_height)


def rc_params(font: str, font_size: float) -> dict:
    """matplotlib settings for a figure: embedded TrueType, text kept as text, the family and size."""
    return {"pdf.fonttype": 42, "ps.fonttype": 42, "svg.fonttype": "none", "font.size": font_size,
            "svg.hashsalt": "explorer", "pdf.compression": 6, "axes.formatter.use_mathtext": False,
            "axes.unicode_minus": True,
            # No hinting: text is as wide at 100 dpi as in the PDF, so what was measured is what is drawn.
            "text.hinting": "none", "text.hinting_factor": 1, **_FAMILIES[font]}


@contextlib.contextmanager
def figure_style(style: FigureStyle):
    """Draw and save inside this: matplotlib's settings are the style's, and restored after."""
    import matplotlib

    with matplotlib.rc_context(style.rc()):
        yield


class Measure:
    """Widths of text in inches, as matplotlib draws it in this font and size (Agg's metrics, which
    the PDF, SVG and PNG backends share)."""

    def __init__(self, font: str, size: float):
        self.font, self.size = font, size

    def width(self, text: str) -> float:
        return _width(self.font, self.size, text)

    def wrap(self, text: str, width: float, max_lines: int | None = None) -> list[str]:
        """``text`` in lines no wider than ``width`` inches, wrapped at spaces only, cut with an ellipsis after
        ``max_lines``. A word no line holds (a model's name in a narrow column) is never broken across lines
        ("demo-clip-" / "base" read as two words): it is shortened with an ellipsis (``shortened``)."""
        lines: list[str] = []
        width -= SLACK
        for word in text.split():
            if max_lines is not None and len(lines) > max_lines:
                break  # the rest is cut anyway: a visitor's 20,000-letter word is not measured to the end
            if lines and self.width(f"{lines[-1]} {word}") <= width:
                lines[-1] = f"{lines[-1]} {word}"
                continue
            lines.append(self.shortened(word, width + SLACK) if self.width(word) > width else word)
        if max_lines is not None and len(lines) > max_lines:
            lines = lines[:max_lines]
            lines[-1] = self.ellipsis(lines[-1], width)
        return lines

    def shortened(self, word: str, width: float) -> str:
        """A word too wide for ``width`` inches, cut with an ellipsis after its last whole part that fits
        ("demo-clip…" of "demo-clip-base") when that keeps two thirds of what fits, else after its longest
        prefix that fits ("demo-cl…"): on one line either way, the full name in the settings JSON."""
        fitting = self.ellipsis(word[:200], width)[:-1]  # the longest prefix that fits with its ellipsis
        if word[len(fitting):len(fitting) + 1] in PART_BREAKS:  # it ends on a whole part already
            return fitting + "…"
        parts = [i for i, c in enumerate(fitting) if c in PART_BREAKS and i >= 2 * len(fitting) / 3]
        return (fitting[:parts[-1]] if parts else fitting) + "…"  # "demo…" would hide which model it is

    def ellipsis(self, line: str, width: float) -> str:
        """``line`` shortened until it and an ellipsis fit ``width``."""
        line, width = line.rstrip(), width - SLACK
        while line and self.width(line + "…") > width:
            line = line[:-1].rstrip()
        return line + "…"

    def height(self, lines: int) -> float:
        """Inches that ``lines`` lines of text take as drawn (tall capitals and descenders included)."""
        return _height(self.font, self.size, lines) if lines > 0 else 0.0

    def fit(self, text: str, width: float) -> str:
        """``text`` on one line, cut with an ellipsis when it does not fit."""
        return text if self.width(text) <= width else self.ellipsis(text, width)


@lru_cache(maxsize=1)
def _renderer():
    from matplotlib.backends.backend_agg import RendererAgg

    return RendererAgg(10, 10, 72)  # 72 dpi: a pixel is a point


@lru_cache(maxsize=8192)
def _width(font: str, size: float, text: str) -> float:
    import matplotlib
    from matplotlib.font_manager import FontProperties

    with matplotlib.rc_context(rc_params(font, size)):
        prop = FontProperties(size=size)
        width, _, _ = _renderer().get_text_width_height_descent(text, prop, ismath=False)
    return width / 72


@lru_cache(maxsize=256)
def _height(font: str, size: float, lines: int) -> float:
    import matplotlib
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    with matplotlib.rc_context(rc_params(font, size)):
        figure = Figure(figsize=(4, 4), dpi=72)
        text = figure.text(0, 1, "\n".join(["ÉTlpgjy|"] * lines), va="top", fontsize=size)
        return text.get_window_extent(FigureCanvasAgg(figure).get_renderer()).height / 72


__all__ = ["ANNOTATIONS", "FONTS", "HEADERS", "PRESETS", "FigureStyle", "Measure", "figure_style", "resolve_style"]
