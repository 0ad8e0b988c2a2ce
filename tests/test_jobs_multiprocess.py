"""Jobs of many processes: ``JobManager.submit(processes=2)`` runs torchrun with 2 CPU ranks (Gloo); the
record keeps torchrun's pid and group, only rank 0 writes the record and the files, a cancel stops
both ranks at one step and leaves no process behind, and a resume continues from the saved step."""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path

import pytest

import explorer
from explorer.jobs import JobError, JobManager, launcher
from explorer.training.checkpointing import latest_checkpoint
from explorer.training.metrics_log import read_jsonl

@pytest.fixture
def subreaper() -> bool:
    return True  # the manager adopts the ranks torchrun leaves behind, and reaps them


TINY = {"size": "tiny", "batch_size": 2, "cpu_threads": 1, "evaluate": False}




def assert_no_process_left(run):
    """torchrun reaped (not our child, gone), nothing of its group, and no rank alive or a zombie."""
    launcher.wait_children(10)
    assert launcher.process_state(run.pid, run.start_ticks) == launcher.GONE
    assert launcher.group_members(run.pgid) == []
    ranks = launcher.rank_processes(run.out_dir)
    assert len(ranks) == 2
    for pid, ticks in ranks:
        assert launcher.process_state(pid, ticks) == launcher.GONE, f"rank process {pid} is left"


# ---- fast: what is refused, and the commands ---------------------------------------------------------


def test_many_processes_are_checked_before_anything_is_recorded(jobs, world):
    cases = [(dict(gpus=2), "lends 0 GPU.*torchrun starts one process per GPU"),
             (dict(gpus=0, processes=0), "processes must be 1 or more"),
             (dict(backend="cloud"), "backend must be one of local, slurm")]
    for kwargs, message in cases:
        with pytest.raises(JobError, match=message):
            jobs.submit("clip", world, overrides=TINY, **kwargs)
    gpu_jobs = JobManager(root=jobs.root / "gpu", gpu_ids=["0", "1"], subreaper=False)
    with pytest.raises(JobError, match="one process per GPU: processes must be 2"):
        gpu_jobs.submit("clip", world, overrides=TINY, gpus=2, processes=3)
    queued = gpu_jobs.submit("clip", world, overrides=TINY, gpus=2, start=False)
    assert queued.processes == 2 and queued.command[2:7] == ["-m", "torch.distributed.run", "--standalone",
                                                             "--nproc_per_node", "2"]
    assert queued.describe_devices() == "2 GPU(s) [], 2 processes"
    assert jobs.list() == []


def test_the_queue_gives_a_run_of_n_gpus_n_devices(tmp_path, world):
    from explorer.jobs.queue import claim_runs

    jobs = JobManager(root=tmp_path / "jobs", gpu_ids=["0", "1", "2"], max_running=3, subreaper=False)
    two = jobs.submit("clip", world, overrides=TINY, gpus=2, start=False)
    also_two = jobs.submit("clip", world, overrides=TINY, gpus=2, start=False)
    one = jobs.submit("clip", world, overrides=TINY, gpus=1, start=False)
    claimed = claim_runs(jobs.store)  # first come, first served: the second 2-GPU run waits and holds the 1-GPU one
    assert [(run.id, run.devices) for run in claimed] == [(two.id, ["0", "1"])]
    assert jobs.get(also_two.id).status == jobs.get(one.id).status == "queued"


def test_a_cpu_run_of_two_processes_is_torchrun_with_two_ranks(jobs, world):
    run = jobs.submit("clip", world, overrides=TINY, processes=2, start=False)
    assert run.gpus == 0 and run.processes == 2 and run.describe_devices() == "CPU x 2 processes"
    assert run.command[:7] == [sys.executable, "-u", "-m", "torch.distributed.run", "--standalone",
                               "--nproc_per_node", "2"]
    assert run.command[7:10] == ["-m", "explorer.jobs.worker", run.id]
    assert run.brief()["processes"] == 2


# ---- slow: real torchrun runs --------------------------------------------------------------------------


STEPS = 40  # enough that the cancel after the first logged step lands mid-run (one took 0.1 s; the cancel landed
#               two steps after the first was logged)


