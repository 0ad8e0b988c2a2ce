"""An evaluation task: its options (declared once, ``options``) and what one run of it does, by name.

    TASK = register(Task("retrieval", "Recall@K both ways", OPTIONS, run))
    run_task("retrieval", job)            # a sweep child's work (``jobs.eval_child``)

A runner gets an ``EvalJob`` (the model as the user named it, the dataset folder, the options, the device,
this process's rank among ``world``, a stop flag) and returns an ``EvalOutcome`` on rank 0: the results
document (the child's ``results.json``, the document the foreground command writes) and the flat metrics
that become rows of the results table. Other ranks return None. A runner raises for a model that does not
load or a dataset that does not read: the child fails with that message and the sweep's other children go on.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from explorer.core.errors import InputError
from explorer.evaluation.tasks.options import Option, checked_options

BOTH = "both"  # a sweep of both: one retrieval and one grounding child per (model, dataset)
# entry fields of an evaluation that describe the run, not the model: not rows of the results table
NOT_METRICS = frozenset({"images", "captions", "seconds", "context_length"})


@dataclass
class EvalJob:
    model: str  # a zoo name, a manifest or a weights file, as the user gave it
    data: str  # the dataset folder
    options: dict = field(default_factory=dict)  # the task's options (``Task.options``) and the zoo folder
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

    def load_model(self):
        import explorer

        return explorer.load(self.model, device=self.device, allow_pickle=bool(self.options.get("allow_pickle")),
                             zoo_root=self.options.get("zoo"))

    def work_file(self, name: str) -> str:
        """Where this run keeps its per-item results (read again by a resumed child)."""
        return str(Path(self.out_dir) / name)


@dataclass
class EvalOutcome:
    document: dict  # the child's results.json
    metrics: dict[str, float]  # metric -> value: the child's rows of the results table
    datasets: dict[str, dict[str, float]] | None = None  # label -> metrics: rows under these dataset names instead


@dataclass(frozen=True)
class Task:
    name: str  # as ``--task`` and the form name it
    title: str  # what it measures, one line
    options: tuple[Option, ...]  # every option it reads: the one declaration
    run: Callable[[EvalJob], EvalOutcome | None] | None = None  # None: a foreground command only (no sweep)

    def option(self, name: str) -> Option:
        return next(option for option in self.options if option.name == name)

    def values(self, given: dict) -> dict:
        """Every declared option's value: ``given``'s, else the declared default."""
        return {option.name: option.value(given) for option in self.options}

    def given(self, given: dict, *names: str) -> dict:
        """The options ``names`` that ``given`` holds (None left out): what a reader or scorer is passed."""
        return {name: given[name] for name in names if given.get(name) is not None}

    def check(self, given: dict) -> dict:
        return checked_options(self.options, given)


TASKS: dict[str, Task] = {}


def register(task: Task) -> Task:
    """Add ``task`` under its name (a later registration of the same name replaces it)."""
    TASKS[task.name] = task
    return task


def task_names() -> list[str]:
    """The tasks a sweep can run (those with a runner)."""
    return sorted(name for name, task in TASKS.items() if task.run is not None)


def expand_tasks(name: str) -> list[str]:
    """The tasks a sweep's ``--task`` asks for: one name, or ``both`` (retrieval and grounding)."""
    if name == BOTH:
        return ["retrieval", "grounding"]
    if name not in task_names():
        raise InputError(f"unknown evaluation task {name!r}; known: {', '.join(task_names() + [BOTH])}")
    return [name]


def get_task(name: str) -> Task:
    if name not in TASKS:
        raise InputError(f"unknown evaluation task {name!r}; known: {', '.join(sorted(TASKS))}")
    return TASKS[name]


def run_task(name: str, job: EvalJob) -> EvalOutcome | None:
    task = get_task(name)
    if task.run is None:
        raise InputError(f"the {name} evaluation runs from its command only, not as a sweep")
    return task.run(job)


def model_label(reference: str) -> str:
    """How a model is named in the results: a zoo name as given, a file by its name without the suffix."""
    path = Path(reference)
    return path.stem if path.suffix or "/" in reference else reference


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


__all__ = ["BOTH", "EvalJob", "EvalOutcome", "TASKS", "Task", "expand_tasks", "get_task", "model_label",
           "numeric_metrics", "register", "run_task", "task_names"]
