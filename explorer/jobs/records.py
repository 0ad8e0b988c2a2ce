"""A run's record: what the store keeps about one background training run.

Statuses (``STATUSES``), and the only moves between them:

    queued  -> running            the queue gave it its devices and started its process
    queued  -> cancelled          cancelled before it started
    running -> done               trained, evaluated, published to the zoo (exit code 0)
    running -> failed             an error (in ``error``), or the process died without saying why
    running -> cancelled          SIGTERM: a checkpoint was saved (exit code 143), or it was killed after the grace
    failed / cancelled -> queued  resumed: it continues from its last checkpoint

Times are Unix seconds (``time.time()``); paths are absolute strings.
"""

from __future__ import annotations

import signal
from dataclasses import asdict, dataclass, field, fields

from explorer.core.errors import ExplorerError

QUEUED, RUNNING, DONE, FAILED, CANCELLED = "queued", "running", "done", "failed", "cancelled"
STATUSES = (QUEUED, RUNNING, DONE, FAILED, CANCELLED)
ACTIVE = (QUEUED, RUNNING)
FINAL = (DONE, FAILED, CANCELLED)
RESUMABLE = (FAILED, CANCELLED)

# Exit codes of the run process (besides a death by signal, recorded as -<signal number>).
EXIT_DONE = 0
EXIT_FAILED = 1
EXIT_DISK_FULL = 28  # ENOSPC
EXIT_CANCELLED = 143  # 128 + SIGTERM: stopped on request, after saving a checkpoint

LOCAL, SLURM = "local", "slurm"  # where a run's processes run (``Run.backend``)
BACKENDS = (LOCAL, SLURM)

# What a record is (``Run.kind``): a training run, one evaluation (a model on a dataset, a child of a
# sweep), or a sweep (a record with no process of its own: its status is its children's, ``sweeps``).
TRAIN, EVAL, SWEEP = "train", "eval", "sweep"
KINDS = (TRAIN, EVAL, SWEEP)


class JobError(ExplorerError):
    """A job cannot be submitted, found, cancelled, resumed or deleted (the message says why)."""


