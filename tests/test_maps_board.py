"""The maps board's HTML and the state around it, without a browser: rows per sentence, columns per model,
scores as page text, flat maps named, the out-of-date marking, the model limit and the demo models' warning."""

from __future__ import annotations

import base64
import io
import re
from html.parser import HTMLParser
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from explorer.grounding.sentence_maps import MapCache
from explorer.ui import grounding_tab, maps_board, maps_tab
from explorer.views import focus_view
from explorer.views.focus_view import focus_figure
from explorer.views.maps_view import FLAT_NOTE, compute_maps, render_maps
from explorer.views.render import overlay
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
    # no truth there (read without the pictures: their base64 may spell "IoU")
    words = re.sub(r"data:image/[a-z]+;base64,[A-Za-z0-9+/=]+", "", board)
    assert "IoU" not in words.split('data-map-panel="demo-flair|3"')[1].split("</figure>")[0]
    for row in view.scores(settings.threshold):  # each label says what the scores say
        label = board.split(f'data-map-panel="{row["model"]}|{row["#"]}"')[1].split("</figure>")[0]
        if row.get("pointing") is not None:
            assert f"IoU {row['IoU']:.2f}" in label and f'class="mb-{"hit" if row["pointing"] else "miss"}"' in label
    assert "data-pointing-note" not in draw(zoo, photo)[2]  # no truth: nothing to explain
    assert "peak pixel" in board and 'data-stale="false"' in board
    heads = {name: board.split(f'data-map-model="{name}"')[1].split("</div>")[0] for name in ("tiny-untrained",
                                                                                            "demo-flair")}
    assert all(re.search(r"mIoU \d\.\d\d · pointing \d+%", head) for head in heads.values())  # per model, with truth
    assert "UNTRAINED" in heads["tiny-untrained"] and "UNTRAINED" not in heads["demo-flair"]
    assert board.count("<img") == 1 + 6  # the plain picture once, then a map per panel


def test_the_status_line_and_the_headers_say_what_the_models_computed_in(zoo, photo):
    from explorer.models.precision import cpu_has_native_bf16

    view, settings, board, status, *_ = draw(zoo, photo)
    assert "computed in fp32" in status and settings.precision == "fp32"
    auto = Zoo(zoo.root, precision="auto")
    view, settings, board, status, *_ = draw(auto, photo)
    ran = "bf16" if cpu_has_native_bf16() else "fp32"
    assert f"computed in {ran}" in status and settings.precision == ran
    assert f"- auto: {ran} (" in status  # what auto chose, and the measurement it rests on
    assert f"· {ran}</span>" in board  # each column's header


def test_each_display_setting_draws_its_own_board(zoo, photo):
    """The board is memoised per display setting: a change of any of them is a board of its own."""
    view, settings, board, *_ = draw(zoo, photo)

    def shown(cmap="turbo", opacity=0.5, mask="contour", otsu=True, threshold=0.5, scale="map"):
        return maps_tab.rerender(view, settings, cmap, opacity, mask, otsu, threshold, scale, 1, 8)[1]

    def pictures(html):
        return re.findall(r'src="(data:[^"]+)"', html)[1:]  # the maps, not the plain picture

    assert shown() == board
    labels = re.findall(r"· t=([^<]+)</figcaption>", shown(otsu=False, threshold=0.3))
    assert labels != re.findall(r"· t=([^<]+)</figcaption>", board) and len(labels) == 3
    for changed in (dict(cmap="jet"), dict(opacity=0.9), dict(mask="none"), dict(otsu=False, threshold=0.9)):
        assert pictures(shown(**changed)) != pictures(board), changed
    assert shown() == board  # and back


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
    rows = maps_tab.score_rows(view, settings)  # the table says so too, instead of a mask's share
    assert [row[4] == "flat" for row in rows] == [False, True, False]


