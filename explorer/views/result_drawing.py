"""A grounding unit of a results file drawn as the board draws a caption: its map, Otsu mask, truth and boxes.

The unit is drawn as the evaluation drew it: the picture shrunk to the working size, every unit of the picture
mapped in one ``sentence_maps`` call of the unit's kind (a method whose maps depend on the other sentences
gives the evaluation's map), the unit's row kept. Its truth is the dataset's own (``unit_truths``), so the
board's IoU and hit are the work file's. Where the unit names a target box among proposals (RefCOCO), the
picture is drawn again with the true box (green) and the box the map picks (red: ``metrics.boxes.pick_box``).
Baselines (centre box, uniform map) are no models: they are left out of the drawing, and said so.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw

from explorer.core.errors import ExplorerError
from explorer.evaluation.metrics.boxes import pair_iou, pick_box
from explorer.evaluation.real_grounding import BASELINES
from explorer.grounding.budget import analyse_caption
from explorer.grounding.sentence_maps import GroundingResult, working_picture
from explorer.grounding.truth import Truth
from explorer.models.model import SentenceMaps
from explorer.views.maps_view import MapsView, ModelMaps
from explorer.views.result_datasets import open_dataset, picture_lookup
from explorer.views.result_units import Results, ResultsError

TRUE_BOX, PICKED_BOX = (26, 152, 80), (215, 48, 39)  # green, red


@dataclass
class UnitDrawing:
    view: MapsView  # one sentence (the unit), a column per model
    boxes: Image.Image | None  # the working picture with the true and picked boxes, where the unit has a target
    picks: dict = field(default_factory=dict)  # model -> IoU of its picked box with the target
    notes: list[str] = field(default_factory=list)


def unit_picture(results: Results, row: dict, folder=None):
    """(dataset, picture index, the picture's record) of a grounding unit row; ``ResultsError`` when its
    picture is gone (listed as missing, never skipped silently)."""
    dataset = open_dataset(results, row["dataset"], folder)
    index = picture_lookup(dataset).get(str(row["picture"]))
    if index is None:
        raise ResultsError(f"picture {row['picture']} is not in the dataset read from {dataset.root} (another split "
                           "or --limit?)")
    picture = dataset.pictures[index]
    if not Path(picture.path).is_file():
        raise ResultsError(f"picture {row['picture']} is missing: no file at {picture.path}")
    return dataset, index, picture


def draw_unit(results: Results, row: dict, models: list[str], load, folder=None, cache=None) -> UnitDrawing:
    """The unit ``row`` (a picked row: dataset, picture, position, kind, text) drawn for ``models`` (names the
    ``load`` function gives models for)."""
    from explorer.data.grounding_sets.truth import unit_truths

    dataset, index, picture = unit_picture(results, row, folder)
    working = working_picture(picture.path)
    members = dataset.units_of(index)
    position = int(row["position"])
    if position >= len(members):
        raise ResultsError(f"unit {row['unit_id']} is past the {len(members)} units its picture has now: the dataset "
                           "changed since the evaluation")
    unit = dataset.units[members[position]]
    texts = [dataset.units[i].text for i in members]
    truth = np.asarray(unit_truths(dataset, index, working.image.size)[position], dtype=bool)
    drawn, notes, picks = [], [], {}
    for name in dict.fromkeys(models):
        if name in BASELINES:
            notes.append(f"{name} is a baseline (no model): not drawn")
            continue
        try:
            model = load(name)
        except ExplorerError as error:  # scored elsewhere (a plugin not installed here, a file gone): said, not drawn
            notes.append(f"{name} cannot be loaded here: {error}")
            continue
        if row["kind"] not in model.map_kinds:
            notes.append(f"{name} offers no {row['kind']} map")
            continue
        maps = _picture_maps(model, working, texts, row["kind"], picture, cache)
        one = _one_unit(maps, position)
        if unit.target is not None:
            picked = pick_box(np.asarray(one.maps[0], dtype=np.float64), picture.proposals, picture.size)
            picks[name] = (None if picked is None else picture.proposals[picked],
                           0.0 if picked is None else pair_iou(picture.proposals[picked], unit.target))
        result = GroundingResult(image=working.image, analysis=analyse_caption(unit.text), maps=one, model_name=name)
        drawn.append(ModelMaps(name=name, result=result, trained=getattr(model, "trained", True),
                               synthetic_only=getattr(model, "synthetic_only", False),
                               precision=getattr(model, "precision", "fp32")))
    if not drawn:
        raise ResultsError("none of the models can be drawn here: " + "; ".join(notes))
    view = MapsView(picture=working.image, sentences=[unit.text], models=drawn,
                    truth=Truth(masks=[truth], source=f"{dataset.layout} picture {picture.id}"), notes=notes,
                    in_world=True)
    boxes = boxes_picture(working.image, unit.target, picks, picture.size) if unit.target is not None else None
    return UnitDrawing(view=view, boxes=boxes, picks={k: v[1] for k, v in picks.items()}, notes=notes)


def _picture_maps(model, working, texts, kind, picture, cache) -> SentenceMaps:
    """Every unit of the picture in one call, as the evaluation drew them (kept in the page's map cache)."""
    dense = (picture.caption or None) if getattr(model, "uses_dense_caption", False) else None

    def compute():
        return model.sentence_maps(working.image, texts, kind, dense_caption=dense)

    key = ("results-unit", model.name, id(model), working.digest, tuple(texts), kind, dense)
    return cache.get(key, compute) if cache is not None else compute()


def _one_unit(maps: SentenceMaps, position: int) -> SentenceMaps:
    grid = None if maps.grid is None else np.asarray(maps.grid)[position:position + 1]
    one = SentenceMaps(maps=np.asarray(maps.maps)[position:position + 1], kind=maps.kind, grid=grid,
                       sentences=maps.sentences[position:position + 1], n_cut=maps.n_cut[position:position + 1],
                       size=maps.size)
    if hasattr(maps, "precision"):
        one.precision = maps.precision
    return one


def boxes_picture(picture: Image.Image, target, picks: dict, frame) -> Image.Image:
    """The picture with the true box (green) and each model's picked box (red), boxes given in the annotation
    ``frame`` (width, height) and scaled to the picture."""
    out = picture.convert("RGB").copy()
    draw = ImageDraw.Draw(out)
    sx, sy = out.size[0] / frame[0], out.size[1] / frame[1]
    width = max(2, round(out.size[0] / 200))

    def rect(box, colour):
        draw.rectangle([box[0] * sx, box[1] * sy, box[2] * sx - 1, box[3] * sy - 1], outline=colour, width=width)

    for box, _ in picks.values():
        if box is not None:
            rect(box, PICKED_BOX)
    rect(target, TRUE_BOX)
    return out


__all__ = ["UnitDrawing", "boxes_picture", "draw_unit", "unit_picture"]
