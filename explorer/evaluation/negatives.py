"""Hard negatives on real data (FG-OVD, SugarCrepe, the synthetic twin): does the true caption win?

``evaluate_negatives(models, negatives_set, region="roi", ties="hit")`` scores, for every model, every item of
a ``NegativesSet`` (``explorer.data.negatives_sets``) against its positive caption and its negatives. A
picture without a box (SugarCrepe) is read with the method's own preprocessing and scored with the model's own
score (``Model.similarity``). A region (FG-OVD) is read by one of two protocols (``REGIONS``):

Pictures are read in their stored pixel frame (no EXIF turn), as the boxes are and as the official codes read them.

- ``roi`` (default; FG-CLIP's, qihoo360/FG-CLIP ``fgclip/eval/fgovd_eval.py``, which MulCLIP follows): the
  whole picture squashed to the model's input square, the box's embedding pooled from the projected patch grid
  with RoIAlign (``Model.region_features``), scored by its cosine with each caption's text embedding. A method
  without a patch grid cannot be read so: it is left out with one line saying why (``--region crop`` reads it).
- ``crop`` (Bianchi et al.'s CLIP baseline, lorebianchi98/FG-CLIP ``fgovd_evaluation/inference_on_benchmark.py``):
  the box cut from the picture in whole pixels (floor of the corner, ceiling of the far edge, clamped), read
  alone with the method's own preprocessing and scored with its own score.

An item is right when its positive scores at least as high as every negative (``ties="hit"``: both official
codes take the first best caption, and the positive is listed first) or strictly higher (``ties="miss"``, as
``explorer eval`` counts); ``accuracy`` per split is the share of its items that are right. Every negative the
file lists is read (FG-CLIP's code reads them all; FG-OVD's pattern and transparency files hold fewer than ten).

Items are scored ``GROUP`` at a time: their pictures (or crops) in one image forward, their captions in one
text call, each item's own captions read off its own row. Per-item scores go to a work file (``WorkFile``) as
each group finishes, so a rerun scores only what is missing (the verdict is counted from the scores, so
``ties`` may change on a rerun; ``region`` may not). A picture that does not open, or a crop under two pixels
once the picture is read, is skipped with its reason (``skipped_items``).

The returned dict (the JSON ``explorer eval-negatives`` writes): ``format``, ``protocol`` (region, ties, what
each means), ``dataset`` (layout, root, splits and their files, items, negatives per split, what was left out
and why, notes), ``models`` ([{name, method, score, region, accuracy: {split: fraction}, n: {split: items
scored}, notes}]), ``skipped_items`` ({reason: count}) and ``timing`` ({model: {items, seconds}} for this run).
"""

from __future__ import annotations

import json
import math
import os
import time

import numpy as np

from explorer.core.errors import ExplorerError, InputError
from explorer.core.images import load_image
from explorer.data.negatives_sets import read_negatives_set
from explorer.data.negatives_sets.base import MIN_CROP_SIDE, NegativesSet, skipped_by_reason
from explorer.evaluation.pace import Pace
from explorer.core.prefetch import AHEAD, prefetched
from explorer.evaluation.progress import progress as progress_bar
from explorer.evaluation.results import aligned_text
from explorer.evaluation.work_file import MemoryWork, WorkFile, skip_reasons
from explorer.models.methods.base import cosine_matrix

FORMAT = "explorer-negatives/1"
SKIPPED = "*"  # the model of an item that could not be scored by any
GROUP = 16  # items scored in one image forward and one similarity call
PICTURE_SIDE = 1 << 14  # read pictures whole: boxes are in their own pixels
REGIONS = {
    "roi": "FG-CLIP's (qihoo360/FG-CLIP fgclip/eval/fgovd_eval.py): the whole picture squashed to the model's "
           "input, the box's projected patch features pooled with RoIAlign (1x1, adaptive sampling, aligned), "
           "cosine with each caption's text embedding",
    "crop": "Bianchi et al.'s CLIP baseline (lorebianchi98/FG-CLIP fgovd_evaluation/inference_on_benchmark.py): the "
            "box cut out in whole pixels, read alone with the method's preprocessing and scored with its own score",
}
TIES = {"hit": "a positive that ties the best negative is right (both official codes: the first best caption "
               "wins and the positive is listed first)",
        "miss": "a positive must beat every negative strictly (explorer eval's rule)"}
