"""Evaluation tasks: what one child of a sweep does, by name. A registry, so that a task is one function.

    @task("retrieval")
    def retrieval(job: EvalJob) -> EvalOutcome | None: ...
    run_task("retrieval", job)            # the child's work, in the run process (``eval_child``)

A runner gets an ``EvalJob`` (the model as the user named it, the dataset folder, the options of the
sweep, the device, this process's rank among ``world``, a stop flag) and returns an ``EvalOutcome`` on
rank 0: the results document (written as the child's ``results.json``, the same document the
foreground command writes) and the flat metrics that become rows of the results table. Other ranks
return None. A runner raises for a model that does not load or a dataset that does not read: the child
fails with that message and the sweep's other children go on.

- ``retrieval``: what ``explorer eval-retrieval`` does (``evaluation.retrieval``): the same reading, the
  same embedding cache, the same ``evaluate_retrieval``. Under torchrun each rank embeds its share of
  the dataset into the one cache (``EmbeddingStore.update_part``); after a barrier rank 0 scores.
- ``grounding``: ``explorer eval-grounding``'s library entry point (``explorer.evaluation.real_grounding``),
  imported when the task runs; a build without it fails the child and says so.
- ``refcoco``: the same on a refer toolkit folder, for every (dataset, split) of CAFT's Table 2 and SEPS's
  Table 4 that the folder holds (RefCOCO val/testA/testB, RefCOCO+ val/testA/testB, G-Ref val/test; or the
  ``dataset`` and ``split`` options): its rows go to the results table under "RefCOCO val" and so on
  (``EvalOutcome.datasets``), with ``miou``, ``oiou`` and ``box_accuracy`` of the headline kind (the
  first ``kinds`` option, else the method's native map, else generic) beside every "<kind>/<metric>".
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from explorer.jobs.records import JobError

RETRIEVAL, GROUNDING, REFCOCO = "retrieval", "grounding", "refcoco"
BOTH = "both"  # a sweep of both: one retrieval and one grounding child per (model, dataset)
GROUNDING_MODULE = "explorer.evaluation.real_grounding"
NOT_AVAILABLE = "grounding evaluation is not available in this build"
# entry fields of evaluate_retrieval that describe the run, not the model: not rows of the results table
NOT_METRICS = frozenset({"images", "captions", "seconds", "context_length"})

TASKS: dict[str, Callable[["EvalJob"], "EvalOutcome | None"]] = {}


@dataclass
class EvalJob:
    model: str  # a zoo name, a manifest or a weights file, as the user gave it
    data: str  # the dataset folder
    options: dict = field(default_factory=dict)  # split, layout, limit, ks, shortlist, queries, allow_pickle, zoo
    device: str = "cpu"
    out_dir: str = ""
    rank: int = 0
    world: int = 1
    should_stop: Callable[[], bool] = lambda: False
    say: Callable[[str], None] = print
    all_ok: Callable[[bool], bool] = lambda ok: ok  # a collective: True when every rank is ok (torchrun)
    scoring: Callable[[], None] = lambda: None  # called when the slow, uninterruptible scoring starts

    @property
    def model_label(self) -> str:
        return model_label(self.model)

    @property
    def dataset_label(self) -> str:
        return Path(self.data).name or str(self.data)


@dataclass
class EvalOutcome:
    document: dict  # the child's results.json
    metrics: dict[str, float]  # metric -> value: the child's rows of the results table
    datasets: dict[str, dict[str, float]] | None = None  # label -> metrics: rows under these dataset names instead


def task(name: str):
    """Register ``runner`` as the task ``name`` (a later registration of the same name replaces it)."""
    def register(runner):
        TASKS[name] = runner
        return runner
    return register


def task_names() -> list[str]:
    return sorted(TASKS)


def expand_tasks(name: str) -> list[str]:
    """The tasks a sweep's ``--task`` asks for: one name, or ``both``."""
    if name == BOTH:
        return [RETRIEVAL, GROUNDING]
    if name not in TASKS:
        raise JobError(f"unknown evaluation task {name!r}; known: {', '.join(task_names() + [BOTH])}")
    return [name]