def test_a_nearly_constant_map_is_flat_and_its_noise_never_outlined(zoo, photo):
    """A map constant but for rounding noise: Otsu would outline the noise; no view draws it."""
    settings = ViewSettings(image=str(photo), caption=CAPTION, models=["tiny-untrained"])
    view = compute_maps(zoo.load, settings, MapCache())
    maps = view.models[0].result.maps.maps
    maps[1] = 0.25 + 5e-7 * np.random.default_rng(1).random(maps[1].shape)  # within FLAT_TOLERANCE
    model = view.models[0]
    assert model.flat(1) and 0 < model.masks(None)[1].mean() < 1  # a mask of noise is there to outline
    figure = focus_figure(view, settings, 1)
    source = next(trace.source for trace in figure.data if trace.type == "image")
    def decoded(uri):
        return np.asarray(Image.open(io.BytesIO(base64.b64decode(uri.split(",", 1)[1]))).convert("RGB"))

    plain = np.asarray(overlay(view.picture, maps[1], settings.cmap, settings.opacity, None, None).convert("RGB"))
    # The panel is a JPEG (deterministic): the same pixels encode to the same picture, an outline would not.
    assert np.array_equal(decoded(source), decoded(focus_view.encoded(plain)))  # the overlay alone: no outline
    panel = [p for p in render_maps(view, settings).rows[0] if p.sentence == 1][0]
    assert np.array_equal(panel.pixels[..., :3], plain) and FLAT_NOTE in panel.scores


def test_a_changed_input_marks_the_board_out_of_date_and_forgets_the_result(zoo, photo):
    view, settings, board, *_ = draw(zoo, photo)
    drawn = [str(photo), CAPTION, ["tiny-untrained"], "native", "", None]
    late = maps_tab.mark_stale(view, settings, *drawn)  # an event for the inputs it was drawn from, queued behind it
    # nothing written back, not even the states it read: a Draw finishing meanwhile keeps its result
    assert late == tuple([{"__type__": "update"}] * 8)
    new_caption = [str(photo), "A cat.", *drawn[2:]]
    kept_view, kept_settings, stale, status, rows, number, plot, note = maps_tab.mark_stale(view, settings,
                                                                                          *new_caption)
    assert kept_view is None and kept_settings is None  # nothing stale is focused or exported
    assert 'data-stale="true"' in stale and "data-stale-line" in stale and "Out of date" in stale
    assert stale.count("data-map-panel=") == 3  # the old maps stay visible, dimmed
    assert "Out of date" in status and rows == [] and number is None and plot["visible"] is False
    again = maps_tab.mark_stale(None, None)  # typing on: nothing more to do (and a Draw running keeps its result)
    assert again[0] == again[2] == {"__type__": "update"} and again[5] is None


@pytest.mark.parametrize("position, value", [(0, "other.png"), (1, "A cat."), (2, ["tiny-untrained", "demo-flair"]),
                                             (3, "gradcam"), (4, "A dense caption."), (5, "labels.png")])
def test_every_input_that_changes_marks_the_board_out_of_date(zoo, photo, position, value):
    view, settings, *_ = draw(zoo, photo)
    drawn = [str(photo), CAPTION, ["tiny-untrained"], "native", "", None]
    assert maps_tab.drawn_from(settings, *drawn)
    changed = list(drawn)
    changed[position] = value
    assert not maps_tab.drawn_from(settings, *changed)
    assert 'data-stale="true"' in maps_tab.mark_stale(view, settings, *changed)[2]


@pytest.mark.parametrize("hostile", [5, {"a": 1}, [["x"]], float("nan"), "<b>x</b>" * 1000])
def test_any_value_sent_to_the_stale_check_is_a_change_never_a_failure(zoo, photo, hostile):
    view, settings, *_ = draw(zoo, photo)
    for position in range(6):
        values = [str(photo), CAPTION, ["tiny-untrained"], "native", "", None]
        values[position] = hostile
        assert not maps_tab.drawn_from(settings, *values)
        assert maps_tab.mark_stale(view, settings, *values)[0] is None


