"""One evaluation child of a sweep, in its run process (``worker`` hands an EVAL record here).

1. Under torchrun, a process group (Gloo on CPU, NCCL on GPUs: ``training.ddp.setup``): the ranks agree
   on failures and wait for each other before rank 0 scores.
2. The task's runner (``explorer.evaluation.tasks``) does the work. A SIGTERM while embedding stops at the next batch
   (the embedding cache keeps every shard written, so a resume embeds only the rest); during the
   scoring it stops at once.
3. Rank 0 writes ``results.json`` in the child's folder (the foreground command's document), the
   metrics to the store's results table, a summary to the record's ``evaluation``, and the end.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from explorer.jobs.records import CANCELLED, DONE, EXIT_CANCELLED, EXIT_DONE

RESULTS_FILE = "results.json"


def run_child(job) -> int:
    """The evaluation of ``job.record`` (a ``worker._Job``); its exit code."""
    from explorer.core.files import write_text_atomic
    from explorer.evaluation.tasks import EvalJob, model_label, run_task

    run, stop = job.record, job.stop
    ranks = _process_group(run)
    stop.phase = "train"  # a stop flag, read between batches: what is embedded stays
    eval_job = EvalJob(model=run.init or "", data=run.data, options=dict(run.config), out_dir=run.out_dir,
                       device="cuda" if run.gpus else "cpu", rank=job.rank, world=job.world, should_stop=stop,
                       say=job.say, all_ok=(lambda ok: not ranks.agree(not ok)) if ranks else (lambda ok: ok),
                       scoring=lambda: setattr(stop, "phase", "evaluate"))
    job.write(total_steps=1)
    try:
        outcome = run_task(run.method, eval_job)
    finally:
        if ranks is not None:
            ranks.close()
    if stop.requested:
        job.say("stopped; what was embedded stays in the cache")
        return job.finish(CANCELLED, EXIT_CANCELLED, error=None)
    if not job.leader or outcome is None:
        return EXIT_DONE
    stop.phase = "finish"
    path = Path(run.out_dir) / RESULTS_FILE
    write_text_atomic(path, json.dumps(outcome.document, indent=2))
    by_dataset = outcome.datasets or {eval_job.dataset_label: outcome.metrics}  # a task may name its columns
    rows = [{"sweep": run.parent, "model": model_label(eval_job.model), "dataset": label, "task": run.method,
             "metric": metric, "value": value}
            for label, metrics in by_dataset.items() for metric, value in metrics.items()]
    job.store.put_results(run.id, rows)
    split = (outcome.document.get("dataset") or {}).get("split", "?")
    job.write(step=1, checkpoint=None, evaluation={
        "kind": run.method, "split": split, "measures": f"{eval_job.model_label} on {eval_job.dataset_label}",
        "results": str(path), "time": time.time(), "metrics": outcome.metrics})
    job.say(f"{len(rows)} result rows for {eval_job.model_label} on {eval_job.dataset_label}")
    return job.finish(DONE, EXIT_DONE, error=None)


def _process_group(run):
    """The ranks' group under torchrun (None for one process)."""
    from explorer.training import ddp

    return ddp.setup("cuda" if run.gpus else "cpu")


__all__ = ["RESULTS_FILE", "run_child"]
