"""The ``negatives`` task: does each picture's or region's true caption beat its hard negatives
(``explorer eval-negatives``, a sweep's ``--task negatives``): the dataset folder read in the ``layout``
option (fg-ovd, sugarcrepe, synthetic), its ``splits`` (default every file present) with pictures under
``images``, a box read by ``region`` (roi, crop) and a tie counted by ``ties`` (hit, miss). The results table
gets one column per split, "accuracy/hard" and so on, under the set's name as the papers print it
("FG-OVD", its reader's title): MulCLIP's and CAFT's Table 8 as a row per model."""

from __future__ import annotations

from dataclasses import replace

from explorer.data.negatives_sets import LAYOUTS
from explorer.evaluation.tasks.base import EvalJob, EvalOutcome, Task, register
from explorer.evaluation.tasks.options import ALLOW_PICKLE, LIMIT, Option

OPTIONS = (Option("layout", "the dataset's layout (default: detected from its names)", choices=tuple(LAYOUTS)),
           Option("splits", "FG-OVD: hard, medium, easy, trivial, color, material, pattern, transparency; "
                            "SugarCrepe: replace_obj, swap_att, add_obj, ...; repeat for several (default: every "
                            "file present)", kind="names", flag="--split", sweep_flag="--splits", metavar="NAME"),
           Option("images", "where the pictures are (FG-OVD: the COCO root holding val2017/; SugarCrepe: COCO's "
                            "val2017/; default: under --data)", kind="path"),
           Option("region", "how a box is read: roi (FG-CLIP's, the default: the whole picture, the box's patch "
                            "features pooled with RoIAlign) or crop (Bianchi et al.'s CLIP baseline: the box cut "
                            "out)", choices=("roi", "crop"), default="roi"),
           Option("ties", "a positive that ties the best negative: hit (both official codes, the default) or miss "
                          "(explorer eval's rule)", choices=("hit", "miss"), default="hit"),
           replace(LIMIT, help="only the first N items of each split"), ALLOW_PICKLE)


def run(job: EvalJob) -> EvalOutcome | None:
    from explorer.data.negatives_sets import read_negatives_set
    from explorer.evaluation.negatives import evaluate_negatives

    if job.rank != 0:  # one process scores
        return None
    values = TASK.values(job.options)
    splits = values["splits"] or job.options.get("split")  # several, or the sweep's one --split
    dataset = read_negatives_set(job.data, layout=values["layout"], splits=splits, images=values["images"],
                                 limit=values["limit"])
    job.say(dataset.summary())
    model = job.load_model()
    job.scoring()
    result = evaluate_negatives({job.model_label: model}, dataset, progress=False,
                                work_file=job.work_file("negatives-work.jsonl"), region=values["region"],
                                ties=values["ties"], say=job.say)
    entry = result["models"][0]
    metrics = {f"accuracy/{split}": value for split, value in entry["accuracy"].items() if value is not None}
    # the results table's dataset column: the set's name in the papers' tables, as its reader titled it
    return EvalOutcome(document=result, metrics=metrics, datasets={dataset.title or job.dataset_label: metrics})


TASK = register(Task("negatives", "true captions against their hard negatives (FG-OVD, SugarCrepe, synthetic)",
                     OPTIONS, run))

__all__ = ["OPTIONS", "TASK", "run"]
