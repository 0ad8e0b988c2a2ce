"""Figures people read (explorer/views/figure_style.py, figures.py): embedded TrueType fonts, text kept as
text in SVG, presets, sentence headers, and no text overlapping or leaving the figure at any preset.

Views are drawn from tiny models built in code; the overlap check measures every text as matplotlib
renders it (``get_window_extent``).
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

import numpy as np
import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg
from test_figures import load, picture  # noqa: F401 - the tiny models and picture, as fixtures

from explorer.grounding.sentence_maps import MapCache
from explorer.grounding.truth import Truth
from explorer.views import figures
from explorer.views.figure_style import PRESETS, figure_style, resolve_style
from explorer.views.figures import build_figure, grid_rows, save_figure, split_pages
from explorer.views.kinds_view import compute_kinds, render_kinds
from explorer.views.maps_view import compute_maps, render_maps
from explorer.views.panels import Header, Panel, PanelGrid
from explorer.views.pca_view import compute_pca, render_pca
from explorer.views.regions_view import compute_regions, render_regions
from explorer.views.settings import ViewSettings

CAPTION = ("A small red cube sits on the wooden table near the left edge of the picture. "
           "Behind it, a tall blue bottle with a narrow neck catches the light from the window. "
           "The floor is grey. A cat sleeps.")
OBJECT = re.compile(rb"(\d+) 0 obj\s*(.*?)\s*endobj", re.S)
REF = rb"(\d+) 0 R"


@pytest.fixture(scope="module")
def maps_view(picture, load, tmp_path_factory):
    chosen = ViewSettings(image=str(picture), caption=CAPTION, models=["clip", "caft"])
    view = compute_maps(load, chosen, MapCache(), truth_dir=tmp_path_factory.mktemp("truth"))
    # truth for every sentence, so each panel carries its IoU and hit
    view.truth = Truth(masks=[np.eye(48, 64, dtype=bool) | np.eye(48, 64, k=10, dtype=bool)] * len(view.sentences),
                       source="test")
    return view


@pytest.fixture(scope="module")
def grids(picture, load, maps_view, tmp_path_factory):
    """One grid of every kind the figures draw."""
    maps = ViewSettings(image=str(picture), caption=CAPTION, models=["clip", "caft"], mask="both")
    kinds = ViewSettings(view="kinds", image=str(picture), caption=CAPTION, models=["clip", "caft"], per_page=2)
    regions = ViewSettings(view="regions", image=str(picture), caption=CAPTION, models=["clip"])
    pca = ViewSettings(view="pca", image=str(picture), images=[str(picture)], models=["clip", "caft"])
    truth = tmp_path_factory.mktemp("truth")
    return {"maps": render_maps(maps_view, maps),
            "kinds": render_kinds(compute_kinds(load, kinds, MapCache(), truth_dir=truth), kinds),
            "regions": render_regions(compute_regions(load, regions), regions),
            "pca": render_pca(compute_pca(load, pca), pca),
            "retrieval-i2t": text_cells_grid()}


def text_cells_grid() -> PanelGrid:
    """A retrieval figure's shape: a query row title, the query picture, then captions set as text."""
    rng = np.random.default_rng(2)
    caption = "A long caption with many words that has to wrap inside its cell and is cut " * 3
    rows = [[Panel(rng.integers(0, 256, (40, 40, 3), dtype=np.uint8), "query")]
            + [Panel(None, f"{0.9 - r / 10:.3f}", body=caption, scores=f"{0.9 - r / 10:.3f}",
                     frame="#1a9850" if r == 0 else "") for r in range(4)] for _ in range(2)]
    return PanelGrid(rows=rows, row_labels=["demo-model-with-a-long-name\nright answer: rank 1", "other"],
                     headers=[Header("query")] + [Header(f"#{r}") for r in range(1, 5)],
                     row_titles=["Q1: picture #3 (test-000003)", ""], caption="Framed: the right answer.", repeat=1)


# ---- what a reader sees: nothing overlaps, nothing leaves the figure ----------------------------------