ROI_SCORE = "cosine (RoI box features)"


class NoPatchGrid(ExplorerError):
    """The model has no patch grid to pool a box from (``--region roi``)."""


def check_protocol(region: str, ties: str) -> None:
    """One line naming the choices for an unknown ``region`` or ``ties``."""
    for option, value, choices in (("--region", region, REGIONS), ("--ties", ties, TIES)):
        if value not in choices:
            raise InputError(f"unknown {option} {value!r}; the choices are {', '.join(choices)}")


def evaluate_negatives(models: dict, negatives_set, work_file: str | os.PathLike | None = None,
                       progress: bool = True, group: int = GROUP, region: str = "roi", ties: str = "hit",
                       say=None, ahead: int = AHEAD, **read) -> dict:
    """The module docstring's results for ``models`` ({name: loaded Model}) on ``negatives_set`` (a
    ``NegativesSet``, or a folder read with ``read``: layout, splits, images, limit); ``say``: where the forwards
    and the time estimate go (``pace``); ``ahead``: groups decoded in a background thread (``prefetch``; 0: none)."""
    check_protocol(region, ties)
    dataset = negatives_set if isinstance(negatives_set, NegativesSet) else read_negatives_set(negatives_set, **read)
    header = {"format": FORMAT, "layout": dataset.layout, "root": str(dataset.root), "splits": sorted(dataset.splits),
              "region": region}
    work = WorkFile(work_file, header) if work_file else MemoryWork(header)
    timing, notes = {}, {}
    for name, model in models.items():
        todo = [item for item in dataset.items
                if record_key(name, item.id) not in work and record_key(SKIPPED, item.id) not in work]
        started = time.perf_counter()
        groups = [todo[start:start + group] for start in range(0, len(todo), max(1, group))]
        pace = Pace(f"{name}: negatives", say)
        pace.start(sum(group_forwards(items, region) for items in groups), f"{len(todo)} items")
        try:
            for items, decoded in prefetched(progress_bar(groups, progress, f"{name}: negatives", unit="group"),
                                             lambda items: read_group(items, region), ahead):
                score_group(name, model, items, work, region, decoded)
                pace.batch_done(group_forwards(items, region))
        except NoPatchGrid as error:
            notes[name] = [str(error)]
        timing[name] = {"items": len(todo), "seconds": round(time.perf_counter() - started, 3)}
    return results(models, dataset, work, timing, region=region, ties=ties, notes=notes)


def record_key(model: str, item: str) -> str:
    return json.dumps([model, item])


def crop(picture, box):
    """The box (x, y, w, h, in the picture's own pixels) cut from ``picture`` (a ``LoadedImage``), whole
    pixels that hold it; an ``ExplorerError`` when under ``MIN_CROP_SIDE`` pixels on a side."""
    image = picture.image
    if box is None:
        return image
    scale = image.size[0] / picture.full_size[0] if picture.full_size[0] else 1.0  # a picture read smaller
    x, y, w, h = (v * scale for v in box)
    x0, y0 = max(0, math.floor(x)), max(0, math.floor(y))
    x1, y1 = min(image.size[0], math.ceil(x + w)), min(image.size[1], math.ceil(y + h))
    if x1 - x0 < MIN_CROP_SIDE or y1 - y0 < MIN_CROP_SIDE:
        raise ExplorerError(f"one-pixel crop: the box {list(box)} holds {max(0, x1 - x0)}x{max(0, y1 - y0)} px of "
                            f"the {image.size[0]}x{image.size[1]} picture")
    return image.crop((x0, y0, x1, y1))


