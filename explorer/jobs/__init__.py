"""Jobs: training runs in the background, each its own process group, recorded in SQLite.

    from explorer.jobs import JobManager
    jobs = JobManager()                        # runs under $EXPLORER_HOME/jobs (~/.cache/explorer/jobs)
    run = jobs.submit("mulclip", "data/world", init="demo-clip-base", max_steps=200,
                      name="mulclip-try", gpus=0, overrides={"batch_size": 32})
    run.id, run.status                         # "queued" or "running"
    jobs.list()                                # every run (dead processes reconciled first)
    jobs.get(run.id).progress                  # (step, total)
    jobs.metrics(run.id, since_step=0)         # metrics.jsonl rows: loss terms, lr per group, samples/s, ...
    jobs.logs(run.id, tail=50)                 # the run process's stdout + stderr
    jobs.cancel(run.id)                        # SIGTERM -> checkpoint -> exit 143; SIGKILL after the grace
    jobs.resume(run.id)                        # a cancelled or failed run, from its last checkpoint
    jobs.delete(run.id, keep_checkpoint=True)  # {"removed": [...], "kept": [...]}
    jobs.wait(run.id, timeout=600)             # block until done / failed / cancelled
    jobs.reconcile()                           # mark runs whose process died; start what the queue allows

The public surface for the CLI and the UI is ``JobManager`` and ``Run`` (``Run.as_dict()`` for
``show --json``, ``Run.brief()`` for ``list --json``: id, name, status, pid, output checkpoint,
progress, error), ``STATUSES`` (``queued``, ``running``, ``done``, ``failed``, ``cancelled``),
``JobError`` (every refusal, with a message for the user) and ``method_defaults`` (a form's
defaults and where each comes from).

Modules, one concept each (lowest first):

    records       Run (the record), the statuses and their moves, exit codes, JobError
    run_store     RunStore: the SQLite file (WAL, short transactions, safe from many processes)
    configs       per-method YAML defaults (configs/<method>.yaml, each number with its source; a plugin's
                  from its class's job_defaults) + overrides
    training_data any data folder as training samples (synthetic world, samples.jsonl, any retrieval
                  layout) and what it holds back for evaluation; the local pairs a method may need
                  (GOAL's FLISM pairs), and the check of a run's data and init against its class
    launcher      the run process: its command, its own session/process group, reaping, signals
    queue         which queued run starts now and on which GPUs (a cap, one GPU per run by default)
    final_eval    the evaluation recorded with a finished run
    publish       the finished checkpoint's manifest in the zoo
    worker        the run process itself (``python -m explorer.jobs.worker RUN_ID --root DIR``)
    manager       JobManager: submit, list, cancel, resume, delete, logs, metrics, reconcile
    (the evaluation tasks a sweep runs, and their options, are ``explorer.evaluation.tasks``)
    eval_child    one evaluation (kind EVAL) in its run process: torchrun ranks, results.json, results rows
    sweeps        a sweep (kind SWEEP): one child per (model, dataset, task); status from its children;
                  cancel / resume / delete over them (``JobManager.submit_eval``)

On disk, under ``<home>/jobs/``: ``runs.sqlite3`` (the store) and ``runs/<id>/`` per run: the
training loop's run folder (``metrics.jsonl``, ``run.jsonl``, ``model.safetensors``,
``<name>.json`` manifest, ``resume/``) plus ``run.log`` (the process's output). A finished run is
also published as ``<zoo>/jobs/<name>.json``. Two runs with the same name are two runs: ids and
folders differ (the zoo entry of the second is ``<name>-<id>``).

No daemon: a run is started by whoever changes the queue (submit, resume, cancel, reconcile, and
the run process itself when it ends), so runs go on and the queue moves without the app. The app
(the web process) never trains.

Many processes: ``submit(gpus=N)`` (N GPUs of the pool) or ``submit(processes=N)`` (N CPU ranks,
Gloo) runs the worker under torchrun; the record keeps torchrun's pid and group and rank 0 alone
writes it (``worker``, ``launcher``). Slurm: ``submit(backend="slurm", slurm={...})`` submits the same
worker command through submitit (``slurm``), recorded in the same store; one node per run.
"""

from __future__ import annotations

from explorer.core.lazy import lazy_exports

_EXPORTS = {
    "JobManager": "manager",
    "Run": "records", "JobError": "records", "STATUSES": "records", "QUEUED": "records", "RUNNING": "records",
    "DONE": "records", "FAILED": "records", "CANCELLED": "records",
    "RunStore": "run_store",
    "method_defaults": "configs", "resolve_config": "configs", "known_methods": "configs",
    "inspect_data": "training_data",
}


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
__all__ = sorted(_EXPORTS)
