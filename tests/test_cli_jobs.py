"""`explorer jobs ...` as a user types it (``explorer.cli.main`` in this process): submit, list --json,
show, logs, cancel, resume, delete, and the refusals. Runs are real run processes (tiny CLIP-family
models on a 12-scene world, CPU) where the test is about a process; the rest run the worker here."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from explorer.cli import main
from explorer.jobs.queue import claim_runs
from explorer.jobs.worker import run_job

TINY = ["--size", "tiny", "--set", "batch_size=4", "--set", "cpu_threads=1"]
BRIEF_KEYS = {"id", "name", "status", "pid", "checkpoint"}
# The fixtures ``world`` (a 12-scene world), ``jobs`` (an isolated run store) and ``wait_for`` are in conftest.py.


def cli(capsys, *argv):
    """(exit code, stdout, stderr) of `explorer ARGV`."""
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def cli_json(capsys, *argv):
    code, out, err = cli(capsys, *argv)
    assert code == 0, err
    return json.loads(out)


def submitted_id(out: str) -> str:
    return out.split()[0]  # "<id>  <name>  <status>  <folder>"


def finish_here(jobs, run_ids):
    """Run queued runs' workers in this process (no child process): finished runs in a few seconds."""
    assert [run.id for run in claim_runs(jobs.store)] == list(run_ids)
    for run_id in run_ids:
        run_job(run_id, jobs.root, start_next=False)
    return [jobs.get(run_id) for run_id in run_ids]


STEPS = 40  # enough that a cancel after the first logged step lands mid-run (a step took about 0.1 s)


@pytest.mark.slow(reason="a run process, cancelled, then resumed as a second process to its end")
def test_submit_cancel_resume_list_show_logs_of_a_run_to_its_end(jobs, world, capsys, wait_for):
    """One run through every command (issue 65: this was two runs, each process importing torch): submitted,
    listed, cancelled at a step with a checkpoint, resumed from it, and shown, listed and logged once done."""
    code, out, err = cli(capsys, "jobs", "submit", "--method", "clip", "--data", world, "--max-steps", STEPS,
                         "--name", "cli-run", "--gpus", 0, *TINY, "--set", "eval_limit=2",
                         "--set", "eval_grounding_limit=1", "--set", "checkpoint_every=1000")
    assert code == 0, err
    run_id = submitted_id(out)
    assert f"{run_id}  cli-run  " in out and str(jobs.root / "runs" / run_id) in out

    listed = cli_json(capsys, "jobs", "list", "--json")
    assert [entry["id"] for entry in listed] == [run_id]
    assert BRIEF_KEYS <= set(listed[0]) and listed[0]["name"] == "cli-run"
    assert listed[0]["status"] in ("queued", "running")
    wait_for(lambda: cli_json(capsys, "jobs", "show", run_id, "--json")["last_metrics"], what="the first step")

    code, out, err = cli(capsys, "jobs", "cancel", run_id)
    assert code == 0, err
    assert f"{run_id}" in out and "cancelled (exit code 143)" in out and "checkpoint at step" in out
    record = cli_json(capsys, "jobs", "show", run_id, "--json")
    assert record["status"] == "cancelled" and record["exit_code"] == 143 and 1 <= record["step"] < STEPS
    stopped_at = record["step"]
    assert cli_json(capsys, "jobs", "list", "--json")[0]["status"] == "cancelled"

    code, out, err = cli(capsys, "jobs", "resume", run_id)
    assert code == 0, err
    assert out.split()[2] in ("queued", "running") and f"resumed from step-{stopped_at:08d}" in out
    record = cli_json(capsys, "jobs", "show", run_id, "--json")
    assert record["status"] in ("queued", "running", "done") and record["attempts"] >= 1  # 2 once it starts

    def final():
        record = cli_json(capsys, "jobs", "show", run_id, "--json")
        return record if record["status"] in ("done", "failed", "cancelled") else None

    record = wait_for(final, what=f"run {run_id} to end")
    assert record["status"] == "done" and record["exit_code"] == 0, record["error"]
    assert record["attempts"] == 2 and record["step"] == STEPS > stopped_at  # trained on from the saved step
    assert record["progress"] == {"step": STEPS, "total": STEPS} and record["last_metrics"]["step"] == STEPS
    assert record["evaluation"]["kind"] == "synthetic" and "long_t2i_R@1" in record["evaluation"]["metrics"]
    assert Path(record["checkpoint"]).is_file() and record["zoo_name"] == "cli-run"

    entry = cli_json(capsys, "jobs", "list", "--json")[0]
    assert entry["status"] == "done" and entry["checkpoint"] == record["checkpoint"] and entry["pid"] == record["pid"]
    code, out, _ = cli(capsys, "jobs", "show", run_id[:5])  # an id prefix finds it
    assert code == 0 and "status      done" in out and "long_t2i_R@1" in out and "zoo name    cli-run" in out
    code, out, _ = cli(capsys, "jobs", "list")
    assert code == 0 and out.splitlines()[0].split()[:4] == ["id", "name", "method", "status"] and run_id in out

    code, out, _ = cli(capsys, "jobs", "logs", run_id)
    assert code == 0 and f"step {STEPS}/{STEPS}" in out and "done (exit code 0)" in out and len(out.splitlines()) > 5
    code, out, _ = cli(capsys, "jobs", "logs", run_id, "--tail", 2)
    assert code == 0 and len(out.splitlines()) == 2 and "done (exit code 0)" in out
    code, out, _ = cli(capsys, "jobs", "logs", run_id, "--follow")  # a finished run: prints and returns
    assert code == 0 and "done (exit code 0)" in out


