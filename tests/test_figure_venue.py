"""Figures that fit their venue (issue 48, part 5): `--preset column` pages at most 3.5 x 4.5 in, read back from
the files; `--layout sentences-as-rows|models-as-rows`; `--no-picture`; what went to another page, and the
demo models' warning, on stderr.

The zoo is a temporary folder of the built-in tiny model under a few names and one demo model of the
repository's (checkpoints/demo); nothing here reads ~/.cache or the network.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from test_figure_style import text_problems
from test_figures import load, picture  # noqa: F401 - the tiny models and picture, as fixtures

from explorer.cli import main
from explorer.grounding.sentence_maps import MapCache
from explorer.views.figure_style import PRESETS, figure_style, resolve_style
from explorer.views.figures import build_figure, even_pages
from explorer.views.maps_view import compute_maps, render_maps_figure
from explorer.views.settings import SettingsError, ViewSettings
from explorer.zoo.manifest import DEMO_COMMAND

REPO = Path(__file__).resolve().parents[1]
MODELS = ["tiny-a", "tiny-b", "tiny-c", "tiny-d"]
DEMO = "demo-clip-base"  # built by the demo build: trained on the synthetic shapes only
SENTENCES = ["A red cube sits on the left.", "A blue ball rolls to the right.", "A green tree stands behind.",
             "The sky is grey.", "A cat sleeps on the mat.", "A dog looks up at the cat.",
             "The floor is made of wood."]
CAPTION = " ".join(SENTENCES)
COLUMN = (3.5, 4.5)  # inches: the most a column figure's page may take
MEDIA_BOX = re.compile(rb"/MediaBox\s*\[\s*(-?[\d.]+)\s+(-?[\d.]+)\s+(-?[\d.]+)\s+(-?[\d.]+)\s*\]")
MOVED = re.compile(r"^sentences? (\d+)(?:-(\d+))? went to (.+)$")


@pytest.fixture(scope="module")
def zoo(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("zoo")
    manifest = json.loads((REPO / "checkpoints" / "tiny-untrained.json").read_text())
    for name in MODELS:
        (root / f"{name}.json").write_text(json.dumps({**manifest, "name": name}))
    demo = json.loads((REPO / "checkpoints" / "demo" / "clip-base.json").read_text())
    assert DEMO_COMMAND in json.dumps(demo)  # what makes the zoo call it a demo model
    demo["weights"] = str(REPO / "checkpoints" / "demo" / demo["weights"])
    (root / f"{DEMO}.json").write_text(json.dumps(demo))
    return root


@pytest.fixture(autouse=True)
def isolated(monkeypatch, tmp_path):
    monkeypatch.setattr("explorer.ui.examples.truth_dir", lambda: tmp_path / "truth")
    monkeypatch.chdir(tmp_path)


@pytest.fixture()
def photo(tmp_path) -> Path:
    """A picture no truth is known for."""
    path = tmp_path / "photo.png"
    Image.fromarray((np.random.default_rng(0).random((48, 64, 3)) * 255).astype(np.uint8)).save(path)
    return path


def explorer(zoo: Path, *argv) -> int:
    return main(["--checkpoints", str(zoo), *map(str, argv)])


def maps(zoo, photo, out, *flags, models=MODELS) -> int:
    return explorer(zoo, "figure", "maps", photo, "--caption", CAPTION, *[f for m in models for f in ("--model", m)],
                    "--out", out, *flags)


def pdf_pages(path: Path) -> list[tuple[float, float]]:
    """(width, height) in inches of every page of a PDF, from its page objects' media boxes."""
    data = path.read_bytes()
    boxes = [tuple(float(v) for v in box) for box in MEDIA_BOX.findall(data)]
    assert len(boxes) == len(re.findall(rb"/Type\s*/Page\b", data)), "a page without its own media box"
    return [((x1 - x0) / 72, (y1 - y0) / 72) for x0, y0, x1, y1 in boxes]


