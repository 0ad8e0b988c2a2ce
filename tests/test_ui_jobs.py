"""The Jobs tab's handlers (explorer/ui/jobs_tab.py over explorer/views/jobs_view.py), called as the page
calls them, without a browser: the form's defaults, submit, the table, curves, log, record, cancel,
delete (asked first), Open in Grounding, the refusals, and the app built with the tab."""

from __future__ import annotations

import tempfile
from pathlib import Path

import gradio as gr
import plotly.graph_objects as go
import pytest

from explorer.jobs.queue import claim_runs
from explorer.jobs.worker import run_job
from explorer.ui import jobs_tab as tab
from explorer.serve.access import Access
from explorer.views import jobs_view as view
from explorer.zoo import Zoo

QUICK = "evaluate=false\ncpu_threads=1"
MULCLIP_TERMS = {"loss", "loss/global_long", "loss/global_short", "loss/word", "loss/sub"}
# The fixtures ``world`` (a 12-scene world) and ``jobs`` (an isolated run store) are in conftest.py.


@pytest.fixture
def zoo(tmp_path):
    return Zoo(tmp_path / "zoo")


def submit(jobs, method="mulclip", data="", init="", max_steps=2, name="", devices=0, size="tiny", batch_size=4,
           overrides=QUICK):
    """The Submit button with the form's values, on a page that may read the test's temporary folders."""
    access = Access(roots=(Path(tempfile.gettempdir()).resolve(),))
    return tab.submit(access, jobs, Zoo(), method, data, init, max_steps, name, devices, size, batch_size, overrides)


def finished_here(jobs, world, name="ui-run"):
    """A tiny MulCLIP run submitted as the form does, its worker run in this process (no child process)."""
    run = view.submit_form(jobs, view.Form("mulclip", data=str(world), max_steps=2, name=name, batch_size=4,
                                           overrides=QUICK), start=False)
    claimed = claim_runs(jobs.store)
    assert [c.id for c in claimed] == [run.id]
    run_job(run.id, jobs.root, start_next=False)
    return jobs.get(run.id)


def test_the_forms_defaults_follow_the_method():
    rows, batch, note = tab.on_method("mulclip")
    values = {row[0]: row[1] for row in rows}
    sources = {row[0]: row[2] for row in rows}
    assert (values["lr_backbone"], values["lr_new"], values["weight_decay"], values["warmup_steps"]) == (
        "1e-05", "0.0002", "0.05", "200")
    assert batch == 16 and "MulCLIP Sec. 4.1" in sources["lr_new"] and values["lambda_short (fixed in code)"] == "0.5"
    assert "1e-05 (backbone) / 0.0002 (new modules)" in note and "200 warm-up steps" in note
    rows, batch, note = tab.on_method("finelip")
    values = {row[0]: row[1] for row in rows}
    assert (values["lr_backbone"], values["lr_new"], batch) == ("1e-06", "0.0002", 128)
    rows, batch, _ = tab.on_method("longclip")
    assert {row[0]: row[1] for row in rows}["lr_backbone"] == "1e-06" and batch == 2048
    rows, batch, note = tab.on_method("nosuch")
    assert rows == [] and batch is None and note.startswith("**Cannot do that:**") and "unknown method" in note