def test_delete_asks_first_and_keeps_the_checkpoint_unless_told(jobs, world, capsys, monkeypatch):
    ids = []
    for name in ("kept", "gone"):
        code, out, err = cli(capsys, "jobs", "submit", "--method", "clip", "--data", world, "--max-steps", 2,
                             "--name", name, "--no-start", *TINY, "--set", "evaluate=false")
        assert code == 0 and out.split()[2] == "queued", err
        ids.append(submitted_id(out))
    kept, gone = finish_here(jobs, ids)
    assert kept.status == gone.status == "done"

    answers = []
    monkeypatch.setattr("builtins.input", lambda prompt: answers.append(prompt) or "n")
    code, out, err = cli(capsys, "jobs", "delete", kept.id)
    assert code == 1 and "not deleted" in err and len(answers) == 1
    assert "its checkpoint stays" in answers[0] and "'kept'" in answers[0]  # says what stays before asking
    assert {entry["id"] for entry in cli_json(capsys, "jobs", "list", "--json")} == set(ids)

    monkeypatch.setattr("builtins.input", lambda prompt: answers.append(prompt) or "y")
    code, out, err = cli(capsys, "jobs", "delete", kept.id)
    assert code == 0 and "still in the zoo as 'kept'" in out, err
    assert Path(kept.zoo_manifest).is_file() and Path(kept.out_dir, "model.safetensors").is_file()

    code, out, err = cli(capsys, "jobs", "delete", gone.id, "--delete-checkpoint", "--yes")
    assert code == 0 and "zoo entry 'gone' was removed" in out, err
    assert len(answers) == 2  # --yes: not asked
    assert not Path(gone.zoo_manifest).exists() and not Path(gone.out_dir).exists()
    assert cli_json(capsys, "jobs", "list", "--json") == []


def test_refusals_are_one_clear_error_line_and_record_nothing(jobs, world, tmp_path, capsys):
    for argv in (["show", "nosuchid"], ["show", "nosuchid", "--json"], ["logs", "nosuchid"], ["cancel", "nosuchid"],
                 ["resume", "nosuchid"], ["delete", "nosuchid", "--yes"]):
        code, out, err = cli(capsys, "jobs", *argv)
        assert code == 2 and out == "" and err == "error: no run with id 'nosuchid' (explorer jobs list shows them)\n"
    refused = {
        ("--data", tmp_path / "nowhere"): "no data at",
        ("--data", world, "--set", "nosuch=1"): "unknown setting 'nosuch'",
        ("--data", world, "--set", "batch_size=many"): "batch_size must be",
        ("--data", world, "--set", "batch_size"): "--set takes KEY=VALUE",
        ("--data", world, "--set", "batch_size=64"): "fewer than the 64 samples",
        ("--data", world, "--set", "batch_size=4", "--init", "no-such-model"): "init no-such-model",
    }
    for extra, message in refused.items():
        code, out, err = cli(capsys, "jobs", "submit", "--method", "clip", *extra)
        assert code == 2 and err.startswith("error: ") and message in err and len(err.splitlines()) == 1, err
    code, _, err = cli(capsys, "jobs", "submit", "--method", "nosuch", "--data", world)
    assert code == 2 and "unknown method 'nosuch'" in err
    assert cli_json(capsys, "jobs", "list", "--json") == []  # nothing was recorded

    code, out, _ = cli(capsys, "jobs", "submit", "--method", "clip", "--data", world, "--no-start", *TINY)
    run_id = submitted_id(out)
    code, _, err = cli(capsys, "jobs", "delete", run_id, "--yes")
    assert code == 2 and "cancel it before deleting it" in err
    code, _, err = cli(capsys, "jobs", "resume", run_id)
    assert code == 2 and "only a failed or cancelled run can be resumed" in err
    code, out, err = cli(capsys, "jobs", "cancel", run_id)
    assert code == 0 and "cancelled" in out, err
    code, _, err = cli(capsys, "jobs", "cancel", run_id)
    assert code == 2 and "only a queued or running run can be cancelled" in err
