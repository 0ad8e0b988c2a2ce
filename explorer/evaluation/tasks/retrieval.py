"""The ``retrieval`` task: Recall@K both ways on a retrieval dataset (``explorer eval-retrieval``, a sweep's
``--task retrieval``). The same reading, the same embedding cache, the same ``evaluate_retrieval`` as the
command: under torchrun each rank embeds its share of the dataset into the one cache
(``EmbeddingStore.update_part``); after a barrier rank 0 scores."""

from __future__ import annotations

from dataclasses import replace

from explorer.core.errors import ExplorerError
from explorer.evaluation.tasks.base import EvalJob, EvalOutcome, Task, numeric_metrics, register
from explorer.evaluation.tasks.options import ALLOW_PICKLE, LIMIT, SPLIT, Option

# what reads the dataset (``index`` and ``search`` take these too)
READING = (SPLIT, Option("layout", "read the dataset in this layout (docci, urban1k, karpathy, folder, ...; "
                                   "default: detected)"),
           replace(LIMIT, help="only the first N pictures, with their captions (as `explorer eval --limit N`)"))
OPTIONS = (*READING,
           Option("ks", "the Ks of R@K (default 1 5 10 25 50)", kind="ints", flag="--k", minimum=1),
           Option("shortlist", "candidates re-ranked per query on datasets too large to score every pair "
                               "(default: the library's, 100)", kind="int", minimum=1),
           Option("queries", "leave the per-query records out of the JSON", kind="flag", default=True),
           ALLOW_PICKLE)


def run(job: EvalJob) -> EvalOutcome | None:
    from explorer.evaluation.pace import Pace
    from explorer.evaluation.retrieval import DEFAULT_KS, evaluate_retrieval, read_evaluation_set, results_document
    from explorer.retrieval.embedding_store import EmbeddingStore
    from explorer.retrieval.search import DEFAULT_SHORTLIST

    values = TASK.values(job.options)
    store, error = None, None
    try:  # every rank reads and embeds; a failure on any rank fails them all (no rank waits forever)
        dataset = read_evaluation_set(job.data, values["split"], values["layout"], values["limit"])
        store = EmbeddingStore(job.load_model(), dataset)
        job.say(f"{job.model_label} on {dataset.summary()}")
        pace = Pace(job.model_label, job.say if job.rank == 0 else None)  # the forwards and the time left
        if job.world > 1:
            store.update_part(job.rank, job.world, progress=pace.progress, should_stop=job.should_stop)
        else:
            store.update(progress=pace.progress, should_stop=job.should_stop)
    except Exception as caught:  # noqa: BLE001 - said after the ranks agree
        error = caught
    if not job.all_ok(error is None):
        raise error or ExplorerError("another process of this evaluation failed while embedding (the log says why)")
    if job.should_stop() or job.rank != 0:
        return None
    job.say(store.status().line())
    ks = sorted(set(values["ks"] or DEFAULT_KS))
    job.scoring()
    entry = evaluate_retrieval(store.model, store, ks, shortlist=int(values["shortlist"] or DEFAULT_SHORTLIST),
                               queries=bool(values["queries"]))
    document = results_document(store.usable_set(), ks, {job.model_label: entry})
    return EvalOutcome(document=document, metrics=numeric_metrics(entry))


TASK = register(Task("retrieval", "Recall@K both ways on a retrieval dataset", OPTIONS, run))

__all__ = ["OPTIONS", "READING", "TASK", "run"]
