"""``JobManager``: the one object the app and the CLI use to run training in the background.

    jobs = JobManager()                                   # the store under $EXPLORER_HOME/jobs
    run = jobs.submit("finelip", "data/world", init="demo-clip-base", max_steps=500,
                      overrides={"batch_size": 32})       # checked first, then queued, then started
    jobs.list(); jobs.get(run.id); jobs.logs(run.id, tail=50); jobs.metrics(run.id)
    jobs.submit("clip", "data/world", gpus=4)             # torchrun: 4 ranks (DDP), one per GPU the queue gives
    jobs.submit("clip", "data/world", processes=2)        # torchrun: 2 CPU ranks (Gloo)
    jobs.submit("clip", "/shared/world", backend="slurm", slurm={"partition": "gpu", "time": "2:00:00"},
                gpus=2)                                   # a Slurm job through submitit (slurm.py)
    jobs.cancel(run.id)                                   # SIGTERM, checkpoint, exit; SIGKILL after the grace
    jobs.resume(run.id)                                   # from its last checkpoint
    jobs.delete(run.id, keep_checkpoint=True)

Everything a run is lives in the store (``run_store``) and its folder ``<root>/runs/<id>/``, never
only in this object's memory: a new ``JobManager`` (an app restart, another CLI call) sees every
run, and ``reconcile()`` (run by ``list()`` and on every change) marks runs whose process died
without saying so as failed (cancelled if a cancel was asked), their logs kept, and lets the queue
move on. See the package docstring for the whole picture.
"""

from __future__ import annotations

import errno
import os
import shutil
import signal
import socket
import threading
import time
from collections import deque
from pathlib import Path
from typing import Any, Mapping, Sequence

from explorer.jobs import launcher, sweeps
from explorer.jobs import slurm as slurm_backend
from explorer.jobs.configs import as_plain, known_methods, method_defaults, resolve_config
from explorer.jobs.queue import claim_runs, gpu_pool, queue_position, set_gpu_pool, set_max_running
from explorer.jobs.records import (ACTIVE, BACKENDS, CANCELLED, EVAL, FAILED, FINAL, LOCAL, QUEUED, RESUMABLE, RUNNING,
                                   SLURM, SWEEP, JobError, Run, signal_name)
from explorer.jobs.run_store import RunStore
from explorer.jobs.training_data import PAIRS_FILE, check_data_and_init, inspect_data

RUNS_DIR = "runs"
LOG_FILE = "run.log"
GRACE_SETTING = "grace_s"
DEFAULT_GRACE_S = 30.0
CLAIM_TIMEOUT_S = 120.0  # a run claimed by a process that never started it is failed after this
REAP_WINDOW_S = 86400.0  # a finished run's process adopted by this one is reaped if it ended within this