def test_bad_input_gives_a_clear_message_and_records_nothing(jobs, world, tmp_path):
    cases = {"no data at": dict(data=str(tmp_path / "nowhere")),
             "write key=value": dict(data=str(world), overrides="lr_new 1e-4"),
             "lr_new must be a float": dict(data=str(world), overrides="lr_new=fast"),
             "unknown setting 'nosuch'": dict(data=str(world), overrides="nosuch=1"),
             "fewer than the 16 samples": dict(data=str(world), batch_size=16),
             "max steps must be a whole number": dict(data=str(world), max_steps=2.5),
             "init no-such-model": dict(data=str(world), init="no-such-model"),
             "/etc is not under an allowed folder": dict(data="/etc"),
             "not under an allowed folder": dict(data=str(world), init="/etc/passwd"),
             "allow_pickle cannot be set from the page": dict(data=str(world), overrides="allow_pickle=true")}
    for message, fields in cases.items():
        note, selected = submit(jobs, **fields)
        assert note.startswith("**Cannot do that:**") and message in note, note
        assert selected == gr.update()
    assert jobs.list() == []
    for handler in (tab.cancel, tab.resume):
        assert "Select a run" in handler(jobs, "")
        assert "no run with id 'nosuch1'" in handler(jobs, "nosuch1")
    note, row, pending = tab.ask_delete(jobs, "nosuch1", True)
    assert "no run with id" in note and row["visible"] is False and pending is None
    assert "press Delete first" in tab.confirm_delete(jobs, None)[0]
    models, tabs, note = tab.open_in_grounding(jobs, Zoo(tmp_path / "zoo"), "nosuch1", [])
    assert "no run with id" in note and models == gr.update() and tabs == gr.update()
    details, log, figure = tab.run_view(jobs, "nosuch1")
    assert "no run with id" in details and isinstance(figure, go.Figure)


def test_a_finished_run_gives_rows_curves_log_and_record(jobs, world, zoo):
    run = finished_here(jobs, world)
    assert run.status == "done", run.error
    table, details, log, figure, seen, stamp = tab.snapshot(jobs, run.id, {})
    assert len(table) == 1 and dict(zip(view.COLUMNS, table[0])) | {"started": "", "duration": ""} == {
        "id": run.id, "name": "ui-run", "method": "mulclip", "status": "done", "progress": "100%", "step": "2/2",
        "started": "", "duration": "", "last loss": f"{jobs.metrics(run.id)[-1]['loss']:.4g}",
        "checkpoint": "zoo: ui-run"}
    assert isinstance(figure, go.Figure)
    names = {trace.name for trace in figure.data}
    assert MULCLIP_TERMS <= names and {"lr/backbone", "lr/new", "samples_per_s"} <= names
    loss = next(trace for trace in figure.data if trace.name == "loss")
    assert list(loss.x) == [1, 2]
    assert "submitted ui-run (mulclip)" in log  # the log tail (the worker ran here: its lines went to stdout)
    assert f"`{run.id}`" in details and "**done**" in details and "exit code" in details
    assert "explorer.jobs.worker" in details and "| lr_new | 0.0002 |" in details and "evaluate is off" in details
    assert stamp == "ui-run"
    # the timer sends only what changed: nothing, here
    again = tab.snapshot(jobs, run.id, seen, force=False)
    assert all(isinstance(value, type(gr.skip())) for value in again[:4]) and again[5] == "ui-run"


def test_delete_asks_first_and_says_what_happens_to_the_checkpoint(jobs, world, zoo):
    run = finished_here(jobs, world)
    note, row, pending = tab.ask_delete(jobs, run.id, False)
    assert row["visible"] is True and pending == {"id": run.id, "delete_checkpoint": False}
    assert "its checkpoint stays" in note and "in the zoo as 'ui-run'" in note
    assert jobs.get(run.id).status == "done"  # asking deleted nothing
    note, row, cleared = tab.keep(pending)
    assert "nothing was deleted" in note and row["visible"] is False and cleared is None
    note, row, pending = tab.ask_delete(jobs, run.id, True)
    assert "AND ITS CHECKPOINT" in note and "zoo entry 'ui-run'" in note and "every model list" in note
    note, row, cleared, selected = tab.confirm_delete(jobs, pending)
    assert "zoo entry 'ui-run' was removed" in note and selected == "" and cleared is None
    assert not Path(run.zoo_manifest).exists() and not Path(run.out_dir).exists() and jobs.list() == []

    kept = finished_here(jobs, world, name="kept")
    _, _, pending = tab.ask_delete(jobs, kept.id, False)
    note, *_ = tab.confirm_delete(jobs, pending)
    assert "still in the zoo as 'kept'" in note and Path(kept.zoo_manifest).is_file()
    assert [m.name for m in zoo.manifests()] == ["kept"]


