"""The ``refcoco`` task: the papers' referring tables, one sweep child for every (dataset, split) of CAFT's
Table 2 and SEPS's Table 4 that a refer toolkit folder holds (RefCOCO val/testA/testB, RefCOCO+ val/testA/testB,
G-Ref val/test; or the ``dataset`` and ``split`` options). Its rows go to the results table under "RefCOCO val"
and so on (``EvalOutcome.datasets``), with ``miou``, ``oiou`` and ``box_accuracy`` of the headline kind (the
first ``kinds`` option, else the method's native map, else generic) beside every "<kind>/<metric>"."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from explorer.data.errors import DatasetError
from explorer.evaluation.tasks.base import EvalJob, EvalOutcome, Task, register
from explorer.evaluation.tasks.grounding import BOX, REFER, grounding_metrics
from explorer.evaluation.tasks.options import ALLOW_PICKLE, KINDS_OPTION, LIMIT, SPLIT

PAPER_COLUMNS = (("refcoco", "val"), ("refcoco", "testA"), ("refcoco", "testB"), ("refcoco+", "val"),
                 ("refcoco+", "testA"), ("refcoco+", "testB"), ("refcocog", "val"),
                 ("refcocog", "test"))  # CAFT Table 2 (to G-Ref val), SEPS Table 4 (and RefCOCOg test)
HEADLINE = ("miou", "oiou", "box_accuracy")
OPTIONS = (replace(SPLIT, help="only this split's columns (default: every paper column the folder holds)"),
           *REFER, *BOX, KINDS_OPTION, replace(LIMIT, help="only the first N pictures of each column"), ALLOW_PICKLE)
LAYOUT_READS = tuple(option.name for option in REFER)


def run(job: EvalJob) -> EvalOutcome | None:
    from explorer.data.grounding_sets import read_grounding_set
    from explorer.evaluation.real_grounding import evaluate_grounding

    if job.rank != 0:
        return None
    values = TASK.values(job.options)
    model = job.load_model()
    documents, datasets = {}, {}
    for dataset, split in columns(values["dataset"], values["split"]):
        if not (Path(job.data) / dataset).is_dir():
            job.say(f"{job.data} has no {dataset}/: its columns are left out")
            continue
        grounding_set = read_grounding_set(job.data, split=split, layout="refcoco", limit=values["limit"],
                                           options={**TASK.given(values, *LAYOUT_READS), "dataset": dataset})
        job.say(grounding_set.summary())
        job.scoring()
        result = evaluate_grounding({job.model_label: model}, grounding_set, kinds=values["kinds"],
                                    work_file=job.work_file(f"refcoco-{dataset}-{split}-work.jsonl"), progress=False,
                                    say=job.say, **TASK.given(values, *(option.name for option in BOX)))
        label = grounding_set.title
        documents[label], datasets[label] = result, referring_metrics(result, job.model_label, model, values)
    if not datasets:
        raise DatasetError(f"{job.data} holds none of refcoco/, refcoco+/, refcocog/ with the asked splits")
    metrics = {f"{label}/{name}": found[name] for label, found in datasets.items() for name in HEADLINE
               if found.get(name) is not None}
    return EvalOutcome(document={"format": "explorer-referring/1", "results": documents}, metrics=metrics,
                       datasets=datasets)


def columns(dataset: str | None, split: str | None) -> list[tuple[str, str]]:
    """The (dataset, split) columns asked: the papers' that match, or the one named outside them."""
    found = [(d, s) for d, s in PAPER_COLUMNS if dataset in (None, d) and split in (None, s)]
    return found or ([(dataset, split)] if dataset and split else [])


def referring_metrics(result: dict, name: str, model, options: dict) -> dict[str, float]:
    """``grounding_metrics`` and, unprefixed, ``HEADLINE`` of the headline kind: the papers' one number per column."""
    from explorer.evaluation.grounding_eval import native_kind

    metrics = grounding_metrics(result, name)
    kind = (options.get("kinds") or [None])[0] or native_kind(model) or "generic"
    metrics.update({metric: metrics[f"{kind}/{metric}"] for metric in HEADLINE if f"{kind}/{metric}" in metrics})
    return metrics


TASK = register(Task("refcoco", "every column of CAFT's Table 2 / SEPS's Table 4 the refer folder holds",
                     OPTIONS, run))

__all__ = ["HEADLINE", "OPTIONS", "PAPER_COLUMNS", "TASK", "columns", "referring_metrics", "run"]