def text_problems(figure, style) -> list[str]:
    """Texts that leave the figure, overlap another text, or lie on a picture, measured as rendered (in the
    style's settings, as ``save_figure`` renders)."""
    with figure_style(style):
        return _problems(figure, FigureCanvasAgg(figure).get_renderer())


def _problems(figure, renderer) -> list[str]:
    page = figure.bbox
    texts = [(t.get_text(), t.get_window_extent(renderer)) for t in figure.texts if t.get_text().strip()]
    for axis in (axis for axis in figure.axes if axis.axison):  # a picture's axes are off: no ticks
        for tick in axis.get_xticklabels() + axis.get_yticklabels():
            if tick.get_visible() and tick.get_text().strip():
                texts.append((tick.get_text(), tick.get_window_extent(renderer)))
    pictures = [axis.get_window_extent(renderer) for axis in figure.axes if axis.images and not axis.axison]
    tolerance = 0.5  # pixels
    problems = []
    for text, box in texts:
        if box.x0 < page.x0 - tolerance or box.y0 < page.y0 - tolerance or box.x1 > page.x1 + tolerance \
                or box.y1 > page.y1 + tolerance:
            problems.append(f"{text[:30]!r} leaves the figure")
        for picture in pictures:
            if _overlap(box, picture) > tolerance:
                problems.append(f"{text[:30]!r} lies on a picture")
    for i, (text, box) in enumerate(texts):
        for other, second in texts[i + 1:]:
            if _overlap(box, second) > tolerance:
                problems.append(f"{text[:30]!r} overlaps {other[:30]!r}")
    return problems


def _overlap(a, b) -> float:
    """The smaller side of the two boxes' intersection, in pixels (0: they do not meet)."""
    return max(0.0, min(min(a.x1, b.x1) - max(a.x0, b.x0), min(a.y1, b.y1) - max(a.y0, b.y0)))


def drawn(grid: PanelGrid, style):
    with figure_style(style):
        return build_figure(grid, style)


def drawn_pages(grid: PanelGrid, style) -> list:
    """The pages an export draws: the grid's rows split over as many pages as the preset's page needs."""
    pages = split_pages(len(grid.rows), lambda rows: grid_rows(grid, rows), style)
    return [drawn(grid_rows(grid, rows), style) for rows in pages]


@pytest.mark.parametrize("preset", list(PRESETS))
@pytest.mark.parametrize("kind", ["maps", "kinds", "regions", "pca", "retrieval-i2t"])
def test_no_text_overlaps_or_leaves_the_figure_at_any_preset(grids, kind, preset):
    for header in ("sentence", "number"):
        style = resolve_style(preset, header=header, annotate="all")
        for page, figure in enumerate(drawn_pages(grids[kind], style)):
            assert figure.get_figwidth() == pytest.approx(PRESETS[preset].width)
            if PRESETS[preset].height:
                assert figure.get_figheight() == pytest.approx(PRESETS[preset].height)
            assert text_problems(figure, style) == [], (kind, preset, header, page)


@pytest.mark.parametrize("font", ["sans", "serif", "cm"])
def test_no_overlap_in_every_font(grids, font):
    style = resolve_style("column", font=font)
    assert text_problems(drawn(grids["maps"], style), style) == []


def test_the_check_fails_when_a_header_is_too_long_for_its_column(grids, monkeypatch):
    """Break the wrapping once: a sentence left on one line runs over its neighbours, and the check says so."""
    style = resolve_style("page")
    assert text_problems(drawn(grids["maps"], style), style) == []
    monkeypatch.setattr(figures, "header_lines", lambda header, layout: [header.text or header.label])
    problems = text_problems(drawn(grids["maps"], style), style)
    assert any("overlaps" in p or "leaves the figure" in p for p in problems)


