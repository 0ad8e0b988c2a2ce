"""Every figure fits its preset's page or goes on more pages and says so (issue 58, part 6): the regions figure
at the page preset (6.9 x 9 in a page), the sentence maps on slides (more slides, never exit 2), pages split by
rows keeping each group's title; and a PDF's pictures compressed (a four-model, eight-sentence maps PDF under
1 MB) without visible loss.

Grids are built from numpy panels or tiny models in code; nothing reads ~/.cache or the network.
"""

from __future__ import annotations

import io
import re
from pathlib import Path

import numpy as np
import pikepdf
import pytest
from PIL import Image
from test_figure_venue import DEMO, REPO, explorer, moved, pdf_pages, zoo  # noqa: F401 - fixtures

from explorer.views.figure_pages import write_figure_pages
from explorer.views.figure_style import PRESETS, resolve_style
from explorer.views.figures import grid_rows, save_pages, split_pages
from explorer.views.panels import Colorbar, Header, Panel, PanelGrid
from explorer.views.pdf_images import compress_pdf_images
from explorer.views.regions_view import compute_regions
from explorer.views.settings import ViewSettings

PAGE = (PRESETS["page"].width, PRESETS["page"].max_height)
SLIDE = (PRESETS["slide"].width, PRESETS["slide"].height)
ROWS = re.compile(r"^rows? (\d+)(?:-(\d+))? \((.+)\) went to (.+)$")


