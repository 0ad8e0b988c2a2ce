"""`explorer figure maps|regions|pca|replay` (and the old `explorer maps`), run in-process.

The zoo is a temporary folder holding only the built-in tiny model's manifest; ground truth
lookups go to a temporary folder, so nothing here reads ~/.cache or the network.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from explorer.cli import main
from explorer.views.settings import ViewSettings

REPO = Path(__file__).resolve().parents[1]
MODEL = "tiny-untrained"
CAPTION = "A red cube sits on the left. A blue ball rolls to the right."


@pytest.fixture(scope="module")
def zoo(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("zoo")
    shutil.copy(REPO / "checkpoints" / f"{MODEL}.json", root)
    return root


@pytest.fixture(autouse=True)
def isolated(monkeypatch, tmp_path):
    monkeypatch.setattr("explorer.ui.examples.truth_dir", lambda: tmp_path / "truth")
    monkeypatch.delenv("EXPLORER_DETECTOR", raising=False)
    monkeypatch.chdir(tmp_path)


def write_picture(path: Path, seed: int = 0) -> Path:
    Image.fromarray((np.random.default_rng(seed).random((48, 64, 3)) * 255).astype(np.uint8)).save(path)
    return path


@pytest.fixture()
def picture(tmp_path) -> Path:
    return write_picture(tmp_path / "picture.png")


def explorer(zoo: Path, *argv) -> int:
    return main(["--checkpoints", str(zoo), *map(str, argv)])


# ---- maps, and replaying a figure from its settings -----------------------------------------------


@pytest.mark.parametrize("suffix", [".png", ".pdf", ".svg"])
def test_maps_figure_writes_settings_that_replay_to_the_same_bytes(zoo, picture, tmp_path, capsys, suffix):
    out = tmp_path / f"x{suffix}"
    assert explorer(zoo, "figure", "maps", "picture.png", "--caption", CAPTION, "--model", MODEL,
                    "--out", out) == 0
    settings_file = tmp_path / f"x{suffix}.json"
    assert out.is_file() and settings_file.is_file()
    assert f"wrote {out} and {settings_file}" in capsys.readouterr().out
    settings = ViewSettings.load(settings_file)
    assert settings.view == "maps" and settings.caption == CAPTION and settings.models == [MODEL]
    assert settings.image == str(picture.resolve())  # a relative path is saved absolute

    again = tmp_path / f"y{suffix}"
    assert explorer(zoo, "figure", "replay", settings_file, "--out", again) == 0
    assert again.read_bytes() == out.read_bytes()
    assert ViewSettings.load(tmp_path / f"y{suffix}.json") == settings

    original = out.read_bytes()
    out.unlink()
    assert explorer(zoo, "figure", "replay", settings_file) == 0  # default: the name without .json
    assert out.read_bytes() == original


def test_png_figure_is_a_page_wide_at_300_dpi_by_default(zoo, picture, tmp_path):
    assert explorer(zoo, "figure", "maps", picture, "--caption", CAPTION, "--model", MODEL,
                    "--out", tmp_path / "x.png") == 0
    with Image.open(tmp_path / "x.png") as image:
        assert abs(image.width - 2070) <= 1  # the page preset: 6.9 in
        assert image.info["dpi"] == pytest.approx((300, 300), rel=1e-3)
    assert explorer(zoo, "figure", "maps", picture, "--caption", CAPTION, "--model", MODEL,
                    "--out", tmp_path / "small.png", "--width", 3.5, "--dpi", 100) == 0
    with Image.open(tmp_path / "small.png") as image:
        assert abs(image.width - 350) <= 1
    assert explorer(zoo, "figure", "maps", picture, "--caption", CAPTION, "--model", MODEL,
                    "--out", tmp_path / "column.png", "--preset", "column", "--dpi", 100) == 0
    with Image.open(tmp_path / "column.png") as image:
        assert abs(image.width - 330) <= 1


def test_settings_file_with_one_flag_overridden(zoo, picture, tmp_path):
    assert explorer(zoo, "figure", "maps", picture, "--caption", CAPTION, "--model", MODEL, "--mask", "both",
                    "--out", tmp_path / "x.png", "--dpi", 100) == 0
    assert explorer(zoo, "figure", "maps", "--settings", tmp_path / "x.png.json", "--cmap", "viridis",
                    "--out", tmp_path / "z.png", "--dpi", 100) == 0
    before = json.loads((tmp_path / "x.png.json").read_text())
    after = json.loads((tmp_path / "z.png.json").read_text())
    assert before["cmap"] == "turbo" and after["cmap"] == "viridis"
    assert {k: v for k, v in after.items() if k != "cmap"} == {k: v for k, v in before.items() if k != "cmap"}
    assert after["mask"] == "both"  # kept from the file
    assert (tmp_path / "z.png").read_bytes() != (tmp_path / "x.png").read_bytes()


def test_display_flags_land_in_the_settings(zoo, picture, tmp_path):
    caption_file = tmp_path / "caption.txt"
    caption_file.write_text("A cat. A dog. A tree.")
    assert explorer(zoo, "figure", "maps", picture, "--caption-file", caption_file, "--model", MODEL,
                    "--page", 2, "--per-page", 1, "--threshold", 0.4, "--scale", "shared", "--opacity", 0.3,
                    "--kind", "generic", "--save-maps", tmp_path / "maps.npz", "--out", tmp_path / "x.svg") == 0
    saved = ViewSettings.load(tmp_path / "x.svg.json")
    assert saved.caption == "A cat. A dog. A tree."
    assert (saved.page, saved.per_page, saved.threshold, saved.scale, saved.opacity, saved.kind) == (
        1, 1, 0.4, "shared", 0.3, "generic")  # --page counts from 1, the settings from 0
    with np.load(tmp_path / "maps.npz") as maps:
        assert list(maps) == [MODEL] and maps[MODEL].shape == (3, 48, 64)


def test_style_flags_land_in_the_settings_and_replay_restyles(zoo, picture, tmp_path):
    out = tmp_path / "x.pdf"
    assert explorer(zoo, "figure", "maps", picture, "--caption", CAPTION, "--model", MODEL, "--font", "cm",
                    "--header", "number", "--annotate", "all", "--font-size", 9, "--out", out) == 0
    saved = ViewSettings.load(tmp_path / "x.pdf.json")
    assert (saved.font, saved.header, saved.annotate, saved.font_size, saved.preset) == ("cm", "number", "all", 9.0,
                                                                                         "page")
    assert b"Cmr10" in out.read_bytes()
    # replay with another preset: its own width and size, the rest as saved
    assert explorer(zoo, "figure", "replay", tmp_path / "x.pdf.json", "--preset", "slide",
                    "--out", tmp_path / "slide.pdf") == 0
    again = ViewSettings.load(tmp_path / "slide.pdf.json")
    assert (again.preset, again.width, again.font_size, again.font, again.header) == ("slide", None, None, "cm",
                                                                                      "number")


def test_the_old_maps_command_still_works(zoo, picture, tmp_path):
    assert explorer(zoo, "maps", picture, "--caption", CAPTION, "--model", MODEL, "--out", tmp_path / "m.png",
                    "--dpi", 100) == 0
    assert (tmp_path / "m.png").is_file()
    saved = ViewSettings.load(tmp_path / "m.png.json")
    assert saved.view == "maps" and saved.models == [MODEL]


# ---- regions and PCA ------------------------------------------------------------------------------


def test_regions_figure(zoo, picture, tmp_path, capsys):
    out = tmp_path / "r.pdf"
    assert explorer(zoo, "figure", "regions", picture, "--caption", CAPTION, "--model", MODEL,
                    "--detector", tmp_path / "no-yolos", "--out", out) == 0
    assert out.read_bytes().startswith(b"%PDF")
    printed = capsys.readouterr().out
    assert "does not exist" in printed and "Felzenszwalb" in printed
    saved = ViewSettings.load(tmp_path / "r.pdf.json")
    assert saved.view == "regions" and saved.detector == str(tmp_path / "no-yolos")
    assert explorer(zoo, "figure", "replay", tmp_path / "r.pdf.json", "--out", tmp_path / "again.pdf") == 0
    assert (tmp_path / "again.pdf").read_bytes() == out.read_bytes()


def test_pca_figure_of_two_pictures(zoo, picture, tmp_path):
    second = write_picture(tmp_path / "second.png", seed=3)
    out = tmp_path / "p.png"
    assert explorer(zoo, "figure", "pca", picture, "--images", second, "--model", MODEL, "--fit", "per-image",
                    "--out", out, "--dpi", 100) == 0
    with Image.open(out) as image:
        assert abs(image.width - 690) <= 1
    saved = ViewSettings.load(tmp_path / "p.png.json")
    assert saved.view == "pca" and saved.images == [str(second)] and saved.pca_fit == "per-image"
    assert saved.caption == ""  # PCA needs no caption


# ---- the figures papers print: map kinds side by side, qualitative retrieval ---------------------------


def pixels_of(path: Path) -> np.ndarray:
    with Image.open(path) as image:
        return np.asarray(image.convert("RGB"))


def test_kinds_figure_replays_to_the_same_png(zoo, picture, tmp_path, capsys):
    out = tmp_path / "kinds.png"
    assert explorer(zoo, "figure", "kinds", picture, "--caption", CAPTION, "--model", MODEL, "--kind", "gradcam",
                    "--kind", "clearclip", "--kind", "native", "--preset", "column", "--dpi", 100, "--out", out) == 0
    saved = ViewSettings.load(tmp_path / "kinds.png.json")
    assert (saved.view, saved.kinds, saved.preset, saved.width) == ("kinds", ["gradcam", "clearclip", "native"],
                                                                    "column", None)
    with Image.open(out) as image:
        assert abs(image.width - 330) <= 1
    assert explorer(zoo, "figure", "replay", tmp_path / "kinds.png.json", "--out", tmp_path / "again.png") == 0
    assert (tmp_path / "again.png").read_bytes() == out.read_bytes()
    # a kind no model offers is refused with what they offer
    assert explorer(zoo, "figure", "kinds", picture, "--caption", CAPTION, "--model", MODEL, "--kind", "nope",
                    "--out", tmp_path / "bad.png") == 2
    assert "offer" in capsys.readouterr().err and not (tmp_path / "bad.png").exists()


@pytest.fixture()
def folder_dataset(tmp_path, monkeypatch) -> Path:
    """Six pictures with their captions (the plain folder layout); embeddings cached under the test's home."""
    monkeypatch.setenv("EXPLORER_HOME", str(tmp_path / "home"))
    root = tmp_path / "data"
    root.mkdir()
    for n in range(6):
        write_picture(root / f"{n}.png", seed=10 + n)
        (root / f"{n}.txt").write_text(f"Picture {n} is a square of noise. It has a long caption number {n}.")
    return root