def test_sentence_headers_are_wrapped_and_cut_with_an_ellipsis(grids):
    style = resolve_style("page", header_lines=2)
    figure = drawn(grids["maps"], style)
    texts = [t.get_text() for t in figure.texts]
    cut = [t for t in texts if t.endswith("…")]
    assert cut and all(len(t.split("\n")) <= 2 for t in cut)
    assert any(t.replace("\n", " ").startswith("A small red cube") for t in texts)
    assert not any(t.startswith("S1: ") for t in texts)  # the sentences are the headers, no legend


def test_numbered_headers_keep_the_legend(grids):
    figure = drawn(grids["maps"], resolve_style("page", header="number"))
    texts = [t.get_text() for t in figure.texts]
    assert "S1" in texts and any("S1: A small red cube" in t.replace("\n", " ") for t in texts)


@pytest.mark.parametrize("annotate, present, absent", [("none", [], ["IoU", "t="]), ("scores", ["IoU"], ["t="]),
                                                       ("all", ["IoU", "t="], [])])
def test_what_is_printed_under_each_map(grids, annotate, present, absent):
    figure = drawn(grids["maps"], resolve_style("page", annotate=annotate))
    labels = set(grids["maps"].row_labels)  # the row labels carry each model's mIoU whatever the choice
    text = " ".join(t.get_text() for t in figure.texts if t.get_text() not in labels)
    assert all(word in text for word in present) and not any(word in text for word in absent)


def test_a_narrow_figure_wraps_its_columns_into_bands_with_the_picture_in_each(grids):
    layout = figures.plan(grids["maps"], resolve_style("column"))
    assert len(layout.bands) > 1 and all(band[0] == 0 for band in layout.bands)
    assert sorted({c for band in layout.bands for c in band}) == list(range(len(grids["maps"].rows[0])))


def test_a_preset_sets_the_width_and_size_and_flags_override_them():
    assert (resolve_style("column").width, resolve_style("column").font_size) == (3.3, 8.0)
    assert resolve_style("slide").height == 7.5 and resolve_style("slide").font_size > 8
    custom = resolve_style("column", width=4.0, font_size=9)
    assert (custom.width, custom.font_size, custom.height) == (4.0, 9.0, None)
    assert ViewSettings(preset="slide").style().width == 13.3
    assert ViewSettings(width=7.0).style().width == 7.0  # settings saved before presets keep their width


# ---- files: fonts embedded as TrueType, text kept as text ----------------------------------------------


def pdf_fonts(data: bytes) -> list[tuple[bytes, bytes]]:
    """(subtype, font file key) for every font the PDF's font dictionaries use, descendants followed."""
    objects = {int(n): body for n, body in OBJECT.findall(data)}
    found = []
    for body in objects.values():
        head = body.split(b"stream")[0]
        if not re.search(rb"/Type\s*/Font\b", head):
            continue
        subtype = re.search(rb"/Subtype\s*/(\w+)", head).group(1)
        if subtype == b"Type0":
            continue  # its descendant (a CIDFontType2) is a font object of its own, checked below
        descriptor = re.search(rb"/FontDescriptor\s*" + REF, head)
        files = re.findall(rb"/(FontFile\d?)\s*" + REF, objects[int(descriptor.group(1))]) if descriptor else []
        embedded = [key for key, number in files if int(number) in objects]
        found.append((subtype, embedded[0] if embedded else b""))
    return found


@pytest.mark.parametrize("font", ["sans", "serif", "cm"])
def test_pdf_embeds_every_font_as_truetype_never_type3(grids, tmp_path, font):
    pdf = save_figure(grids["maps"], tmp_path / "maps.pdf", style=resolve_style("page", font=font))
    data = pdf.read_bytes()
    fonts = pdf_fonts(data)
    assert fonts, "no font dictionary found"
    assert b"/Type3" not in data
    for subtype, file_key in fonts:
        assert subtype in (b"TrueType", b"CIDFontType2"), subtype
        assert file_key == b"FontFile2", f"a {subtype} font is not embedded"
    names = re.findall(rb"/BaseFont\s*/(\S+)", data)
    assert any((b"Cmr10" if font == "cm" else b"DejaVu") in name for name in names), names


