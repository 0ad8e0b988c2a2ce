"""Background training runs for real: each run is a process of its own, started, watched, cancelled,
killed, resumed and queued through ``explorer.jobs.JobManager`` (tiny CLIP, 12-scene world, CPU)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

import explorer
from explorer.jobs import JobManager, launcher
from explorer.training.checkpointing import latest_checkpoint
from explorer.training.metrics_log import read_jsonl
from explorer.zoo import Zoo

# A run small enough for a 2-core CPU: the tiny model, 4 samples a step, one torch thread.
TINY = {"size": "tiny", "batch_size": 4, "cpu_threads": 1, "evaluate": False}
# The fixtures ``world`` (a 12-scene world), ``jobs`` (an isolated run store) and ``wait_for`` are in conftest.py.


@pytest.fixture
def subreaper() -> bool:
    """The ``jobs`` fixture (conftest) adopts orphaned run processes here: reaping them is tested."""
    return True


def assert_gone(pid, pgid=None):
    """Reaped (no zombie: not our child any more) and no process of its group left (no orphan)."""
    launcher.wait_children(10)
    assert launcher.process_state(pid) == launcher.GONE
    with pytest.raises(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)
    if pgid:
        assert launcher.group_members(pgid) == []


def assert_reaped_in_time(wait_for, manager, run, timeout=60.0):
    """A run process started by another run is adopted by this process (subreaper) and reaped by reconcile."""
    def gone():
        manager.reconcile()
        return launcher.process_state(run.pid, run.start_ticks) == launcher.GONE

    wait_for(gone, timeout, f"run {run.id}'s process to be reaped")


@pytest.mark.slow
def test_cancel_saves_a_checkpoint_and_resume_finishes_from_it(jobs, world, wait_for):
    run = jobs.submit("clip", world, max_steps=60, gpus=0, overrides={**TINY, "checkpoint_every": 1000})
    wait_for(lambda: jobs.metrics(run.id), what="the first logged step")
    run = jobs.get(run.id)
    assert os.getpgid(run.pid) == run.pid != os.getpgrp()

    cancelled = jobs.cancel(run.id)
    assert cancelled.status == "cancelled" and cancelled.exit_code == 143 and cancelled.error is None
    events = read_jsonl(os.path.join(run.out_dir, "run.jsonl"))
    stop = [e for e in events if e["event"] == "stop"]
    assert len(stop) == 1 and 1 <= stop[0]["step"] < 60, events
    step = stop[0]["step"]
    assert latest_checkpoint(Path(run.out_dir)).name == f"step-{step:08d}"
    assert cancelled.step == step and explorer.load(cancelled.checkpoint, device="cpu").key_report.ok
    assert "SIGTERM during train" in jobs.logs(run.id)
    assert_gone(run.pid, run.pgid)

    resumed = jobs.resume(run.id)
    assert resumed.status in ("queued", "running")
    done = jobs.wait(run.id, timeout=240)
    assert done.status == "done" and done.step == 60 and done.attempts == 2 and done.exit_code == 0, done.error
    assert [row["step"] for row in jobs.metrics(run.id)] == list(range(1, 61))  # no step twice, none lost
    events = read_jsonl(os.path.join(run.out_dir, "run.jsonl"))
    assert [e["event"] for e in events if e["event"] in ("start", "stop", "resume", "finish")] == [
        "start", "stop", "resume", "finish"]
    assert [e["step"] for e in events if e["event"] == "resume"] == [step]
    assert_gone(done.pid, done.pgid)
    with pytest.raises(explorer.ExplorerError, match="done"):
        jobs.resume(run.id)


@pytest.mark.slow
def test_the_app_dies_the_run_goes_on_and_a_killed_run_is_reconciled(jobs, world, tmp_path, wait_for):
    """An "app" process submits two runs and dies at once; a new manager sees both, one finishes with
    its curves, the other is killed with SIGKILL and reconcile marks it failed, its log kept."""
    app = (f"import os\nfrom explorer.jobs import JobManager\njobs = JobManager(subreaper=False)\n"
           f"a = jobs.submit('clip', {str(world)!r}, max_steps=100000, name='long', gpus=0, overrides={TINY!r})\n"
           f"b = jobs.submit('clip', {str(world)!r}, max_steps=3, name='short', gpus=0, overrides={TINY!r})\n"
           f"print(a.id, b.id, flush=True)\nos._exit(0)\n")
    out = subprocess.run([sys.executable, "-c", app], capture_output=True, text=True, timeout=120, check=True)
    long_id, short_id = out.stdout.split()

    restarted = JobManager()
    assert {r.id: r.status for r in restarted.list()} == {long_id: "running", short_id: "running"}
    short = restarted.wait(short_id, timeout=240)
    assert short.status == "done" and [r["step"] for r in restarted.metrics(short_id)] == [1, 2, 3]
    # The metrics row is written before the worker logs its step line: wait for both, or the kill below
    # can land between the two (seen under load).
    wait_for(lambda: restarted.metrics(long_id) and "step 1/100000" in restarted.logs(long_id, tail=None),
             what="the long run's first step, logged")

    long = restarted.get(long_id)
    os.killpg(long.pgid, signal.SIGKILL)
    failed = restarted.wait(long_id, timeout=60)
    assert failed.status == "failed" and "without recording its end" in failed.error
    if failed.exit_code is not None:  # known when this process adopted (and reaped) it
        assert failed.exit_code == -signal.SIGKILL and "SIGKILL" in failed.error
    log = restarted.logs(long_id, tail=None)
    assert f"run {long_id}" in log and "step 1/100000" in log  # the log is kept
    restarted.reconcile()  # reaps what it adopted
    assert_gone(long.pid, long.pgid)
    assert_reaped_in_time(wait_for, restarted, short)  # it ends just after recording "done"


def assert_says_everything(jobs, run):
    """A finished run's record, files, log, checkpoint and evaluation (three steps, evaluated)."""
    assert run.status == "done", run.error
    assert run.exit_code == 0 and run.error is None and run.attempts == 1
    assert run.command[:4] == [sys.executable, "-u", "-m", "explorer.jobs.worker"] and run.id in run.command
    assert run.config["max_steps"] == 3 and run.config["lr_backbone"] == 1e-5 and run.config_sources
    assert run.created <= run.started <= run.finished and run.pid and run.pgid == run.pid
    assert run.progress == (3, 3)
    assert [row["step"] for row in jobs.metrics(run.id)] == [1, 2, 3]
    assert run.metrics_path.startswith(run.out_dir) and os.path.isfile(run.log_path)
    assert "done (exit code 0)" in jobs.logs(run.id, tail=5)
    assert explorer.load(run.checkpoint, device="cpu").key_report.ok  # the output checkpoint loads
    evaluation = run.evaluation
    assert evaluation["kind"] == "synthetic" and evaluation["split"] == "test"
    assert evaluation["counts"]["retrieval_scenes"] == 1 and "long_t2i_R@1" in evaluation["metrics"]