@pytest.mark.parametrize("direction, query", [("t2i", "2"), ("i2t", "4")])
def test_retrieval_figure_replays_to_the_same_png(zoo, folder_dataset, tmp_path, direction, query):
    out = tmp_path / f"{direction}.png"
    assert explorer(zoo, "figure", "retrieval", "--data", folder_dataset, "--model", MODEL, "--query", query,
                    "--query", "0", "--k", 3, "--direction", direction, "--dpi", 80, "--out", out) == 0
    saved = ViewSettings.load(tmp_path / f"{direction}.png.json")
    assert (saved.view, saved.queries, saved.k, saved.direction) == ("retrieval", [query, "0"], 3, direction)
    assert saved.data == str(folder_dataset.resolve())
    assert explorer(zoo, "figure", "replay", tmp_path / f"{direction}.png.json", "--out", tmp_path / "again.png") == 0
    assert np.array_equal(pixels_of(tmp_path / "again.png"), pixels_of(out))


def test_retrieval_figure_frames_the_right_answer_and_sets_captions_as_text(zoo, folder_dataset):
    from explorer.views.retrieval_figure import TRUTH_FRAME, compute_retrieval, render_retrieval
    from explorer.zoo import Zoo

    load = Zoo(zoo).load
    t2i = ViewSettings(view="retrieval", data=str(folder_dataset), models=[MODEL], queries=["3"], k=6)
    grid = render_retrieval(compute_retrieval(load, t2i), t2i)
    framed = [panel for panel in grid.rows[0] if panel.frame]
    assert len(grid.rows[0]) == 6 and len(framed) == 1 and framed[0].frame == TRUTH_FRAME  # k = the gallery: found
    assert grid.row_titles[0].startswith("Q1: Picture 3 is a square")
    i2t = ViewSettings(view="retrieval", data=str(folder_dataset), models=[MODEL], queries=["1"], k=2, direction="i2t")
    grid = render_retrieval(compute_retrieval(load, i2t), i2t)
    assert grid.rows[0][0].pixels is not None and all(p.pixels is None and p.body for p in grid.rows[0][1:])