def png_inches(path: Path) -> tuple[float, float]:
    with Image.open(path) as image:
        dpi = image.info["dpi"][0]
        return image.width / dpi, image.height / dpi


def moved(err: str) -> list[tuple[int, int, str]]:
    """(first, last, where) for each "sentences 4-6 went to page 2 of x.pdf" line on stderr."""
    found = [MOVED.match(line) for line in err.splitlines()]
    return [(int(m[1]), int(m[2] or m[1]), m[3]) for m in found if m]


def fits_a_column(width: float, height: float, slack: float = 0.0) -> bool:
    return width <= COLUMN[0] + slack and height <= COLUMN[1] + slack


# ---- --preset column: every page fits, and stderr says what went where -----------------------------------


@pytest.mark.parametrize("count", [2, 4])
def test_column_pdf_pages_fit_a_column_and_stderr_names_each_page(zoo, photo, tmp_path, capsys, count):
    out = tmp_path / "maps.pdf"
    assert maps(zoo, photo, out, "--preset", "column", models=MODELS[:count]) == 0
    pages = pdf_pages(out)
    assert len(pages) > 1, "seven sentences of maps do not fit one column page"
    assert all(fits_a_column(*page) for page in pages), pages
    err = capsys.readouterr().err
    lines = moved(err)
    assert [where for *_, where in lines] == [f"page {n} of maps.pdf" for n in range(2, len(pages) + 1)]
    # the pages hold the sentences in order, each once, the first page from sentence 1
    starts = [1] + [first for first, _, _ in lines]
    ends = [first - 1 for first in starts[1:]] + [len(SENTENCES)]
    assert all(a <= b for a, b in zip(starts, ends)) and [last for _, last, _ in lines] == ends[1:]
    assert "tall, over" not in err


@pytest.mark.parametrize("count", [2, 4])
def test_column_png_pages_are_files_of_their_own(zoo, photo, tmp_path, capsys, count):
    out = tmp_path / "maps.png"
    assert maps(zoo, photo, out, "--preset", "column", "--dpi", 100, models=MODELS[:count]) == 0
    lines = moved(capsys.readouterr().err)
    files = [out] + [tmp_path / where for *_, where in lines]
    assert len(files) > 1 and [f.name for f in files[1:]] == [f"maps-{n}.png" for n in range(2, len(files) + 1)]
    for file in files:
        assert fits_a_column(*png_inches(file), slack=0.01), (file.name, png_inches(file))
    assert not (tmp_path / f"maps-{len(files) + 1}.png").exists()
    assert [p.name for p in tmp_path.glob("*.json")] == ["maps.png.json"]  # one settings file writes them all


@pytest.mark.parametrize("suffix", [".pdf", ".png"])
def test_pages_replay_to_the_same_bytes(zoo, photo, tmp_path, suffix):
    out = tmp_path / f"maps{suffix}"
    assert maps(zoo, photo, out, "--preset", "column", "--dpi", 80) == 0
    assert explorer(zoo, "figure", "replay", tmp_path / f"maps{suffix}.json", "--out", tmp_path / f"again{suffix}") == 0
    first = sorted(tmp_path.glob(f"maps*{suffix}"))
    again = sorted(tmp_path.glob(f"again*{suffix}"))
    assert len(first) == len(again) and [f.read_bytes() for f in first] == [f.read_bytes() for f in again]


def test_the_page_preset_keeps_one_page(zoo, photo, tmp_path, capsys):
    out = tmp_path / "maps.pdf"
    assert maps(zoo, photo, out) == 0
    assert len(pdf_pages(out)) == 1 and not moved(capsys.readouterr().err)


