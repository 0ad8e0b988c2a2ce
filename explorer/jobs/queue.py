"""The queue: which queued runs start now, and on which devices. No daemon runs it.

    claimed = claim_runs(store)           # under the store's write lock: queued -> running, devices given
    for run in claimed: launch(run)       # the caller starts their processes (JobManager.start_next)

Whoever changes what runs calls it: ``submit`` and ``resume`` (a new run may start now), the run
process itself when it ends (its slot and GPUs are free), ``cancel`` and ``reconcile`` (a run that
died frees its slot). So the queue moves as long as any of these happens, and a run that ends with
no app open still starts the next one.

Rules:
- at most ``max_running`` runs at once (a setting in the store; default: one per GPU of the pool,
  at least 1);
- a run asks for ``gpus`` GPUs (default 1 where the machine has any, else 0 = CPU) and gets that
  many free ones from the pool (``CUDA_VISIBLE_DEVICES`` of its process; a run of N GPUs runs N
  torchrun ranks); a CPU run needs none, however many processes it runs;
- a Slurm run (``backend="slurm"``) is not this queue's: Slurm queues it (``slurm.py``);
- first come, first served: the oldest queued run starts first, and a run that cannot start
  (too few free GPUs) holds the ones behind it, so a large run is never starved by small ones.

The GPU pool is the list of GPU ids this machine lends to runs: ``CUDA_VISIBLE_DEVICES`` of the
process that first opened the store, else the GPUs the NVIDIA driver lists, else none. It is stored
(``gpu_pool``), so a run process, whose own CUDA_VISIBLE_DEVICES is narrowed to its GPUs, starts the
next run with the whole pool in view.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from explorer.core.errors import InputError
from explorer.jobs.records import QUEUED, RUNNING, SLURM, SWEEP, Run
from explorer.jobs.run_store import RunStore

MAX_RUNNING = "max_running"
GPU_POOL = "gpu_pool"


def detect_gpus() -> list[str]:
    """GPUs visible to this process, as CUDA_VISIBLE_DEVICES names them (an index, a GPU-/MIG- UUID),
    without importing torch: CUDA_VISIBLE_DEVICES when set, else the driver's list (indices)."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        ids = []
        for part in visible.split(","):
            part = part.strip()
            if not part or part.startswith("-"):
                break  # CUDA stops at the first invalid entry
            ids.append(part)
        return ids
    driver = Path("/proc/driver/nvidia/gpus")
    if driver.is_dir():
        return [str(i) for i in range(len([p for p in driver.iterdir() if p.is_dir()]))]
    return []


def gpu_pool(store: RunStore) -> list[str]:
    pool = store.get_setting(GPU_POOL)
    if pool is None:
        pool = detect_gpus()
        store.set_setting(GPU_POOL, pool)
    return [str(g) for g in pool]


def set_gpu_pool(store: RunStore, gpus) -> None:
    """The GPUs runs may use (indices or UUIDs, as CUDA_VISIBLE_DEVICES takes them); [] for none."""
    store.set_setting(GPU_POOL, [str(g) for g in gpus])


def max_running(store: RunStore) -> int:
    value = store.get_setting(MAX_RUNNING)
    return int(value) if value is not None else max(1, len(gpu_pool(store)))


def set_max_running(store: RunStore, limit: int | None) -> None:
    """The cap on concurrent runs (None: back to one per GPU)."""
    if limit is not None and int(limit) < 1:
        raise InputError(f"the limit on concurrent runs must be at least 1, got {limit}")
    store.set_setting(MAX_RUNNING, None if limit is None else int(limit))


def claim_runs(store: RunStore) -> list[Run]:
    """Move the queued runs that may start now to ``running`` (devices given, not yet launched); returns them."""
    pool = gpu_pool(store)
    limit = max_running(store)
    claimed = []
    with store.transaction() as tx:
        running = [run for run in tx.runs((RUNNING,)) if run.backend != SLURM]  # Slurm has its own queue
        used = {d for run in running for d in run.devices}
        free = [g for g in pool if g not in used]
        slots = limit - len(running)
        waiting = (run for run in tx.runs((QUEUED,)) if run.backend != SLURM and run.kind != SWEEP)
        for run in sorted(waiting, key=_queue_order):  # a sweep has no process: its children queue
            if slots <= 0 or run.gpus > len(free):
                break
            devices, free = free[:run.gpus], free[run.gpus:]
            now = time.time()
            tx.update(run.id, status=RUNNING, devices=devices, launcher_pid=os.getpid(), claimed=now, pid=None,
                      pgid=None, start_ticks=None, started=None, finished=None, exit_code=None, error=None)
            claimed.append(tx.get(run.id))
            slots -= 1
    return claimed


def _queue_order(run: Run) -> tuple:
    return (run.queued_at or run.created, run.created, run.id)


def queue_position(store: RunStore, run_id: str) -> int | None:
    """1 for the next queued run to start, None when the run is not queued."""
    queued = [run.id for run in sorted(store.list((QUEUED,)), key=_queue_order)
              if run.backend != SLURM and run.kind != SWEEP]
    return queued.index(run_id) + 1 if run_id in queued else None


__all__ = ["GPU_POOL", "MAX_RUNNING", "claim_runs", "detect_gpus", "gpu_pool", "max_running", "queue_position",
           "set_gpu_pool", "set_max_running"]