@pytest.mark.parametrize("argv, message", [
    (["--query", "99"], "no caption #99"),
    (["--query", "a text", "--direction", "i2t"], "an i2t query is a picture"),
    (["--k", "0", "--query", "1"], "1 to 20 results"),
])
def test_retrieval_figure_refuses_what_the_dataset_cannot_answer(zoo, folder_dataset, tmp_path, capsys, argv,
                                                                 message):
    assert explorer(zoo, "figure", "retrieval", "--data", folder_dataset, "--model", MODEL, *argv,
                    "--out", tmp_path / "r.png") == 2
    assert message in capsys.readouterr().err and not (tmp_path / "r.png").exists()


# ---- errors: exit status 2 and a message, never a traceback ---------------------------------------


@pytest.mark.parametrize("argv, message", [
    (["figure", "maps", "missing.png", "--caption", CAPTION, "--model", MODEL], "No image file"),
    (["figure", "maps", "picture.png", "--caption", "   ", "--model", MODEL], "give a caption"),
    (["figure", "maps", "picture.png", "--model", MODEL], "give a caption"),
    (["figure", "regions", "--caption", CAPTION, "--model", MODEL], "give the picture"),
    (["figure", "maps", "picture.png", "--caption", CAPTION] + ["--model", MODEL] * 5, "at most 4 models"),
    (["figure", "maps", "picture.png", "--caption", CAPTION, "--model", MODEL, "--opacity", "1.5"], "opacity"),
    (["figure", "maps", "picture.png", "--caption", CAPTION, "--model", "no-such-model"], "no-such-model"),
])
def test_errors_exit_2_with_a_message(zoo, picture, tmp_path, capsys, argv, message):
    assert explorer(zoo, *argv, "--out", tmp_path / "x.png") == 2
    captured = capsys.readouterr()
    assert captured.err.startswith("error: ") and message in captured.err
    assert not (tmp_path / "x.png").exists() and not (tmp_path / "x.png.json").exists()