@pytest.mark.slow(reason="torchrun starts two CPU ranks that import torch and train, twice (a cancel, a resume)")
def test_a_two_process_job_is_cancelled_at_one_step_and_resumed_to_one_checkpoint_rank_0_wrote(jobs, world,
                                                                                               wait_for):
    """One run does what two did (issue 65: every torchrun start imports torch in three processes): cancelled
    while it trains, both ranks stop at one step; resumed, it continues from that step to its end, and what
    the finished run wrote is rank 0's, once."""
    run = jobs.submit("clip", world, max_steps=STEPS, overrides={**TINY, "checkpoint_every": 10000}, processes=2,
                      name="ddp")
    assert run.status == "running"
    wait_for(lambda: jobs.metrics(run.id), what="the first logged step")
    run = jobs.get(run.id)
    ranks = launcher.rank_processes(run.out_dir)
    assert len(ranks) == 2 and all(launcher.process_state(pid, t) == launcher.ALIVE for pid, t in ranks)
    assert all(os.getpgid(pid) == pid != run.pgid for pid, _ in ranks)  # torchrun gives each rank a session

    cancelled = jobs.cancel(run.id)
    assert cancelled.status == "cancelled" and cancelled.exit_code == 143, (cancelled.error, jobs.logs(run.id))
    events = read_jsonl(Path(run.out_dir) / "run.jsonl")
    stops = [e for e in events if e["event"] == "stop"]
    assert len(stops) == 1 and 1 <= stops[0]["step"] < STEPS  # one stop: both ranks at one step, rank 0 wrote it
    step = stops[0]["step"]
    assert latest_checkpoint(Path(run.out_dir)).name == f"step-{step:08d}" and cancelled.step == step
    assert_no_process_left(cancelled)

    resumed = jobs.resume(run.id)
    assert resumed.status in ("queued", "running")
    done = jobs.wait(run.id, timeout=180)
    assert done.status == "done" and done.exit_code == 0, (done.error, jobs.logs(run.id, tail=60))
    assert done.processes == 2 and done.progress == (STEPS, STEPS) and done.attempts == 2
    assert done.pid == done.pgid and "torch.distributed.run" in done.command  # torchrun's, not a rank's
    rows = jobs.metrics(run.id)
    assert [row["step"] for row in rows] == list(range(1, STEPS + 1))  # each step once (rank 0 writes): none lost
    assert [row["samples"] for row in rows] == [4 * k for k in range(1, STEPS + 1)]  # 2 per rank, 4 a step
    out = Path(done.out_dir)
    assert latest_checkpoint(out).name == f"step-{STEPS:08d}"
    events = read_jsonl(out / "run.jsonl")
    assert [e["step"] for e in events if e["event"] == "resume"] == [step]
    kinds = [e["event"] for e in events]
    assert kinds.count("finish") == kinds.count("evaluation") == 1 and kinds.count("start") == 1  # rank 0's
    assert [e["world_size"] for e in events if e["event"] == "ddp"] == [2, 2]  # once an attempt
    assert explorer.load(done.checkpoint, device="cpu").key_report.ok and done.zoo_name == "ddp"
    log = jobs.logs(run.id, tail=None)
    assert log.count("done (exit code 0)") == 1 and "rank 0 of 2 processes" in log
    assert_no_process_left(done)


@pytest.mark.slow(reason="torchrun starts two CPU ranks that import torch and train")
def test_a_torchrun_killed_with_sigkill_takes_its_ranks_with_it(jobs, world, wait_for):
    run = jobs.submit("clip", world, max_steps=1000, overrides={**TINY, "checkpoint_every": 10000}, processes=2)
    wait_for(lambda: jobs.metrics(run.id), what="the first logged step")
    run = jobs.get(run.id)
    os.killpg(run.pgid, signal.SIGKILL)  # torchrun only: the ranks die with it (PDEATHSIG) or are killed
    failed = jobs.wait(run.id, timeout=60)
    assert failed.status == "failed" and "without recording its end" in failed.error
    states = lambda: [launcher.process_state(p, t) for p, t in launcher.rank_processes(run.out_dir)]  # noqa: E731
    wait_for(lambda: states() == ["gone", "gone"], timeout=30, what=f"the ranks to be gone and reaped {states()}")
    assert_no_process_left(failed)
    json.dumps(failed.as_dict())


def test_the_form_and_the_cli_ask_for_many_processes(jobs, world, capsys):
    from explorer.cli import main
    from explorer.views import jobs_view as view

    labels = dict(view.device_choices(jobs))
    assert labels["CPU x 2 processes"] == "cpu:2" and labels["CPU"] == 0
    assert view.device_request("cpu:2") == {"gpus": 0, "processes": 2}
    assert view.device_request("slurm:1") == {"gpus": 1, "backend": "slurm", "slurm": {}}
    assert view.device_request(1.0) == {"gpus": 1} and view.device_request("") == {"gpus": None}
    run = view.submit_form(jobs, view.Form("clip", data=str(world), gpus="cpu:2", size="tiny", batch_size=2,
                                           max_steps=2), start=False)
    assert run.processes == 2 and "torch.distributed.run" in run.command
    assert "CPU x 2 processes" in view.details_markdown(run)

    assert main(["jobs", "submit", "--method", "clip", "--data", str(world), "--processes", "2", "--size", "tiny",
                 "--set", "batch_size=2", "--no-start", "--json"]) == 0
    brief = json.loads(capsys.readouterr().out)
    assert brief["processes"] == 2 and brief["backend"] == "local" and brief["status"] == "queued"
    assert main(["jobs", "submit", "--method", "clip", "--data", str(world), "--partition", "gpu"]) == 2
    assert "add --slurm" in capsys.readouterr().err