def test_a_type3_pdf_would_fail_the_check(grids, tmp_path):
    """The check tells the two apart: matplotlib's own default (Type 3) is caught."""
    from matplotlib.figure import Figure

    figure = Figure(figsize=(2, 1))
    figure.text(0.1, 0.5, "plain text")
    figure.savefig(tmp_path / "type3.pdf")
    fonts = pdf_fonts((tmp_path / "type3.pdf").read_bytes())
    assert any(subtype == b"Type3" for subtype, _ in fonts)


def test_svg_keeps_the_sentences_as_text(grids, tmp_path):
    svg = save_figure(grids["maps"], tmp_path / "maps.svg", style=resolve_style("page"))
    root = ET.parse(svg).getroot()
    texts = [" ".join("".join(node.itertext()).split()) for node in root.iter("{http://www.w3.org/2000/svg}text")]
    assert texts, "no <text> element: the text was drawn as paths"
    words = [word.strip(".,…") for word in " ".join(texts).split()]
    for word in ("small", "red", "cube", "Behind", "bottle", "grey", "cat", "sleeps"):
        assert word in words, word
    assert not list(root.iter("{http://www.w3.org/2000/svg}use")) or "<text" in svg.read_text()


def test_the_same_settings_give_the_same_bytes_in_every_font(grids, tmp_path):
    for font in ("sans", "cm"):
        for suffix in (".pdf", ".svg", ".png"):
            style = resolve_style("column", font=font)
            first = save_figure(grids["kinds"], tmp_path / f"a{suffix}", dpi=80, style=style).read_bytes()
            second = save_figure(grids["kinds"], tmp_path / f"b{suffix}", dpi=80, style=style).read_bytes()
            assert first == second, (font, suffix)


@pytest.mark.parametrize("preset", list(PRESETS))
def test_no_model_name_is_broken_mid_word_at_any_preset(maps_view, preset):
    """Issue 66.6: a name too wide for its column is shortened with an ellipsis after a whole part, never
    broken across lines ("demo-clip-" / "base")."""
    from dataclasses import replace

    from explorer.views.maps_view import render_sentence_rows

    names = ["demo-clip-base-with-a-long-tail", "demo-caft"]
    view = replace(maps_view, models=[replace(m, name=n) for m, n in zip(maps_view.models, names)])
    settings = ViewSettings(models=names, preset=preset)
    figure = drawn(render_sentence_rows(view, settings), settings.style())
    lines = [line for text in figure.texts for line in text.get_text().split("\n") if line.strip()]
    assert not [line for line in lines if line.rstrip().endswith("-")], lines  # no line ends inside a name
    for line in (line for line in lines if "demo" in line):
        name = line.split()[0]
        assert name in names or (name.endswith("…") and any(n.startswith(name[:-1]) for n in names)), line


def test_a_one_model_page_figure_keeps_each_sentence_beside_its_picture(maps_view):
    """Issue 66.6: one model at the page preset shrinks its panels to the page's height; the room they leave goes
    to the sentences and the margins, never a third of the width between a sentence and its picture."""
    from dataclasses import replace

    from explorer.views.maps_view import render_sentence_rows

    view = replace(maps_view, models=maps_view.models[:1])
    settings = ViewSettings(models=[view.models[0].name], preset="page")
    style = settings.style()
    grid = render_sentence_rows(view, settings)
    grid.rows, grid.row_labels = grid.rows * 3, grid.row_labels * 3  # taller than the page: the panels shrink
    figure = drawn(grid, style)
    with figure_style(style):
        renderer = FigureCanvasAgg(figure).get_renderer()
        labels = [t.get_window_extent(renderer) for t in figure.texts if re.match(r"\d+\. ", t.get_text())]
    pictures = [axis.get_window_extent(renderer) for axis in figure.axes if axis.images and not axis.axison]
    assert labels and pictures
    gap = min(p.x0 for p in pictures) - max(box.x1 for box in labels)
    assert 0 <= gap < 0.1 * figure.bbox.width, (gap, figure.bbox.width)