def test_the_page_wires_the_model_limit_and_the_stale_marking(zoo):
    import gradio as gr

    from explorer.serve.access import Access

    with gr.Blocks() as page:
        inputs, _ = grounding_tab.build(zoo, MapCache(), Access.for_app(zoo.root))
    by_name = {}
    for fn in page.fns.values():
        by_name.setdefault(fn.name, []).append(fn)
    models = inputs.models
    note, kind_line = ([b for b in page.blocks.values() if b.elem_id == name][0]
                       for name in ("model-limit-note", "grounding-kind-note"))
    # the limit is the browser's (no server event per pick), marking the kind note at once in the same event
    limit = [fn for fn in page.fns.values() if (models._id, "input") in fn.targets and fn.js is not None]
    assert len(limit) == 1 and limit[0].fn is None and limit[0].js == grounding_tab.LIMIT_MODELS_JS
    assert limit[0].inputs == [models] and limit[0].outputs == [models, note, kind_line]
    assert not [fn for fn in page.fns.values() if (models._id, "input") in fn.targets and fn.fn is not None]
    marked = {target for fn in by_name["mark_stale"] for target in fn.targets}
    assert {(c._id, "change") for c in inputs.components()} <= marked


def limited(names) -> list:
    """What the page's model limit (JavaScript, run by Playwright's own Node) answers for ``names``."""
    import json
    import subprocess

    playwright = pytest.importorskip("playwright._impl._driver")
    node = playwright.compute_driver_executable()[0]
    script = f"console.log(JSON.stringify(({grounding_tab.LIMIT_MODELS_JS})({json.dumps(names)})))"
    return json.loads(subprocess.run([node, "-e", script], capture_output=True, text=True, check=True).stdout)


def test_a_fifth_model_is_left_out_with_a_message():
    five = ["demo-mulclip", "demo-clip-base", "demo-caft", "demo-flair", "demo-finelip"]
    kept, message, kind_note = limited(five)
    assert kept == five[:4] and "At most 4 models" in message and "demo-finelip" in message
    assert kind_note == grounding_tab.UPDATING
    assert limited(five[:4]) == [{"__type__": "update"}, "", grounding_tab.UPDATING]  # the box left as it is
    assert limited(None)[:2] == [{"__type__": "update"}, ""]


def test_demo_models_on_a_picture_without_truth_get_a_warning(zoo, photo, halves):
    board, status = draw(zoo, photo, ("demo-flair",))[2:4]
    assert 'data-warning="synthetic"' in board and "trained on synthetic shapes" in board
    assert "trained on synthetic shapes" in status
    with_truth = draw(zoo, photo, ("demo-flair",), truth=halves)[2]
    assert "data-warning" not in with_truth  # on a scored picture the numbers speak
    assert "data-warning" not in draw(zoo, photo, ("tiny-untrained",))[2]  # not a demo model: its own label says


def test_the_focus_view_of_four_models_links_every_panel_and_titles_each_on_a_line_of_its_own(zoo, photo):
    four = ("tiny-untrained", "demo-flair", "demo-caft", "demo-clip-base")
    view, settings, *_ = draw(zoo, photo, four)
    layout = focus_figure(view, settings, 0).layout
    assert layout.xaxis.matches is None and layout.yaxis.scaleanchor == "x"  # the first panel: square pixels
    for k in (2, 3, 4):  # every other panel zooms and pans with the first
        assert layout[f"xaxis{k}"].matches == "x" and layout[f"yaxis{k}"].matches == "y", k
    titles = [a for a in layout.annotations if any(name in a.text for name in four)]
    assert [t.text for t in titles] == [f"<b>{m.name}</b> · {m.kind}" for m in view.models]  # name, then kind
    assert all(t.font.size >= 12 for t in titles)
    # issue 66: each title on a line of its own (a phone's 80-px panels ran them into one another), the first
    # model's on top, each starting over its own panel
    assert [t.yshift for t in titles] == sorted({t.yshift for t in titles}, reverse=True) and len(titles) == 4
    assert [t.x for t in titles] == [layout[f"xaxis{k}" if k > 1 else "xaxis"].domain[0] for k in (1, 2, 3, 4)]


def test_a_panel_pick_is_checked_on_the_server(zoo, photo):
    class Event:
        def __init__(self, index):
            self.index = index

    view, settings, *_ = draw(zoo, photo)
    number, plot, note = maps_tab.focus_from_board(view, settings, Event(3.0))
    assert number == 3 and plot["visible"] is True and "S3" in note
    for index in (0, 4, -1, 10**30, 1e300, "2", None, 2.5, True, [1, 2], float("nan")):
        number, plot, note = maps_tab.focus_from_board(view, settings, Event(index))
        assert plot["visible"] is False and note and number == {"__type__": "update"}, index  # the box kept


