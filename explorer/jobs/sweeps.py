"""Evaluation sweeps: many models x many datasets as one record with one child per (model, dataset, task).

    sweep = jobs.submit_eval(["demo-longclip", "demo-finelip"], ["/data/urban1k", "/data/docci"],
                             task="retrieval", processes=2)
    children(jobs.store, sweep.id)         # the EVAL records, in submission order
    refresh(jobs.store, sweep.id)          # the sweep's status and progress, from its children

The sweep record (kind SWEEP) never has a process: the queue and ``reconcile`` leave it alone. Its
children (kind EVAL, ``parent`` = the sweep) are ordinary queued runs: the queue gives each its
devices, the launcher starts ``explorer.jobs.worker`` on it (under torchrun for ``processes`` > 1, or
through Slurm), and a child that fails (a checkpoint that does not load, a dataset that does not read)
fails alone. The sweep's status is its children's (``rollup``): running while any runs, queued while
any waits, done when all are done, else cancelled (some cancelled) or failed; its progress is
(children ended, children). Cancelling a sweep cancels its queued children first (so none starts),
then its running ones; resuming it re-queues only its failed and cancelled children: a done child is
never run again, and a resumed one re-embeds only what its cache lacks.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Sequence

from explorer.core.errors import ExplorerError
from explorer.evaluation.tasks import model_label
from explorer.jobs.records import (ACTIVE, CANCELLED, DONE, EVAL, FAILED, FINAL, LOCAL, QUEUED, RESUMABLE, RUNNING,
                                   SWEEP, JobError, Run)

def check_options(options: dict | None, tasks: list[str]) -> dict:
    """The sweep's options, typed and checked by the declarations of ``tasks`` (``evaluation.tasks``); an option
    of another task is typed by its own and left to the children that do not read it. ``JobError`` for an
    unknown option or a bad value, before anything is recorded."""
    from explorer.evaluation.tasks import checked_options, get_task, sweep_options

    try:
        values = checked_options(sweep_options(), dict(options or {}))
        for name in tasks:
            task = get_task(name)
            task.check({key: value for key, value in values.items() if key in {o.name for o in task.options}})
    except ExplorerError as error:
        raise JobError(str(error)) from None
    return values


def model_reference(model: str) -> str:
    """A model as the child will load it: a file as an absolute path, a zoo name as given (the child loads
    it from the same zoo); a name the zoo lacks is kept, and its child fails with the zoo's message."""
    path = Path(model).expanduser()
    return str(path.resolve()) if path.exists() else model


def submit(jobs, models: Sequence[str], datasets: Sequence, task: str = "retrieval", name: str | None = None,
           gpus: int | None = None, processes: int | None = None, backend: str = LOCAL, slurm=None,
           options=None, start: bool = True) -> Run:
    """Record a sweep and its children (queued); start what the queue allows. Refused (nothing recorded)
    only for what is wrong with the sweep itself: no model or dataset, an unknown task or option, devices
    this machine lacks. A model that does not load or a dataset that does not read fails its children."""
    from explorer.evaluation.tasks import expand_tasks, sweep_options

    models = [str(m).strip() for m in models if str(m).strip()]
    datasets = [str(Path(d).expanduser().resolve()) for d in datasets if str(d).strip()]
    if not models or not datasets:
        raise JobError("an evaluation sweep needs at least one model and one dataset")
    try:
        tasks = expand_tasks(task)
    except ExplorerError as error:
        raise JobError(str(error)) from None
    values = check_options(options, tasks)
    files = [option.name for option in sweep_options() if option.kind == "path"]
    if Path(str(values.get("templates"))).is_file():  # a templates file, or a name (openai, cifar, ...)
        files.append("templates")
    for key in files:  # files the children read from their own folders
        if key in values:
            values[key] = str(Path(values[key]).expanduser().resolve())
    values["zoo"] = None if jobs.zoo_root is None else str(Path(jobs.zoo_root).expanduser().resolve())  # children run elsewhere
    gpus, processes, slurm_options = jobs.resolve_devices(gpus, processes, backend, slurm)
    devices = dict(gpus=gpus, processes=processes, backend=backend, slurm=slurm_options)
    sweep = jobs.new_record(kind=SWEEP, name=name or f"eval-{task}-{len(models)}x{len(datasets)}", method=task,
                            data=", ".join(datasets), init=", ".join(models), config=dict(values), **devices,
                            notes=[f"{len(models)} model(s) x {len(datasets)} dataset(s) x {', '.join(tasks)}"])
    kids = [jobs.new_record(kind=EVAL, parent=sweep.id, method=kind, data=data, init=model_reference(model),
                            name=f"{model_label(model)}@{Path(data).name}" + (f":{kind}" if len(tasks) > 1 else ""),
                            config=dict(values), **devices)
            for model in models for data in datasets for kind in tasks]
    refresh(jobs.store, sweep.id)
    for kid in kids:
        try:
            jobs.launch_new(kid, start=False)
        except JobError:
            pass  # Slurm refused this one: its record says why, the others go on
    if start:
        jobs.start_next()
    return refresh(jobs.store, sweep.id)