def test_the_page_export_splits_the_same_way_and_says_so(load, picture, tmp_path, monkeypatch):  # noqa: F811
    from explorer.ui import view_controls

    monkeypatch.setattr(view_controls, "EXPORT_ROOT", tmp_path / "exports")
    chosen = ViewSettings(image=str(picture), caption=CAPTION, models=["clip", "caft"])
    view = compute_maps(load, chosen, MapCache(), truth_dir=tmp_path / "truth")
    files, note = view_controls.export_view(view, chosen, "png", "column")
    pictures = [Path(f) for f in files if f.endswith(".png")]
    assert [p.name for p in pictures] == ["maps.png"] + [f"maps-{n}.png" for n in range(2, len(pictures) + 1)]
    assert len(pictures) > 1 and files[-1].endswith("maps.png.json")
    assert all(fits_a_column(*png_inches(p), slack=0.01) for p in pictures)
    assert all(f"went to maps-{n}.png" in note for n in range(2, len(pictures) + 1)), note


def test_a_page_that_cannot_fit_says_so(zoo, tmp_path, capsys):
    tall = tmp_path / "tall.png"  # 1:20, so a map is taller than a column page however narrow it is drawn
    Image.fromarray((np.random.default_rng(0).random((960, 48, 3)) * 255).astype(np.uint8)).save(tall)
    assert maps(zoo, tall, tmp_path / "tall.pdf", "--preset", "column", models=MODELS[:1]) == 0
    err = capsys.readouterr().err
    pages = pdf_pages(tmp_path / "tall.pdf")
    assert len(pages) == len(SENTENCES) and pages[0][1] > COLUMN[1]  # a sentence a page: the least it can do
    assert f"tall.pdf, page 1 is {pages[0][1]:.2f} in tall, over the column preset's 4.5 in" in err


def test_a_later_page_of_sentences_splits_into_its_own_sentences(load, tmp_path, monkeypatch):  # noqa: F811
    """The page's export of its second page of sentences (5-7): the column pages hold those, and say so."""
    from explorer.views import figures
    from explorer.views.figure_pages import write_figure_pages

    tall = tmp_path / "tall.png"  # a portrait picture: two sentences' rows fill a column page
    Image.fromarray((np.random.default_rng(1).random((96, 40, 3)) * 255).astype(np.uint8)).save(tall)
    chosen = ViewSettings(image=str(tall), caption=CAPTION, models=["clip", "caft"], per_page=4, page=1,
                          preset="column")
    view = compute_maps(load, chosen, MapCache(), truth_dir=tmp_path / "truth")
    drawn = []
    save = figures.save_pages
    monkeypatch.setattr(figures, "save_pages", lambda grids, *a, **k: drawn.extend(grids) or save(grids, *a, **k))
    written = write_figure_pages(view, chosen, tmp_path / "maps.pdf")
    pages = [[int(label.split(".")[0]) for label in grid.row_labels] for grid in drawn]  # the rows' numbers
    assert len(pages) > 1 and sum(pages, []) == [5, 6, 7]  # the second page of sentences, in order, each once
    lines = moved("\n".join(written.pages))  # numbered as the rows are
    assert [(first, last) for first, last, _ in lines] == [(rows[0], rows[-1]) for rows in pages[1:]]
    assert [where for *_, where in lines] == [f"page {n} of maps.pdf" for n in range(2, len(drawn) + 1)]


def test_pages_are_as_even_as_their_count_allows():
    assert even_pages(7, 3) == [[0, 1, 2], [3, 4], [5, 6]]
    assert even_pages(6, 4) == [[0, 1], [2, 3], [4], [5]] and even_pages(2, 5) == [[0], [1]]


# ---- layouts and the picture column --------------------------------------------------------------------


@pytest.fixture(scope="module")
def view(picture, load, tmp_path_factory):  # noqa: F811
    chosen = ViewSettings(image=str(picture), caption=CAPTION, models=["clip", "caft"])
    return compute_maps(load, chosen, MapCache(), truth_dir=tmp_path_factory.mktemp("truth"))


