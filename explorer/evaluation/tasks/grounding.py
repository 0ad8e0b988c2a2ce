"""The ``grounding`` task: sentence maps scored on a real annotated dataset (``explorer eval-grounding``, a
sweep's ``--task grounding``): DCI, PNG, Flickr30k Entities, IIW-400, or one RefCOCO column read through the
refer toolkit's layout (whose own options, ``REFER``, are declared here: eval-grounding and the ``refcoco``
task both read them). Its rows: "<kind>/<miou|pointing|auroc|n_units>", and the run's baselines beside."""

from __future__ import annotations

from dataclasses import replace

from explorer.evaluation.metrics.boxes import DEFAULT_ALPHA, DEFAULT_MIN_AREA, box_rule, check_alpha
from explorer.evaluation.tasks.base import EvalJob, EvalOutcome, Task, numeric_metrics, register
from explorer.evaluation.tasks.options import ALLOW_PICKLE, KINDS_OPTION, LIMIT, SPLIT, Option

# the refer toolkit layout's own options (``grounding_sets.refcoco.read``'s keywords)
REFER = (Option("dataset", "refcoco layout: which of the root's folders (default: refcoco when present)",
                choices=("refcoco", "refcoco+", "refcocog")),
         Option("split_by", "refcoco layout: the refs file, refs(<split-by>).p (default: unc; refcocog: umd)",
                choices=("unc", "umd", "google")),
         Option("images", "refcoco layout: the COCO train2014 pictures (default: "
                          "ROOT/images/mscoco/images/train2014)", kind="path", metavar="DIR"),
         Option("proposals", "refcoco layout: box grounding picks among these detections instead of the "
                             "picture's COCO boxes: MAttNet's released list, ReCLIP's {image_id: [boxes]} or "
                             "{\"dets\": [...]} (boxes [x, y, w, h]; a picture with none gets the whole picture, "
                             "as ReCLIP)", kind="path", metavar="FILE"),
         Option("text", "refcoco layout: the sentence field read (default raw, as the RIS and ReCLIP codes; "
                        "sent: the toolkit's cleaned text)", choices=("raw", "sent")))
# how a map picks its box among the proposals (``evaluate_grounding``'s)
BOX = (Option("box_alpha", "box grounding: a proposal scores its map sum / area**A (ReCLIP's; default its README's "
                           f"{DEFAULT_ALPHA}; 1 is the mean over the box), A in (0, 2]", kind="float",
              default=DEFAULT_ALPHA, metavar="A", check=check_alpha),
       Option("min_box_area", "box grounding: only a box larger than this share of the picture may be the answer "
                              f"(ReCLIP's --box_area_threshold; default {DEFAULT_MIN_AREA}: every box; ReCLIP's "
                              "method uses 0.05), S in [0, 1)", kind="float", default=DEFAULT_MIN_AREA, metavar="S",
              check=lambda share: box_rule(DEFAULT_ALPHA, share)))
OPTIONS = (replace(SPLIT, help="default: the layout's (DCI: all, PNG: val, Flickr30k Entities: test, RefCOCO: val; "
                               "testA, testB, test as its refs hold them)"),
           Option("layout", "read the folder in this layout (dci, png, flickr30k_entities, iiw, refcoco)"),
           *REFER, *BOX, KINDS_OPTION,
           Option("units", "default: the layout's (PNG offers both)", choices=("sentence", "phrase")),
           replace(LIMIT, help="only the first N pictures with units"), ALLOW_PICKLE)


def run(job: EvalJob) -> EvalOutcome | None:
    from explorer.data.grounding_sets import read_grounding_set
    from explorer.evaluation.real_grounding import evaluate_grounding

    if job.rank != 0:  # one process scores; nothing to share
        return None
    values = TASK.values(job.options)
    grounding_set = read_grounding_set(job.data, **TASK.given(values, "split", "layout", "units", "limit"),
                                       options=TASK.given(values, *(option.name for option in REFER)))
    model = job.load_model()
    job.scoring()
    result = evaluate_grounding({job.model_label: model}, grounding_set, kinds=values["kinds"],
                                work_file=job.work_file("grounding-work.jsonl"), progress=False, say=job.say,
                                **TASK.given(values, *(option.name for option in BOX)))
    metrics, label = grounding_metrics(result, job.model_label), grounding_set.title
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


TASK = register(Task("grounding", "sentence maps scored on a real grounding dataset", OPTIONS, run))

__all__ = ["BOX", "OPTIONS", "REFER", "TASK", "grounding_metrics", "run"]