def run_task(name: str, job: EvalJob) -> EvalOutcome | None:
    if name not in TASKS:
        raise JobError(f"unknown evaluation task {name!r}; known: {', '.join(task_names())}")
    return TASKS[name](job)


def model_label(reference: str) -> str:
    """How a model is named in the results: a zoo name as given, a file by its name without the suffix."""
    path = Path(reference)
    return path.stem if path.suffix or "/" in reference else reference


def load_model(job: EvalJob):
    import explorer

    return explorer.load(job.model, device=job.device, allow_pickle=bool(job.options.get("allow_pickle")),
                         zoo_root=job.options.get("zoo"))


def numeric_metrics(entry: dict, prefix: str = "") -> dict[str, float]:
    """Every number of a (nested) result entry, by its key path ("a/b"), but the run's descriptions."""
    found: dict[str, float] = {}
    for key, value in entry.items():
        if key in NOT_METRICS or isinstance(value, bool):
            continue
        if isinstance(value, (int, float)):
            found[prefix + str(key)] = float(value)
        elif isinstance(value, dict) and key not in ("truncation", "queries"):
            found.update(numeric_metrics(value, f"{prefix}{key}/"))
    return found


# ---- retrieval ---------------------------------------------------------------------------------------


@task(RETRIEVAL)
def retrieval(job: EvalJob) -> EvalOutcome | None:
    from explorer.retrieval.embedding_store import EmbeddingStore
    from explorer.evaluation.retrieval import DEFAULT_KS, evaluate_retrieval, read_evaluation_set, results_document
    from explorer.retrieval.search import DEFAULT_SHORTLIST

    options = job.options
    store, error = None, None
    try:  # every rank reads and embeds; a failure on any rank fails them all (no rank waits forever)
        dataset = read_evaluation_set(job.data, options.get("split"), options.get("layout"), options.get("limit"))
        store = EmbeddingStore(load_model(job), dataset)
        job.say(f"{job.model_label} on {dataset.summary()}")
        if job.world > 1:
            store.update_part(job.rank, job.world, should_stop=job.should_stop)
        else:
            store.update(should_stop=job.should_stop)
    except Exception as caught:  # noqa: BLE001 - said after the ranks agree
        error = caught
    if not job.all_ok(error is None):
        raise error or JobError("another process of this evaluation failed while embedding (the log says why)")
    if job.should_stop() or job.rank != 0:
        return None
    job.say(store.status().line())
    ks = sorted(set(options.get("ks") or DEFAULT_KS))
    job.scoring()
    entry = evaluate_retrieval(store.model, store, ks, shortlist=int(options.get("shortlist") or DEFAULT_SHORTLIST),
                               queries=bool(options.get("queries", True)))
    document = results_document(store.usable_set(), ks, {job.model_label: entry})
    return EvalOutcome(document=document, metrics=numeric_metrics(entry))


# ---- grounding (issue 22's library, when this build has it) -----------------------------------------


def grounding_library():
    """(the evaluation library, the grounding-set readers), imported when a task runs; a build without them
    fails the child and says so."""
    try:
        return importlib.import_module(GROUNDING_MODULE), importlib.import_module("explorer.data.grounding_sets")
    except ImportError as error:
        raise JobError(f"{NOT_AVAILABLE} ({GROUNDING_MODULE} cannot be imported: {error})") from error


@task(GROUNDING)
def grounding(job: EvalJob) -> EvalOutcome | None:
    library, readers = grounding_library()
    if job.rank != 0:  # one process scores; nothing to share
        return None
    grounding_set = readers.read_grounding_set(job.data, **_given(job.options, "split", "layout", "units", "limit"),
                                               options=_given(job.options, *LAYOUT_OPTIONS))
    model = load_model(job)
    job.scoring()
    result = library.evaluate_grounding({job.model_label: model}, grounding_set, kinds=job.options.get("kinds"),
                                        work_file=str(Path(job.out_dir) / "grounding-work.jsonl"), progress=False,
                                        **_given(job.options, *BOX_OPTIONS))
    metrics, label = grounding_metrics(result, job.model_label), grounding_set.extra.get("label")
    return EvalOutcome(document=result, metrics=metrics, datasets={label: metrics} if label else None)