def test_a_settings_file_of_another_view_is_refused(zoo, picture, tmp_path, capsys):
    settings_file = tmp_path / "pca.json"
    settings_file.write_text(ViewSettings(view="pca", image=str(picture)).to_json())
    assert explorer(zoo, "figure", "regions", "--settings", settings_file, "--caption", CAPTION,
                    "--out", tmp_path / "r.png") == 2
    assert "holds a 'pca' figure, not 'regions'" in capsys.readouterr().err
    assert not (tmp_path / "r.png").exists()


def test_an_unreadable_settings_file_is_refused(zoo, tmp_path, capsys):
    broken = tmp_path / "broken.json"
    broken.write_text('{"view": "maps", "colour": "red"}')
    assert explorer(zoo, "figure", "replay", broken) == 2
    assert "unknown settings colour" in capsys.readouterr().err


def test_a_bad_choice_is_an_argparse_error(zoo, picture, capsys):
    with pytest.raises(SystemExit) as exit_:
        explorer(zoo, "figure", "maps", picture, "--caption", CAPTION, "--cmap", "rainbow")
    assert exit_.value.code == 2 and "rainbow" in capsys.readouterr().err


def test_an_output_that_is_no_figure_format_exits_2(zoo, picture, tmp_path, capsys):
    assert explorer(zoo, "figure", "maps", picture, "--caption", CAPTION, "--model", MODEL,
                    "--out", tmp_path / "x.jpg") == 2
    assert "a figure is one of .png, .pdf, .svg" in capsys.readouterr().err
    assert not (tmp_path / "x.jpg").exists()


