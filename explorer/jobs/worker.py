"""The run process: ``python -m explorer.jobs.worker RUN_ID --root <jobs folder> [--zoo DIR]``.

What it does, in order, writing every step of it to the run's record and log:

1. takes SIGTERM (the first thing it does): while the model trains, a SIGTERM asks the loop to
   stop at the next optimizer step, save a checkpoint and return (``train(should_stop=...)``); before
   training (reading data, mining local pairs) and during the evaluation it stops at once. A
   watchdog kills the process group if the stop takes longer than the grace (plus 5 s);
2. reads its record; settings as recorded at submit (``configs``), data as ``training_data`` reads
   it (the error lands in the record when the data has gone since), the init as recorded;
3. trains with the library loop (``explorer.training.train_from_args``) in the run folder, resuming
   from its newest checkpoint when there is one; metrics stream to ``metrics.jsonl`` (the loop's),
   progress to the record (at most once a second), a line to the log every few seconds;
4. evaluates the result (``final_eval``: ``explorer eval``'s measures on the synthetic world's test
   split; Recall@K on a retrieval set's held-out split; nothing when nothing is held out) and
   records it; a failed evaluation is recorded as such and does not fail the run;
5. publishes the checkpoint to the zoo (``publish``) and records ``done``;
6. whatever happened, asks the queue to start the next run, then exits.

Under torchrun (``processes`` > 1: ``RANK`` and ``WORLD_SIZE`` in the environment) every rank runs
this module and trains (``explorer.training.ddp``), but only rank 0 writes the record (progress,
evaluation, publication, the end) and the run's files; the other ranks only read the record and
wait for rank 0's files (GOAL's mined pairs: rank 0 mines them once). The record's pid and group
stay torchrun's. Each rank dies with torchrun and leaves its pid in ``ranks/`` (``launcher``). A
cancel reaches every rank (torchrun forwards the SIGTERM), and the loop stops them all at one step.
Rank 0 also reads ``cancel_requested`` with its progress, so a cancel asked through the store stops
a run the signal cannot reach (a Slurm job on another machine, ``slurm.py``).

Exit codes (also in the record): 0 done, 1 failed, 28 disk full (the record says which file),
143 cancelled (a checkpoint holds the state). A death by a signal is recorded by whoever reaps it
(the manager that started it, or ``reconcile``).
"""

from __future__ import annotations

import argparse
import errno
import os
import signal
import socket
import sys
import threading
import time
import traceback
from pathlib import Path

from explorer.jobs.records import (CANCELLED, DONE, EVAL, EXIT_CANCELLED, EXIT_DISK_FULL, EXIT_DONE, EXIT_FAILED,
                                   FAILED, QUEUED, RUNNING, SLURM, JobError)

WATCHDOG_MARGIN_S = 5.0
PROGRESS_EVERY_S = 1.0
LOG_EVERY_S = 5.0


class Cancelled(BaseException):
    """SIGTERM outside the training loop (not an Exception: no library ``except Exception`` swallows it)."""


class StopRequest:
    """The SIGTERM handler and the loop's ``should_stop``: a flag, or an immediate stop outside training."""

    def __init__(self, grace_s: float = 30.0):
        self.requested = False
        self.phase = "setup"  # "setup", "train", "evaluate", "finish"
        self.grace_s = grace_s
        self.watchdog: threading.Timer | None = None

    def __call__(self) -> bool:
        return self.requested

    def install(self) -> "StopRequest":
        signal.signal(signal.SIGTERM, self.handle)
        return self

    def handle(self, signum, frame) -> None:
        first = not self.requested
        self.requested = True
        if first:
            os.write(2, f"[explorer.jobs worker] SIGTERM during {self.phase}: stopping "
                        f"(a checkpoint first when training)\n".encode())
            self.watchdog = threading.Timer(self.grace_s + WATCHDOG_MARGIN_S, _kill_own_group)
            self.watchdog.daemon = True
            self.watchdog.start()
        if self.phase in ("setup", "evaluate"):
            raise Cancelled()

    def disarm(self) -> None:
        if self.watchdog is not None:
            self.watchdog.cancel()


def _kill_own_group() -> None:
    os.write(2, b"[explorer.jobs worker] the stop took longer than the grace: SIGKILL to the process group\n")
    if "TORCHELASTIC_RUN_ID" in os.environ:  # a rank: torchrun's group too (each rank has a session of its own)
        try:
            os.killpg(os.getpgid(os.getppid()), signal.SIGKILL)
        except OSError:
            pass
    os.killpg(os.getpgrp(), signal.SIGKILL)


