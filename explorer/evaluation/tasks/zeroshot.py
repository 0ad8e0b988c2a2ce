"""The ``zeroshot`` task: zero-shot top-1 and top-5 (``explorer eval-zeroshot``, a sweep's ``--task
zeroshot``): the folder read in the ``layout`` option (cifar10, cifar100, imagenet-v2, imagenet-o, folder;
detected from the folder's names when not given) with the ``templates``, ``classnames`` and ``class_set``
options; "top1" and "top5" under the dataset's name as the papers print it ("CIFAR-10", "ImageNet-V2", ...):
MulCLIP's Table 7 columns."""

from __future__ import annotations

from dataclasses import replace

from explorer.data.class_sets import LAYOUTS
from explorer.evaluation.tasks.base import EvalJob, EvalOutcome, Task, register
from explorer.evaluation.tasks.options import ALLOW_PICKLE, LIMIT, Option

OPTIONS = (Option("layout", "the dataset's layout (default: detected from its names)", choices=tuple(LAYOUTS)),
           Option("templates", "cifar (CLIP's 18, the default for cifar10/cifar100), openai (CLIP's 80, the default "
                               "otherwise), simple (7), or a file: one template a line, {} where the class name goes"),
           Option("classnames", "class names file: 'wnid name' lines (imagenet-o) or one name a line in class-index "
                                "order (imagenet-v2)", kind="path", metavar="FILE"),
           Option("class_set", "imagenet-o: fixed (clip_benchmark's 200 classes, the default) or present (the "
                               "WordNet id folders there)", choices=("fixed", "present"), default="fixed"),
           replace(LIMIT, help="only N pictures, spread evenly over the set"), ALLOW_PICKLE)


def run(job: EvalJob) -> EvalOutcome | None:
    from explorer.data.class_sets import read_class_set
    from explorer.evaluation.zeroshot import evaluate_zeroshot

    if job.rank != 0:
        return None
    values = TASK.values(job.options)
    dataset = read_class_set(job.data, values["layout"], limit=values["limit"],
                             allow_pickle=bool(values["allow_pickle"]), classnames=values["classnames"],
                             class_set=values["class_set"])
    job.say(dataset.summary())
    model = job.load_model()
    job.scoring()
    result = evaluate_zeroshot({job.model_label: model}, dataset, templates=values["templates"], progress=False,
                               work_file=job.work_file("zeroshot-work.jsonl"), say=job.say)
    entry = result["models"][0]
    metrics = {k: entry[k] for k in ("top1", "top5") if entry[k] is not None}
    return EvalOutcome(document=result, metrics=metrics, datasets={dataset.title or job.dataset_label: metrics})


TASK = register(Task("zeroshot", "zero-shot classification top-1/top-5 (CIFAR-10/100, ImageNet-V2/O, a folder)",
                     OPTIONS, run))

__all__ = ["OPTIONS", "TASK", "run"]
