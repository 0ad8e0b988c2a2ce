"""Evaluation tasks of the fine-grained and short-text tables: ``negatives`` (``explorer eval-negatives``) and
``zeroshot`` (``explorer eval-zeroshot``), registered with ``eval_tasks.task`` like retrieval and grounding.

- ``negatives``: the dataset folder read in the ``layout`` option (fg-ovd, sugarcrepe, synthetic), its
  ``splits`` (default every file present) with pictures under ``images``, a box read by ``region`` (roi,
  crop) and a tie counted by ``ties`` (hit, miss); the results table gets one
  column per split, "accuracy/hard" and so on, under the layout's name ("FG-OVD" for fg-ovd): MulCLIP's
  and CAFT's Table 8 as a row per model.
- ``zeroshot``: the folder read in the ``layout`` option (cifar10, cifar100, imagenet-v2, imagenet-o,
  folder; detected from the folder's names when not given, as the page's sweep form gives none) with
  the ``templates`` (default: the set's own, CLIP's 18 for CIFAR), ``classnames`` and ``class_set`` (ImageNet-O:
  fixed, clip_benchmark's 200; present) options; "top1" and "top5" under the dataset's name as
  the papers print it ("CIFAR-10", "ImageNet-V2", ...): MulCLIP's Table 7 columns.

Both write their per-item work file in the child's folder, so a resumed child scores only what is missing.
"""

from __future__ import annotations

from pathlib import Path

from explorer.jobs.eval_tasks import EvalJob, EvalOutcome, load_model, task

NEGATIVES, ZEROSHOT = "negatives", "zeroshot"
LABELS = {"fg-ovd": "FG-OVD", "sugarcrepe": "SugarCrepe", "cifar10": "CIFAR-10", "cifar100": "CIFAR-100",
          "imagenet-v2": "ImageNet-V2", "imagenet-o": "ImageNet-O"}  # a layout's name in the papers' tables


def _label(job: EvalJob, layout: str) -> str:
    return LABELS.get(layout, job.dataset_label)


@task(NEGATIVES)
def negatives(job: EvalJob) -> EvalOutcome | None:
    from explorer.data.negatives_sets import detect, read_negatives_set
    from explorer.evaluation.negatives import evaluate_negatives

    if job.rank != 0:  # one process scores
        return None
    options = job.options
    layout = options.get("layout") or detect(Path(job.data))
    splits = options.get("splits") or options.get("split")  # several, or the sweep's one --split
    dataset = read_negatives_set(job.data, layout=layout, splits=splits, images=options.get("images"),
                                 limit=options.get("limit"))
    job.say(dataset.summary())
    model = load_model(job)
    job.scoring()
    result = evaluate_negatives({job.model_label: model}, dataset, progress=False,
                                work_file=str(Path(job.out_dir) / "negatives-work.jsonl"),
                                region=options.get("region") or "roi", ties=options.get("ties") or "hit")
    entry = result["models"][0]
    metrics = {f"accuracy/{split}": value for split, value in entry["accuracy"].items() if value is not None}
    return EvalOutcome(document=result, metrics=metrics, datasets={_label(job, layout): metrics})


@task(ZEROSHOT)
def zeroshot(job: EvalJob) -> EvalOutcome | None:
    from explorer.data.class_sets import detect, read_class_set
    from explorer.evaluation.zeroshot import evaluate_zeroshot

    if job.rank != 0:
        return None
    options = job.options
    layout = options.get("layout") or detect(job.data)  # the page's sweep form names no layout
    dataset = read_class_set(job.data, layout, limit=options.get("limit"),
                             allow_pickle=bool(options.get("allow_pickle")), classnames=options.get("classnames"),
                             class_set=options.get("class_set") or "fixed")
    job.say(dataset.summary())
    model = load_model(job)
    job.scoring()
    result = evaluate_zeroshot({job.model_label: model}, dataset, templates=options.get("templates"), progress=False,
                               work_file=str(Path(job.out_dir) / "zeroshot-work.jsonl"))
    entry = result["models"][0]
    metrics = {k: entry[k] for k in ("top1", "top5") if entry[k] is not None}
    return EvalOutcome(document=result, metrics=metrics, datasets={_label(job, layout): metrics})


__all__ = ["LABELS", "NEGATIVES", "ZEROSHOT", "negatives", "zeroshot"]
