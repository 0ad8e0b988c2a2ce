"""The Retrieval tab's handlers (explorer/ui/retrieval_tab.py over explorer/views/retrieval_view.py),
called as the page calls them, without a browser.

A 16-scene synthetic world at 64 px and two demo models (indexed once per module through the app's
``Indexer``); a third demo model is never indexed, to see what the page says about it. Everything the
app writes (embeddings, exports, the default dataset) goes under this module's ``EXPLORER_HOME``.
"""

from __future__ import annotations

import csv
import json
import time
from pathlib import Path

import gradio as gr
import numpy as np
import pytest
from PIL import Image

from explorer.data import write_dataset
from explorer.data.retrieval_sets import read_retrieval_set
from explorer.retrieval.embedding_store import EmbeddingStore
from explorer.evaluation.retrieval import DEFAULT_KS, evaluate_retrieval
from explorer.retrieval.indexing import Indexer
from explorer.ui import retrieval_tab as tab
from explorer.ui import view_controls
from explorer.views import retrieval_view as view
from explorer.zoo import Zoo

REPO = Path(__file__).resolve().parents[1]
MODELS = ["demo-longclip", "demo-caft"]
NOT_INDEXED = "demo-finelip"
SCENES = 16


@pytest.fixture(scope="module")
def home(tmp_path_factory):
    folder = tmp_path_factory.mktemp("home")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("EXPLORER_HOME", str(folder))
        patch.setattr(view_controls, "EXPORT_ROOT", folder / "exports")
        yield folder


@pytest.fixture(scope="module")
def world(home) -> Path:
    root = home / "world"
    write_dataset(root, SCENES, seed=0, image_size=64, split_fractions={"test": 1.0})
    return root


@pytest.fixture(scope="module")
def zoo():
    return Zoo(REPO / "checkpoints")


@pytest.fixture(scope="module")
def indexer():
    worker = Indexer()
    yield worker
    worker.shutdown()


def where(world) -> list:
    """The dataset controls: (picker, folder typed, split)."""
    return [view.SYNTHETIC, str(world), "test"]


@pytest.fixture(scope="module")
def indexed(zoo, indexer, world, owner):
    """Both models indexed through the Index button and the timer, as on the page; the status lines."""
    started = time.perf_counter()
    tasks, status, timer = tab.start_indexing(owner, zoo.load, indexer, *where(world), MODELS)
    assert time.perf_counter() - started < 5  # returns at once: the embedding runs in the background
    assert [name for name, _ in tasks] == MODELS and isinstance(timer, gr.Timer)
    while timer.active:
        assert time.perf_counter() - started < 60, status
        time.sleep(0.2)
        status, timer = tab.poll(indexer, tasks)
    return status


def columns(outputs) -> list[dict]:
    """A search's outputs ([status, then per column: column, header, gallery, caption table]) by column."""
    rest = outputs[1:]
    return [dict(zip(("column", "header", "gallery", "table"), rest[i:i + 4])) for i in range(0, len(rest), 4)]


def test_indexing_completes_and_the_status_says_so(zoo, indexer, world, indexed, owner):
    assert indexed.count("(ready)") == 2 and f"{SCENES}/{SCENES} images" in indexed
    again = tab.index_status(owner, zoo.load, indexer, *where(world), [*MODELS, NOT_INDEXED])
    assert again.count("(ready)") == 2 and f"**{NOT_INDEXED}** (not indexed)" in again
    # indexing again embeds nothing: the tasks finish at once, from the cache
    tasks, status, timer = tab.start_indexing(owner, zoo.load, indexer, *where(world), MODELS)
    deadline = time.perf_counter() + 20
    while timer.active and time.perf_counter() < deadline:
        time.sleep(0.1)
        status, timer = tab.poll(indexer, tasks)
    assert status.count("(ready)") == 2