def test_pca_of_attention_for_a_model_without_it_exits_2(zoo, picture, tmp_path, capsys):
    seps = REPO / "checkpoints" / "demo" / "seps.json"
    if not seps.is_file():
        pytest.skip("no demo SEPS checkpoint")
    assert explorer(zoo, "figure", "pca", picture, "--model", seps, "--source", "attention",
                    "--out", tmp_path / "p.png") == 2
    assert "does not expose" in capsys.readouterr().err


def test_width_dpi_and_relative_paths_are_saved_for_replay(zoo, picture, tmp_path, monkeypatch):
    from PIL import Image

    from explorer.views.settings import ViewSettings

    monkeypatch.chdir(picture.parent)
    out = tmp_path / "narrow.png"
    assert explorer(zoo, "figure", "pca", picture.name, "--images", picture.name, "--model", MODEL,
                    "--width", "3.5", "--dpi", "100", "--out", out) == 0
    saved = ViewSettings.load(str(out) + ".json")
    assert (saved.width, saved.dpi) == (3.5, 100)
    assert saved.images == [str(picture.resolve())]
    monkeypatch.chdir(tmp_path)
    again = tmp_path / "again.png"
    assert explorer(zoo, "figure", "replay", str(out) + ".json", "--out", again) == 0
    assert Image.open(again).width == 350 and again.read_bytes() == out.read_bytes()


def test_replay_to_a_non_figure_name_is_refused(zoo, picture, tmp_path, capsys):
    out = tmp_path / "m.png"
    assert explorer(zoo, "figure", "maps", picture, "--caption", CAPTION, "--model", MODEL, "--out", out) == 0
    assert explorer(zoo, "figure", "replay", str(out) + ".json", "--out", tmp_path / "m.jpg") == 2
    assert "a figure is one of" in capsys.readouterr().err


def test_regions_record_the_detector_they_used(zoo, picture, tmp_path, monkeypatch):
    from explorer.grounding.detectors import CLASSICAL, DETECTOR_ENV

    monkeypatch.delenv(DETECTOR_ENV, raising=False)
    out = tmp_path / "r.png"
    assert explorer(zoo, "figure", "regions", picture, "--caption", CAPTION, "--model", MODEL, "--out", out) == 0
    assert ViewSettings.load(str(out) + ".json").detector == CLASSICAL
    # a replay elsewhere with $EXPLORER_DETECTOR set still uses what the figure used
    monkeypatch.setenv(DETECTOR_ENV, str(tmp_path / "some-yolos"))
    again = tmp_path / "again.png"
    assert explorer(zoo, "figure", "replay", str(out) + ".json", "--out", again) == 0
    assert again.read_bytes() == out.read_bytes()


def test_a_settings_file_with_wrong_types_exits_2(zoo, tmp_path, capsys):
    broken = tmp_path / "typed.json"
    broken.write_text('{"view": "maps", "page": "2"}')
    assert explorer(zoo, "figure", "replay", broken, "--out", tmp_path / "x.png") == 2
    assert "page should be int" in capsys.readouterr().err


def test_an_explainer_kind_is_drawn_and_recorded(zoo, picture, tmp_path):
    out = tmp_path / "legrad.png"
    assert explorer(zoo, "figure", "maps", picture, "--caption", CAPTION, "--model", MODEL, "--kind", "legrad",
                    "--out", out, "--dpi", 100) == 0
    assert out.is_file() and ViewSettings.load(tmp_path / "legrad.png.json").kind == "legrad"