def test_examples_read_as_their_name_and_their_caption_start():
    long = "An image showing three shapes on a noisy dark gray background. A medium dotted blue cross is at the top."
    labels = grounding_tab.example_labels([(Path("synthetic-test-000000.png"), long), (Path("cat.png"), "A cat.")])
    assert labels[0].startswith("scene 000000: An image showing three shapes") and labels[0].endswith("…")
    assert "at the top" not in labels[0] and labels[1] == "cat: A cat."
    start = labels[0].removeprefix("scene 000000: ").removesuffix("…")
    assert long.startswith(start) and long[len(start)] == " "  # cut at a word, never inside one


def test_inputs_changed_while_a_draw_or_re_render_ran_mark_its_result_out_of_date(zoo, photo):
    """A change event that ran during a Draw found nothing to mark (or had its marking undone by the result):
    the check chained after every Draw and re-render compares the inputs as they are then."""
    view, settings, *_ = draw(zoo, photo)
    drawn = [str(photo), CAPTION, ["tiny-untrained"], "native", "", None]
    assert maps_tab.recheck(view, settings, *drawn) == tuple([{"__type__": "update"}] * 8)  # still current
    kept_view, kept_settings, board, status, rows, number, plot, _ = maps_tab.recheck(
        view, settings, str(photo), "A cat.", *drawn[2:])
    assert kept_view is None and kept_settings is None and 'data-stale="true"' in board and "data-stale-line" in board
    assert "Out of date" in status and rows == [] and number is None and plot["visible"] is False
    # a re-render that finished after the inputs changed: its settings are back, its view is gone, its board fresh
    kept_view, kept_settings, board, status, *_ = maps_tab.recheck(None, settings, *drawn)
    assert kept_view is None and kept_settings is None
    assert 'data-stale="true"' in board and "data-stale-line" in board and "Out of date" in status
    assert maps_tab.recheck(None, None, *drawn) == tuple([{"__type__": "update"}] * 8)  # a failed Draw: nothing


def test_every_draw_and_re_render_is_followed_by_the_check(zoo):
    import gradio as gr

    from explorer.ui.view_controls import Inputs

    with gr.Blocks() as page:
        inputs = Inputs(image=gr.File(), caption=gr.Textbox(), models=gr.Dropdown(multiselect=True),
                        kind=gr.Dropdown(), dense_caption=gr.Textbox(), truth=gr.File())
        maps_tab.build(inputs, zoo, MapCache())
    fns = list(page.fns.values())
    after = {fn._id: [later for later in fns if later.trigger_after == fn._id] for fn in fns}
    sources = [fn for fn in fns if fn.api_name == "draw_maps" or str(fn.api_name).startswith("rerender_maps_")]
    assert len(sources) == 9  # the Draw and the eight display controls
    for fn in sources:
        chained = {later.name: later for later in after[fn._id]}
        # the check, and (after a Draw) the swap panel's sentence words: nothing else follows a board's change
        allowed = {"settle", "choose_sentence"} if fn.api_name == "draw_maps" else {"settle"}
        assert "settle" in chained and set(chained) <= allowed, (fn.api_name, sorted(chained))
        assert after[chained["settle"]._id] == [], fn.api_name  # the check and the focus in one event


def test_settle_marks_what_changed_meanwhile_else_draws_the_focused_sentence_again(zoo, photo):
    view, settings, *_ = draw(zoo, photo)
    drawn = [str(photo), CAPTION, ["tiny-untrained"], "native", "", None]
    *kept, plot, note = maps_tab.settle(view, settings, 2, *drawn)
    assert kept == [{"__type__": "update"}] * 6  # current: the board and its states as the Draw left them
    assert (plot, note) == maps_tab.focus_by_number(view, settings, 2)  # the focused sentence, from the new maps
    assert maps_tab.settle(view, settings, 2, str(photo), "A cat.", *drawn[2:]) == maps_tab.recheck(
        view, settings, str(photo), "A cat.", *drawn[2:])  # changed meanwhile: marked out of date, no focus drawn