def grounding_metrics(result: dict, name: str) -> dict[str, float]:
    """The results-table rows of one model's grounding result: "<kind>/<miou|pointing|auroc|n_units>", and the
    same for the run's baselines as "<baseline>/<metric>" (they score the same units: the floor to compare)."""
    metrics = {}
    for entry in result["models"]:
        if entry["name"] == name:
            metrics.update(numeric_metrics(entry["kinds"]))
        elif entry["method"] == "baseline":
            metrics.update(numeric_metrics({entry["name"]: next(iter(entry["kinds"].values()))}))
    return metrics


# ---- refcoco: the papers' tables, one child for every (dataset, split) -----------------------------------

LAYOUT_OPTIONS = ("dataset", "split_by", "images", "proposals", "text")  # the refcoco layout's own options
BOX_OPTIONS = ("box_alpha", "min_box_area")  # how a map picks its box (evaluate_grounding's)
PAPER_COLUMNS = (("refcoco", "val"), ("refcoco", "testA"), ("refcoco", "testB"), ("refcoco+", "val"),
                 ("refcoco+", "testA"), ("refcoco+", "testB"), ("refcocog", "val"),
                 ("refcocog", "test"))  # CAFT Table 2 (to G-Ref val), SEPS Table 4 (and RefCOCOg test)
HEADLINE = ("miou", "oiou", "box_accuracy")


@task(REFCOCO)
def refcoco(job: EvalJob) -> EvalOutcome | None:
    library, readers = grounding_library()
    if job.rank != 0:
        return None
    model, options = load_model(job), job.options
    columns = [(d, s) for d, s in PAPER_COLUMNS
               if options.get("dataset") in (None, d) and options.get("split") in (None, s)]
    if options.get("dataset") and options.get("split") and not columns:
        columns = [(options["dataset"], options["split"])]
    documents, datasets = {}, {}
    for dataset, split in columns:
        if not (Path(job.data) / dataset).is_dir():
            job.say(f"{job.data} has no {dataset}/: its columns are left out")
            continue
        grounding_set = readers.read_grounding_set(job.data, split=split, layout="refcoco", limit=options.get("limit"),
                                                   options={**_given(options, *LAYOUT_OPTIONS), "dataset": dataset})
        job.say(grounding_set.summary())
        job.scoring()
        work = Path(job.out_dir) / f"refcoco-{dataset}-{split}-work.jsonl"
        result = library.evaluate_grounding({job.model_label: model}, grounding_set, kinds=options.get("kinds"),
                                            work_file=str(work), progress=False, **_given(options, *BOX_OPTIONS))
        label = grounding_set.extra["label"]
        documents[label], datasets[label] = result, referring_metrics(result, job.model_label, model, options)
    if not datasets:
        raise JobError(f"{job.data} holds none of refcoco/, refcoco+/, refcocog/ with the asked splits")
    metrics = {f"{label}/{name}": values[name] for label, values in datasets.items() for name in HEADLINE
               if values.get(name) is not None}
    return EvalOutcome(document={"format": "explorer-referring/1", "results": documents}, metrics=metrics,
                       datasets=datasets)


def referring_metrics(result: dict, name: str, model, options: dict) -> dict[str, float]:
    """``grounding_metrics`` and, unprefixed, ``HEADLINE`` of the headline kind: the papers' one number per column."""
    from explorer.evaluation.grounding_eval import native_kind

    metrics = grounding_metrics(result, name)
    kind = (options.get("kinds") or [None])[0] or native_kind(model) or "generic"
    metrics.update({metric: metrics[f"{kind}/{metric}"] for metric in HEADLINE if f"{kind}/{metric}" in metrics})
    return metrics


def _given(options: dict, *names: str) -> dict:
    return {name: options[name] for name in names if options.get(name) is not None}


__all__ = ["BOTH", "EvalJob", "EvalOutcome", "GROUNDING", "NOT_AVAILABLE", "REFCOCO", "RETRIEVAL", "TASKS",
           "expand_tasks", "model_label", "numeric_metrics", "run_task", "task", "task_names"]

from explorer.jobs import benchmark_tasks  # noqa: E402,F401 - registers negatives and zeroshot (they import task)