@pytest.mark.slow(reason="starts three training runs one after another, each its own Python process")
def test_the_queue_starts_the_next_run_when_one_ends_and_each_record_says_everything(jobs, world, tmp_path,
                                                                                     wait_for):
    """One at a time: a crash at start (the data gone while the run waited) is recorded and the queue goes on.
    The two runs that finish share a name and are evaluated: each record says everything, both are kept in the
    zoo under names of their own, and a new manager reads the same records. (Issue 65: this was two tests,
    two runs of one name at once and a queue of three; two runs at once are in the app-dies test.)"""
    jobs.set_max_running(1)
    doomed = tmp_path / "doomed-world"
    shutil.copytree(world, doomed)
    evaluated = {**TINY, "evaluate": True, "eval_limit": 2, "eval_grounding_limit": 1}
    first = jobs.submit("clip", world, max_steps=3, name="same", gpus=0, overrides=evaluated)
    second = jobs.submit("clip", doomed, max_steps=3, name="second", gpus=0, overrides=TINY)
    third = jobs.submit("clip", world, max_steps=3, name="same", gpus=0, overrides=evaluated)
    assert (first.status, second.status, third.status) == ("running", "queued", "queued")
    assert (jobs.queue_position(second.id), jobs.queue_position(third.id)) == (1, 2)
    try:
        assert os.getpgid(first.pid) == first.pid != os.getpgrp()  # the leader of its own group
    except ProcessLookupError:  # already ended (and reaped): its record still says so below
        pass
    shutil.rmtree(doomed)  # the data goes away while the run waits: it fails when it starts

    third = jobs.wait(third.id, timeout=300)
    first, second = jobs.get(first.id), jobs.get(second.id)
    assert first.status == "done" and third.status == "done", (first.error, third.error)
    assert second.status == "failed" and second.exit_code == 1 and f"no data at {doomed}" in second.error
    assert "no data at" in jobs.logs(second.id)
    # one at a time, in order: each started after the one before it had ended
    assert first.finished <= second.started and second.finished <= third.started
    for run in (first, second, third):
        assert_reaped_in_time(wait_for, jobs, run)
    for run in (first, third):
        assert_says_everything(jobs, run)
        assert_gone(run.pid, run.pgid)

    # two runs with one name: both kept, with their own ids, folders and zoo entries
    assert first.id != third.id and first.out_dir != third.out_dir and first.pid != third.pid
    assert (first.zoo_name, third.zoo_name) == ("same", f"same-{third.id}")  # the second published is renamed
    zoo = Zoo(os.environ["EXPLORER_CHECKPOINTS"])
    assert {m.name for m in zoo.manifests()} >= {"same", f"same-{third.id}"}
    assert zoo.load(third.zoo_name).method_name == "clip"

    # the record survives the app: a new manager (a restart) reads the same records
    again = JobManager()
    assert [r.as_dict() for r in again.list()] == [r.as_dict() for r in jobs.list()]
    brief = again.get(first.id[:6]).brief()  # an id prefix finds it
    assert {k: brief[k] for k in ("id", "name", "status", "pid", "output_checkpoint")} == {
        "id": first.id, "name": "same", "status": "done", "pid": first.pid, "output_checkpoint": first.checkpoint}
    json.dumps(first.as_dict())  # JSON-ready, for `explorer jobs show --json`