class JobManager:
    """Submit, list, cancel, resume and delete background training runs (module docstring).

    ``home``: where explorer keeps things (default ``$EXPLORER_HOME``); the jobs live in
    ``<home>/jobs`` (or ``root``). ``zoo_root``: where finished runs are published (default: the
    zoo folder, ``$EXPLORER_CHECKPOINTS``). ``gpu_ids`` / ``max_running`` / ``grace_s`` set the
    shared queue settings when given. ``subreaper``: adopt this process's orphaned run processes
    (Linux), so that a run started by another run is reaped here rather than left a zombie.
    """

    def __init__(self, home: str | Path | None = None, *, root: str | Path | None = None,
                 zoo_root: str | Path | None = None, gpu_ids: list | None = None,
                 max_running: int | None = None, grace_s: float | None = None, python: str | None = None,
                 subreaper: bool = True):
        from explorer.core import paths

        self.root = Path(root) if root is not None else Path(home or paths.home()) / "jobs"
        self.store = RunStore(self.root)
        self.zoo_root = Path(zoo_root) if zoo_root is not None else None
        self.python = python
        if gpu_ids is not None:
            set_gpu_pool(self.store, list(gpu_ids))
        if max_running is not None:
            set_max_running(self.store, max_running)
        if grace_s is not None:
            self.store.set_setting(GRACE_SETTING, float(grace_s))
        if subreaper:
            launcher.become_subreaper()

    # ---- settings ----------------------------------------------------------------------------

    @property
    def grace_s(self) -> float:
        return float(self.store.get_setting(GRACE_SETTING, DEFAULT_GRACE_S))

    def set_max_running(self, limit: int | None) -> None:
        set_max_running(self.store, limit)

    def methods(self) -> list[str]:
        return known_methods()

    def defaults(self, method: str):
        """The method's settings with where each comes from (``configs.MethodDefaults``), for a form."""
        return method_defaults(method)

    # ---- submitting --------------------------------------------------------------------------

    def submit(self, method: str, data: str | Path, init: str | Path | None = None, max_steps: int | None = None,
               name: str | None = None, gpus: int | None = None, overrides: Mapping[str, Any] | None = None,
               start: bool = True, processes: int | None = None, backend: str = LOCAL,
               slurm: Mapping[str, Any] | None = None) -> Run:
        """Check everything that can be checked here, record the run as queued, and start it if a slot is free.

        ``gpus``: GPUs of the run (0: CPU); more than one runs torchrun with one rank per GPU.
        ``processes``: for a CPU run, how many torchrun ranks (Gloo) to start (default 1; for a GPU
        run it is the number of GPUs). ``backend="slurm"``: submit it to Slurm through submitit with
        the ``slurm`` settings (``slurm.OPTIONS``: partition, time, gpus_per_node, ...) instead of
        running it here; it is recorded the same way and shows in the same list.

        Raises ``JobError`` (nothing recorded) for an unknown method, a bad setting, data that is
        missing or too small for one step, an init that is not found, or devices this machine lacks.
        """
        config = resolve_config(method, overrides, max_steps)
        values = config.values
        plan = inspect_data(data, values["train_split"])
        per_step = values["batch_size"] * values["accumulate"]
        if plan.count < per_step:
            raise JobError(f"{plan.describe()}: fewer than the {per_step} samples one optimizer step takes "
                           f"(batch_size {values['batch_size']} x accumulate {values['accumulate']}); "
                           "lower batch_size in the settings.")
        init_path, init_method = self._resolve_init(init)
        check_data_and_init(method, plan, init, init_path, init_method)
        gpus, processes, options = self.resolve_devices(gpus, processes, backend, slurm)
        run = self.new_record(
            name=name or f"{method}-{Path(data).expanduser().resolve().name}", method=method,
            data=str(Path(data).expanduser().resolve()), init=str(init_path) if init_path else None,
            config=as_plain(values), config_sources=dict(config.sources), gpus=gpus, processes=processes,
            backend=backend, slurm=options, notes=[plan.describe(), *plan.notes])
        _append_log(run.log_path, f"submitted {run.name} ({method}) on {run.data} ({run.describe_devices()}); "
                                  f"settings: {run.config}")
        return self.launch_new(run, start)

    def resolve_devices(self, gpus: int | None, processes: int | None, backend: str = LOCAL,
                        slurm: Mapping[str, Any] | None = None) -> tuple[int, int, dict | None]:
        """(gpus, processes, Slurm settings) of a run, checked against this machine; ``JobError`` otherwise."""
        if backend not in BACKENDS:
            raise JobError(f"backend must be one of {', '.join(BACKENDS)}, not {backend!r}")
        if backend == SLURM and gpus is None:
            gpus = int((slurm or {}).get("gpus_per_node") or 0)
        gpus = self._resolve_gpus(gpus, local=backend == LOCAL)
        processes = _resolve_processes(processes, gpus)
        return gpus, processes, slurm_backend.check_options(slurm, gpus) if backend == SLURM else None

    def submit_eval(self, models: Sequence[str], datasets: Sequence[str | Path], task: str = "retrieval",
                    name: str | None = None, gpus: int | None = None, processes: int | None = None,
                    backend: str = LOCAL, slurm: Mapping[str, Any] | None = None,
                    options: Mapping[str, Any] | None = None, start: bool = True) -> Run:
        """An evaluation sweep: one record with one queued child per (model, dataset, task) (``sweeps``)."""
        from explorer.jobs import sweeps

        return sweeps.submit(self, models, datasets, task, name=name, gpus=gpus, processes=processes,
                             backend=backend, slurm=slurm, options=options, start=start)

    def new_record(self, **values) -> Run:
        """Insert a queued record with a fresh id and folder (``values``: the Run's fields but those)."""
        run_id = self.store.new_id()
        out = self.root / RUNS_DIR / run_id
        out.mkdir(parents=True, exist_ok=True)
        now = time.time()
        run = Run(id=run_id, out_dir=str(out), log_path=str(out / LOG_FILE), metrics_path=str(out / "metrics.jsonl"),
                  created=now, queued_at=now, host=socket.gethostname(), **values)
        if run.kind != SWEEP:
            run.command = launcher.worker_command(run_id, self.root, run.processes, self.python,
                                                  None if self.zoo_root is None else str(self.zoo_root))
        return self.store.insert(run)

    def launch_new(self, run: Run, start: bool = True) -> Run:
        """A new record's first start: handed to Slurm, or to the queue (``start``: now, if a slot is free)."""
        if run.backend == SLURM:
            return self._submit_slurm(run)
        if start:
            self.start_next()
        return self.store.get(run.id)

    def _resolve_init(self, init) -> tuple[Path | None, str | None]:
        """(weights file, its method when a manifest says it) for a file, a manifest or a zoo name."""
        if init is None or str(init) == "":
            return None, None
        from explorer.core.errors import ExplorerError
        from explorer.zoo import Manifest, Zoo

        path = Path(init).expanduser()
        try:
            if path.is_file() and path.suffix == ".json":
                manifest = Manifest.read(path)
            elif path.is_file():
                return path.resolve(), None
            else:
                manifest = Zoo(self.zoo_root, cache_size=1).get(str(init))
        except ExplorerError as error:
            raise JobError(f"init {init}: not a checkpoint file, a manifest or a zoo name ({error})") from error
        if manifest.is_builtin:
            raise JobError(f"init {init} is built in code and has no weights file to start from.")
        weights = manifest.weights_path()
        if not weights.is_file():
            raise JobError(f"init {init}: its weights {weights} are missing")
        return weights.resolve(), manifest.method

    def _resolve_gpus(self, gpus: int | None, local: bool = True) -> int:
        pool = gpu_pool(self.store)
        if gpus is None:
            return 1 if pool else 0
        gpus = int(gpus)
        if gpus < 0:
            raise JobError(f"gpus must be 0 (CPU) or more, got {gpus}")
        if local and gpus > len(pool):
            many = " (torchrun starts one process per GPU; for many CPU processes use processes=N)" if gpus > 1 else ""
            raise JobError(f"this machine lends {len(pool)} GPU(s) to runs ({pool or 'none'}); "
                           f"a run cannot have {gpus}{many}. Use gpus=0 for a CPU run.")
        return gpus

    def _submit_slurm(self, run: Run) -> Run:
        """Hand a queued Slurm run to submitit; a refusal fails the run (the record says why) and raises."""
        try:
            job_id = slurm_backend.submit_job(run)
        except Exception as error:  # noqa: BLE001 - sbatch's refusal, a missing submitit: said in the record
            message = f"Slurm refused the job: {type(error).__name__}: {error}"
            self.store.update_if(run.id, (QUEUED,), status=FAILED, finished=time.time(), error=message)
            _append_log(run.log_path, message)
            raise JobError(f"run {run.id}: {message}") from error
        _append_log(run.log_path, f"submitted to Slurm through submitit: job {job_id}")
        return self.store.update(run.id, slurm_job_id=job_id, attempts=run.attempts + 1)

    # ---- the queue ---------------------------------------------------------------------------

    def start_next(self) -> list[Run]:
        """Start every queued run that may start now (``queue``); returns them."""
        return [self._launch(run) for run in claim_runs(self.store)]

    def _launch(self, run: Run) -> Run:
        attempt = run.attempts + 1
        _append_log(run.log_path, f"attempt {attempt}: starting {' '.join(run.command)} "
                                  f"(CUDA_VISIBLE_DEVICES={','.join(map(str, run.devices))!r}, "
                                  f"{run.processes} process{'es' if run.processes > 1 else ''})")
        try:
            process = launcher.spawn(run.command, run.log_path, devices=run.devices, cwd=run.out_dir,
                                     on_exit=lambda code, pid, rid=run.id: self._on_exit(rid, pid, code))
        except OSError as error:
            return self.store.update(run.id, status=FAILED, finished=time.time(), attempts=attempt,
                                     error=f"could not start the run process: {error}")
        pid = process.pid
        return self.store.update(run.id, pid=pid, pgid=pid, start_ticks=launcher.start_ticks(pid), attempts=attempt,
                                 host=socket.gethostname())

    def _on_exit(self, run_id: str, pid: int, returncode: int) -> None:
        """A run process this object started has ended (its reaper thread)."""
        deadline = time.monotonic() + 5.0
        while True:  # _launch records the pid just after the spawn: a very short run may end first
            try:
                run = self.store.get(run_id)
            except JobError:
                return  # deleted meanwhile
            if run.pid is not None or time.monotonic() > deadline:
                break
            time.sleep(0.02)
        self._record_end(run, pid, returncode)
        self.start_next()
        if run.parent:
            sweeps.refresh(self.store, run.parent)

    def _record_end(self, run: Run, pid: int, returncode: int | None) -> Run:
        """Process ``pid`` of ``run`` is gone: record how, unless the run recorded its own end (or the
        record is about a later attempt by now: a run resumed while its last process was exiting)."""
        if run.pid != pid:
            return run
        launcher.kill_leftovers(run.pgid, run.start_ticks)  # whatever of its group is left: no orphan
        if run.processes > 1:
            launcher.end_ranks(run.out_dir)  # torchrun's ranks have sessions of their own
        if run.status != RUNNING:
            if run.exit_code is None and returncode is not None:
                return self.store.update_if(run.id, (run.status,), expect={"pid": pid}, exit_code=returncode) or run
            return run
        how = ("exit code unknown" if returncode is None else f"killed by {signal_name(-returncode)}"
               if returncode < 0 else f"exit code {returncode}")
        if run.cancel_requested:
            updated = self.store.update_if(run.id, (RUNNING,), expect={"pid": pid}, status=CANCELLED,
                                           exit_code=returncode, finished=time.time(), error=None)
        else:
            updated = self.store.update_if(
                run.id, (RUNNING,), expect={"pid": pid}, status=FAILED, exit_code=returncode, finished=time.time(),
                error=f"the run process ended without recording its end ({how}): killed, or out of memory; "
                      f"the log {run.log_path} has its last words")
        if updated is not None:
            _append_log(run.log_path, f"recorded by {socket.gethostname()}:{os.getpid()}: {updated.status} ({how})")
        return updated or self.store.get(run.id)

    def reconcile(self) -> list[Run]:
        """Mark running runs whose process is gone (failed, or cancelled if asked), reap the run processes
        this process adopted (no zombie), then let the queue move. Returns the runs it changed."""
        changed, host, now = [], socket.gethostname(), time.time()
        for run in self.store.list():
            if run.kind == SWEEP:
                continue  # no process of its own: its status is its children's (sweeps.refresh, below)
            if run.backend == SLURM:  # Slurm knows its jobs; their pids are the nodes'
                updated = self._reconcile_slurm(run) if run.status in ACTIVE else None
                changed += [updated] if updated is not None else []
                continue
            if run.host and run.host != host:
                continue  # a pid of another machine means nothing here
            if run.pid is None:
                if run.status == RUNNING:
                    updated = self._unlaunched(run)
                    changed += [updated] if updated is not None else []
                continue
            if launcher.is_our_child(run.pid):
                continue  # our reaper thread records it
            if run.status != RUNNING and not (run.finished and now - run.finished < REAP_WINDOW_S):
                continue
            if run.status != RUNNING and run.processes > 1:
                launcher.end_ranks(run.out_dir, timeout=0.0)  # ranks that outlived torchrun: killed, reaped
            state = launcher.process_state(run.pid, run.start_ticks)
            if state == launcher.ALIVE:
                continue
            returncode = launcher.reap_adopted(run.pid) if state == launcher.ZOMBIE else None
            if run.status == RUNNING:
                changed.append(self._record_end(self.store.get(run.id), run.pid, returncode))
            elif returncode is not None and run.exit_code is None:
                self.store.update_if(run.id, (run.status,), expect={"pid": run.pid}, exit_code=returncode)
        self.start_next()
        sweeps.refresh_all(self.store)
        return changed

    def _reconcile_slurm(self, run: Run) -> Run | None:
        """A Slurm run whose job ended (submitit's state) without its worker recording the end."""
        state = slurm_backend.job_state(run) if run.slurm_job_id else None
        if not slurm_backend.has_ended(state):
            return None
        cancelled = run.cancel_requested or state == "CANCELLED"
        updated = self.store.update_if(
            run.id, ACTIVE, expect={"slurm_job_id": run.slurm_job_id}, status=CANCELLED if cancelled else FAILED,
            finished=time.time(), error=None if cancelled else (
                f"Slurm job {run.slurm_job_id} ended ({state}) without the run recording its end; the log "
                f"{run.log_path} and {Path(run.out_dir) / slurm_backend.SLURM_DIR} have its last words"))
        if updated is not None:
            _append_log(run.log_path, f"recorded by {socket.gethostname()}: {updated.status} (Slurm state {state})")
        return updated

    def _unlaunched(self, run: Run) -> Run | None:
        """A run claimed from the queue whose process was never recorded: failed once its claimer is gone."""
        claimer = launcher.process_state(run.launcher_pid)
        if claimer == launcher.ALIVE and time.time() - (run.claimed or 0) < CLAIM_TIMEOUT_S:
            return None  # being launched right now
        return self.store.update_if(run.id, (RUNNING,), status=FAILED, finished=time.time(),
                                    error="the run was taken from the queue but its process never started "
                                          "(the launching process ended)")

    # ---- looking -----------------------------------------------------------------------------

    def list(self, status: str | None = None, reconcile: bool = True) -> list[Run]:
        """Every run, oldest first (or those with ``status``); dead processes reconciled first."""
        if reconcile:
            self.reconcile()
        return self.store.list(None if status is None else (status,))

    def get(self, run_id: str) -> Run:
        return self.store.get(run_id)

    def queue_position(self, run_id: str) -> int | None:
        return queue_position(self.store, self.store.get(run_id).id)

    def logs(self, run_id: str, tail: int | None = 200) -> str:
        """The last ``tail`` lines of the run's log (stdout and stderr of its process; None: all)."""
        path = Path(self.store.get(run_id).log_path)
        if not path.is_file():
            return ""
        if tail is None:
            return path.read_text(encoding="utf-8", errors="replace")
        with path.open(encoding="utf-8", errors="replace") as handle:
            return "".join(deque(handle, maxlen=max(0, int(tail))))

    def metrics(self, run_id: str, since_step: int = 0) -> list[dict]:
        """The run's metrics rows (metrics.jsonl) with step > ``since_step``, for live curves."""
        from explorer.training.metrics_log import read_jsonl

        path = Path(self.store.get(run_id).metrics_path)
        if not path.is_file():
            return []
        return [row for row in read_jsonl(path) if row.get("step", 0) > since_step]

    def wait(self, run_id: str, timeout: float | None = None, poll_s: float = 0.2) -> Run:
        """Block until the run is done, failed or cancelled (``JobError`` on timeout)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            run = self.store.get(run_id)
            if run.status in FINAL:
                return run
            if deadline is not None and time.monotonic() > deadline:
                raise JobError(f"run {run.id} is still {run.status} after {timeout} s")
            self.reconcile()
            time.sleep(poll_s)

    # ---- stopping and resuming ---------------------------------------------------------------

    def cancel(self, run_id: str, wait: bool = True, grace_s: float | None = None) -> Run:
        """Cancel a queued run, or stop a running one: SIGTERM to its process group (the loop saves a
        checkpoint and exits), SIGKILL after ``grace_s`` (default: the store's, 30 s). ``wait``: block
        until the process is gone and the record final; otherwise a thread of this process escalates."""
        run = self.store.get(run_id)
        grace = self.grace_s if grace_s is None else float(grace_s)
        if run.kind == SWEEP:
            return sweeps.cancel(self, run, wait, grace)
        if run.backend == SLURM:
            return self._cancel_slurm(run, wait, grace)
        if run.status == QUEUED:
            done = self.store.update_if(run.id, (QUEUED,), status=CANCELLED, finished=time.time(),
                                        cancel_requested=True)
            if done is not None:
                _append_log(run.log_path, "cancelled while queued")
                return done
            run = self.store.get(run.id)
        if run.status != RUNNING:
            raise JobError(f"run {run.id} is {run.status}; only a queued or running run can be cancelled")
        self.store.update(run.id, cancel_requested=True)
        run = self._wait_for_pid(run)
        _append_log(run.log_path, f"cancel asked: SIGTERM to process group {run.pgid}, SIGKILL after {grace:g} s")
        if not wait:
            if launcher.still_our_group(run.pgid, run.start_ticks):
                launcher.signal_group(run.pgid, signal.SIGTERM)
            threading.Thread(target=self._escalate, args=(run, grace), daemon=True).start()
            return self.store.get(run.id)
        launcher.stop_group(run.pgid, run.pid, run.start_ticks, grace)
        return self._settle(run.id)

    def _cancel_slurm(self, run: Run, wait: bool, grace: float) -> Run:
        """A Slurm run: pending, its job is cancelled; running, rank 0 reads the cancel in the record and
        stops at its next step (a checkpoint first); ``job.cancel()`` (scancel) after the grace."""
        if run.status not in ACTIVE:
            raise JobError(f"run {run.id} is {run.status}; only a queued or running run can be cancelled")
        self.store.update(run.id, cancel_requested=True)
        done = self.store.update_if(run.id, (QUEUED,), status=CANCELLED, finished=time.time())
        if done is not None:
            slurm_backend.cancel_job(done)
            _append_log(run.log_path, f"cancelled while pending in Slurm (job {run.slurm_job_id} cancelled)")
            return done
        _append_log(run.log_path, f"cancel asked: the run stops at its next step; scancel of job "
                                  f"{run.slurm_job_id} after {grace:g} s")
        if not wait:
            threading.Thread(target=self._escalate_slurm, args=(run, grace), daemon=True).start()
            return self.store.get(run.id)
        return self._escalate_slurm(run, grace)

    def _escalate_slurm(self, run: Run, grace: float, poll_s: float = 0.2) -> Run:
        def settled() -> bool:
            return self.store.get(run.id).status in FINAL or slurm_backend.has_ended(slurm_backend.job_state(run))

        deadline = time.monotonic() + grace
        while not settled() and time.monotonic() < deadline:
            time.sleep(poll_s)
        if self.store.get(run.id).status not in FINAL:
            slurm_backend.cancel_job(run)
            deadline = time.monotonic() + 30.0
            while not settled() and time.monotonic() < deadline:
                time.sleep(poll_s)
            self._reconcile_slurm(self.store.get(run.id))
        return self.store.get(run.id)

    def _wait_for_pid(self, run: Run, timeout: float = 10.0) -> Run:
        deadline = time.monotonic() + timeout
        while run.pid is None and run.status == RUNNING and time.monotonic() < deadline:
            time.sleep(0.05)
            run = self.store.get(run.id)
        return run

    def _escalate(self, run: Run, grace: float) -> None:
        if not launcher.wait_gone(run.pid, run.start_ticks, grace):
            launcher.kill_leftovers(run.pgid, run.start_ticks)
            launcher.wait_gone(run.pid, run.start_ticks, 10.0)
        self._settle(run.id)

    def _settle(self, run_id: str, timeout: float = 15.0) -> Run:
        """After its process ended: wait for the record to be final (the run's own, the reaper's, or ours)."""
        deadline = time.monotonic() + timeout
        while True:
            run = self.store.get(run_id)
            if run.status in FINAL and (run.pid is None or not launcher.is_our_child(run.pid)):
                return run
            if time.monotonic() > deadline:
                return run
            if run.pid is not None and not launcher.is_our_child(run.pid):
                self.reconcile()
            time.sleep(0.05)

    def resume(self, run_id: str, start: bool = True) -> Run:
        """Queue a failed or cancelled run again; it continues from its last checkpoint (or starts over
        when it has none, which the log and notes say)."""
        from explorer.training.checkpointing import latest_checkpoint

        run = self.store.get(run_id)
        if run.kind == SWEEP:
            return sweeps.resume(self, run, start)
        if run.status not in RESUMABLE:
            raise JobError(f"run {run.id} is {run.status}; only a failed or cancelled run can be resumed")
        if run.kind == EVAL:  # nothing to check here: a child that still cannot load or read fails again, saying why
            note = "resumed: the embedding cache keeps what was embedded"
        else:
            inspect_data(run.data, run.config.get("train_split", "train"))  # the data must still be there
            try:
                folder = latest_checkpoint(Path(run.out_dir))
            except Exception as error:  # noqa: BLE001 - a broken pointer is reported, not a crash
                raise JobError(f"run {run.id} cannot resume: {error}") from error
            note = (f"resumed from {folder.name}" if folder is not None else
                    "resumed with no checkpoint on disk: it starts over from step 0")
        updated = self.store.update_if(run.id, RESUMABLE, status=QUEUED, queued_at=time.time(), finished=None,
                                       exit_code=None, error=None, cancel_requested=False, pid=None, pgid=None,
                                       start_ticks=None, evaluation=None, slurm_job_id=None,
                                       notes=[*run.notes, note])
        if updated is None:
            raise JobError(f"run {run.id} changed while being resumed; look again")
        _append_log(run.log_path, note)
        if run.parent:
            sweeps.refresh(self.store, run.parent)
        return self.launch_new(updated, start)

    def delete(self, run_id: str, keep_checkpoint: bool = True) -> dict:
        """Forget a finished run. ``keep_checkpoint``: its weights, manifests, logs of metrics and its zoo
        entry stay (the resumable state and the process log go); otherwise its folder and zoo entry go too.
        Returns {"removed": [paths], "kept": [paths]} so the caller can say what happened."""
        from explorer.jobs.publish import unpublish

        run = self.store.get(run_id)
        if run.kind == SWEEP:
            report = sweeps.delete(self, run)
            shutil.rmtree(run.out_dir, ignore_errors=True)
            return {**report, "removed": [*report["removed"], run.out_dir]}
        if run.status in ACTIVE:
            raise JobError(f"run {run.id} is {run.status}; cancel it before deleting it")
        out = Path(run.out_dir)
        removed, kept = [], []
        has_weights = (out / "model.safetensors").is_file()
        if keep_checkpoint and has_weights:
            for path in (out / "resume", out / LOG_FILE, out / PAIRS_FILE):
                if path.exists():
                    shutil.rmtree(path) if path.is_dir() else path.unlink()
                    removed.append(str(path))
            kept.append(str(out))
            if run.zoo_manifest and Path(run.zoo_manifest).is_file():
                kept.append(run.zoo_manifest)
        else:
            zoo = unpublish(run)
            if zoo is not None:
                removed.append(str(zoo))
            if out.exists():
                shutil.rmtree(out, ignore_errors=True)
                if out.exists():
                    raise JobError(f"could not remove {out} entirely; the run's record is kept")
                removed.append(str(out))
        self.store.delete(run.id)
        return {"id": run.id, "removed": removed, "kept": kept}


def _resolve_processes(processes: int | None, gpus: int) -> int:
    """Training processes of a run: one per GPU, or ``processes`` CPU ranks (default 1)."""
    if processes is None or processes == "":
        return max(1, gpus)
    processes = int(processes)
    if processes < 1:
        raise JobError(f"processes must be 1 or more, got {processes}")
    if gpus and processes != gpus:
        raise JobError(f"a GPU run starts one process per GPU: processes must be {gpus} (its gpus) or left out, "
                       f"not {processes}")
    return processes


def _append_log(path: str | Path, line: str) -> None:
    """A line from the manager in the run's log (best effort: a full disk must not stop a cancel)."""
    try:
        with open(path, "a", encoding="utf-8") as log:
            log.write(f"[explorer.jobs {time.strftime('%Y-%m-%d %H:%M:%S')}] {line}\n")
    except OSError as error:
        if error.errno not in (errno.ENOSPC, errno.ENOENT, errno.EACCES):
            raise


__all__ = ["JobManager", "LOG_FILE", "RUNS_DIR"]