def test_a_board_that_cannot_be_drawn_again_is_still_marked_out_of_date(zoo, photo, monkeypatch):
    view, settings, *_ = draw(zoo, photo)

    def broken(*args, **kwargs):
        raise MemoryError("no room")

    monkeypatch.setattr(maps_board, "board_html", broken)
    board = maps_tab.mark_stale(view, settings, str(photo), "A cat.", ["tiny-untrained"], "native", "", None)[2]
    assert 'data-stale="true"' in board and "data-stale-line" in board and "data-map-panel" not in board


def test_what_a_visitor_or_a_zoo_names_is_text_on_the_board_never_markup(zoo, photo):
    """Sentences are what a visitor types; model names and kinds come from the zoo's files."""
    caption = 'A <script>alert(1)</script> cat. A dog "on" the <b>right</b> & left.'
    settings = ViewSettings(image=str(photo), caption=caption, models=["tiny-untrained"])
    view = compute_maps(zoo.load, settings, MapCache())
    name = '<img src=x onerror=alert(2)>"\'|'
    view.models[0].name, view.models[0].synthetic_only = name, True  # the warning names it too
    view.models[0].result.maps.n_cut[0] = 3  # and the tokens it cut
    view.models[0].result.maps.kind = "<i>kind</i>"
    board = maps_board.board_html(view, settings, stale=True)
    text = re.sub(r'src="data:image/webp;base64,[A-Za-z0-9+/=]+"', 'src=""', board)
    for markup in ("<script", "<img src=x", "<b>right", "<i>kind", "onerror=alert(2)>", '"on"'):
        assert markup not in text, markup
    # the warning, the header (attribute and name), the cut tokens, each panel (attribute, alt text and the
    # model's name a phone shows under it)
    assert text.count("&lt;img src=x onerror=alert(2)&gt;&quot;&#x27;|") == 10
    assert 'data-sentence="1"' in text and "A &lt;script&gt;alert(1)&lt;/script&gt; cat." in text
    first = text.split('data-sentence="1"')[1].split('data-sentence="2"')[0]
    assert "cuts 3 token(s)" in first and "cuts" not in text.split('data-sentence="2"')[1]  # in its own row

    class Attributes(HTMLParser):
        def __init__(self):
            super().__init__()
            self.panels = []

        def handle_starttag(self, tag, attrs):
            self.panels += [value for key, value in attrs if key == "data-map-panel"]

    parser = Attributes()
    parser.feed(board)
    assert parser.panels == [f"{name}|1", f"{name}|2"]  # the contract's value, read back whole


def test_a_value_typed_past_a_sliders_ends_is_a_line_beside_it_not_a_toast():
    """Issue 66.5: Gradio's own check answered 0 in "Sentences per page" with a toast; the slider passes it on
    and the handler refuses it in one line (the status under the controls)."""
    from explorer.core.errors import InputError
    import gradio as gr

    from explorer.ui.view_controls import checked_slider

    slider = checked_slider(1, 12, value=8, step=1)
    assert type(slider) is gr.Slider and slider.preprocess(0) == 0  # no toast: the handler decides
    for bad in (0, -1, 99):
        with pytest.raises(InputError, match=f"sentences per page is 1 to 12, not {bad}"):
            maps_tab.display_settings("turbo", 0.5, "contour", True, 0.5, "map", 1, bad)
    assert "not 5" in maps_tab.rerender(*draw_stub(), "turbo", 5, "contour", True, 0.5, "map", 1, 8)[2]


def draw_stub():
    """A drawn view of one tiny map (for handlers that need one)."""
    from explorer.grounding.sentence_maps import GroundingResult
    from explorer.models.model import SentenceMaps
    from explorer.views.maps_view import MapsView, ModelMaps

    picture = Image.fromarray(np.full((16, 16, 3), 90, np.uint8))
    grid = np.random.default_rng(0).random((1, 16, 16)).astype(np.float32)
    result = GroundingResult(image=picture, analysis=None, model_name="m",
                             maps=SentenceMaps(maps=grid, grid=grid, kind="generic", sentences=["A."], n_cut=[0]))
    return MapsView(picture=picture, sentences=["A."], models=[ModelMaps(name="m", result=result)]), \
        ViewSettings(models=["m"])