def settings(**changes) -> ViewSettings:
    return ViewSettings(caption=CAPTION, models=["clip", "caft"], per_page=3, **changes)


def test_sentences_as_rows_is_the_default_a_row_per_sentence(view):
    grid = render_maps_figure(view, settings())
    assert ViewSettings().layout == "sentences-as-rows"
    assert len(grid.rows) == 3 and all(len(row) == 3 for row in grid.rows)  # the picture, then a column per model
    assert grid.row_labels == [f"{i + 1}. {SENTENCES[i]}" for i in range(3)]
    assert [h.label.split("\n")[:2] for h in grid.headers[1:]] == [[m.name, m.kind] for m in view.models]
    assert [[panel.sentence for panel in row[1:]] for row in grid.rows] == [[0, 0], [1, 1], [2, 2]]


def test_models_as_rows_is_the_transpose(view):
    grid = render_maps_figure(view, settings(layout="models-as-rows"))
    assert len(grid.rows) == 2 and all(len(row) == 4 for row in grid.rows)  # the picture, then a column per sentence
    assert [label.split("\n")[0] for label in grid.row_labels] == ["clip", "caft"]
    assert [h.text for h in grid.headers[1:]] == SENTENCES[:3]
    assert [panel.sentence for panel in grid.rows[1][1:]] == [0, 1, 2]


@pytest.mark.parametrize("layout", ["sentences-as-rows", "models-as-rows"])
def test_no_picture_drops_the_picture_column(view, layout):
    plain = np.asarray(view.picture.convert("RGB"))
    with_picture = render_maps_figure(view, settings(layout=layout))
    without = render_maps_figure(view, settings(layout=layout, picture=False))
    assert all(np.array_equal(row[0].pixels, plain) for row in with_picture.rows)
    assert not any(np.array_equal(panel.pixels, plain) for row in without.rows for panel in row)
    assert [len(row) for row in without.rows] == [len(row) - 1 for row in with_picture.rows]
    assert len(without.headers) == len(with_picture.headers) - 1 and without.repeat == 0


def test_mask_both_gives_each_model_two_columns(view):
    grid = render_maps_figure(view, settings(mask="both"))
    assert [h.label.split("\n")[0] for h in grid.headers] == ["", "clip", "mask", "caft", "mask"]
    assert all(len(row) == 5 for row in grid.rows)


def test_numbered_rows_keep_the_sentences_in_a_legend(view):
    grid = render_maps_figure(view, settings(header="number"))
    assert grid.row_labels == ["S1", "S2", "S3"] and f"S2: {SENTENCES[1]}" in grid.caption


@pytest.mark.parametrize("preset", list(PRESETS))
@pytest.mark.parametrize("mask", ["contour", "both"])
def test_sentence_rows_never_overlap_or_leave_the_figure(view, preset, mask):
    grid = render_maps_figure(view, settings(mask=mask, annotate="all"))
    style = resolve_style(preset, annotate="all")
    with figure_style(style):
        figure = build_figure(grid, style)
    assert text_problems(figure, style) == []


def test_cli_flags_land_in_the_settings_and_draw_differently(zoo, photo, tmp_path):
    assert maps(zoo, photo, tmp_path / "rows.png", "--dpi", 60, models=MODELS[:2]) == 0
    assert maps(zoo, photo, tmp_path / "cols.png", "--dpi", 60, "--layout", "models-as-rows", "--no-picture",
                models=MODELS[:2]) == 0
    rows, cols = ViewSettings.load(tmp_path / "rows.png.json"), ViewSettings.load(tmp_path / "cols.png.json")
    assert (rows.layout, rows.picture) == ("sentences-as-rows", True)
    assert (cols.layout, cols.picture) == ("models-as-rows", False)
    # a row per sentence is taller than wide here (7 rows of 3 panels); a row per model the other way
    (rows_w, rows_h), (cols_w, cols_h) = png_inches(tmp_path / "rows.png"), png_inches(tmp_path / "cols.png")
    assert rows_h > rows_w and cols_h < cols_w
    assert explorer(zoo, "figure", "replay", tmp_path / "cols.png.json", "--out", tmp_path / "again.png") == 0
    assert (tmp_path / "again.png").read_bytes() == (tmp_path / "cols.png").read_bytes()


