"""The negatives and zeroshot tasks of evaluation sweeps: a child run in-process on the synthetic twins gives the
numbers the foreground command gives, under the papers' dataset names, and the results table prints them in
percent as the papers do."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from explorer.cli import main
from explorer.evaluation.tasks import EvalJob, run_task, task_names
from explorer.views import results_table as rt

DEMO = Path(__file__).resolve().parents[1] / "checkpoints" / "demo"


@pytest.fixture(scope="module")
def twins(tmp_path_factory):
    root = tmp_path_factory.mktemp("twins")
    assert main(["data", "negatives-twin", str(root / "fg"), "--n", "2", "--size", "64"]) == 0
    assert main(["data", "classes-twin", str(root / "classes"), "--per-class", "1", "--size", "64"]) == 0
    return root


def test_tasks_are_registered():
    assert {"negatives", "zeroshot"} <= set(task_names())


@pytest.mark.slow(reason="scores the FG-OVD twin with a demo model twice: as a sweep child's task and as the command")
def test_negatives_child_equals_the_command(twins, tmp_path):
    options = {"layout": "fg-ovd", "splits": ["hard", "trivial"], "limit": 3, "zoo": str(DEMO)}
    outcome = run_task("negatives", EvalJob("demo-clip-base", str(twins / "fg"), options, out_dir=str(tmp_path)))
    assert list(outcome.datasets) == ["FG-OVD"] and list(outcome.metrics) == ["accuracy/hard", "accuracy/trivial"]
    out = tmp_path / "cli.json"
    assert main(["--checkpoints", str(DEMO), "eval-negatives", "--data", str(twins / "fg"), "--layout", "fg-ovd",
                 "--split", "hard", "--split", "trivial", "--limit", "3", "--model", "demo-clip-base",
                 "--out", str(out), "--no-progress"]) == 0
    accuracy = json.loads(out.read_text())["models"][0]["accuracy"]
    assert outcome.metrics == {f"accuracy/{s}": v for s, v in accuracy.items()}
    assert (tmp_path / "negatives-work.jsonl").is_file()
    rows = [{"model": "demo-clip-base", "dataset": "FG-OVD", "task": "negatives", "metric": m, "value": v,
             "run_id": "r", "sweep": "s"} for m, v in outcome.metrics.items()]
    table = rt.pivot(rt.results_frame(rows))
    assert table.loc["demo-clip-base", ("FG-OVD", "accuracy/hard")] == pytest.approx(100 * accuracy["hard"])


def test_zeroshot_child(twins, tmp_path):
    (tmp_path / "one.txt").write_text("a photo of a {}.\n")
    options = {"templates": str(tmp_path / "one.txt"), "limit": 12, "zoo": str(DEMO)}  # the layout: detected
    outcome = run_task("zeroshot", EvalJob("demo-clip-base", str(twins / "classes"), options, out_dir=str(tmp_path)))
    assert list(outcome.datasets) == ["classes"] and set(outcome.metrics) == {"top1", "top5"}
    folders = [f for f in (twins / "classes").iterdir() if f.is_dir()]
    assert 70 <= len(folders) <= 80  # a class per (colour, shape) pair, a rare pair maybe missing
    assert outcome.document["dataset"]["classes"] == len(folders) and outcome.document["models"][0]["n"] == 12
    assert 0 <= outcome.metrics["top1"] <= outcome.metrics["top5"] and outcome.document["dataset"]["templates"] == 1
    assert rt.display_value("top1", 0.25) == 25.0 and rt.display_value("accuracy/hard", 0.5) == 50.0