def main(argv: list[str] | None = None) -> int:
    stop = StopRequest().install()  # before anything slow: a cancel right after the start is honoured
    parser = argparse.ArgumentParser(prog="python -m explorer.jobs.worker", description=__doc__.splitlines()[0])
    parser.add_argument("run_id")
    parser.add_argument("--root", required=True, type=Path, help="the jobs folder (holds runs.sqlite3)")
    parser.add_argument("--zoo", type=Path, help="zoo folder to publish to (default: the zoo folder)")
    args = parser.parse_args(argv)
    try:
        return run_job(args.run_id, args.root, zoo_root=args.zoo, stop=stop)
    except Cancelled:  # a SIGTERM between the record's last update and the exit
        return EXIT_CANCELLED


def run_job(run_id: str, root: str | Path, zoo_root: str | Path | None = None, stop: StopRequest | None = None,
            start_next: bool = True) -> int:
    """Run the job ``run_id`` of the store at ``root`` in this process; returns the exit code (module docstring)."""
    from explorer.jobs.launcher import rank_and_world, register_rank, start_ticks
    from explorer.jobs.manager import GRACE_SETTING, JobManager
    from explorer.jobs.run_store import RunStore

    store = RunStore(root)
    stop = stop or StopRequest()
    stop.grace_s = float(store.get_setting(GRACE_SETTING, stop.grace_s))
    rank, world = rank_and_world()
    run = store.get(run_id)
    if world > 1:
        register_rank(run.out_dir, rank)
    if rank == 0 and run.backend == SLURM and run.status == QUEUED:  # Slurm started it: it runs from now
        run = store.update_if(run_id, (QUEUED,), status=RUNNING, claimed=time.time()) or store.get(run_id)
    if run.status != RUNNING:  # cancelled between the claim and this start, or started twice
        print(f"run {run_id} is {run.status}, not running: nothing to do (rank {rank})", flush=True)
        return EXIT_CANCELLED if run.status == CANCELLED else EXIT_FAILED
    if rank == 0:
        values = dict(started=time.time(), host=socket.gethostname(), processes=world)
        if run.backend == SLURM:  # the node's pid, for the log and the eye; its group is the Slurm job's
            values.update(pid=os.getpid(), pgid=None, start_ticks=start_ticks(os.getpid()))
        elif world == 1:  # under local torchrun the record keeps torchrun's pid and group
            values.update(pid=os.getpid(), pgid=os.getpgrp(), start_ticks=start_ticks(os.getpid()))
        store.update(run_id, **values)
    job = _Job(store, run_id, zoo_root, stop, rank=rank, world=world)
    try:
        code = job.run()
    finally:
        stop.disarm()
        if rank == 0 and run.parent:  # the sweep's status follows its children's
            from explorer.jobs.sweeps import refresh

            refresh(store, run.parent)
        if start_next and rank == 0:
            try:
                JobManager(root=root, subreaper=False).start_next()
            except Exception as error:  # noqa: BLE001 - this run's end is recorded; the next start is best effort
                print(f"could not start the next queued run: {error}", flush=True)
    return code