def test_a_dataset_caption_finds_its_picture_in_every_model(zoo, indexer, world, indexed, owner):
    dataset = read_retrieval_set(world, "test")
    outputs = tab.search_text(owner, zoo.load, indexer, *where(world), MODELS, dataset.captions[3], SCENES)
    shown = columns(outputs)
    assert "Top 16 for the text on" in outputs[0] and len(shown) == 4
    for name, column in zip(MODELS, shown[:2]):
        assert column["column"]["visible"] is True and column["table"]["visible"] is False
        assert f"**{name}**" in column["header"] and "truth at rank" in column["header"]
        rank = int(column["header"].split("truth at rank ")[1].split(" ")[0])
        labels = [label for _, label in column["gallery"]["value"]]
        assert len(labels) == SCENES and labels[0].startswith("#1 · ")
        truth = [label for label in labels if "✓ truth" in label]
        # the label names the picture by its caption's start (the one line under a thumbnail), not its id
        start = dataset.captions[3][:30]
        assert len(truth) == 1 and truth[0].startswith(f"#{rank} · ") and start in truth[0], (truth, start)
    assert all(column["column"]["visible"] is False for column in shown[2:])


def test_a_dataset_picture_finds_its_caption(zoo, indexer, world, indexed, owner):
    outputs = tab.search_number(owner, zoo.load, indexer, *where(world), MODELS, 5, SCENES)
    for column in columns(outputs)[:2]:
        assert column["gallery"]["visible"] is False and column["table"]["visible"] is True
        rows = column["table"]["value"]
        assert [row[0] for row in rows] == list(range(1, SCENES + 1))
        truth = [row for row in rows if row[2] == "✓ truth"]
        assert len(truth) == 1 and truth[0][4] == "test-000005"
        assert f"truth at rank {truth[0][0]}" in column["header"]
    # the query gallery offers the pictures, and a picture's caption can become the text query
    note, pictures = tab.show_dataset(owner, *where(world))
    fifth = read_retrieval_set(world, "test").captions[5]
    assert f"{SCENES} images" in note and len(pictures) == SCENES and pictures[5][1].startswith("#5 · ")
    assert fifth.startswith(pictures[5][1][len("#5 · "):].rstrip("…")), pictures[5][1]
    text, _ = tab.use_caption(owner, *where(world), 5)
    assert text == read_retrieval_set(world, "test").captions[5]


def test_the_search_is_exported_as_a_figure_that_replays(zoo, indexer, world, indexed, owner, tmp_path):
    from explorer.cli import main
    from explorer.views.settings import ViewSettings

    dataset = read_retrieval_set(world, "test")
    style = ["png", "column", "sans", None]
    files, note = tab.export_search_figure(owner, zoo.load, indexer, *where(world), MODELS, "text",
                                           dataset.captions[3], 0, 5, *style)
    assert files[0].endswith("retrieval.png") and "figure replay" in note
    saved = ViewSettings.load(files[1])
    assert (saved.view, saved.queries, saved.k, saved.direction, saved.models) == (
        "retrieval", [dataset.captions[3]], 5, "t2i", MODELS)
    again = tmp_path / "again.png"
    assert main(["--checkpoints", str(REPO / "checkpoints"), "figure", "replay", files[1], "--out", str(again)]) == 0
    with Image.open(files[0]) as first, Image.open(again) as second:
        assert np.array_equal(np.asarray(first), np.asarray(second))
    files, _ = tab.export_search_figure(owner, zoo.load, indexer, *where(world), MODELS, "picture #", "", 5, 3,
                                        *style)
    assert ViewSettings.load(files[1]).direction == "i2t"
    # not indexed, a bad query kind, number or k: said, nothing written
    for values in ([NOT_INDEXED], "text", "a cube", 0, 5), (MODELS, "sideways", "", 0, 5), \
            (MODELS, "picture #", "", "five", 5), (MODELS, "picture #", "", 99, 5), (MODELS, "text", "a", 0, 500):
        files, note = tab.export_search_figure(owner, zoo.load, indexer, *where(world), *values, *style)
        assert files is None and "Cannot do that" in note, values


