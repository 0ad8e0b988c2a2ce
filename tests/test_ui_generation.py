"""The Generation tab's handlers, on the repo's demo zoo and a tiny SDXL whose text_encoder is as wide as
the demo Long-CLIP's text tower (as SDXL base's is as wide as Long-CLIP-L's)."""

from __future__ import annotations

import time
from pathlib import Path

import gradio as gr
import pytest

from explorer.core.background import BackgroundWorker
from explorer.generation import Generator
from explorer.generation.tiny_sdxl import build_tiny_sdxl
from explorer.ui import generation_tab as tab
from explorer.views import generation_view as view
from explorer.zoo import Zoo

REPO = Path(__file__).resolve().parents[1]
LONG = "demo-longclip"


@pytest.fixture(scope="module")
def zoo():
    return Zoo(REPO / "checkpoints")


@pytest.fixture(scope="module")
def sdxl_dir(tmp_path_factory, zoo):
    width = zoo.load(LONG).text_tower().width
    return build_tiny_sdxl(tmp_path_factory.mktemp("sdxl") / "sdxl", long_width=width)


@pytest.fixture(scope="module")
def worker():
    worker = BackgroundWorker("test-generation-tab")
    yield worker
    worker.shutdown()


@pytest.fixture(scope="module")
def generator(zoo):
    return Generator(load_model=zoo.load)


def request(sdxl, **changes):
    values = dict(sdxl=str(sdxl), sdxl_config="", prompt=view.EXAMPLE_PROMPT, negative="", models=[LONG],
                  stock=True, seeds="0, 1", steps=2, size=64, guidance=5.0, layer="last", allow_cut=False,
                  score_with=LONG, precision="fp16", cpu_offload=False, attention_slicing=False, vae_tiling=False)
    values.update(changes)
    return list(values.values())


def finish(worker, key, timeout=120):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        outputs = tab.poll(worker, key)
        if not outputs[-1].active:
            return outputs
        time.sleep(0.05)
    raise AssertionError("the generation did not finish")


def test_without_sdxl_the_tab_says_how_to_point_to_it_and_still_shows_the_budgets(worker, generator, tmp_path, owner):
    line = view.sdxl_line("")
    assert line.count("\n") == 0 and "EXPLORER_SDXL" in line and "--sdxl" in line
    key, status, timer = tab.generate(owner, worker, generator, *request(tmp_path / "nowhere"))
    assert key is None and "SDXL not found" in status and timer.active is False
    note, rows = tab.on_prompt(view.EXAMPLE_PROMPT)
    assert "Stock SDXL (77) misses" in note and "long text tower reads all of it" in note
    stock_reads = [row[4] for row in rows]
    assert stock_reads[0] == "yes" and stock_reads[-1] == "no" and all(row[5] == "yes" for row in rows)
    assert "empty" in tab.on_prompt("   ")[0]


def test_generate_is_off_with_its_reason_until_sdxl_is_found_and_the_endpoint_refuses_without_it(
        worker, generator, sdxl_dir, tmp_path, owner):
    button, reason = tab.generate_button(owner, "", "")
    assert button["interactive"] is False and reason["visible"] is True and "no SDXL base is set" in reason["value"]
    button, reason = tab.generate_button(owner, str(tmp_path / "nowhere"), "")
    assert button["interactive"] is False and "cannot be used" in reason["value"]
    button, reason = tab.generate_button(owner, "/etc", "")  # a path this page may not read
    assert button["interactive"] is False and "not under an allowed folder" in reason["value"]
    button, reason = tab.generate_button(owner, str(sdxl_dir), "")
    assert button["interactive"] is True and reason["visible"] is False
    # The button is only the page's: a direct call without SDXL is refused at once, nothing queued.
    key, status, timer = tab.generate(owner, worker, generator, *request(""))
    assert key is None and "No SDXL weights given" in status and timer.active is False