class _Job:
    """One attempt of one run, in this process."""

    def __init__(self, store, run_id: str, zoo_root, stop: StopRequest, rank: int = 0, world: int = 1):
        self.store, self.run_id, self.zoo_root, self.stop = store, run_id, zoo_root, stop
        self.rank, self.world, self.leader = rank, world, rank == 0
        self.record = store.get(run_id)
        self.last_progress = self.last_line = 0.0
        self.total: int | None = None
        self.step = self.record.step

    def say(self, text: str) -> None:
        if self.leader:
            print(f"[{time.strftime('%H:%M:%S')}] {text}", flush=True)

    def write(self, **values) -> None:
        """The record's update, from rank 0 only (the other ranks never write the store)."""
        if self.leader:
            self.store.update(self.run_id, **values)

    def finish(self, status: str, code: int, **values) -> int:
        self.stop.phase = "finish"
        if not self.leader:
            if values.get("error"):
                print(f"[rank {self.rank}] {status}: {values['error']}", flush=True)
            return code
        updated = self.store.update_if(self.run_id, (RUNNING,), status=status, exit_code=code, finished=time.time(),
                                       **values)
        if updated is None:
            self.store.update(self.run_id, exit_code=code)
        self.say(f"{status} (exit code {code})" + (f": {values['error']}" if values.get("error") else ""))
        return code

    def run(self) -> int:
        run = self.record
        ranks = f", rank 0 of {self.world} processes" if self.world > 1 else ""
        self.say(f"run {run.id} ({run.name}): {run.method} on {run.data}, pid {os.getpid()}{ranks}")
        try:
            if run.kind == EVAL:  # one evaluation of a sweep (eval_child)
                from explorer.jobs.eval_child import run_child

                return run_child(self)
            return self.train_and_publish()
        except Cancelled:
            return self.finish(CANCELLED, EXIT_CANCELLED, error=None)
        except BaseException as error:  # noqa: BLE001 - every failure ends in the record
            if isinstance(error, KeyboardInterrupt):
                return self.finish(CANCELLED, EXIT_CANCELLED, error=None)
            full = _disk_full(error)
            if full is not None:
                return self.finish(FAILED, EXIT_DISK_FULL, step=self.step, error=(
                    f"disk full ({full.strerror or 'ENOSPC'}) while writing {full.filename or 'a run file'} after "
                    f"step {self.step}: the run stopped; {self.last_checkpoint()}. Free space and resume it."))
            traceback.print_exc()
            known = _is_user_error(error)
            message = str(error) or type(error).__name__
            if not known:
                message = f"{type(error).__name__}: {message} (traceback in the log)"
            return self.finish(FAILED, EXIT_FAILED, step=self.step, error=message)

    def train_and_publish(self) -> int:
        from explorer.jobs.configs import check, from_plain
        from explorer.jobs.final_eval import evaluate_checkpoint
        from explorer.jobs.publish import publish
        from explorer.jobs.training_data import inspect_data
        from explorer.training.checkpointing import latest_checkpoint
        from explorer.training.launch import train_from_args
        from explorer.training.metrics_log import RUN_LOG_FILE, JsonlLog

        run, stop = self.record, self.stop
        config = from_plain(run.config)
        check(config)  # a record edited since submit (or written by an older explorer) fails here, said plainly
        if config.get("cpu_threads"):
            import torch

            torch.set_num_threads(int(config["cpu_threads"]))
        elif not run.gpus:  # a shared CPU may run one thread faster than all (training.threads): measured
            from explorer.training.threads import measure_threads

            self.say(measure_threads().line())
        out = Path(run.out_dir)
        plan = inspect_data(run.data, config["train_split"])
        self.say(plan.describe())
        samples = self.samples(plan, config, out)
        resume = latest_checkpoint(out) is not None
        # an earlier attempt died before its first checkpoint: its rows go (rank 0 writes the files)
        if not resume and self.leader and (out / "metrics.jsonl").is_file():
            dropped = JsonlLog(out / "metrics.jsonl").truncate_after_step(0)
            self.say(f"no checkpoint to resume from: starting over ({dropped} metrics row(s) of the last attempt "
                     "dropped; run.jsonl keeps its history)")
        total = self.total = _total_steps(len(samples), config)
        self.write(total_steps=total)
        self.say(f"{'resuming' if resume else 'training'}: {total} steps, settings {run.config}")

        stop.phase = "train"
        result = train_from_args(
            method=run.method, data=run.data, out=out, init=None if resume else run.init,
            size=None if run.init else config["size"],  # an init sets the architecture
            context_length=config["context_length"], resume=resume, allow_pickle=config["allow_pickle"],
            progress=False, command=" ".join(run.command), read_samples=lambda _: samples,
            on_metrics=self.on_metrics, should_stop=stop, name=run.name, device="cuda" if run.gpus else "cpu",
            **{key: config[key] for key in _train_keys()})
        if not self.leader:  # rank 0 evaluates, publishes and records the end
            return EXIT_CANCELLED if result.stopped or stop.requested else EXIT_DONE
        manifest = result.manifest if result.manifest.is_file() else None
        self.store.update(self.run_id, step=result.steps, total_steps=result.total_steps,
                          checkpoint=None if manifest is None else str(manifest))
        for note in result.notes:
            self.say(f"note: {note}")
        if result.stopped or stop.requested:
            what = f"stopped at step {result.steps} of {result.total_steps}" + (
                ", checkpoint saved" if manifest is not None else ", before the first step: no checkpoint")
            self.say(what)
            return self.finish(CANCELLED, EXIT_CANCELLED, error=None)

        stop.phase = "evaluate"
        self.say("evaluating" + (f" on the {plan.eval_split} split" if plan.eval_kind else ""))
        try:
            evaluation = evaluate_checkpoint(result.manifest, plan, config, device=str(result.device))
        except Exception as error:  # noqa: BLE001 - the trained checkpoint stands; the record says what failed
            traceback.print_exc()
            evaluation = {"error": f"{type(error).__name__}: {error}"}
        JsonlLog(out / RUN_LOG_FILE).write({"event": "evaluation", "time": time.time(), **evaluation})
        self.store.update(self.run_id, evaluation=evaluation)
        self.say(f"evaluation: {evaluation.get('metrics') or evaluation}")

        stop.phase = "finish"
        zoo_name, zoo_path = publish(self.store.get(self.run_id), result.manifest, self.zoo_root)
        self.say(f"in the zoo as {zoo_name} ({zoo_path})")
        return self.finish(DONE, EXIT_DONE, error=None, zoo_name=zoo_name, zoo_manifest=str(zoo_path))

    def samples(self, plan, config: dict, out: Path):
        """The training samples; GOAL's local pairs mined with the init (cached in the run folder)."""
        from explorer.jobs.training_data import (PAIRS_FILE, load_pairs, mine_local_pairs, read_samples, save_pairs,
                                                 with_local_pairs)

        from explorer.models.methods import get_method

        samples = read_samples(plan)
        if not get_method(self.record.method).needs_local_pairs or plan.has_local_pairs:
            return samples
        pairs = load_pairs(out / PAIRS_FILE)
        if pairs is None and not self.leader:
            pairs = self.wait_for_pairs(out / PAIRS_FILE)
        if pairs is None:
            if not self.record.init:
                raise JobError(f"{self.record.method} needs FLISM local pairs and this run has no init to mine them "
                               "with")
            from explorer.models.io.loading import load_method
            from explorer.models.model import Model

            self.say(f"mining FLISM local pairs for {len(samples)} samples with {self.record.init}")
            method, report = load_method(self.record.init, allow_pickle=config["allow_pickle"])
            model = Model(method, name="flism-init", report=report, device="cuda" if self.record.gpus else "cpu")
            pairs = mine_local_pairs(samples, model, self.say)
            save_pairs(out / PAIRS_FILE, pairs)
        return with_local_pairs(samples, pairs)

    def wait_for_pairs(self, path: Path, poll_s: float = 0.5) -> list[dict]:
        """A rank other than 0: the pairs rank 0 mines (written atomically), once they are there."""
        from explorer.jobs.training_data import load_pairs

        while True:
            pairs = load_pairs(path)
            if pairs is not None:
                return pairs
            if self.store.get(self.run_id).status != RUNNING:
                raise JobError("rank 0 ended before it had mined the local pairs (its error is in the record)")
            time.sleep(poll_s)

    def last_checkpoint(self) -> str:
        from explorer.training.checkpointing import latest_checkpoint

        try:
            folder = latest_checkpoint(Path(self.record.out_dir))
        except Exception as error:  # noqa: BLE001 - only words for a message
            return f"its checkpoint cannot be read ({error})"
        return f"its last checkpoint is {folder.name}" if folder is not None else "it has no checkpoint yet"

    def on_metrics(self, row: dict) -> None:
        now, total = time.monotonic(), self.total
        self.step = int(row["step"])
        if now - self.last_progress >= PROGRESS_EVERY_S or row["step"] == total:
            record = self.store.update(self.run_id, step=int(row["step"]))
            self.last_progress = now
            if record.cancel_requested and not self.stop.requested:  # asked through the store (slurm.py)
                self.say("cancel asked in the record: stopping at the next step (a checkpoint first)")
                self.stop.requested = True
        if now - self.last_line >= LOG_EVERY_S or row["step"] == total:
            self.say(f"step {row['step']}/{total} loss {row['loss']:.4f} ({row['samples_per_s']:.1f} samples/s)")
            self.last_line = now


def _train_keys() -> tuple[str, ...]:
    from explorer.jobs.configs import TRAIN_TYPES

    return tuple(TRAIN_TYPES)


def _total_steps(n_samples: int, config: dict) -> int:
    """What the loop will count: full batches per epoch (drop_last), per accumulation window."""
    per_epoch = (n_samples // config["batch_size"]) // config["accumulate"]
    return int(config["max_steps"] or (config["epochs"] or 1) * max(1, per_epoch))


def _disk_full(error: BaseException) -> OSError | None:
    seen = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        if isinstance(error, OSError) and error.errno == errno.ENOSPC:
            return error
        error = error.__cause__ or error.__context__
    return None


def _is_user_error(error: BaseException) -> bool:
    from explorer.core.errors import ExplorerError

    return isinstance(error, (ExplorerError, FileNotFoundError))


if __name__ == "__main__":
    sys.exit(main())