def test_a_settings_file_from_before_layouts_replays_as_it_was_drawn(tmp_path):
    data = json.loads(ViewSettings(caption=CAPTION).to_json())
    del data["layout"], data["picture"]
    (tmp_path / "old.png.json").write_text(json.dumps(data))
    old = ViewSettings.load(tmp_path / "old.png.json")
    assert (old.layout, old.picture) == ("models-as-rows", True)


@pytest.mark.parametrize("data, message", [({"picture": "no"}, "picture should be bool"),
                                           ({"picture": 0}, "picture should be bool"),
                                           ({"layout": "diagonal"}, "layout is one of")])
def test_bad_layout_settings_are_refused(data, message):
    with pytest.raises(SettingsError, match=message):
        ViewSettings.from_dict(data)


# ---- the demo models' warning ------------------------------------------------------------------------------


@pytest.mark.parametrize("view_name", ["maps", "kinds"])
def test_demo_models_on_a_picture_without_truth_warn_on_stderr(zoo, photo, tmp_path, capsys, view_name):
    assert explorer(zoo, "figure", view_name, photo, "--caption", "A cat. A dog.", "--model", DEMO, "--model",
                    MODELS[0], "--out", tmp_path / "x.png", "--dpi", 60) == 0
    captured = capsys.readouterr()
    warnings = [line for line in captured.err.splitlines() if line.startswith("warning: ")]
    assert len(warnings) == 1 and f"{DEMO} was trained on synthetic shapes only" in warnings[0]
    assert MODELS[0] not in warnings[0] and "warning" not in captured.out


def test_no_warning_without_demo_models(zoo, photo, tmp_path, capsys):
    assert explorer(zoo, "figure", "maps", photo, "--caption", "A cat. A dog.", "--model", MODELS[0],
                    "--out", tmp_path / "x.png", "--dpi", 60) == 0
    assert "warning" not in capsys.readouterr().err


def test_no_warning_where_the_truth_is_known(zoo, photo, tmp_path, capsys):
    truth = tmp_path / "truth.png"
    Image.fromarray(np.full((48, 64), 255, np.uint8)).save(truth)  # every sentence: the whole picture
    assert explorer(zoo, "figure", "maps", photo, "--caption", "A cat. A dog.", "--model", DEMO, "--truth", truth,
                    "--out", tmp_path / "x.png", "--dpi", 60) == 0
    assert "warning" not in capsys.readouterr().err


@pytest.mark.slow
def test_the_docs_column_figure_replays_within_a_column(tmp_path, monkeypatch):
    """docs/figures/maps-column.pdf: the page's default example under four demo models, a column figure."""
    monkeypatch.setenv("EXPLORER_HOME", str(tmp_path / "home"))
    saved = REPO / "docs" / "figures" / "maps-column.pdf.json"
    assert ViewSettings.load(saved).models == ["demo-mulclip", "demo-clip-base", "demo-caft", "demo-flair"]
    assert main(["--checkpoints", str(REPO / "checkpoints"), "figure", "replay", str(saved), "--out",
                 str(tmp_path / "again.pdf"), "--device", "cpu"]) == 0
    pages = pdf_pages(tmp_path / "again.pdf")
    saved_pages = pdf_pages(REPO / "docs" / "figures" / "maps-column.pdf")
    assert len(pages) == len(saved_pages)
    for page, saved_page in zip(pages, saved_pages, strict=True):  # per page, each dimension (pytest.approx is flat)
        assert page == pytest.approx(saved_page, abs=1e-3)
    assert len(pages) > 1 and all(fits_a_column(*page) for page in pages)