def children(store, sweep_id: str) -> list[Run]:
    return [run for run in store.list() if run.parent == sweep_id and run.kind == EVAL]


def rollup(statuses: Sequence[str]) -> str:
    """A sweep's status from its children's."""
    if RUNNING in statuses:
        return RUNNING
    if QUEUED in statuses:
        return QUEUED
    if statuses and all(status == DONE for status in statuses):
        return DONE
    return CANCELLED if CANCELLED in statuses else FAILED


def refresh(store, sweep_id: str) -> Run:
    """Write the sweep's status, progress and error from its children (any process may call it)."""
    kids = children(store, sweep_id)
    status = rollup([kid.status for kid in kids])
    failed = [kid for kid in kids if kid.status == FAILED]
    error = "; ".join(f"{kid.name}: {(kid.error or 'failed').splitlines()[0]}" for kid in failed) or None
    values = dict(status=status, step=sum(kid.status in FINAL for kid in kids), total_steps=len(kids),
                  error=None if status in ACTIVE else error)
    sweep = store.get(sweep_id)
    if status in FINAL and sweep.finished is None:
        values["finished"] = time.time()
    elif status in ACTIVE:
        values["finished"] = None
    if status == RUNNING and sweep.started is None:
        values["started"] = time.time()
    return store.update(sweep_id, **values)


def refresh_all(store) -> None:
    for run in store.list(ACTIVE):
        if run.kind == SWEEP:
            refresh(store, run.id)


def cancel(jobs, sweep: Run, wait: bool = True, grace_s: float | None = None) -> Run:
    """Cancel every active child: the queued ones first (none starts meanwhile), then the running ones."""
    kids = children(jobs.store, sweep.id)
    if not any(kid.status in ACTIVE for kid in kids):
        raise JobError(f"sweep {sweep.id} is {sweep.status}; only a queued or running sweep can be cancelled")
    for kid in sorted(kids, key=lambda kid: kid.status != QUEUED):
        if jobs.get(kid.id).status in ACTIVE:
            try:
                jobs.cancel(kid.id, wait=wait, grace_s=grace_s)
            except JobError:
                pass  # it ended meanwhile
    return refresh(jobs.store, sweep.id)


def resume(jobs, sweep: Run, start: bool = True) -> Run:
    """Queue the failed and cancelled children again; done ones stay done."""
    kids = [kid for kid in children(jobs.store, sweep.id) if kid.status in RESUMABLE]
    if not kids:
        raise JobError(f"sweep {sweep.id} has no failed or cancelled evaluation to resume")
    for kid in kids:
        jobs.resume(kid.id, start=False)  # all queued first, then started in their order
    if start:
        jobs.start_next()
    return refresh(jobs.store, sweep.id)


def delete(jobs, sweep: Run) -> dict:
    """Delete every child (their folders: results, logs) and then the sweep."""
    if any(kid.status in ACTIVE for kid in children(jobs.store, sweep.id)):
        raise JobError(f"sweep {sweep.id} has evaluations still queued or running; cancel it first")
    removed, kept = [], []
    for kid in children(jobs.store, sweep.id):
        report = jobs.delete(kid.id, keep_checkpoint=False)
        removed += report["removed"]
        kept += report["kept"]
    jobs.store.delete(sweep.id)
    return {"id": sweep.id, "removed": removed, "kept": kept}


__all__ = ["cancel", "check_options", "children", "delete", "model_reference", "refresh", "refresh_all",
           "resume", "rollup", "submit"]
