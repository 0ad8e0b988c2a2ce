"""The swap probe (explorer.probe, `explorer probe`, `explorer figure swaps`, the Swap panel's handlers).

The margins are checked against ``Model.similarity`` called directly, the map comparison against masks and
peaks made by hand, ``--as-eval`` against ``explorer eval``'s own hard-negative function on the same world
(1e-6), and every bad input against its one clear line.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from explorer.probe import (MAX_SWAPS, SwapError, compare_maps, find_word, pick_sentence, span_maps, span_text,
                            swap_scores, swap_text, swappable)
from explorer.probe.vocabulary import alternatives, word_type

EXAMPLE = Path(__file__).resolve().parents[1] / "assets" / "synthetic-test-000000"
SENTENCE = "A medium dotted blue cross is at the top left."


@pytest.fixture(scope="module")
def models():
    from explorer.zoo import Zoo

    zoo = Zoo(Path(__file__).resolve().parents[1] / "checkpoints", precision="fp32")
    return [zoo.load("demo-mulclip"), zoo.load("demo-clip-base")]


def test_the_words_of_a_sentence_are_found_by_type_and_swapped_in_place():
    found = {w.text: w.type for w in swappable(SENTENCE)}
    assert found == {"medium": "size", "dotted": "texture", "blue": "colour", "cross": "shape",
                     "top left": "position"}  # a phrase whole, before its words
    assert swap_text(SENTENCE, find_word(SENTENCE, "blue"), "orange") == SENTENCE.replace("blue", "orange")
    assert swap_text("There is a red box.", find_word("There is a red box.", "red"), "orange") == \
        "There is an orange box."  # the article follows the new word
    assert swap_text("Red box.", find_word("Red box.", "red"), "blue") == "Blue box."
    assert find_word("A bluebird and a blue cup.", "blue").start == 17  # whole words only
    assert len(alternatives("blue")) == 10 and "blue" not in alternatives("blue")  # the basic colours
    assert word_type("grey") == "colour" and "gray" not in alternatives("grey")
    assert span_text(SENTENCE, 1, 4) == "medium dotted blue cross"
    assert pick_sentence(EXAMPLE.with_suffix(".txt").read_text(), 2) == SENTENCE


@pytest.mark.parametrize("call, said", [
    (lambda: find_word(SENTENCE, "green"), "is not a word of the sentence"),
    (lambda: swap_text(SENTENCE, find_word(SENTENCE, "blue"), "  "), "replacement is empty"),
    (lambda: swap_text(SENTENCE, find_word(SENTENCE, "blue"), "Blue"), "is the word itself"),
    (lambda: pick_sentence("One. Two.", 3), "past the caption: it has 2 sentences"),
    (lambda: pick_sentence("One. Two.", 0), "past the caption"),
    (lambda: swap_scores([], EXAMPLE.with_suffix(".png"), SENTENCE, "blue", ["red"] * (MAX_SWAPS + 1)),
     f"at most {MAX_SWAPS} a request"),
    (lambda: swap_scores([], EXAMPLE.with_suffix(".png"), SENTENCE, "is"), "not a word of a known type"),
    (lambda: swappable("word " * 1000), "at most"),
    (lambda: span_text(SENTENCE, 3, 1), "first before last"),
])
def test_bad_input_is_one_clear_line(call, said):
    with pytest.raises(SwapError, match=said):
        call()


def test_margins_are_the_difference_of_the_methods_own_scores(models):
    from PIL import Image

    record = swap_scores(models, EXAMPLE.with_suffix(".png"), SENTENCE, "blue", None, kind=None)
    picture = Image.open(EXAMPLE.with_suffix(".png")).convert("RGB")
    assert record.word == "blue" and record.word_type == "colour" and len(record.replacements) == 10
    for model, result in zip(models, record.models):
        texts = [SENTENCE, *(s.text for s in result.swaps)]
        direct = model.similarity([picture], texts)[0].double().numpy()  # the square picture: crop == squash
        margins = np.array([s.margin for s in result.swaps])
        np.testing.assert_allclose(margins, direct[0] - direct[1:], atol=1e-6)
        assert [s.noticed for s in result.swaps] == list(direct[0] - direct[1:] > 0)
        assert result.original_score == pytest.approx(direct[0], abs=1e-6)
    stricter = swap_scores(models[:1], EXAMPLE.with_suffix(".png"), SENTENCE, "blue", None, kind=None, margin=0.3)
    assert [s.noticed for s in stricter.models[0].swaps] == [s.margin > 0.3 for s in record.models[0].swaps]


def test_maps_are_compared_by_otsu_masks_and_peaks(models):
    first = np.zeros((20, 30), dtype=np.float32)
    first[2:6, 3:7] = 1.0  # a 4 x 4 block, peak at (3, 2)
    second = np.zeros_like(first)
    second[2:6, 5:9] = 1.0  # shifted 2 px right: overlap 4 x 2
    second[4, 8] = 2.0  # peak at (8, 4)
    shift = compare_maps(first, second)
    assert shift.iou == pytest.approx(8 / 24)
    assert shift.peak_shift_px == pytest.approx(np.hypot(5, 2))
    record = swap_scores(models[:1], EXAMPLE.with_suffix(".png"), SENTENCE, "blue", ["purple"], kind="generic")
    maps = models[0].sentence_maps(EXAMPLE.with_suffix(".png"), [SENTENCE, record.models[0].swaps[0].text]).maps
    direct = compare_maps(maps[0], maps[1])
    assert record.models[0].swaps[0].map_iou == pytest.approx(direct.iou)
    assert record.models[0].swaps[0].peak_shift_px == pytest.approx(direct.peak_shift_px)


def test_a_span_is_mapped_as_a_sentence_of_its_words(models):
    spans = span_maps(models[:1], EXAMPLE.with_suffix(".png"), SENTENCE, 1, 4)
    alone = models[0].sentence_maps(EXAMPLE.with_suffix(".png"), ["medium dotted blue cross"]).maps[0]
    np.testing.assert_allclose(spans[0].map, alone)
    truth = np.zeros(alone.shape, dtype=bool)
    truth[:40, :40] = True
    scored = span_maps(models[:1], EXAMPLE.with_suffix(".png"), SENTENCE, 1, 4, truth=truth)[0]
    assert scored.iou is not None and scored.pointing is not None


def test_as_eval_gives_evals_hard_negative_accuracy(models, world, tmp_path):
    from explorer.cli import main
    from explorer.data import read_dataset
    from explorer.evaluation.runner import encode_images, hard_negative_metrics

    from explorer.probe.world import eval_negatives

    scenes = read_dataset(world, "train")[:6]
    out = tmp_path / "as-eval.json"
    code = main(["--checkpoints", str(Path(__file__).resolve().parents[1] / "checkpoints"), "probe", "--data",
                 str(world), "--split", "train", "--limit", "6", "--as-eval", "--model", "demo-mulclip",
                 "--out", str(out)])
    assert code == 0
    probed = {**json.loads(out.read_text())["models"], models[1].name: eval_negatives(models[1], scenes)}
    for model in models:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(0)
            metrics, _ = hard_negative_metrics(model, encode_images(model, [s.image for s in scenes]), scenes)
        expected = {k: v for k, v in metrics.items() if k.startswith("hard_negative_acc/") and v is not None}
        assert expected and set(expected) == set(probed[model.name])
        for key, value in expected.items():
            assert probed[model.name][key] == pytest.approx(value, abs=1e-6), key


def test_world_rates_count_every_other_word_of_each_type(models, world):
    from explorer.data import read_dataset
    from explorer.probe.vocabulary import WORLD_WORDS
    from explorer.probe.world import world_rates, world_swaps

    scenes = read_dataset(world, "train")[:3]
    rates = world_rates(models[:1], scenes)
    for kind in ("colour", "shape", "count"):
        expected = sum(len(world_swaps(s, kind)) for s in scenes)
        assert expected == 3 * (len(WORLD_WORDS[kind]) - 1)
        assert rates.counts[models[0].name][kind][1] == expected
    assert "| demo-mulclip |" in rates.table()


def test_probe_command_writes_the_contract_and_says_bad_input(tmp_path, capsys):
    from explorer.cli import main

    root = ["--checkpoints", str(Path(__file__).resolve().parents[1] / "checkpoints"), "probe", "--image",
            str(EXAMPLE.with_suffix(".png")), "--caption-file", str(EXAMPLE.with_suffix(".txt")), "--model",
            "demo-mulclip"]
    out = tmp_path / "swaps.json"
    assert main([*root, "--sentence", "2", "--word", "blue", "--replacements", "red,purple", "--out", str(out)]) == 0
    record = json.loads(out.read_text())
    assert record["sentence"] == SENTENCE and record["word"] == "blue"
    swap = record["models"][0]["swaps"][1]
    assert set(swap) >= {"replacement", "text", "score", "margin", "noticed", "map_iou", "peak_shift_px"}
    assert swap["text"] == SENTENCE.replace("blue", "purple") and record["models"][0]["name"] == "demo-mulclip"
    assert swap["margin"] == pytest.approx(record["models"][0]["original_score"] - swap["score"])
    for flags, said in ((["--sentence", "9", "--word", "blue"], "past the caption"),
                        (["--sentence", "2", "--word", "green"], "not a word of the sentence"),
                        (["--sentence", "2", "--word", "blue", "--replacements", "red,,pink"], "empty"),
                        (["--sentence", "2", "--word", "blue", "--replacements", "blue"], "the word itself")):
        assert main([*root, *flags]) == 2
        assert said in capsys.readouterr().err


def test_the_swap_figure_fits_a_column_and_replays(tmp_path):
    from PIL import Image

    from explorer.cli import main

    figure = tmp_path / "swaps.png"
    root = ["--checkpoints", str(Path(__file__).resolve().parents[1] / "checkpoints"), "figure"]
    assert main([*root, "swaps", "--image", str(EXAMPLE.with_suffix(".png")), "--caption-file",
                 str(EXAMPLE.with_suffix(".txt")), "--sentence", "2", "--word", "blue", "--model", "demo-mulclip",
                 "--pair", "purple", "--dpi", "100", "--out", str(figure)]) == 0
    settings = json.loads(figure.with_name("swaps.png.json").read_text())
    assert settings["view"] == "swaps" and settings["pair"] == "purple" and settings["preset"] == "column"
    width, height = Image.open(figure).size
    assert width / 100 <= 3.5 and height / 100 <= 4.5
    again = tmp_path / "again.png"
    assert main([*root, "replay", str(figure.with_name("swaps.png.json")), "--out", str(again)]) == 0
    assert Image.open(again).size == (width, height)
    assert np.array_equal(np.asarray(Image.open(again)), np.asarray(Image.open(figure)))


def test_the_panels_handlers_refuse_bad_input_and_change_nothing_else(models, tmp_path, monkeypatch):
    from types import SimpleNamespace

    from PIL import Image

    from explorer.ui import swap_panel

    picture = Image.open(EXAMPLE.with_suffix(".png")).convert("RGB")
    drawn = models[0].sentence_maps(picture, [SENTENCE]).maps  # the board's map of the sentence
    board = SimpleNamespace(name=models[0].name, kind="generic", precision="fp32", maps=drawn)
    view = SimpleNamespace(models=[board], sentences=[SENTENCE], picture=picture, truth=None)
    state, words, *_ = swap_panel.choose_sentence(view, None, 1)
    assert 'data-swap-word="blue"' in words and 'data-swap-type="colour"' in words
    out = swap_panel.choose_sentence(view, None, 2)
    assert "past the caption" in out[3] and out[0] == {"__type__": "update"}
    pick = SimpleNamespace(value="blue", index=0)
    state, _, every, _ = swap_panel.pick_word(state, pick)
    assert every["value"] == "Swap every colour"
    load = {m.name: m for m in models}.__getitem__
    for text, said in (("", "replacement is empty"), ("blue", "the word itself"),
                       (",".join(["red"] * (MAX_SWAPS + 1)), f"at most {MAX_SWAPS}")):
        kept, note, table, maps = swap_panel.run_swaps(load, view, state, text, 0.0, False)
        assert said in note and kept == table == maps == {"__type__": "update"}
    state, note, table, _ = swap_panel.run_swaps(load, view, state, "", 0.0, True)
    assert table.count("data-swap-row=") == 10 and f'data-swap-cell="{models[0].name}|purple"' in table
    stricter, _, table_at = swap_panel.judge_again(state, 0.3)  # no model runs: the same scores, judged again
    assert [s.noticed for s in stricter.record.models[0].swaps] == [s.margin > 0.3
                                                                     for s in state.record.models[0].swaps]
    assert table_at.count("swap-missed") == sum(not s.noticed for s in stricter.record.models[0].swaps)
    assert "between -10 and 10" in swap_panel.judge_again(state, "x")[1]
    row = SimpleNamespace(index=0, value="purple")
    shown, _, table, maps = swap_panel.table_event(load, view, None, state, row)
    assert 'data-swap-maps="purple"' in maps and "mask IoU" in maps
    assert np.shares_memory(shown.pairs.pairs[0].original, drawn)  # the board's own map: only the swapped one is computed
    alone = models[0].sentence_maps(picture, [SENTENCE.replace("blue", "purple")]).maps[0]
    np.testing.assert_allclose(shown.pairs.pairs[0].swapped, alone)
    _, note, *_ = swap_panel.table_event(load, view, None, state, SimpleNamespace(index=0, value="<b>"))
    assert "click a row" in note
    from explorer.ui import view_controls
    from explorer.views.swap_view import SwapSettings

    monkeypatch.setattr(view_controls, "EXPORT_ROOT", tmp_path)
    files, note = swap_panel.export(view, SimpleNamespace(image=str(EXAMPLE.with_suffix(".png"))), shown, "png")
    assert files and files[0].endswith("swaps.png") and "explorer figure replay" in note
    saved = SwapSettings.from_dict(json.loads(Path(files[1]).read_text()), Path(files[1]).parent)
    assert (saved.sentence, saved.word, saved.pair, saved.models) == (1, "blue", "purple", [models[0].name])
    assert Path(saved.image).is_file()  # the picture travels with the figure
    assert swap_panel.export(view, None, shown, "exe")[0] is None


def test_a_span_joins_the_board_as_a_row_scored_against_its_sentences_truth(models, tmp_path):
    from explorer.evaluation.metrics.maps import score_maps
    from explorer.grounding.truth import Truth
    from explorer.views.maps_view import compute_maps
    from explorer.views.settings import ViewSettings
    from explorer.views.span_view import with_span_row

    names = {m.name: m for m in models[:1]}
    settings = ViewSettings(image=str(EXAMPLE.with_suffix(".png")), caption=EXAMPLE.with_suffix(".txt").read_text(),
                            models=list(names), kind="generic")
    view = compute_maps(names.__getitem__, settings, truth_dir=tmp_path)
    masks = [np.zeros(view.picture.size[::-1], dtype=bool) for _ in view.sentences]
    masks[1][10:70, 10:70] = True
    view.truth = Truth(masks=masks, source="test")
    wider = with_span_row(view, names.__getitem__, 2, "Medium Dotted Blue cross")
    assert wider.sentences[-1] == "medium dotted blue cross" and len(wider.sentences) == len(view.sentences) + 1
    alone = models[0].sentence_maps(view.picture, ["medium dotted blue cross"]).maps[0]
    np.testing.assert_allclose(wider.models[0].maps[-1], alone, atol=1e-6)
    np.testing.assert_allclose(wider.models[0].maps[:-1], view.models[0].maps)
    row = wider.scores(None)[-1]
    assert row["IoU"] == pytest.approx(score_maps(alone[None], masks[1][None])[0][0])
    with pytest.raises(SwapError, match="not a word of the sentence"):
        with_span_row(view, names.__getitem__, 2, "blue dotted")  # not consecutive in the sentence


def test_a_span_is_a_row_of_its_own_that_moves_no_figure_and_replays_from_the_export(models, tmp_path):
    """Issue 66, part 1: the headers' mIoU / pointing, the status line and the notes count the sentences only; the
    span row keeps its own scores; the export's settings record the span, so a replay draws the page's rows."""
    from explorer.grounding.sentence_maps import MapCache
    from explorer.grounding.truth import Truth
    from explorer.ui import maps_board, maps_tab, swap_panel
    from explorer.views.maps_view import compute_maps
    from explorer.views.settings import ViewSettings

    names = {m.name: m for m in models[:1]}
    load = names.__getitem__
    settings = ViewSettings(image=str(EXAMPLE.with_suffix(".png")), caption=EXAMPLE.with_suffix(".txt").read_text(),
                            models=list(names), kind="generic")
    cache = MapCache()  # the replay reads the caption's maps from it, as the app's shared cache would serve them
    view = compute_maps(load, settings, cache, truth_dir=tmp_path)
    masks = [np.zeros(view.picture.size[::-1], dtype=bool) for _ in view.sentences]
    masks[1][10:70, 10:70] = True
    view.truth = Truth(masks=masks, source="test")
    state = swap_panel.choose_sentence(view, settings, 2)[0]

    def render(v, s):
        return maps_board.board_html(v, s), maps_tab.status_text(v, s), maps_tab.score_rows(v, s)

    wider, saved, board, status, rows, note = swap_panel.add_span(load, view, settings, state,
                                                                   "medium dotted blue cross", render)
    n = len(view.sentences)
    assert wider.n_sentences == n and wider.span_of == [2] and len(wider.sentences) == n + 1
    assert wider.summary(None) == view.summary(None)  # the headers' figures: not moved by the span
    assert maps_tab.status_text(view, settings).split(" · ")[1] == f"{n} sentence(s)"
    assert f"{n} sentence(s) · 1 span row(s)" in status and f"({view.summary(None)[0]['n']} sentence(s))" in status
    assert f'data-sentence="{n + 1}" data-span="2"' in board and len(rows) == n + 1 and rows[-1][6] != ""
    assert "span of sentence 2" in note and maps_tab.show_focus(wider, saved, n)[1].startswith(f"**span** {n + 1}")
    assert maps_tab.show_focus(wider, saved, 0)[1].startswith(f"**S1** of {n}:")
    assert saved.spans == [{"sentence": 2, "words": "medium dotted blue cross"}] and settings.spans == []
    assert "has 6 sentence(s)" in swap_panel.choose_sentence(wider, saved, n + 1)[3]  # a span is not swapped in
    # the export writes the spans into its settings; the replay (compute_maps of that file) draws the same rows
    replayed = compute_maps(load, ViewSettings.from_dict(json.loads(saved.to_json())), cache, truth_dir=tmp_path)
    assert replayed.sentences == wider.sentences and replayed.span_of == [2]
    np.testing.assert_allclose(replayed.models[0].maps, wider.models[0].maps, atol=1e-6)
    with pytest.raises(Exception, match="span"):
        ViewSettings(spans=[{"sentence": 0, "words": "x"}])


def test_a_typed_sentence_number_is_chosen_once():
    """One event chooses the sentence from its box: with Enter's "submit" as well as "input", a typed number was
    chosen twice and a word clicked between the two answers was undone (the panel drawn afresh)."""
    import gradio as gr

    from explorer.ui import swap_panel

    with gr.Blocks() as page:
        view, settings, draw = gr.State(None), gr.State(None), gr.Button()
        swap_panel.build(view, settings, draw.click(lambda: None), zoo=None)
    number = next(b for b in page.blocks.values() if getattr(b, "elem_id", None) == "swap-sentence")
    choosing = [fn for fn in page.fns.values() if fn.name == "choose_sentence"
                and any(target[0] == number._id for target in fn.targets)]
    assert [target[1] for fn in choosing for target in fn.targets] == ["input"]
    assert choosing[0].api_name == "swap_sentence"  # the endpoint's name kept
