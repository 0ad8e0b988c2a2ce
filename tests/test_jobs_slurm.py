"""Slurm runs through submitit: the same record in the same store, the job's state reconciled, a cancel
through the record (then ``job.cancel()``). Exercised with submitit's local executor
(``cluster: "local"``: the same ``AutoExecutor`` and job objects, a process on this machine instead
of sbatch); the Slurm-only parts (sbatch, sacct, scancel, the node's environment) are not run here."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from explorer.jobs import JobError, JobManager, launcher
from explorer.jobs import slurm as slurm_backend
from explorer.training.metrics_log import read_jsonl

submitit = pytest.importorskip("submitit")

TINY = {"size": "tiny", "batch_size": 2, "cpu_threads": 1, "evaluate": False}
LOCAL = {"cluster": "local", "time": "0:10:00"}


@pytest.fixture
def jobs(tmp_path, monkeypatch):
    monkeypatch.setenv("EXPLORER_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("EXPLORER_CHECKPOINTS", str(tmp_path / "zoo"))
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    manager = JobManager(gpu_ids=[], max_running=1, grace_s=60)
    yield manager
    for run in manager.list(reconcile=False):
        if run.status in ("queued", "running"):
            slurm_backend.cancel_job(run)
    launcher.wait_children(10)


def test_slurm_settings_are_checked_and_become_submitit_parameters(jobs, world):
    assert slurm_backend.minutes("90") == 90 and slurm_backend.minutes("1-02:30:00") == 1590
    assert slurm_backend.minutes("4:00") == 240
    with pytest.raises(JobError, match="unknown Slurm setting 'gpu'"):
        jobs.submit("clip", world, overrides=TINY, backend="slurm", slurm={"gpu": 1})
    with pytest.raises(JobError, match="one node"):
        jobs.submit("clip", world, overrides=TINY, backend="slurm", slurm={"nodes": 2})
    with pytest.raises(JobError, match="minutes or"):
        jobs.submit("clip", world, overrides=TINY, backend="slurm", slurm={"time": "soon"})
    assert jobs.list() == []
    options = slurm_backend.check_options({"partition": "gpu", "time": "2:00:00", "gpus_per_node": 4}, gpus=4)
    from explorer.jobs.records import Run

    run = Run(id="abcd1234", name="x", method="clip", data="/d", gpus=4, processes=4, backend="slurm",
              slurm=options)
    assert slurm_backend.executor_parameters(run) == {
        "timeout_min": 120, "nodes": 1, "tasks_per_node": 1, "gpus_per_node": 4, "name": "explorer-abcd1234",
        "slurm_partition": "gpu"}
    # the parameters are ones submitit's Slurm executor takes (no sbatch is run here)
    executor = submitit.AutoExecutor(folder=Path(jobs.root) / "probe", cluster="slurm") if _has_sbatch() else None
    if executor is not None:
        executor.update_parameters(**slurm_backend.executor_parameters(run))


def _has_sbatch() -> bool:
    import shutil

    return shutil.which("sbatch") is not None


STEPS = 100  # the cancel reaches the run through its record, read with the progress at most once a second: a
#             second of steps and more (it landed at step 21 on the idle machine, at 3-9 on a loaded one)


@pytest.mark.slow(reason="two submitit jobs (a cancel, a resume) each start a worker that imports torch and trains")
def test_a_slurm_run_is_recorded_cancelled_through_its_record_and_resumed_as_a_new_job_to_its_end(jobs, world):
    """One run does what two did (issue 65: a job's worker imports torch): it shows in the list as a local run
    does, a cancel asked through its record stops it at a step, and the resume is a new Slurm job that
    finishes from that step and is recorded as done."""
    run = jobs.submit("clip", world, max_steps=STEPS, overrides={**TINY, "checkpoint_every": 10000},
                      backend="slurm", slurm=LOCAL, name="cluster")
    assert run.backend == "slurm" and run.slurm_job_id and run.status in ("queued", "running")
    assert run.slurm["cluster"] == "local" and run.describe_devices().startswith("CPU on Slurm (job ")
    assert run.id in [r.id for r in jobs.list()]  # the same list as local runs
    wait_for(lambda: jobs.metrics(run.id), "the first logged step")
    cancelled = jobs.cancel(run.id, grace_s=60)
    assert cancelled.status == "cancelled" and cancelled.exit_code == 143, (cancelled.error, jobs.logs(run.id))
    events = read_jsonl(Path(run.out_dir) / "run.jsonl")
    stops = [e for e in events if e["event"] == "stop"]
    assert len(stops) == 1 and STEPS > cancelled.step == stops[0]["step"] >= 1
    assert "cancel asked in the record" in jobs.logs(run.id, tail=None)

    first_job = cancelled.slurm_job_id
    resumed = jobs.resume(run.id)
    assert resumed.slurm_job_id and resumed.slurm_job_id != first_job and resumed.attempts == 2
    done = jobs.wait(run.id, timeout=180)
    assert done.status == "done" and done.exit_code == 0, (done.error, jobs.logs(run.id, tail=40))
    assert [row["step"] for row in jobs.metrics(run.id)] == list(range(1, STEPS + 1)) and done.zoo_name == "cluster"
    assert [e["step"] for e in read_jsonl(Path(run.out_dir) / "run.jsonl") if e["event"] == "resume"] == [
        cancelled.step]
    assert "submitted to Slurm through submitit: job" in jobs.logs(run.id, tail=None)
    wait_for(lambda: slurm_backend.has_ended(slurm_backend.job_state(done)), "the submitit job to end")
    assert jobs.list()[0].status == "done"  # reconcile leaves a run that recorded its end alone
    assert jobs.get(run.id).brief()["slurm_job_id"] == resumed.slurm_job_id


@pytest.mark.slow
def test_a_slurm_job_that_ends_without_a_word_is_marked_failed(jobs, world):
    run = jobs.submit("clip", world, max_steps=1000, overrides={**TINY, "checkpoint_every": 10000},
                      backend="slurm", slurm=LOCAL)
    wait_for(lambda: jobs.metrics(run.id), "the first logged step")
    job = slurm_backend.load_job(jobs.get(run.id))
    job._process.kill()  # the job's controller dies (as scancel's SIGKILL would end a job)
    record = jobs.get(run.id)
    assert record.pgid is None  # a Slurm run's group is the job's, never signalled from here
    os.kill(record.pid, signal.SIGKILL)  # and the worker with it (on a cluster: the node's cgroup)
    failed = jobs.wait(run.id, timeout=60)
    assert failed.status == "failed" and "without" in failed.error, failed.error


def wait_for(condition, what, timeout=120.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")