def box_fractions(picture, box) -> tuple[float, float, float, float]:
    """The box's corners (x0, y0, x1, y1) as fractions of the picture's width and height, as FG-CLIP scales a
    COCO box (x, y, w, h) to the patch grid: ``x / width``, ``(x + w) / width``."""
    width, height = picture.full_size
    x, y, w, h = box
    return x / width, y / height, (x + w) / width, (y + h) / height


def skip_record(item, error) -> dict:
    reason = str(error) if isinstance(error, ExplorerError) else f"picture unreadable: {error}"
    return {"key": record_key(SKIPPED, item.id), "item": item.id, "split": item.split, "skipped": reason}


def read_group(items, region: str = "roi") -> tuple[list, list, list]:
    """The decode half of a group: (item, crop) pairs, (item, picture) pairs for RoI pooling, skip records."""
    opened, records, by_crop, by_roi = {}, [], [], []
    for item in items:
        try:
            if item.picture not in opened:
                # as stored, not EXIF-turned: the boxes are in the file's pixel frame (COCO's), and both official
                # codes open the picture with PIL alone
                opened[item.picture] = load_image(item.picture, max_side=PICTURE_SIDE, exif=False)
            picture = opened[item.picture]
            if region == "roi" and item.box is not None:
                by_roi.append((item, picture))
            else:
                by_crop.append((item, crop(picture, item.box)))
        except (ExplorerError, OSError, ValueError) as error:
            records.append(skip_record(item, error))
    return by_crop, by_roi, records


def score_group(name: str, model, items, work, region: str = "roi", decoded=None) -> None:
    """Score ``items`` with ``model``: one record each (a skip record for an item that cannot be read);
    ``decoded``: ``read_group``'s answer when it was read ahead."""
    by_crop, by_roi, records = decoded if decoded is not None else read_group(items, region)
    scored = crop_scores(model, by_crop) + roi_scores(model, by_roi)
    records += [{"key": record_key(name, item.id), "model": name, "item": item.id, "split": item.split,
                 "scores": [float(v) for v in own], "correct": right(own, "hit")} for item, own in scored]
    work.add(*records)  # one write per group: a kill loses at most this group


def group_forwards(items, region: str = "roi") -> int:
    """Forwards ``score_group`` makes for ``items`` (all readable): each picture once for its RoI boxes, each crop
    (or whole picture without a box) once, and every caption."""
    by_roi = {item.picture for item in items if region == "roi" and item.box is not None}
    crops = sum(1 for item in items if not (region == "roi" and item.box is not None))
    return len(by_roi) + crops + len(captions_of(items))


def own_rows(items, scores) -> list:
    """Each item's own scores (positive first, then its negatives) read off its row of ``scores``
    [items, all the group's captions]."""
    out, start = [], 0
    for row, item in enumerate(items):
        out.append((item, scores[row, start:start + 1 + len(item.negatives)]))
        start += 1 + len(item.negatives)
    return out


def captions_of(items) -> list[str]:
    return [text for item in items for text in (item.positive, *item.negatives)]


def crop_scores(model, pairs) -> list:
    """(item, scores) for (item, picture or crop) pairs: the method's own score of each crop."""
    if not pairs:
        return []
    items = [item for item, _ in pairs]
    scores = model.similarity(model.encode_image([image for _, image in pairs]), captions_of(items))
    return own_rows(items, scores.double().numpy())


def roi_scores(model, pairs) -> list:
    """(item, scores) for (item, LoadedImage) pairs: the cosine of each box's RoI features with each caption's
    text embedding (``REGIONS["roi"]``); ``NoPatchGrid`` when the model has none."""
    if not pairs:
        return []
    index, images, boxes = {}, [], []
    for item, picture in pairs:
        if item.picture not in index:
            index[item.picture] = len(images)
            images.append(picture.image)
        boxes.append((index[item.picture], *box_fractions(picture, item.box)))
    regions = model.region_features(images, boxes)
    if regions is None:
        raise NoPatchGrid(f"{model.name} has no patch features: --region roi cannot pool its boxes; "
                          f"score it with --region crop")
    items = [item for item, _ in pairs]
    scores = cosine_matrix(regions, model.encode_text(captions_of(items)).eot)
    return own_rows(items, scores.double().numpy())