def test_generate_runs_in_the_background_and_the_timer_shows_the_grid_reads_and_match(worker, generator, sdxl_dir, owner):
    key, status, timer = tab.generate(owner, worker, generator, *request(sdxl_dir))
    assert key and timer.active is True
    status, grid, reads, match, files, timer = finish(worker, key)
    assert status.startswith("Done") and grid.size[0] > 2 * 64 and grid.size[1] > 2 * 64
    assert "stock SDXL" in reads and "248 tokens" in reads and "‖" in reads
    table = match["value"]
    assert match["visible"] is True  # hidden until there are scores (no empty "1 2 3" table)
    assert table["headers"][-1] == "best" and len(table["data"]) == 1 + len(view.budget_rows(view.EXAMPLE_PROMPT))
    assert {row[-1] for row in table["data"][1:]} <= {"stock", LONG}
    assert all(Path(path).is_file() for path in files) and files[1].endswith(".json")


def test_cancel_stops_a_generation_between_steps(worker, generator, sdxl_dir, owner):
    key, _, _ = tab.generate(owner, worker, generator, *request(sdxl_dir, steps=200, seeds="0"))
    deadline = time.monotonic() + 60
    while worker.task(key).done < 1 and time.monotonic() < deadline:
        time.sleep(0.02)
    assert "Cancelling" in tab.cancel(worker, key)
    status = finish(worker, key)[0]
    assert status.startswith("Cancelled") and worker.task(key).done < 200


def test_refusals_come_back_at_once_as_messages(worker, generator, sdxl_dir, owner):
    for changes, words in (({"prompt": ""}, "empty"), ({"seeds": "one"}, "whole numbers"),
                           ({"models": ["demo-clip-base"]}, "not a long text tower"),
                           ({"models": [LONG, "demo-finelip", "demo-goal"]}, "at most 2")):
        key, status, _ = tab.generate(owner, worker, generator, *request(sdxl_dir, **changes))
        if key is not None:  # refused on the worker (a model is loaded there): the poll says why
            status = finish(worker, key)[0]
        assert words in status, (changes, status)


def test_the_sdxl_field_names_a_folder_typed_in_it(zoo, sdxl_dir, owner):
    """The field's change event as the page wires it (``build`` once shadowed the handler with a
    component of the same name: every typed folder ended in "'Markdown' object is not callable")."""
    with gr.Blocks() as page:
        tab.build(zoo, owner)
    handlers = {fn.api_name: fn.fn for fn in page.fns.values()}
    for api in ("sdxl_status", "sdxl_config_status"):
        line = handlers[api](str(sdxl_dir), "")
        assert line == f"SDXL base at `{sdxl_dir.resolve()}`.", line
    assert "not under an allowed folder" in handlers["sdxl_status"]("/etc", "")


def test_only_models_with_a_long_clip_text_tower_are_offered(zoo):
    labels = dict((name, label) for label, name in view.long_text_models(zoo.manifests()))
    assert {"demo-longclip", "demo-finelip", "demo-mulclip", "demo-goal"} <= set(labels)
    assert not set(labels) & {"demo-clip-base", "demo-caft", "demo-flair", "demo-seps"}
    assert all(("UNTRAINED" in label) == (name == "tiny-untrained") for name, label in labels.items())
    update = tab.refresh_models(zoo, ["gone", "demo-goal"])
    assert update["value"] == ["demo-goal"]


def test_the_app_builds_with_the_generation_tab(zoo, tmp_path, monkeypatch):
    from explorer.jobs import JobManager
    from explorer.ui.app import build_app

    monkeypatch.setenv("EXPLORER_HOME", str(tmp_path))
    app = build_app(zoo, jobs=JobManager(gpu_ids=[], max_running=1))
    ids = {getattr(block, "elem_id", None) for block in app.blocks.values()}
    assert {"generation-prompt", "generation-go", "generation-grid", "generation-budget"} <= ids
    assert isinstance(app, gr.Blocks)
