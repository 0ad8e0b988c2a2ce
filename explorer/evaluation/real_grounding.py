"""Grounding on real annotated pictures (DCI, PNG, Flickr30k Entities, IIW, RefCOCO): where each model's maps land.

``evaluate_grounding(models, grounding_set)`` scores, for every model and map kind (default: every
kind the model offers, per-head variants left out, as ``explorer eval`` does), every unit of a
``GroundingSet`` (``explorer.data.grounding_sets``):

- ``iou``: IoU of the map's Otsu mask with the truth mask (mask truth only; None for box truth); the
  mask's intersection and union pixel counts too, for the cumulative IoU (``oiou`` = the sum of the
  intersections over the sum of the unions, the referring-segmentation literature's second figure);
- ``box_iou``: where the unit names a ``target`` box among its picture's proposals (RefCOCO), the IoU
  of the proposal its map picks (``metrics.boxes``: ReCLIP's protocol, each box scored ``sum / area **
  box_alpha``, ReCLIP's alpha 0.5 by default, among the boxes larger than ``min_box_area`` of the picture)
  with that box;
- ``pointing``: the map's peak lies in the truth (mask or box; ``pointing_hits``: every peak pixel);
- ``auroc``: pixel AUROC of the truth against the rest of the picture (None when the truth covers it).
Scoring goes through ``explorer.evaluation.metrics.maps.score_maps`` / ``pixel_auroc``, as the benchmark's.

Each picture is decoded and shrunk once to the working size (``WORKING_SIDE``, as the Grounding tab);
the maps are drawn there, all units of the picture in one ``sentence_maps`` call per kind (one image
forward), and the truth is brought to that size (``truth.RESIZE_NOTE``). Methods that read a dense
caption get the picture's long caption. Baselines score in the same run as two more "models" with
method "baseline" and one kind, "baseline": ``centre-box`` (its mask the middle third of width and
height, its map peaking at the centre) and ``uniform`` (a flat map: empty Otsu mask, the whole picture
as its peak, AUROC 0.5) (``explorer.evaluation.baselines``).

Per-picture results go to a work file (``work_file``: JSON lines, ``work_file.WorkFile``) as each
model and kind finishes a picture; a rerun reads it and scores only what is missing, so a kill loses
at most one picture. A picture that cannot be opened, or whose masks do not decode, is skipped with
its reason; its units are counted under ``skipped_units``.

The returned dict (the JSON ``explorer eval-grounding`` writes): ``dataset`` (what was read, what was
left out and why), ``notes``, ``models`` ([{name, method, kinds: {kind: {miou, oiou, box_accuracy,
pointing, auroc, n_units}}, label_only?}]), ``units`` ([{picture, picture_index, text, truth, label_only,
scores: {model: {kind: {iou, pointing, auroc, box_iou}}}}]) and ``skipped_units``. Fractions, not
percents; ``n_units`` counts the units scored; ``box_accuracy`` is the share of picks with IoU > 0.5
(ReCLIP's strict rule; None where the set has no target boxes); ``protocol`` records every choice that ran
(the box score and its alpha, the hit rule, and the reader's: text field, proposals, orientation...); oIoU and the IoUs are counted at the working size. DCI's
label-only units are scored apart (``label_only``), not in ``n_units``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np

from explorer.core.errors import ExplorerError
from explorer.data.grounding_sets import read_grounding_set
from explorer.data.grounding_sets.base import BOX, EXIF, GroundingSet, skipped_by_reason
from explorer.data.grounding_sets.truth import RESIZE_NOTE, unit_truths
from explorer.evaluation.baselines import centre_box_mask, centre_point_map
from explorer.evaluation.metrics.boxes import (DEFAULT_ALPHA, DEFAULT_MIN_AREA, RECLIP, BoxRule, box_rule, is_hit,
                                               picked_iou, protocol)
from explorer.evaluation.grounding_eval import native_kind, scored_kinds
from explorer.evaluation.pace import Pace
from explorer.evaluation.progress import progress as progress_bar
from explorer.evaluation.results import aligned_text
from explorer.evaluation.work_file import MemoryWork, WorkFile
from explorer.evaluation.metrics.maps import otsu_masks, pixel_auroc, score_maps
from explorer.grounding.sentence_maps import WORKING_SIDE, working_picture
from explorer.grounding.truth import ASPECT_TOLERANCE

BASELINE_KIND = "baseline"
BASELINES = {"centre-box": "middle third of width and height as the mask; the map peaks at the picture's centre",
             "uniform": "a flat map: Otsu finds one class (empty mask), the peak is the whole picture, AUROC 0.5"}
SKIPPED = "*"  # the key's model and kind of a picture that could not be scored
FORMAT = "explorer-real-grounding/1"


def evaluate_grounding(models: dict, grounding_set, kinds=None, units: str | None = None, split: str | None = None,
                       limit: int | None = None, work_file: str | os.PathLike | None = None, progress: bool = True,
                       working_side: int = WORKING_SIDE, box_alpha: float = DEFAULT_ALPHA,
                       min_box_area: float = DEFAULT_MIN_AREA, say=None) -> dict:
    """The module docstring's results for ``models`` ({name: loaded Model}) on ``grounding_set`` (a
    ``GroundingSet``, or a folder read with ``split``, ``units`` and ``limit``); ``box_alpha``: the power of
    the box's area a proposal's map sum is divided by, ``min_box_area``: the share of the picture a box must
    exceed to be the answer (``metrics.boxes``; an ``InputError`` out of (0, 2], [0, 1)); ``say``: where the map
    passes and the time estimate go (``pace``)."""
    rule = box_rule(box_alpha, min_box_area)
    dataset = _dataset(grounding_set, split, units, limit)
    plan = {name: kinds_for(model, kinds) for name, model in models.items()}
    plan.update({name: [BASELINE_KIND] for name in BASELINES})
    header = {"format": FORMAT, "layout": dataset.layout, "root": str(dataset.root), "split": dataset.split,
              "units": dataset.units_kind, "working_side": int(working_side)}
    if dataset.extra:  # the layout's options (RefCOCO's dataset, split_by, proposals): another run, another file
        header["options"] = dict(dataset.extra)
    if has_targets(dataset):  # another rule picks other boxes: another run (sets without boxes keep their header)
        header["box_alpha"], header["min_box_area"] = rule.alpha, rule.min_area
    work = WorkFile(work_file, header) if work_file else MemoryWork(header)
    # a map pass per model, kind and sentence of a picture (the baselines run no model)
    passes = [sum(len(kinds) for name, kinds in plan.items() if name not in BASELINES) * len(dataset.units_of(i))
              for i in range(len(dataset.pictures))]
    paced = Pace("grounding", say, unit="map passes").over(
        list(range(len(dataset.pictures))), lambda i: passes[i], detail=f"{len(dataset.pictures)} pictures")
    for index in progress_bar(paced, progress, "grounding", unit="picture", total=len(dataset.pictures)):
        score_picture(models, plan, dataset, index, work, working_side, rule)
    return results(models, plan, dataset, work, working_side, rule)


def has_targets(dataset: GroundingSet) -> bool:
    return any(unit.target is not None for unit in dataset.units)


def _dataset(grounding_set, split, units, limit) -> GroundingSet:
    if not isinstance(grounding_set, GroundingSet):
        return read_grounding_set(grounding_set, split=split, units=units, limit=limit)
    if units is not None and units != grounding_set.units_kind:
        raise ExplorerError(f"the set holds {grounding_set.units_kind} units, not {units}")
    return grounding_set if limit is None else grounding_set.first(limit, f"only the first {limit} pictures")


def kinds_for(model, kinds=None) -> list[str]:
    """The kinds scored for ``model``: ``kinds`` that it offers, or (None) every kind it offers less per-head ones."""
    if not kinds:
        return scored_kinds(model, native_kind(model))
    offered = [kind for kind in kinds if kind in model.map_kinds]
    if not offered:
        raise ExplorerError(f"{model.name} offers none of the kinds {', '.join(kinds)}; it offers "
                            f"{', '.join(model.map_kinds)}")
    return offered


def record_key(model: str, kind: str, picture: str) -> str:
    return json.dumps([model, kind, picture])


def score_picture(models: dict, plan: dict, dataset: GroundingSet, index: int, work, working_side: int,
                  rule: BoxRule = RECLIP) -> None:
    """Score every model and kind that the work file lacks on picture ``index``, one record each."""
    picture = dataset.pictures[index]
    missing = [(name, kind) for name, kinds in plan.items() for kind in kinds
               if record_key(name, kind, picture.id) not in work]
    if not missing or record_key(SKIPPED, SKIPPED, picture.id) in work:
        return
    try:
        image, truth = picture_truth(dataset, index, working_side)
    except (ExplorerError, OSError, ValueError) as error:
        reason = f"{type(error).__name__}: {error}" if not isinstance(error, ExplorerError) else str(error)
        work.add({"key": record_key(SKIPPED, SKIPPED, picture.id), "picture": picture.id, "skipped": reason})
        return
    units = [dataset.units[i] for i in dataset.units_of(index)]
    boxes = [unit.truth == BOX for unit in units]
    targets = [unit.target for unit in units]
    records = []
    for name, kind in missing:
        if name in BASELINES:
            maps, predicted = baseline_maps(name, truth.shape)
        else:
            model = models[name]
            dense = picture.caption or None if getattr(model, "uses_dense_caption", False) else None
            maps = np.asarray(model.sentence_maps(image, [u.text for u in units], kind, dense_caption=dense).maps)
            predicted = None
        scores = unit_scores(maps, truth, boxes, predicted, picks=(picture.proposals, targets, picture.size),
                             rule=rule)
        records.append({"key": record_key(name, kind, picture.id), "model": name, "kind": kind,
                        "picture": picture.id, "scores": scores})
    work.add(*records)  # one write per picture: a kill loses at most this picture


def picture_truth(dataset: GroundingSet, index: int, working_side: int):
    """(working picture, bool [M, H, W] truth of its units at the working size); errors say why not."""
    picture = dataset.pictures[index]
    working = working_picture(picture.path, working_side, exif=dataset.orientation == EXIF)
    (width, height), (frame_w, frame_h) = working.full_size, picture.size
    if abs(width / height - frame_w / frame_h) > ASPECT_TOLERANCE * frame_w / frame_h:
        raise ExplorerError(f"picture size differs from its annotation: {width}x{height}, annotated at "
                            f"{frame_w}x{frame_h}")
    return working.image, np.stack(unit_truths(dataset, index, working.image.size))


def baseline_maps(name: str, shape) -> tuple[np.ndarray, np.ndarray | None]:
    """(maps, predicted masks or None for Otsu) of a baseline, [M, H, W]."""
    _, height, width = shape
    if name == "centre-box":
        return (np.broadcast_to(centre_point_map(height, width), shape),
                np.broadcast_to(centre_box_mask(height, width), shape))
    return np.zeros(shape, dtype=np.float64), None


def unit_scores(maps, truth: np.ndarray, boxes: list[bool], predicted=None, picks=None,
                rule: BoxRule = RECLIP) -> list[list]:
    """[iou or None, pointing hit, auroc or None, intersection, union, box_iou or None] per unit; iou,
    intersection and union are None for box truth. ``picks``: (proposals, target box per unit, frame) for
    box grounding (``metrics.boxes.picked_iou`` by ``rule``); box_iou is None for a unit without a
    target."""
    if predicted is None:  # no mIoU to report for box truth: spare the Otsu thresholds
        predicted = np.zeros(truth.shape, dtype=bool) if all(boxes) else otsu_masks(maps)
    predicted = np.asarray(predicted, dtype=bool)
    ious, hits = score_maps(maps, truth, predicted=predicted)
    proposals, targets, frame = picks if picks is not None else ((), [None] * len(boxes), None)
    rows = []
    for values, mask, guess, iou, hit, box, target in zip(maps, truth, predicted, ious, hits, boxes, targets):
        inter = None if box else int(np.count_nonzero(guess & mask))
        union = None if box else int(np.count_nonzero(guess | mask))
        rows.append([None if box else float(iou), bool(hit), pixel_auroc(values, mask, ~mask), inter, union,
                     picked_iou(np.asarray(values, dtype=np.float64), proposals, target, frame, rule)])
    return rows


def results(models: dict, plan: dict, dataset: GroundingSet, work, working_side: int,
            rule: BoxRule = RECLIP) -> dict:
    """The JSON contract (module docstring) from the work records."""
    units_out, pools, skipped_units = [], {}, {}
    for index, picture in enumerate(dataset.pictures):
        members = dataset.units_of(index)
        skip = work.records.get(record_key(SKIPPED, SKIPPED, picture.id))
        if skip is not None:
            reason = skip["skipped"].split(":")[0]
            skipped_units[reason] = skipped_units.get(reason, 0) + len(members)
            continue
        for position, unit_index in enumerate(members):
            unit = dataset.units[unit_index]
            entry = {"picture": picture.id, "picture_index": index, "text": unit.text, "truth": unit.truth,
                     "label_only": unit.label_only, "scores": {}}
            for name, kinds in plan.items():
                for kind in kinds:
                    record = work.records.get(record_key(name, kind, picture.id))
                    if record is None:
                        continue
                    iou, hit, auroc, *more = record["scores"][position]  # a work file of before oIoU: 3 values
                    inter, union, box = (more + [None] * 3)[:3]
                    entry["scores"].setdefault(name, {})[kind] = {"iou": iou, "pointing": hit, "auroc": auroc,
                                                                  "box_iou": box}
                    pools.setdefault((name, kind, unit.label_only), []).append((iou, hit, auroc, inter, union, box))
            units_out.append(entry)
    return {"format": FORMAT, "dataset": dataset_block(dataset),
            "notes": [RESIZE_NOTE, f"maps drawn at the working size: long side at most {working_side} px",
                      "baselines are the models with method 'baseline' (kind 'baseline')"],
            "models": [model_entry(name, models.get(name), kinds, pools) for name, kinds in plan.items()],
            "units": units_out, "skipped_units": skipped_units, "protocol": run_protocol(dataset, rule)}


def run_protocol(dataset: GroundingSet, rule: BoxRule) -> dict:
    """Every choice that made the numbers: the reader's (``extra["protocol"]``: text field, proposals,
    orientation...), the working size's and, where units pick boxes, the box score's and the hit rule."""
    choices = dict(dataset.extra.get("protocol") or {})
    choices["orientation"] = dataset.orientation
    if has_targets(dataset):
        choices.update(protocol(rule))
    return choices


def summary(scores: list) -> dict:
    """{miou, oiou, box_accuracy, pointing, auroc, n_units} of (iou, hit, auroc, intersection, union, box_iou)
    tuples; None where nothing to average."""
    def mean(values):
        values = [v for v in values if v is not None]
        return float(np.mean(values)) if values else None

    pairs = [(s[3], s[4]) for s in scores if s[3] is not None]
    unions = sum(union for _, union in pairs)
    oiou = sum(inter for inter, _ in pairs) / unions if unions else (1.0 if pairs else None)  # all empty: mask_iou's 1
    return {"miou": mean(s[0] for s in scores), "oiou": None if oiou is None else float(oiou),
            "box_accuracy": mean(None if s[5] is None else float(is_hit(s[5])) for s in scores),
            "pointing": mean(float(s[1]) for s in scores), "auroc": mean(s[2] for s in scores),
            "n_units": len(scores)}


def model_entry(name: str, model, kinds: list[str], pools: dict) -> dict:
    method = "baseline" if name in BASELINES else getattr(model, "method_name", "?")
    entry = {"name": name, "method": method, "kinds": {k: summary(pools.get((name, k, False), [])) for k in kinds}}
    if any((name, k, True) in pools for k in kinds):
        entry["label_only"] = {k: summary(pools.get((name, k, True), [])) for k in kinds}
    if name in BASELINES:
        entry["about"] = BASELINES[name]
    return entry


def dataset_block(dataset: GroundingSet) -> dict:
    return {"layout": dataset.layout, "root": str(dataset.root), "split": dataset.split,
            "units": dataset.units_kind, "pictures": len(dataset.pictures),
            "n_units": sum(not u.label_only for u in dataset.units),
            "label_only_units": sum(u.label_only for u in dataset.units),
            "skipped": skipped_by_reason(dataset.skipped),
            "skipped_examples": [[s.item, s.reason] for s in dataset.skipped[:20]], "notes": list(dataset.notes)}


def csv_rows(result: dict) -> list[list]:
    """One row per model and kind: model, method, kind, miou, oiou, box_accuracy, pointing, auroc, n_units."""
    columns = ["miou", "oiou", "box_accuracy", "pointing", "auroc", "n_units"]
    rows = [["model", "method", "kind", *columns]]
    for model in result["models"]:
        for kind, s in model["kinds"].items():
            rows.append([model["name"], model["method"], kind, *(s.get(c) for c in columns)])
    return rows


def table(result: dict) -> str:
    """The per-kind scores as aligned text, for the terminal."""
    def cell(value):
        return "-" if value is None else f"{value:.3f}" if isinstance(value, float) else str(value)

    rows = [[cell(v) for v in row] for row in csv_rows(result)]
    return aligned_text(rows)


__all__ = ["BASELINES", "BASELINE_KIND", "csv_rows", "evaluate_grounding", "kinds_for", "table", "unit_scores"]