def right(scores, ties: str) -> bool:
    """Whether the positive (``scores[0]``) wins over the negatives (``scores[1:]``) under ``ties``."""
    best = max(scores[1:])
    return bool(scores[0] >= best) if ties == "hit" else bool(scores[0] > best)


def results(models: dict, dataset: NegativesSet, work, timing: dict | None = None, region: str = "roi",
            ties: str = "hit", notes: dict | None = None) -> dict:
    """The JSON contract (module docstring) from the work records."""
    skipped = skip_reasons(work, (record_key(SKIPPED, item.id) for item in dataset.items))
    boxed = any(item.box is not None for item in dataset.items)
    entries = []
    for name, model in models.items():
        verdicts: dict[str, list[bool]] = {split: [] for split in dataset.splits}
        for item in dataset.items:
            record = work.records.get(record_key(name, item.id))
            if record is not None:
                verdicts.setdefault(item.split, []).append(right(record["scores"], ties))
        own_score = str(getattr(model, "score_label", "") or "")
        entries.append({"name": name, "method": getattr(model, "method_name", "?"),
                        "score": ROI_SCORE if boxed and region == "roi" else own_score,
                        "region": region if boxed else "whole picture",
                        "accuracy": {s: float(np.mean(v)) if v else None for s, v in verdicts.items()},
                        "n": {s: len(v) for s, v in verdicts.items()}, "notes": list((notes or {}).get(name, []))})
    protocol = {"region": region, "region_means": REGIONS[region] if boxed else "no boxes: the whole picture",
                "ties": ties, "ties_mean": TIES[ties],
                "negatives": "every negative the file lists for the item"}
    return {"format": FORMAT, "protocol": protocol, "dataset": dataset_block(dataset), "models": entries,
            "skipped_items": skipped, "timing": timing or {}}


def dataset_block(dataset: NegativesSet) -> dict:
    negatives = [len(item.negatives) for item in dataset.items]
    per_split: dict[str, dict[str, int]] = {}
    for item in dataset.items:
        counts = per_split.setdefault(item.split, {})
        counts[str(len(item.negatives))] = counts.get(str(len(item.negatives)), 0) + 1
    return {"layout": dataset.layout, "root": str(dataset.root), "splits": dict(dataset.splits),
            "items": dataset.counts(), "negatives_per_item": [min(negatives), max(negatives)] if negatives else None,
            "negatives_per_split": {split: dict(sorted(c.items(), key=lambda kv: int(kv[0])))
                                    for split, c in per_split.items()},
            "skipped": skipped_by_reason(dataset.skipped),
            "skipped_examples": [[s.item, s.reason] for s in dataset.skipped[:20]], "notes": list(dataset.notes)}


def csv_rows(result: dict) -> list[list]:
    """One row per model and split: model, method, split, accuracy, n."""
    rows = [["model", "method", "split", "accuracy", "n"]]
    for model in result["models"]:
        rows += [[model["name"], model["method"], split, value, model["n"][split]]
                 for split, value in model["accuracy"].items()]
    return rows


def table(result: dict) -> str:
    """Models as rows, splits as columns, accuracy in percent: what the terminal shows."""
    splits = list(result["dataset"]["splits"])
    rows = [["model", "method", *splits]]
    for model in result["models"]:
        rows.append([model["name"], model["method"],
                     *("-" if model["accuracy"][s] is None else f"{100 * model['accuracy'][s]:.1f}" for s in splits)])
    return aligned_text(rows)


__all__ = ["FORMAT", "GROUP", "REGIONS", "TIES", "NoPatchGrid", "box_fractions", "check_protocol", "crop",
           "csv_rows", "evaluate_negatives", "results", "right", "table"]