@pytest.mark.slow
def test_submit_from_the_form_runs_in_its_own_process_and_opens_in_grounding(jobs, zoo):
    note, selected = submit(jobs, data="", name="from-the-form")  # empty: the default training world
    assert note.startswith("Submitted **from-the-form**") and "100 training samples" in note, note
    assert (view.training_world_root() / "scenes.jsonl").is_file()
    run = jobs.get(selected)
    assert run.status in ("queued", "running") and run.data == str(view.training_world_root())
    assert run.config["lr_backbone"] == 1e-5 and run.config["size"] == "tiny" and run.config["batch_size"] == 4
    assert run.config_sources["batch_size"] == "override" and run.config_sources["lr_new"].startswith("MulCLIP")
    running = tab.open_in_grounding(jobs, zoo, selected, [])
    assert "only a finished run is in the zoo" in running[2]

    run = jobs.wait(run.id, timeout=240)
    assert run.status == "done", run.error
    table, details, log, figure, _, stamp = tab.snapshot(jobs, selected, {})
    assert table[0][:4] == [run.id, "from-the-form", "mulclip", "done"] and stamp == "from-the-form"
    assert "done (exit code 0)" in log and "step 2/2" in log
    assert MULCLIP_TERMS <= {trace.name for trace in figure.data}

    models, tabs, note = tab.open_in_grounding(jobs, zoo, selected, ["demo-a", "demo-b", "demo-c", "demo-d"])
    assert models["value"] == ["from-the-form", "demo-a", "demo-b", "demo-c"]
    assert ("from-the-form" in [value for _, value in models["choices"]])
    assert isinstance(tabs, gr.Tabs) and tabs.selected == "grounding" and "Opened **from-the-form**" in note
    inits = tab.refresh_inits(zoo, "from-the-form")
    assert inits["value"] == "from-the-form" and ("from scratch", "") in inits["choices"]
    assert "Cannot do that" in tab.cancel(jobs, selected)  # done: nothing to cancel


def test_the_app_builds_with_the_jobs_tab(jobs, zoo, monkeypatch):
    from explorer.retrieval.indexing import Indexer
    from explorer.ui.app import build_app

    indexer = Indexer()
    try:
        app = build_app(zoo, indexer, jobs)
    finally:
        indexer.shutdown()
    ids = {block.elem_id for block in app.blocks.values()}
    assert {"jobs-method", "jobs-data", "jobs-init", "jobs-max-steps", "jobs-batch-size", "jobs-size", "jobs-devices",
            "jobs-name", "jobs-overrides", "jobs-submit", "jobs-table", "jobs-selected", "jobs-cancel", "jobs-resume",
            "jobs-delete", "jobs-delete-checkpoint", "jobs-delete-confirm", "jobs-open-grounding", "jobs-curves",
            "jobs-log", "jobs-details", "jobs-defaults"} <= ids
    tabs = [block.id for block in app.blocks.values() if isinstance(block, gr.Tab)]
    assert tabs.index("retrieval") < tabs.index("jobs") < tabs.index("models")
    names = {fn.api_name for fn in app.fns.values()}
    assert {"jobs_submit", "jobs_show", "jobs_cancel", "jobs_resume", "jobs_delete", "jobs_delete_confirm",
            "jobs_open_in_grounding"} <= names
    assert any(isinstance(block, gr.Timer) and block.value == tab.POLL_SECONDS for block in app.blocks.values())
    # the timer ticks while the Jobs tab is shown: picking a main tab turns it on for Jobs and off for the others
    timer = next(block for block in app.blocks.values() if isinstance(block, gr.Timer)
                 and block.value == tab.POLL_SECONDS)
    main_tabs = next(block for block in app.blocks.values() if isinstance(block, gr.Tabs)
                     and block.elem_id == "main-tabs")
    follows = [fn for fn in app.fns.values() if (main_tabs._id, "select") in fn.targets and fn.outputs == [timer]]
    assert len(follows) == 1 and follows[0].fn is tab.ticks_while_shown
    for label, active in (("Jobs", True), ("Grounding", False), ("Results", False)):
        update = tab.ticks_while_shown(gr.SelectData(main_tabs, {"value": label, "index": 0}))
        assert update.active is active, label