def test_recall_table_export_worst_queries_and_grounding(zoo, indexer, world, indexed, home, owner):
    steps = list(tab.evaluate(owner, zoo.load, indexer, *where(world), MODELS))
    assert len(steps) == len(MODELS)  # the table fills a model at a time
    note, table, evaluation, csv_button, json_button, worst_model = steps[-1]
    dataset = read_retrieval_set(world, "test")
    assert [row[0] for row in table] == MODELS and worst_model["value"] == MODELS[0]
    columns_shown = view.recall_columns()
    for name, row in zip(MODELS, table):
        model = zoo.load(name)
        entry = evaluate_retrieval(model, EmbeddingStore(model, dataset), view.KS)
        shown = dict(zip(columns_shown, row))
        assert shown["T→I R@1"] == round(100 * entry["t2i_R@1"], 1) and shown["I→T R@5"] == round(
            100 * entry["i2t_R@5"], 1)
        assert shown["T→I MedR"] == entry["t2i_median_rank"] and shown["RSUM"] == round(entry["rsum"], 1)
        assert evaluation.entries[name]["t2i_R@10"] == entry["t2i_R@10"]
        assert name in note and entry["truncation"]["summary"] in note
    # the download buttons hold the CSV and JSON (Gradio serves copies), written under the exports folder
    csv_file, json_file = Path(csv_button.value["path"]), Path(json_button.value["path"])
    written = list((home / "exports").rglob("recall.csv"))
    assert len(written) == 1 and written[0].read_bytes() == csv_file.read_bytes()
    assert (written[0].parent / "results.json").read_bytes() == json_file.read_bytes()
    rows = list(csv.DictReader(csv_file.open()))
    assert [row["model"] for row in rows] == MODELS
    assert float(rows[1]["t2i_R@1"]) == evaluation.entries[MODELS[1]]["t2i_R@1"]
    document = json.loads(json_file.read_text())
    assert document["format"] == "explorer-retrieval" and list(document["models"]) == MODELS
    assert document["ks"] == list(DEFAULT_KS)  # the page exports every K that eval-retrieval measures
    assert document["dataset"]["images"] == SCENES and len(document["models"][MODELS[0]]["queries"]["t2i"]) == SCENES
    # worst queries: largest rank first; a row opens its picture and caption in the Grounding tab
    for direction in ("t2i", "i2t"):
        rows, queries, message = tab.show_worst(evaluation, "demo-caft", direction)
        ranks = [row[0] for row in rows]
        assert ranks == sorted(ranks, reverse=True) and len(rows) == SCENES and "worst" in message
    rows, queries, _ = tab.show_worst(evaluation, "demo-caft", "t2i")
    picture, caption, models, tabs, message = tab.open_in_grounding(queries, 0)
    assert caption == queries[0].caption and rows[0][1] == view.shorten(caption) and models == ["demo-caft"]
    assert Path(picture).read_bytes() == queries[0].picture.read_bytes()
    assert str(picture).startswith(str(home / "exports")) and tabs.selected == "grounding"
    assert queries[0].picture_id in message
    assert list((home / "examples" / "truth").glob("*.npz"))  # the scene's truth: Grounding scores its maps


