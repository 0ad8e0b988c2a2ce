"""The Grounding tab's handlers on bad input: a clear message, and the app keeps working."""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image

from explorer.grounding.sentence_maps import MapCache
from explorer.ui import grounding_tab, maps_tab, models_tab, pca_tab, regions_tab
from explorer.zoo import Zoo


@pytest.fixture(scope="module")
def zoo():
    return Zoo()  # the repository's checkpoints/: the built-in tiny model


@pytest.fixture()
def photo(tmp_path):
    path = tmp_path / "photo.png"
    Image.fromarray((np.random.default_rng(0).random((60, 90, 3)) * 255).astype(np.uint8)).save(path)
    return path


DISPLAY = ["turbo", 0.5, "contour", True, 0.5, "map", 1, 8]  # cmap, opacity, mask, otsu, manual, scale, page, per page


def draw(zoo, cache, image, caption, models=("tiny-untrained",), truth=None):
    """The "Draw maps" button: (view, settings, board HTML, status, score rows, page slider)."""
    return maps_tab.draw(zoo.load, cache, str(image) if image else None, caption, list(models), "native", "",
                          truth, *DISPLAY)


def test_three_sentences_give_one_row_of_three_overlays(zoo, photo):
    view, settings, board, status, rows, _ = draw(zoo, MapCache(), photo, "A cat. A dog. A tree.")
    assert len(rows) == 3 and [r[1] for r in rows] == [1, 2, 3]
    assert view.models[0].maps.shape == (3, 60, 90)  # drawn at the picture's own size
    # a row per sentence with its text, a panel per (model, sentence), the model's column header
    assert [board.count(f'data-sentence="{n}"') for n in (1, 2, 3)] == [1, 1, 1]
    assert "A dog." in board and board.count("data-map-panel=") == 3
    assert 'data-map-panel="tiny-untrained|3"' in board and 'data-map-model="tiny-untrained"' in board
    assert "UNTRAINED" in status and "Otsu" in status


@pytest.mark.parametrize("caption, message", [("", "caption is empty"), ("   \n ", "caption is empty")])
def test_empty_caption(zoo, photo, caption, message):
    view, _, board, status, rows, _ = draw(zoo, MapCache(), photo, caption)
    assert view is None and "data-map-panel" not in board and rows == [] and message in status


def test_one_word_caption_draws_one_map_and_says_so(zoo, photo):
    _, _, _, status, rows, _ = draw(zoo, MapCache(), photo, "cat")
    assert len(rows) == 1 and "one sentence" in status


def test_no_image_and_no_model(zoo, photo):
    assert "image" in draw(zoo, MapCache(), None, "A cat.")[3]
    assert "at least one model" in draw(zoo, MapCache(), photo, "A cat.", models=())[3]


@pytest.mark.parametrize("payload", [b"not an image at all", b"\x89PNG\r\n\x1a\n" + b"\x00" * 100])
def test_corrupt_or_non_image_file(zoo, tmp_path, payload, photo):
    bad = tmp_path / "upload.png"
    bad.write_bytes(payload)
    cache = MapCache()
    view, _, _, status, _, _ = draw(zoo, cache, bad, "A cat.")
    assert view is None and "Cannot do that" in status
    # and the next good request still works, with the cache intact
    assert len(draw(zoo, cache, photo, "A cat.")[4]) == 1


def test_re_rendering_uses_the_cache(zoo, photo):
    cache = MapCache()
    view, settings, *_ = draw(zoo, cache, photo, "A cat. A dog.")
    draw(zoo, cache, photo, "A cat. A dog.")
    assert (cache.misses, cache.hits) == (1, 1)
    updated, board, status, rows, _ = maps_tab.rerender(view, settings, "jet", 0.8, "both", False, 0.3, "shared",
                                                           1, 8)
    assert updated.cmap == "jet" and updated.threshold == 0.3 and updated.mask == "both"
    assert cache.misses == 1  # display change: no model run
    assert "0.30 of each map's range" in status
    # "both" adds the mask's picture to each panel
    assert board.count("<img") == draw(zoo, cache, photo, "A cat. A dog.")[2].count("<img") + 2


