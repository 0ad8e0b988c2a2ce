"""Paper figures (explorer/views/figures.py): exact width in inches, the dpi asked for, reproducible bytes."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

import numpy as np
import pytest
from PIL import Image

import explorer
from explorer.grounding.sentence_maps import MapCache
from explorer.models.methods import get_method
from explorer.views.figures import save_figure
from explorer.views.maps_view import compute_maps, render_maps
from explorer.views.panels import Colorbar, Panel, PanelGrid
from explorer.views.regions_view import SimilarityMatrix, compute_regions, render_regions
from explorer.views.settings import ViewSettings

FORMATS = (".png", ".pdf", ".svg")
MEDIA_BOX = re.compile(rb"/MediaBox\s*\[\s*(-?[\d.]+)\s+(-?[\d.]+)\s+(-?[\d.]+)\s+(-?[\d.]+)\s*\]")


def small_grid() -> PanelGrid:
    """Two rows of numpy panels, a colour bar and a caption: every part the layout draws."""
    rng = np.random.default_rng(0)
    rows = [[Panel(rng.integers(0, 256, (20, 30, 3), dtype=np.uint8), f"r{r} p{c} · t=0.5", "a sentence")
             for c in range(3)] for r in range(2)]
    return PanelGrid(rows=rows, row_labels=["model a\ngeneric", "model b\nUNTRAINED"],
                     caption="S1: a cat. S2: a dog. S3: a tree.", colorbar=Colorbar("turbo", 0.0, 1.0, "map value"))


@pytest.fixture(scope="module")
def picture(tmp_path_factory):
    path = tmp_path_factory.mktemp("pictures") / "picture.png"
    Image.fromarray((np.random.default_rng(1).random((48, 64, 3)) * 255).astype(np.uint8)).save(path)
    return path


@pytest.fixture(scope="module")
def load():
    models = {name: explorer.Model(get_method(name).example("tiny"), name=name, device="cpu")
              for name in ("clip", "caft")}
    return models.__getitem__


@pytest.fixture(scope="module")
def maps_grid(picture, load, tmp_path_factory) -> PanelGrid:
    chosen = ViewSettings(image=str(picture), caption="A cat. A dog.", models=["clip", "caft"], mask="both")
    view = compute_maps(load, chosen, MapCache(), truth_dir=tmp_path_factory.mktemp("truth"))
    return render_maps(view, chosen)


@pytest.fixture(scope="module")
def regions_grid(picture, load) -> PanelGrid:
    chosen = ViewSettings(view="regions", image=str(picture), caption="A cat. A dog.", models=["clip", "caft"])
    return render_regions(compute_regions(load, chosen), chosen)


def pdf_width(data: bytes) -> float:
    boxes = MEDIA_BOX.findall(data)
    assert boxes, "no /MediaBox in the PDF"
    x0, _, x1, _ = (float(v) for v in boxes[0])
    return x1 - x0


def svg_width(path) -> float:
    width = ET.parse(path).getroot().attrib["width"]
    assert width.endswith("pt")
    return float(width[:-2])


# ---- size and resolution --------------------------------------------------------------------------


@pytest.mark.parametrize("width, dpi", [(7.0, 300), (3.5, 150)])
def test_png_is_as_wide_as_asked_at_the_dpi_asked(tmp_path, width, dpi):
    out = save_figure(small_grid(), tmp_path / "figure.png", width=width, dpi=dpi)
    assert out == tmp_path / "figure.png"
    with Image.open(out) as image:
        image.load()
        assert image.format == "PNG"
        assert abs(image.width - round(width * dpi)) <= 1
        assert image.info["dpi"] == pytest.approx((dpi, dpi), rel=1e-3)  # PNG stores whole pixels per metre
        pixels = np.asarray(image.convert("RGB"))
    assert (pixels < 250).any() and (pixels == 255).any()  # something drawn on a white page


@pytest.mark.parametrize("width", [7.0, 3.5])
def test_pdf_and_svg_are_as_wide_as_asked(tmp_path, width):
    pdf = save_figure(small_grid(), tmp_path / "figure.pdf", width=width)
    data = pdf.read_bytes()
    assert data.startswith(b"%PDF")
    assert pdf_width(data) == pytest.approx(width * 72, abs=0.5)
    svg = save_figure(small_grid(), tmp_path / "figure.svg", width=width)
    assert svg_width(svg) == pytest.approx(width * 72, abs=1e-6)
    assert ET.parse(svg).getroot().tag.endswith("svg")


def test_a_rendered_maps_view_saves_in_every_format(tmp_path, maps_grid):
    assert [len(row) for row in maps_grid.rows] == [1 + 2 * 2] * 2
    for suffix in FORMATS:
        out = save_figure(maps_grid, tmp_path / f"maps{suffix}", width=7.0, dpi=100)
        assert out.is_file() and out.stat().st_size > 0
    with Image.open(tmp_path / "maps.png") as image:
        assert abs(image.width - 700) <= 1 and image.height > 0
    assert pdf_width((tmp_path / "maps.pdf").read_bytes()) == pytest.approx(504, abs=0.5)
    assert svg_width(tmp_path / "maps.svg") == pytest.approx(504)


def test_a_regions_grid_with_similarity_matrices_saves(tmp_path, regions_grid):
    assert regions_grid.extras and all(isinstance(m, SimilarityMatrix) for m in regions_grid.extras)
    for suffix in FORMATS:
        out = save_figure(regions_grid, tmp_path / f"regions{suffix}", width=7.0, dpi=100)
        assert out.is_file() and out.stat().st_size > 0
    with Image.open(tmp_path / "regions.png") as image:
        assert abs(image.width - 700) <= 1
    assert pdf_width((tmp_path / "regions.pdf").read_bytes()) == pytest.approx(504, abs=0.5)
    assert svg_width(tmp_path / "regions.svg") == pytest.approx(504)


# ---- reproducible bytes ---------------------------------------------------------------------------


@pytest.mark.parametrize("suffix", FORMATS)
def test_the_same_grid_gives_the_same_bytes(tmp_path, suffix, regions_grid):
    for name, grid in (("small", small_grid()), ("regions", regions_grid)):
        first = save_figure(grid, tmp_path / f"{name}-a{suffix}", dpi=100).read_bytes()
        second = save_figure(grid, tmp_path / f"{name}-b{suffix}", dpi=100).read_bytes()
        assert first == second, f"{name}{suffix} differs between two saves"


def test_no_dates_in_pdf_and_svg(tmp_path):
    pdf = save_figure(small_grid(), tmp_path / "figure.pdf").read_bytes()
    assert b"/CreationDate" not in pdf
    svg = save_figure(small_grid(), tmp_path / "figure.svg").read_text()
    assert "<dc:date>" not in svg


# ---- refusals -------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["figure.jpg", "figure.tiff", "figure"])
def test_a_suffix_that_is_no_figure_format_is_refused(tmp_path, name):
    with pytest.raises(ValueError, match="a figure is one of .png, .pdf, .svg"):
        save_figure(small_grid(), tmp_path / name)
    assert not (tmp_path / name).exists()


def test_upper_case_suffixes_are_figure_formats(tmp_path):
    out = save_figure(small_grid(), tmp_path / "figure.PNG", dpi=50)
    with Image.open(out) as image:
        assert image.format == "PNG"


@pytest.mark.parametrize("grid", [PanelGrid(rows=[], row_labels=[]), PanelGrid(rows=[[]], row_labels=["empty"])])
def test_an_empty_grid_is_refused(tmp_path, grid):
    with pytest.raises(ValueError, match="nothing to draw"):
        save_figure(grid, tmp_path / "empty.png")
    assert not (tmp_path / "empty.png").exists()