def test_bad_inputs_say_what_is_wrong(zoo, indexer, world, indexed, tmp_path, owner):
    empty = tab.search_text(owner, zoo.load, indexer, *where(world), MODELS, "   ", 10)
    assert "query is empty" in empty[0]
    nothing = tmp_path / "nothing"
    nothing.mkdir()
    (nothing / "notes.bin").write_bytes(b"\x00" * 10)
    status = tab.search_text(owner, zoo.load, indexer, view.SYNTHETIC, str(nothing), "", MODELS, "a cube", 10)[0]
    assert "matches no dataset layout" in status and "Tried:" in status
    assert "does not exist" in tab.show_dataset(owner, view.SYNTHETIC, str(tmp_path / "gone"), "")[0]
    corrupt = tmp_path / "upload.png"
    corrupt.write_bytes(b"\x89PNG\r\n\x1a\n" + b"\x00" * 64)
    assert "Cannot do that" in tab.search_file(owner, zoo.load, indexer, *where(world), MODELS, str(corrupt), 10)[0]
    assert "Pick at least one model" in tab.search_text(owner, zoo.load, indexer, *where(world), [], "a cube", 10)[0]
    assert "no picture #99" in tab.search_number(owner, zoo.load, indexer, *where(world), MODELS, 99, 10)[0]
    # a model that has not embedded the dataset: said in its column; the indexed one still answers
    outputs = tab.search_text(owner, zoo.load, indexer, *where(world), ["demo-caft", NOT_INDEXED], "a red cube", 5)
    indexed_column, missing_column = columns(outputs)[:2]
    assert "no truth" in indexed_column["header"] and len(indexed_column["gallery"]["value"]) == 5
    assert "click Index first" in missing_column["header"] and NOT_INDEXED in outputs[0]
    assert "click Index first" in outputs[0]  # said under the search buttons too, where the page shows it
    assert missing_column["gallery"]["visible"] is False  # no empty box under a model without results
    note, table, evaluation, *_ = list(tab.evaluate(owner, zoo.load, indexer, *where(world), [NOT_INDEXED]))[-1]
    assert table == [] and "click Index first" in note and not evaluation.entries
    # and the page keeps working
    assert "truth at rank" in columns(tab.search_number(owner, zoo.load, indexer, *where(world), MODELS, 2, 5))[0]["header"]


def test_an_uploaded_picture_has_no_truth(zoo, indexer, world, indexed, owner):
    picture = world / "images" / "test-000001.png"
    first = columns(tab.search_file(owner, zoo.load, indexer, *where(world), MODELS, str(picture), 3))[0]
    assert "no truth: the picture is not one of the dataset's" in first["header"]
    assert len(first["table"]["value"]) == 3


def test_the_synthetic_default_is_written_once(home, monkeypatch):
    monkeypatch.setattr(view, "SYNTHETIC_SCENES", 4)
    dataset = view.open_dataset(view.SYNTHETIC, "", view.DEFAULT_SPLIT)
    assert dataset.root == home / "datasets" / "synthetic" and len(dataset.images) == 4 and dataset.split == "test"
    stamp = (dataset.root / "scenes.jsonl").stat().st_mtime_ns
    assert view.ensure_synthetic() == dataset.root and (dataset.root / "scenes.jsonl").stat().st_mtime_ns == stamp
    assert view.dataset_choices()[0][1] == view.SYNTHETIC
    assert not list(dataset.root.parent.glob(".synthetic-*"))  # no scratch folder left


def test_the_app_builds_with_the_tab_and_its_model_list_follows_the_zoo(zoo, indexer, home):
    from explorer.ui.app import build_app

    app = build_app(zoo, indexer)
    ids = {block.elem_id for block in app.blocks.values()}
    for elem_id in ("main-tabs", "retrieval-dataset", "retrieval-folder", "retrieval-models", "retrieval-index",
                    "retrieval-index-status", "retrieval-text", "retrieval-query-image", "retrieval-query-gallery",
                    "retrieval-gallery-3", "retrieval-captions-0", "retrieval-recall", "retrieval-csv",
                    "retrieval-worst", "grounding-image"):
        assert elem_id in ids, elem_id
    names = [name for _, name in tab.model_choices(zoo)]
    assert set(MODELS) <= set(names)
    assert tab.refresh_models(zoo, ["demo-caft", "gone"])["value"] == ["demo-caft"]


def test_a_public_page_does_not_stop_shared_indexing(indexer):
    from explorer.serve.access import Access

    note = tab.stop_indexing(Access(public=True), indexer, [("demo-caft", "some-task")])
    assert "public demo" in note