def test_wrong_size_truth_mask_is_refused_clearly(zoo, photo, tmp_path):
    mask = tmp_path / "mask.png"
    Image.fromarray(np.zeros((50, 50), np.uint8)).save(mask)
    _, _, _, status, _, _ = draw(zoo, MapCache(), photo, "A cat. A dog.", truth=mask)
    assert "Cannot do that" in status and "50" in status and "90" in status


def test_truth_mask_gives_iou_and_pointing(zoo, photo, tmp_path):
    labels = np.zeros((60, 90), np.uint8)
    labels[:, :45], labels[:, 45:] = 1, 2
    mask = tmp_path / "labels.png"
    Image.fromarray(labels).save(mask)
    view, _, _, status, rows, _ = draw(zoo, MapCache(), photo, "A cat. A dog.", truth=mask)
    assert "mIoU" in status and "mask file" in status
    assert all(isinstance(row[6], float) and row[7] in ("hit", "miss") for row in rows)


def test_fifty_sentences_are_paginated(zoo, photo):
    caption = " ".join(f"Sentence {i} names a thing." for i in range(50))
    view, settings, _, status, rows, slider = draw(zoo, MapCache(), photo, caption)
    assert len(rows) == 50 and view.pages(8) == 7 and "7 pages" in status
    assert slider["visible"] is True and slider["maximum"] == 7
    _, last_page, _, _, slider = maps_tab.rerender(view, settings, "turbo", 0.5, "contour", True, 0.5, "map", 7, 8)
    assert slider["value"] == 7
    first_page = draw(zoo, MapCache(), photo, caption)[2]
    assert 'data-sentences="2"' in last_page and 'data-sentences="8"' in first_page  # page 7 holds 2, page 1 holds 8
    assert 'data-sentence="49"' in last_page and 'data-sentence="49"' not in first_page
    # fewer per page: more pages, and the page control follows (it was stale before)
    *_, slider = maps_tab.rerender(view, settings, "turbo", 0.5, "contour", True, 0.5, "map", 1, 1)
    assert slider["maximum"] == 50 and slider["visible"] is True
    *_, slider = maps_tab.rerender(view, settings, "turbo", 0.5, "contour", True, 0.5, "map", 1, 12)
    assert slider["maximum"] == 5


def test_export_writes_the_figure_and_its_settings(zoo, photo, tmp_path, monkeypatch):
    from explorer.ui import view_controls
    from explorer.views.settings import ViewSettings

    monkeypatch.setattr(view_controls, "EXPORT_ROOT", tmp_path / "exports")
    upload = tmp_path / "gradio-upload" / "photo.png"  # the app's uploads live in temporary folders
    upload.parent.mkdir()
    upload.write_bytes(photo.read_bytes())
    view, settings, *_ = draw(zoo, MapCache(), upload, "A cat. A dog.")
    files, note = view_controls.export_view(view, settings, "svg", "column", "cm", 3.5, "number", "all",
                                            zoo_root="checkpoints")
    assert files[0].endswith("maps.svg") and files[1].endswith("maps.svg.json")
    assert "figure replay" in note and "--checkpoints" in note
    saved = ViewSettings.load(files[1])
    assert (saved.width, saved.preset, saved.font, saved.header, saved.annotate) == (3.5, "column", "cm", "number",
                                                                                      "all")
    assert saved.image != str(upload) and saved.image.startswith(str(tmp_path / "exports"))
    upload.unlink()  # the upload is gone; the export still replays from its own copy
    from explorer.cli import main

    again = tmp_path / "again.svg"
    assert main(["figure", "replay", files[1], "--out", str(again)]) == 0
    assert again.read_bytes() == open(files[0], "rb").read()
    assert view_controls.export_view(None, None, "png", "page", "sans", 7)[0] is None
    for bad in (("gif", "page", "sans", 7), ("png", "poster", "sans", 7), ("png", "page", "comic", 7),
                ("png", "page", "sans", "wide"), ("png", "page", "sans", 400),
                ("png", "page", "sans", None, "words"), ("png", "page", "sans", None, "sentence", ["all"])):
        files, note = view_controls.export_view(view, settings, *bad)
        assert files is None and "Cannot do that" in note, bad


