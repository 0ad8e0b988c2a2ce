"""Hard negatives on real data (FG-OVD, SugarCrepe, the synthetic twin): does the true caption win?

``evaluate_negatives(models, negatives_set)`` scores, for every model, every item of a ``NegativesSet``
(``explorer.data.negatives_sets``): the item's picture, or its region's crop (FG-OVD: the annotated box,
cut from the picture as FG-CLIP's evaluation reads a region without a box head), against its positive
caption and its negatives with the model's own score (``Model.similarity``: the cosine of the global
embeddings for most methods; FineLIP's, SEPS's, CAFT's and FLAIR's own scores for theirs). An item is
right when its positive scores above every negative (a tie is a miss, as in ``explorer eval``);
``accuracy`` per split is the share of its items that are right.

Items are scored ``GROUP`` at a time: their crops in one image forward, their captions in one
``similarity`` call, each item's own captions read off its own row. Per-item results go to a work file
(``WorkFile``) as each group finishes, so a rerun scores only what is missing. A picture that does not
open, or a crop under two pixels once the picture is read, is skipped with its reason (``skipped_items``).

The returned dict (the JSON ``explorer eval-negatives`` writes): ``format``, ``dataset`` (layout, root,
splits and their files, items, what was left out and why, notes), ``models`` ([{name, method, score,
accuracy: {split: fraction}, n: {split: items scored}}]), ``skipped_items`` ({reason: count}) and
``timing`` ({model: {items, seconds}} for the items scored in this run).
"""

from __future__ import annotations

import json
import math
import os
import time

import numpy as np

from explorer.core.errors import ExplorerError
from explorer.core.images import load_image
from explorer.data.negatives_sets import read_negatives_set
from explorer.data.negatives_sets.base import MIN_CROP_SIDE, NegativesSet, skipped_by_reason
from explorer.evaluation.progress import progress as progress_bar
from explorer.evaluation.results import aligned_text
from explorer.evaluation.work_file import MemoryWork, WorkFile, skip_reasons

FORMAT = "explorer-negatives/1"
SKIPPED = "*"  # the model of an item that could not be scored by any
GROUP = 16  # items scored in one image forward and one similarity call
PICTURE_SIDE = 1 << 14  # read pictures whole: boxes are in their own pixels


def evaluate_negatives(models: dict, negatives_set, work_file: str | os.PathLike | None = None,
                       progress: bool = True, group: int = GROUP, **read) -> dict:
    """The module docstring's results for ``models`` ({name: loaded Model}) on ``negatives_set`` (a
    ``NegativesSet``, or a folder read with ``read``: layout, splits, images, limit)."""
    dataset = negatives_set if isinstance(negatives_set, NegativesSet) else read_negatives_set(negatives_set, **read)
    header = {"format": FORMAT, "layout": dataset.layout, "root": str(dataset.root), "splits": sorted(dataset.splits)}
    work = WorkFile(work_file, header) if work_file else MemoryWork(header)
    timing = {}
    for name, model in models.items():
        todo = [item for item in dataset.items
                if record_key(name, item.id) not in work and record_key(SKIPPED, item.id) not in work]
        started = time.perf_counter()
        starts = range(0, len(todo), max(1, group))
        for start in progress_bar(starts, progress, f"{name}: negatives", unit="group"):
            score_group(name, model, todo[start:start + group], work)
        timing[name] = {"items": len(todo), "seconds": round(time.perf_counter() - started, 3)}
    return results(models, dataset, work, timing)


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


def score_group(name: str, model, items, work) -> None:
    """Score ``items`` with ``model``: one record each (a skip record for an item that cannot be read)."""
    crops, kept, records, opened = [], [], [], {}
    for item in items:
        try:
            if item.picture not in opened:
                opened[item.picture] = load_image(item.picture, max_side=PICTURE_SIDE)
            crops.append(crop(opened[item.picture], item.box))
            kept.append(item)
        except (ExplorerError, OSError, ValueError) as error:
            reason = str(error) if isinstance(error, ExplorerError) else f"picture unreadable: {error}"
            records.append({"key": record_key(SKIPPED, item.id), "item": item.id, "split": item.split,
                            "skipped": reason})
    if kept:
        captions = [text for item in kept for text in (item.positive, *item.negatives)]
        scores = model.similarity(model.encode_image(crops), captions).double().numpy()
        start = 0
        for row, item in enumerate(kept):
            own = scores[row, start:start + 1 + len(item.negatives)]
            start += 1 + len(item.negatives)
            records.append({"key": record_key(name, item.id), "model": name, "item": item.id, "split": item.split,
                            "scores": [float(v) for v in own], "correct": bool(own[0] > own[1:].max())})
    work.add(*records)  # one write per group: a kill loses at most this group


def results(models: dict, dataset: NegativesSet, work, timing: dict | None = None) -> dict:
    """The JSON contract (module docstring) from the work records."""
    skipped = skip_reasons(work, (record_key(SKIPPED, item.id) for item in dataset.items))
    entries = []
    for name, model in models.items():
        right: dict[str, list[bool]] = {split: [] for split in dataset.splits}
        for item in dataset.items:
            record = work.records.get(record_key(name, item.id))
            if record is not None:
                right.setdefault(item.split, []).append(bool(record["correct"]))
        entries.append({"name": name, "method": getattr(model, "method_name", "?"),
                        "score": str(getattr(model, "score_label", "") or ""),
                        "accuracy": {s: float(np.mean(v)) if v else None for s, v in right.items()},
                        "n": {s: len(v) for s, v in right.items()}})
    return {"format": FORMAT, "dataset": dataset_block(dataset), "models": entries, "skipped_items": skipped,
            "timing": timing or {}}


def dataset_block(dataset: NegativesSet) -> dict:
    negatives = [len(item.negatives) for item in dataset.items]
    return {"layout": dataset.layout, "root": str(dataset.root), "splits": dict(dataset.splits),
            "items": dataset.counts(), "negatives_per_item": [min(negatives), max(negatives)] if negatives else None,
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


__all__ = ["FORMAT", "GROUP", "crop", "csv_rows", "evaluate_negatives", "results", "table"]
