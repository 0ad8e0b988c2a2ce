"""Runs on a Slurm cluster through submitit (the optional extra: ``pip install explorer[slurm]``).

    jobs.submit("finelip", "/shared/data/world", gpus=4, backend="slurm",
                slurm={"partition": "gpu", "time": "04:00:00", "gpus_per_node": 4})

The run is the same record in the same store as a local run (so it shows in the same list); what
differs is who starts and watches its process:

- ``submit_job`` hands the worker command (``launcher.worker_command``: torchrun with one rank per
  GPU of the node when ``gpus_per_node`` > 1, or ``processes`` CPU ranks) to submitit's
  ``AutoExecutor(folder, cluster="slurm")``; the Slurm job runs ``run_command`` on a node, which
  runs that command with its output appended to the run's log. The record keeps the Slurm job id
  (``slurm_job_id``) and the submitit job is pickled in ``<run folder>/slurm/job.pkl``.
- The worker on the node writes the record itself (queued -> running -> done, failed, cancelled)
  as it does locally: the store and the run folder must be on a filesystem the nodes share.
- ``job_state`` asks submitit (``sacct``/``squeue`` on Slurm) for the job's state; ``reconcile``
  marks a run whose job ended without the worker recording its end as failed (cancelled when a
  cancel was asked). Pids are never used for these runs: they are the node's.
- Cancel: ``cancel_requested`` in the record first (rank 0 of the worker reads it with its
  progress and stops at the next step, saving a checkpoint, as on SIGTERM), then after the grace
  ``job.cancel()`` (``scancel``: Slurm sends SIGTERM to the job's processes, SIGKILL after its
  KillWait).
- ``cluster: "local"`` in the settings uses submitit's local executor instead (a process on this
  machine, for tests and debugging); its job state is known only to the process that submitted it.

One node per run: ``nodes`` > 1 (torchrun across nodes) is refused.
"""

from __future__ import annotations

import importlib.util
import os
import pickle
import re
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any, Mapping, Sequence

from explorer.jobs.records import JobError, Run, typed_settings

SLURM_DIR = "slurm"
JOB_FILE = "job.pkl"
DEFAULT_TIME_MIN = 24 * 60
# the settings a Slurm run takes, and their types (``time``: minutes or [D-]HH:MM[:SS])
OPTIONS = {"partition": str, "time": str, "gpus_per_node": int, "nodes": int, "cpus_per_task": int,
           "mem_gb": float, "account": str, "qos": str, "constraint": str, "cluster": str}
CLUSTERS = ("slurm", "local")
# submitit / sacct states of a job that has ended (first word: "CANCELLED by 1234")
ENDED = frozenset({"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "PREEMPTED", "OUT_OF_MEMORY",
                   "BOOT_FAIL", "DEADLINE", "FINISHED", "INTERRUPTED", "REVOKED"})


def available() -> bool:
    """True when submitit can be imported (the ``slurm`` extra is installed)."""
    return importlib.util.find_spec("submitit") is not None


def check_options(options: Mapping[str, Any] | None, gpus: int) -> dict:
    """The Slurm settings, checked and typed; ``JobError`` for an unknown key, a bad value, or many nodes."""
    if not available():
        raise JobError("Slurm runs need submitit, which is not installed: pip install 'explorer[slurm]' "
                       "(or pip install submitit)")
    values: dict[str, Any] = typed_settings(options, OPTIONS, "Slurm setting")
    if values.get("nodes", 1) != 1:
        raise JobError(f"a Slurm run takes one node (nodes=1); {values['nodes']} nodes (torchrun across nodes) "
                       "is not supported yet")
    values["nodes"] = 1
    values.setdefault("gpus_per_node", gpus)
    if values["gpus_per_node"] != gpus:
        raise JobError(f"gpus_per_node {values['gpus_per_node']} differs from the run's gpus {gpus}")
    values.setdefault("cluster", "slurm")
    if values["cluster"] not in CLUSTERS:
        raise JobError(f"Slurm setting cluster must be one of {CLUSTERS}, got {values['cluster']!r}")
    values["time_min"] = minutes(values.get("time", DEFAULT_TIME_MIN))
    return values


def minutes(text) -> int:
    """Slurm's time limit in minutes: a number of minutes, or [D-]HH:MM[:SS]."""
    text = str(text).strip()
    if re.fullmatch(r"\d+", text):
        return int(text)
    match = re.fullmatch(r"(?:(\d+)-)?(\d+):(\d{2})(?::(\d{2}))?", text)
    if not match:
        raise JobError(f"Slurm time must be minutes or [D-]HH:MM[:SS], got {text!r}")
    days, hours, mins, secs = (int(part or 0) for part in match.groups())
    return max(1, days * 1440 + hours * 60 + mins + (1 if secs else 0))