def test_regions_and_pca_handlers(zoo, photo, owner, tmp_path):
    cache = MapCache()
    common = [str(photo), "A cat. A dog.", ["tiny-untrained"], "native", "", None]
    missing = str(tmp_path / "no" / "such" / "dir")
    view, settings, picture, plot, status, rows = regions_tab.find_regions(owner, zoo.load, cache, *common, missing)
    assert len(rows) == 2 and "best pair" in status and missing in status  # fell back, and said so
    outside = regions_tab.find_regions(owner, zoo.load, cache, *common, "/etc")
    assert outside[0] is None and "not under an allowed folder" in outside[4]
    view, settings, picture, status = pca_tab.draw(zoo.load, cache, *common, [str(photo)], "features", "joint")
    assert "2 picture(s)" in status and picture is not None
    assert pca_tab.refit(view, settings, "per-image")[0].pca_fit == "per-image"


def test_token_budget_marks_where_77_cuts():
    caption = " ".join(f"Sentence {i} says the red cube is on the left." for i in range(10))
    spans, summary, rows = grounding_tab.update_budget(caption)
    labels = [label for _, label in spans]
    assert labels[0] is None and grounding_tab.PAST[77] in labels
    assert "77 cuts" in summary and "Fits 248" in summary
    assert rows[0][3] == "yes" and rows[-1][3] == "CUT" and rows[-1][4] == "yes"
    assert "".join(piece for piece, _ in spans) == caption


def test_models_table_lists_the_builtin(zoo):
    rows = models_tab.zoo_table(zoo)
    assert any(row[0] == "tiny-untrained" and "UNTRAINED" in row[-1] for row in rows)


def test_models_check_reports_a_bad_path(owner, tmp_path):
    assert "No weights file" in models_tab.check_file(owner, str(tmp_path / "model.pt"))
    assert "not under an allowed folder" in models_tab.check_file(owner, "/nonexistent/model.pt")


def test_seps_says_when_the_long_caption_stands_in_for_the_dense_one():
    from explorer.grounding.sentence_maps import ground
    from explorer.models.methods.seps import SepsMethod
    from explorer.models.model import Model

    model = Model(SepsMethod.example("tiny"), name="seps-tiny", device="cpu")
    picture = Image.new("RGB", (50, 40), (20, 20, 200))
    caption = "A red cube sits on the left. A blue ball sits at the top."
    cache = MapCache()
    without = ground(model, picture, caption, kind="kept-dense", cache=cache)
    assert any("stands in" in note for note in without.notes)
    given = ground(model, picture, caption, kind="kept-dense", cache=cache, dense_caption="A red cube. A blue ball.")
    assert not any("stands in" in note for note in given.notes)
    assert cache.misses == 2  # the dense caption is part of what the maps depend on
    assert given.maps.maps.shape == (2, 40, 50)


def test_the_model_list_marks_an_untrained_model_and_follows_the_zoo(tmp_path):
    from explorer.ui.grounding_tab import model_choices, refresh_models
    from explorer.zoo import Manifest, Zoo

    labels = dict((name, label) for label, name in model_choices(Zoo("checkpoints")))
    assert "UNTRAINED" in labels["tiny-untrained"] and "UNTRAINED" not in labels["demo-caft"]
    zoo = Zoo(tmp_path)
    Manifest(name="a", method="clip", weights="builtin:tiny-clip").write(tmp_path / "a.json")
    update = refresh_models(zoo, ["a", "gone"])
    assert [name for _, name in update["choices"]] == ["a"] and update["value"] == ["a"]
    Manifest(name="b", method="clip", weights="builtin:tiny-clip").write(tmp_path / "b.json")
    assert [name for _, name in refresh_models(zoo, ["a"])["choices"]] == ["a", "b"]  # no restart needed


