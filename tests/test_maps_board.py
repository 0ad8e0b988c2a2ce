"""The maps board's HTML and the state around it, without a browser: rows per sentence, columns per model,
scores as page text, flat maps named, the out-of-date marking, the model limit and the demo models' warning."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from explorer.grounding.sentence_maps import MapCache
from explorer.ui import grounding_tab, maps_board, maps_tab
from explorer.views.focus_view import focus_figure
from explorer.views.maps_view import FLAT_NOTE, compute_maps, render_maps
from explorer.views.settings import ViewSettings
from explorer.zoo import Zoo

DISPLAY = ["turbo", 0.5, "contour", True, 0.5, "map", 1, 8]
CAPTION = "A cat on the left. A dog on the right. A tree."


@pytest.fixture(scope="module")
def zoo():
    return Zoo()  # the repository's checkpoints/: the tiny built-in model and the demo zoo


@pytest.fixture()
def photo(tmp_path) -> Path:
    path = tmp_path / "photo.png"
    Image.fromarray((np.random.default_rng(0).random((60, 90, 3)) * 255).astype(np.uint8)).save(path)
    return path


@pytest.fixture()
def halves(tmp_path) -> Path:
    """A label mask: sentence 1 is the left half, sentence 2 the right half, sentence 3 has no truth."""
    labels = np.zeros((60, 90), np.uint8)
    labels[:, :45], labels[:, 45:] = 1, 2
    path = tmp_path / "labels.png"
    Image.fromarray(labels).save(path)
    return path


def draw(zoo, photo, models=("tiny-untrained",), truth=None, caption=CAPTION):
    return maps_tab.draw(zoo.load, MapCache(), str(photo), caption, list(models), "native", "",
                         str(truth) if truth else None, *DISPLAY)


def test_a_row_per_sentence_a_column_per_model_and_scores_as_text(zoo, photo, halves):
    view, settings, board, *_ = draw(zoo, photo, ("tiny-untrained", "demo-flair"), truth=halves)
    assert re.findall(r'data-map-model="([^"]+)"', board) == ["tiny-untrained", "demo-flair"]
    assert re.findall(r'data-sentence="(\d+)"', board) == ["1", "2", "3"]
    assert "A dog on the right." in board.split('data-sentence="2"')[1].split("</div>")[0]  # its text in its row
    panels = re.findall(r'data-map-panel="([^"]+)"', board)
    assert panels == [f"{m}|{n}" for n in (1, 2, 3) for m in ("tiny-untrained", "demo-flair")]  # row by row
    flair_two = board.split('data-map-panel="demo-flair|2"')[1].split("</figure>")[0]
    assert re.search(r"IoU \d\.\d\d", flair_two) and re.search(r'class="mb-(hit|miss)"', flair_two)
    assert "IoU" not in board.split('data-map-panel="demo-flair|3"')[1].split("</figure>")[0]  # no truth there
    assert "peak pixel" in board and 'data-stale="false"' in board
    assert board.count("<img") == 1 + 6  # the plain picture once, then a map per panel


def test_the_both_mask_mode_stacks_the_mask_under_the_map(zoo, photo):
    view, settings, board, *_ = draw(zoo, photo)
    _, both, *_ = maps_tab.rerender(view, settings, "turbo", 0.5, "both", True, 0.5, "map", 1, 8)
    assert both.count("<img") == board.count("<img") + 3 and both.count("data-map-panel=") == 3


def test_a_flat_map_is_named_and_not_masked(zoo, photo):
    settings = ViewSettings(image=str(photo), caption=CAPTION, models=["tiny-untrained"])
    view = compute_maps(zoo.load, settings, MapCache())
    view.models[0].result.maps.maps[1] = 0.0  # e.g. Grad-CAM with no positive gradient anywhere
    assert view.models[0].flat(1) and not view.models[0].flat(0)
    board = maps_board.board_html(view, settings)
    second = board.split('data-map-panel="tiny-untrained|2"')[1].split("</figure>")[0]
    assert "data-flat" in second and FLAT_NOTE in second and "mask" not in second.split("figcaption")[1]
    panel = [p for p in render_maps(view, settings).rows[0] if p.sentence == 1][0]
    assert FLAT_NOTE in panel.scores and "flat map" in panel.title
    plain = np.asarray(view.picture_at(view.picture.size).convert("RGB"))  # no white outline drawn on it
    assert not np.any(np.all(panel.pixels == 255, axis=2) & ~np.all(plain == 255, axis=2))
    assert "flat map" in focus_figure(view, settings, 1).layout.annotations[0].text


def test_a_changed_input_marks_the_board_out_of_date_and_forgets_the_result(zoo, photo):
    view, settings, board, *_ = draw(zoo, photo)
    drawn = [str(photo), CAPTION, ["tiny-untrained"], "native", "", None]
    late = maps_tab.mark_stale(view, settings, *drawn)  # an event for the inputs it was drawn from, queued behind it
    assert late[0] is view and late[2] == {"__type__": "update"}
    new_caption = [str(photo), "A cat.", *drawn[2:]]
    kept_view, kept_settings, stale, status, rows, number, plot, note = maps_tab.mark_stale(view, settings,
                                                                                          *new_caption)
    assert kept_view is None and kept_settings is None  # nothing stale is focused or exported
    assert 'data-stale="true"' in stale and "data-stale-line" in stale and "Out of date" in stale
    assert stale.count("data-map-panel=") == 3  # the old maps stay visible, dimmed
    assert "Out of date" in status and rows == [] and number is None and plot["visible"] is False
    again = maps_tab.mark_stale(None, None)  # typing on: nothing more to do (and a Draw running keeps its result)
    assert again[0] == again[2] == {"__type__": "update"} and again[5] is None


def test_a_fifth_model_is_left_out_with_a_message(zoo):
    five = ["demo-mulclip", "demo-clip-base", "demo-caft", "demo-flair", "demo-finelip"]
    update, message = grounding_tab.limit_models(five)
    assert update["value"] == five[:4] and "At most 4 models" in message and "demo-finelip" in message
    assert grounding_tab.limit_models(five[:4]) == ({"__type__": "update"}, "")
    assert grounding_tab.limit_models(None)[1] == "" and grounding_tab.limit_models([1, 2, 3, 4, 5, 6])[1] == ""


def test_demo_models_on_a_picture_without_truth_get_a_warning(zoo, photo, halves):
    board, status = draw(zoo, photo, ("demo-flair",))[2:4]
    assert 'data-warning="synthetic"' in board and "trained on synthetic shapes" in board
    assert "trained on synthetic shapes" in status
    with_truth = draw(zoo, photo, ("demo-flair",), truth=halves)[2]
    assert "data-warning" not in with_truth  # on a scored picture the numbers speak
    assert "data-warning" not in draw(zoo, photo, ("tiny-untrained",))[2]  # not a demo model: its own label says


def test_a_panel_pick_is_checked_on_the_server(zoo, photo):
    class Event:
        def __init__(self, index):
            self.index = index

    view, settings, *_ = draw(zoo, photo)
    number, plot, note = maps_tab.focus_from_board(view, settings, Event(3.0))
    assert number == 3 and plot["visible"] is True and "S3" in note
    for index in (0, 4, -1, "2", None, 2.5, True, [1, 2]):
        number, plot, note = maps_tab.focus_from_board(view, settings, Event(index))
        assert plot["visible"] is False and note, index


def test_examples_read_as_their_name_and_their_caption_start():
    long = "An image showing three shapes on a noisy dark gray background. A medium dotted blue cross is at the top."
    labels = grounding_tab.example_labels([(Path("synthetic-test-000000.png"), long), (Path("cat.png"), "A cat.")])
    assert labels[0].startswith("scene 000000: An image showing three shapes") and labels[0].endswith("…")
    assert "at the top" not in labels[0] and labels[1] == "cat: A cat."  # cut at a word