@pytest.fixture(autouse=True)
def isolated(monkeypatch, tmp_path):
    monkeypatch.setenv("EXPLORER_HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)


def square(path: Path, side: int = 64, height: int | None = None) -> Path:
    pixels = np.random.default_rng(2).random((height or side, side, 3))
    Image.fromarray((pixels * 255).astype(np.uint8)).save(path)
    return path


@pytest.mark.slow
def test_the_regions_figure_at_the_page_preset_goes_on_pages_that_fit_and_says_which_rows(tmp_path):
    import explorer as library
    from explorer.models.methods import get_method

    names = ["clip", "caft", "flair"]
    models = {n: library.Model(get_method(n).example("tiny", seed=i), name=n, device="cpu")
              for i, n in enumerate(names)}
    portrait = square(tmp_path / "p.png", 32, 96)  # a tall picture: each model's row is taller than a third of a page
    chosen = ViewSettings(view="regions", image=str(portrait), caption="A cat. A dog.",
                          models=names, detector="felzenszwalb")
    view = compute_regions(models.__getitem__, chosen)
    written = write_figure_pages(view, chosen, tmp_path / "regions.pdf")
    pages = pdf_pages(tmp_path / "regions.pdf")
    assert len(pages) > 1, "three models' regions rows (picture and matrix each) are taller than a 9 in page"
    assert all(w <= PAGE[0] + 1e-6 and h <= PAGE[1] + 1e-6 for w, h in pages), pages
    lines = [ROWS.match(line) for line in written.lines]
    assert all(lines) and not written.over, written.lines  # every line names rows that moved; none is too tall
    shown = [int(m[1]) for m in lines]
    assert shown[0] > 1 and [m[4] for m in lines] == [f"page {n} of regions.pdf" for n in range(2, len(pages) + 1)]
    moved_names = [name for m in lines for name in m[3].split(", ")]
    assert moved_names == names[shown[0] - 1:]  # the rows after the first page, in order, each once


def test_maps_that_one_slide_cannot_hold_go_to_more_slides_and_exit_0(zoo, tmp_path, capsys):
    """`explorer figure maps` of the default example with two models at `--preset slide`: slides, not exit 2."""
    example = REPO / "assets" / "synthetic-test-000000"
    out = tmp_path / "maps.pdf"
    assert explorer(zoo, "figure", "maps", f"{example}.png", "--caption-file", f"{example}.txt", "--model", "tiny-a",
                    "--model", DEMO, "--preset", "slide", "--out", out) == 0
    pages = pdf_pages(out)
    assert len(pages) > 1 and all(page == pytest.approx(SLIDE) for page in pages), pages
    lines = moved(capsys.readouterr().err)
    assert [where for *_, where in lines] == [f"page {n} of maps.pdf" for n in range(2, len(pages) + 1)]
    assert lines[-1][1] == 6  # the example's six sentences, the last on the last slide


def grid(rows: int, titled: bool = False) -> PanelGrid:
    rng = np.random.default_rng(0)
    return PanelGrid(rows=[[Panel(rng.integers(0, 256, (40, 40, 3), dtype=np.uint8), "")] * 2 for _ in range(rows)],
                     row_labels=[f"model {r}" for r in range(rows)], headers=[Header("a"), Header("b")],
                     row_titles=[f"Q{r // 2 + 1}" if r % 2 == 0 else "" for r in range(rows)] if titled else [],
                     caption="a caption every page repeats")


def test_rows_split_into_the_fewest_pages_that_fit_and_a_page_inside_a_group_repeats_its_title():
    style = resolve_style("column")
    tall = grid(12, titled=True)
    pages = split_pages(len(tall.rows), lambda rows: grid_rows(tall, rows), style)
    assert len(pages) > 1 and sum(pages, []) == list(range(12))
    assert split_pages(1, lambda rows: grid_rows(tall, rows), style) == [[0]]
    page = grid_rows(tall, [3, 4, 5])
    assert page.row_titles == ["Q2 (continued)", "Q3", ""] and page.row_labels == ["model 3", "model 4", "model 5"]
    assert page.headers == tall.headers and page.caption == tall.caption


def heat_map_grid(models: int = 4, sentences: int = 8, side: int = 224) -> PanelGrid:
    """A maps figure's panels as the page draws them: the picture, then a smooth heat map over it per sentence."""
    import matplotlib

    rng = np.random.default_rng(0)
    y, x = np.mgrid[0:side, 0:side] / side
    picture = (np.stack([x, y, 1 - x], axis=-1) * 200 + rng.normal(0, 12, (side, side, 3))).clip(0, 255)
    turbo = matplotlib.colormaps["turbo"]
    rows = []
    for s in range(sentences):
        cells = [Panel(picture.astype(np.uint8), "")]
        for m in range(models):
            cx, cy = rng.random(2)
            heat = np.exp(-((x - cx) ** 2 + (y - cy) ** 2) * (4 + 4 * m))
            overlay = 0.55 * turbo(heat)[..., :3] * 255 + 0.45 * picture
            cells.append(Panel(overlay.clip(0, 255).astype(np.uint8), ""))
        rows.append(cells)
    return PanelGrid(rows=rows, row_labels=[f"{s + 1}. sentence {s + 1}" for s in range(sentences)],
                     headers=[Header("")] + [Header(f"model {m}") for m in range(models)],
                     colorbar=Colorbar("turbo", 0.0, 1.0, "map value"))


@pytest.mark.slow
def test_a_four_model_eight_sentence_maps_pdf_is_under_1_mb_and_looks_the_same(tmp_path):
    """32 heat maps and the picture at 224 px (a synthetic scene's size): JPEG-coded, the picture once."""
    out = save_pages([heat_map_grid()], tmp_path / "maps.pdf", style=resolve_style("page"))[0]
    assert out.stat().st_size <= 1_000_000, out.stat().st_size
    with pikepdf.open(out) as pdf:
        pictures = [o for o in pdf.objects if isinstance(o, pikepdf.Stream) and o.get("/Subtype") == "/Image"]
        jpeg = [p for p in pictures if p.get("/Filter") == "/DCTDecode"]
        assert len(jpeg) == 33, "32 heat maps and one picture (its eight copies stored once)"
        decoded = np.asarray(pikepdf.PdfImage(jpeg[1]).as_pil_image().convert("RGB"), dtype=float)
    assert decoded.shape == (224, 224, 3)  # the panel's own pixels, not a resampled copy
    # Lossless, the same pictures take well over 1 MB: the bound is the compression's doing.
    lossless = sum(len(_png(p.pixels)) for row in heat_map_grid().rows for p in row[1:])
    assert lossless > 1_500_000


def _png(pixels: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, "PNG")
    return buffer.getvalue()


def test_jpeg_is_kept_for_heat_maps_only_and_a_pdf_compresses_to_the_same_bytes(tmp_path):
    """Flat shapes (a mask, a synthetic scene) stay lossless; compressing twice gives the same bytes."""
    flat = np.zeros((96, 96, 3), np.uint8)
    flat[20:60, 30:70] = (200, 30, 30)
    flat[..., 2] += np.arange(96, dtype=np.uint8)[None, :]  # more than 256 colours, still flat runs
    rows = [[Panel(flat, ""), heat_map_grid(1, 1, 96).rows[0][1]]]
    first = save_pages([PanelGrid(rows=rows, row_labels=["a"])], tmp_path / "one.pdf")[0]
    second = save_pages([PanelGrid(rows=rows, row_labels=["a"])], tmp_path / "two.pdf")[0]
    assert first.read_bytes() == second.read_bytes()
    with pikepdf.open(first) as pdf:
        filters = sorted(str(o.get("/Filter")) for o in pdf.objects
                         if isinstance(o, pikepdf.Stream) and o.get("/Subtype") == "/Image")
    assert filters == ["/DCTDecode", "/FlateDecode"]
    assert compress_pdf_images(first) == 0  # nothing left to do: a second pass keeps the file