@dataclass
class Run:
    """One background training run, as the run store records it."""

    id: str
    name: str
    method: str
    data: str  # the data folder (any layout explorer.jobs.training_data reads)
    status: str = QUEUED
    init: str | None = None  # the weights file it starts from (a zoo name or manifest is resolved to it)
    config: dict = field(default_factory=dict)  # every setting (explorer.jobs.configs.KEYS)
    config_sources: dict = field(default_factory=dict)  # where each setting came from
    gpus: int = 0  # GPUs asked for (0: CPU)
    processes: int = 1  # training processes (torchrun ranks when > 1: one per GPU, or CPU processes with gloo)
    backend: str = "local"  # "local" (a process group on this machine) or "slurm" (a job of submitit, slurm.py)
    slurm: dict | None = None  # the Slurm settings of a slurm run (partition, time, gpus_per_node, ...)
    slurm_job_id: str | None = None  # the Slurm job id (submitit) of its last attempt
    devices: list[str] = field(default_factory=list)  # GPUs given (CUDA_VISIBLE_DEVICES entries), while it runs
    command: list[str] = field(default_factory=list)  # the run process's argv
    pid: int | None = None  # the run process (leader of its own process group)
    pgid: int | None = None
    host: str = ""  # where the process runs (a pid means nothing elsewhere)
    created: float = 0.0
    queued_at: float | None = None  # when it last joined the queue (submitted or resumed): the queue's order
    started: float | None = None
    finished: float | None = None
    exit_code: int | None = None  # -N: killed by signal N
    error: str | None = None
    out_dir: str = ""  # the run folder: weights, manifest, logs, resume/
    log_path: str = ""
    metrics_path: str = ""
    checkpoint: str | None = None  # the output manifest (explorer.load(run.checkpoint)) once one was written
    zoo_name: str | None = None  # its name in the zoo, once published (done)
    zoo_manifest: str | None = None
    step: int = 0  # optimizer steps done
    total_steps: int | None = None
    evaluation: dict | None = None  # the final evaluation (explorer.jobs.final_eval)
    attempts: int = 0  # times a process was started for it (resumes included)
    cancel_requested: bool = False
    notes: list[str] = field(default_factory=list)
    # bookkeeping of the launch itself
    start_ticks: int | None = None  # the process's start time (/proc), so a reused pid is not mistaken for it
    launcher_pid: int | None = None  # the process that claimed it from the queue
    claimed: float | None = None
    kind: str = TRAIN  # TRAIN, EVAL (method: the task, init: the model, data: the dataset) or SWEEP
    parent: str | None = None  # the sweep an EVAL record belongs to

    @property
    def active(self) -> bool:
        return self.status in ACTIVE

    @property
    def progress(self) -> tuple[int, int | None]:
        """(steps done, total steps); the total is known once the run has read its data."""
        return self.step, self.total_steps

    @property
    def fraction(self) -> float | None:
        return None if not self.total_steps else min(1.0, self.step / self.total_steps)

    def summary(self) -> str:
        """One line for a list: id, name, status, progress, and the error if any."""
        total = f"/{self.total_steps}" if self.total_steps else ""
        text = f"{self.id}  {self.name}  {self.status}  step {self.step}{total}"
        return text + (f"  ({self.error.splitlines()[0]})" if self.error else "")

    def describe_devices(self) -> str:
        """Where it trains, in words: "CPU", "2 GPU(s) ['0', '1']", "CPU x 2 processes", "... on Slurm (job 42)"."""
        text = "CPU" if not self.gpus else f"{self.gpus} GPU(s) {self.devices or []}"
        if self.processes > 1:
            text += f" x {self.processes} processes" if not self.gpus else f", {self.processes} processes"
        if self.backend == LOCAL:
            return text
        return f"{text} on Slurm" + (f" (job {self.slurm_job_id})" if self.slurm_job_id else "")

    def describe_exit(self) -> str:
        if self.exit_code is None:
            return "unknown"
        if self.exit_code < 0:
            return f"killed by {signal_name(-self.exit_code)}"
        return str(self.exit_code)

    def as_dict(self) -> dict:
        """Every field, JSON-ready, plus ``progress`` (steps done, total) and ``output_checkpoint``."""
        out = asdict(self)
        out["progress"] = {"step": self.step, "total": self.total_steps}
        out["output_checkpoint"] = self.checkpoint
        return out

    def brief(self) -> dict:
        """What ``explorer jobs list --json`` gives per run (``checkpoint``: the name tools read; the
        older ``output_checkpoint`` stays for those that read it)."""
        return {"id": self.id, "name": self.name, "status": self.status, "pid": self.pid,
                "checkpoint": self.checkpoint, "output_checkpoint": self.checkpoint, "zoo_name": self.zoo_name,
                "progress": {"step": self.step, "total": self.total_steps}, "error": self.error,
                "processes": self.processes, "backend": self.backend, "slurm_job_id": self.slurm_job_id,
                "kind": self.kind, "parent": self.parent}


FIELDS = tuple(f.name for f in fields(Run))


def int_list(value) -> list[int]:
    """A list of whole numbers (``typed_settings``' converter for e.g. the Ks of R@K)."""
    if isinstance(value, (str, bytes)):
        raise TypeError("a list, not a string")
    return [int(item) for item in value]


def name_list(value) -> list[str]:
    """A list of non-empty names (``typed_settings``' converter for e.g. map kinds)."""
    if isinstance(value, (str, bytes)) or not all(isinstance(item, str) and item for item in value):
        raise TypeError("a list of names")
    return list(value)


def typed_settings(options, types: dict, what: str) -> dict:
    """``options`` (a mapping) with each value converted by its type (or converter) in ``types``; empty values
    left out. ``JobError`` for an unknown key or a value that does not convert; ``what`` names the settings
    in the message ("Slurm setting", "evaluation option")."""
    values = {}
    for key, value in dict(options or {}).items():
        if key not in types:
            raise JobError(f"unknown {what} {key!r}; known: {', '.join(types)}")
        if value is None or value == "":
            continue
        try:
            values[key] = types[key](value)
        except (TypeError, ValueError) as error:
            raise JobError(f"{what} {key} must be a {types[key].__name__}, got {value!r}") from error
    return values


def signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


__all__ = ["ACTIVE", "BACKENDS", "CANCELLED", "DONE", "EXIT_CANCELLED", "EXIT_DISK_FULL", "EXIT_DONE", "EXIT_FAILED",
           "EVAL", "FAILED", "FIELDS", "FINAL", "JobError", "KINDS", "LOCAL", "QUEUED", "RESUMABLE", "RUNNING", "Run", "SLURM",
           "STATUSES", "SWEEP", "TRAIN", "int_list", "name_list", "signal_name",
           "typed_settings"]
