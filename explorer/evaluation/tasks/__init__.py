"""Evaluation tasks, one module each, as clip_benchmark keeps one module per task: each declares its options
once (``options.Option``) and what one run of it does (``base.Task``). The command line (``explorer eval``,
``eval-retrieval``, ``eval-grounding``, ``eval-negatives``, ``eval-zeroshot``), ``explorer jobs submit-eval``
and the Jobs tab's sweep form are built from those declarations.

    retrieval    Recall@K both ways (eval-retrieval)
    grounding    sentence maps on a real grounding dataset; the refer layout's options (eval-grounding)
    refcoco      every paper column of a refer toolkit folder (a sweep's --task refcoco)
    negatives    true captions against hard negatives (eval-negatives)
    zeroshot     zero-shot top-1/top-5 (eval-zeroshot)
    synthetic    the zoo on the synthetic world (explorer eval; no sweep)

Importing the package registers them all; nothing heavy is imported until a task runs.
"""

from __future__ import annotations

from explorer.evaluation.tasks import grounding, negatives, refcoco, retrieval, synthetic, zeroshot
from explorer.evaluation.tasks.base import (BOTH, TASKS, EvalJob, EvalOutcome, Task, expand_tasks, get_task,
                                            model_label, numeric_metrics, run_task, task_names)
from explorer.evaluation.tasks.options import Option, checked_options, union

MODULES = (retrieval, grounding, refcoco, negatives, zeroshot, synthetic)


def sweep_options(tasks=None) -> tuple[Option, ...]:
    """Every option a sweep of ``tasks`` (names; default every sweep task) may take, each once."""
    return union(get_task(name).options for name in (task_names() if tasks is None else tasks))


def takers(name: str) -> dict[str, Option]:
    """{task: its declaration of the option ``name``} over the sweep tasks that read it."""
    return {task: option for task in task_names() for option in get_task(task).options if option.name == name}


def sweep_help(name: str) -> str:
    """The option's help for a sweep: the tasks that read it, then one help where they declare it alike, else
    each task's."""
    said = {task: option.help for task, option in takers(name).items()}
    if len(set(said.values())) == 1:
        return f"{', '.join(said)}: {next(iter(said.values()))}"
    return "; ".join(f"{task}: {text}" for task, text in said.items())


__all__ = ["BOTH", "EvalJob", "EvalOutcome", "MODULES", "Option", "TASKS", "Task", "checked_options",
           "expand_tasks", "get_task", "model_label", "numeric_metrics", "run_task", "sweep_help", "sweep_options",
           "takers", "task_names"]