def executor_parameters(run: Run) -> dict:
    """submitit's ``update_parameters`` for the run (AutoExecutor drops the ``slurm_`` ones on ``local``)."""
    options = run.slurm or {}
    params: dict[str, Any] = {"timeout_min": int(options.get("time_min", DEFAULT_TIME_MIN)), "nodes": 1,
                              "tasks_per_node": 1, "gpus_per_node": int(options.get("gpus_per_node", 0)),
                              "name": f"explorer-{run.id}"}
    if options.get("cpus_per_task"):
        params["cpus_per_task"] = int(options["cpus_per_task"])
    if options.get("mem_gb"):
        params["mem_gb"] = float(options["mem_gb"])
    for key in ("partition", "account", "qos", "constraint"):
        if options.get(key):
            params[f"slurm_{key}"] = options[key]
    return params


def submit_job(run: Run) -> str:
    """Submit the run's command as a Slurm job (submitit); returns the job id and pickles the job."""
    import submitit

    folder = Path(run.out_dir) / SLURM_DIR
    folder.mkdir(parents=True, exist_ok=True)
    cluster = (run.slurm or {}).get("cluster", "slurm")
    executor = submitit.AutoExecutor(folder=folder, cluster=cluster)
    params = executor_parameters(run)
    if cluster != "slurm":
        params = {k: v for k, v in params.items() if not k.startswith("slurm_")}
    executor.update_parameters(**params)
    job = executor.submit(run_command, list(run.command), run.log_path, run.out_dir)
    save_job(folder / JOB_FILE, job)
    return str(job.job_id)


def save_job(path: Path, job) -> None:
    scratch = path.with_name(f".{path.name}.{os.getpid()}")
    with open(scratch, "wb") as handle:
        pickle.dump(job, handle)
    os.replace(scratch, path)


def load_job(run: Run):
    """The submitit job of the run's last attempt, or None."""
    path = Path(run.out_dir) / SLURM_DIR / JOB_FILE
    if not path.is_file():
        return None
    try:
        with open(path, "rb") as handle:
            return pickle.load(handle)
    except Exception:  # noqa: BLE001 - a torn or foreign pickle: the state is unknown
        return None


def job_state(run: Run) -> str | None:
    """The job's state as submitit reports it (first word, upper case: PENDING, RUNNING, COMPLETED,
    FAILED, CANCELLED, ...), or None when unknown (no job, submitit cannot tell)."""
    job = load_job(run)
    if job is None or str(job.job_id) != str(run.slurm_job_id):
        return None
    try:
        state = str(job.state or "").strip().upper()
    except Exception:  # noqa: BLE001 - sacct missing or failing: unknown, not ended
        return None
    word = state.split()[0] if state else ""
    return word if word and word not in ("UNKNOWN", "NO") else None


def has_ended(state: str | None) -> bool:
    return state in ENDED


def cancel_job(run: Run) -> bool:
    """``job.cancel()`` (scancel on Slurm); False when there is no job to cancel."""
    job = load_job(run)
    if job is None:
        return False
    try:
        job.cancel(check=False)
    except TypeError:
        job.cancel()
    return True


def run_command(command: Sequence[str], log_path: str, cwd: str | None = None) -> int:
    """What the Slurm job runs on the node: the worker command, its output appended to the run's log;
    SIGTERM or SIGINT to this process is passed on to it as SIGTERM (a checkpoint, then the exit)."""
    from explorer.jobs.launcher import package_root

    env = dict(os.environ)
    env["PYTHONUNBUFFERED"] = "1"
    root = str(package_root())
    env["PYTHONPATH"] = os.pathsep.join([root, *[p for p in env.get("PYTHONPATH", "").split(os.pathsep)
                                                  if p and p != root]])
    with open(log_path, "ab", buffering=0) as log:
        log.write(f"[explorer.jobs slurm] {os.environ.get('SLURM_JOB_ID', 'local')} on "
                  f"{os.uname().nodename}: {' '.join(command)}\n".encode())
        child = subprocess.Popen(list(command), stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                 cwd=cwd, env=env)

    def forward(signum, frame):
        if child.poll() is None:
            child.send_signal(signal.SIGTERM)

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, forward)
    code = child.wait()
    print(f"explorer worker exited with {code}", file=sys.stderr, flush=True)
    return code


__all__ = ["CLUSTERS", "ENDED", "JOB_FILE", "OPTIONS", "SLURM_DIR", "available", "cancel_job", "check_options",
           "executor_parameters", "has_ended", "job_state", "load_job", "minutes", "run_command", "save_job",
           "submit_job"]
