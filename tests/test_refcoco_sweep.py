"""RefCOCO in evaluation sweeps (`jobs submit-eval --task refcoco`) and in the results table shaped like CAFT's
Table 2 / SEPS's Table 4: one child scores every (dataset, split) column the refer folder holds, each under the
papers' column name, with the numbers ``evaluate_grounding`` gives for that column."""

from __future__ import annotations

import signal

import numpy as np
import pytest

from explorer.cli import main
from explorer.data.grounding_sets import read_grounding_set
from explorer.data.grounding_sets.refer_twin import write_refer_twin
from explorer.evaluation.real_grounding import evaluate_grounding
from explorer.evaluation.tasks import EvalJob
from explorer.jobs import JobManager, launcher
from explorer.jobs.queue import claim_runs
from explorer.jobs.sweeps import children
from explorer.jobs.worker import run_job
from explorer.views import results_table as rt

COLUMNS = ["RefCOCO val", "RefCOCO testA", "RefCOCO testB", "RefCOCO+ val", "RefCOCO+ testA", "RefCOCO+ testB",
           "G-Ref val", "G-Ref test"]


class CornerModel:
    """Maps brighter towards the bottom right, whatever the text: known, cheap and not flat."""

    name, method_name, map_kinds, preferred_native_map = "corner", "fake", ("generic",), None

    def sentence_maps(self, image, texts, kind, dense_caption=None):
        width, height = image.size
        ramp = np.add.outer(np.arange(height), np.arange(width)).astype(np.float32)
        return type("Maps", (), {"maps": np.stack([ramp] * len(texts))})()


@pytest.fixture
def jobs(isolated_home, monkeypatch):
    monkeypatch.setattr(EvalJob, "load_model", lambda job: CornerModel())
    manager = JobManager(gpu_ids=[], max_running=1, grace_s=60, subreaper=False)
    yield manager
    for run in manager.list(reconcile=False):
        if run.pgid and run.status == "running":
            launcher.signal_group(run.pgid, signal.SIGKILL)
    launcher.wait_children(10)


def test_a_refcoco_sweep_fills_the_papers_columns_with_the_foreground_numbers(jobs, tmp_path):
    twin = tmp_path / "twin"
    write_refer_twin(twin, n_scenes=3, image_size=64)
    sweep = jobs.submit_eval(["corner"], [twin], task="refcoco", start=False)
    for run in claim_runs(jobs.store):
        run_job(run.id, jobs.root, start_next=False)
    (kid,) = children(jobs.store, sweep.id)
    assert kid.status == "done", kid.error
    frame = rt.results_frame(jobs.store.results([sweep.id]))
    assert rt.choices(frame)[0] == COLUMNS
    expected = evaluate_grounding({"corner": CornerModel()}, read_grounding_set(twin, split="testA"), progress=False)
    generic = expected["models"][0]["kinds"]["generic"]
    rows = frame[frame["dataset"] == "RefCOCO testA"].set_index("metric")["value"]
    for metric in ("miou", "oiou", "box_accuracy"):
        assert rows[metric] == pytest.approx(100 * generic[metric])  # the headline kind: generic, in percent
        assert rows[f"generic/{metric}"] == pytest.approx(100 * generic[metric])
    table = rt.pivot(frame, rt.default_metrics(frame))
    assert list(table.columns) == [(c, m) for c in COLUMNS for m in ("miou", "oiou", "box_accuracy")]
    latex = rt.export(rt.pivot(frame, ["miou"]), "latex")
    assert "RefCOCO+ testB" in latex and "G-Ref val" in latex
    csv = rt.export(table, "csv").splitlines()
    assert "RefCOCO testA" in csv[0] and csv[-1].startswith("corner,")


def test_one_column_by_option_and_the_cli_offers_the_task(jobs, tmp_path, capsys):
    twin = tmp_path / "twin"
    write_refer_twin(twin, n_scenes=2, image_size=64)
    sweep = jobs.submit_eval(["corner"], [twin], task="refcoco", start=False,
                             options={"dataset": "refcocog", "split": "test"})
    for run in claim_runs(jobs.store):
        run_job(run.id, jobs.root, start_next=False)
    (kid,) = children(jobs.store, sweep.id)
    assert kid.status == "done", kid.error
    assert {r["dataset"] for r in jobs.store.results([sweep.id])} == {"G-Ref test"}
    with pytest.raises(SystemExit):
        main(["jobs", "submit-eval", "--help"])
    assert "refcoco" in capsys.readouterr().out


def test_a_store_keyed_by_run_and_metric_gains_the_dataset_key_and_keeps_its_rows(tmp_path):
    import sqlite3

    from explorer.jobs.run_store import DB_FILE, RunStore

    with sqlite3.connect(tmp_path / DB_FILE) as conn:  # as a store of before one evaluation filled several columns
        conn.execute("CREATE TABLE results (run_id TEXT, sweep TEXT, model TEXT, dataset TEXT, task TEXT, "
                     "metric TEXT, value REAL, PRIMARY KEY (run_id, metric))")
        conn.execute("INSERT INTO results VALUES ('r1', 's', 'm', 'urban1k', 'retrieval', 't2i_R@1', 0.5)")
    store = RunStore(tmp_path)
    assert store.results(["r1"]) == [{"run_id": "r1", "sweep": "s", "model": "m", "dataset": "urban1k",
                                      "task": "retrieval", "metric": "t2i_R@1", "value": 0.5}]
    store.put_results("r2", [{"sweep": "s", "model": "m", "dataset": d, "task": "refcoco", "metric": "miou",
                              "value": v} for d, v in (("RefCOCO val", 0.2), ("RefCOCO testA", 0.3))])
    assert [r["value"] for r in store.results(["r2"])] == [0.2, 0.3]
    RunStore(tmp_path)  # opened again: nothing left to change