# ---- the focus view: a sentence's maps large, picked by the table, the strip or its number ---------------


class Event:
    """What Gradio hands a select handler (``gr.SelectData``): a visitor chooses ``index``."""

    def __init__(self, index):
        self.index = index


def test_the_focus_view_shows_the_picked_sentence_for_every_model(zoo, photo):
    view, settings, *_ = draw(zoo, MapCache(), photo, "A cat. A dog. A tree.", models=("tiny-untrained",) * 2)
    shown, note = maps_tab.focus_by_number(view, settings, 2)
    assert "**S2** of 3: A dog." in note and shown["visible"] is True
    figure = shown["value"]
    heatmaps = [trace for trace in figure.data if trace.type == "heatmap"]
    assert len(heatmaps) == 2 and all("value" in trace.hovertemplate for trace in heatmaps)
    shown = np.asarray(heatmaps[0].z)
    assert np.allclose(shown, view.models[0].maps[1], atol=1e-6)  # the map's own values, at the working size
    assert len([trace for trace in figure.data if trace.type == "image"]) == 2
    assert figure.layout.xaxis2.matches == "x" and figure.layout.yaxis2.matches == "y"  # zoom and pan linked
    assert figure.layout.yaxis.scaleanchor == "x"  # square pixels
    # the table's third row is the third sentence of the first model
    number, figure, note = maps_tab.focus_from_table(view, settings, Event([2, 1]))
    assert number == 3 and "S3" in note
    # a panel of the board: the page sends its sentence number and "<model>|<n>"
    number, figure, note = maps_tab.focus_from_board(view, settings, Event(2))
    assert number == 2 and "S2" in note and figure["visible"] is True


@pytest.mark.parametrize("value", [0.5, -1, 4, 10**9, float("nan"), float("inf"), "2", True, [1], {"x": 1}])
def test_the_focus_view_refuses_what_no_sentence_is(zoo, photo, value):
    view, settings, *_ = draw(zoo, MapCache(), photo, "A cat. A dog. A tree.")
    figure, note = maps_tab.focus_by_number(view, settings, value)
    assert figure["value"] is None and "Cannot do that" in note
    for handler in (maps_tab.focus_from_table, maps_tab.focus_from_board):
        for event in (None, Event(value), Event([value, value]), Event([1, 2, 3])):
            *_, figure, note = handler(view, settings, event)
            assert figure["value"] is None and figure["visible"] is False and note
    assert maps_tab.focus_by_number(None, None, 1)[0]["value"] is None  # nothing drawn yet


def test_the_map_kinds_figure_is_exported_from_the_page(zoo, photo, tmp_path, monkeypatch):
    from explorer.ui import view_controls
    from explorer.views.settings import ViewSettings

    monkeypatch.setattr(view_controls, "EXPORT_ROOT", tmp_path / "exports")
    monkeypatch.setattr(maps_tab, "truth_dir", lambda: tmp_path / "truth")
    view, settings, *_ = draw(zoo, MapCache(), photo, "A cat. A dog. A tree.")
    files, note = maps_tab.export_kinds(zoo.load, MapCache(), view, settings, 3, "png", "column", "sans", None)
    assert files[0].endswith("kinds.png") and "figure replay" in note
    saved = ViewSettings.load(files[1])
    assert (saved.view, saved.page, saved.per_page, saved.preset) == ("kinds", 2, 1, "column")
    files, note = maps_tab.export_kinds(zoo.load, MapCache(), view, settings, 9, "png", "column", "sans", None)
    assert files is None and "no row 9" in note
