"""A grounding dataset's picture opened in the Grounding tab: its units as the caption, its truth registered.

The Grounding tab scores maps against a picture's truth when it knows the picture (by its pixels,
``explorer.grounding.truth.find_truth``). Opening dataset picture N here copies the picture into the
page's folder, writes its units as the caption (one per paragraph, so each stays one sentence) and
registers their truth masks, at the working size, under the picture's digest: the tab's maps are then
scored against the dataset's own masks or boxes. ``worst_units`` reads an ``explorer eval-grounding``
results JSON and lists a model's worst units, so a researcher steps from a bad score to the picture.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from PIL import Image

from explorer.core import paths
from explorer.core.cache import MB, BoundedCache
from explorer.core.errors import ExplorerError
from explorer.core.files import copy_by_content, file_stamp
from explorer.data.errors import DatasetError
from explorer.data.grounding_sets import detect, read_grounding_set
from explorer.data.grounding_sets.base import GroundingSet
from explorer.data.grounding_sets.truth import unit_truths
from explorer.grounding.sentence_maps import working_picture
from explorer.grounding.truth import save_scene_truth

SETS = BoundedCache("grounding datasets (units and truth references)", max_items=4, max_bytes=256 * MB)
WORST = 30  # units listed
OVERLAY = (255, 60, 60)


def dataset_choices() -> list[tuple[str, str]]:
    """(label, name) of every folder under ``$EXPLORER_HOME/datasets`` that a grounding layout reads (names,
    not paths: the page never shows the server's folders; ``offered_folder`` maps one back)."""
    root = paths.datasets_dir()
    choices = []
    for folder in sorted(root.iterdir()) if root.is_dir() else []:
        try:
            choices.append((f"{folder.name} ({detect(folder)})", folder.name))
        except DatasetError:
            continue  # not a grounding dataset: not offered
    return choices


def offered_folder(name: str) -> Path | None:
    """The folder of an offered dataset's name, or None when the name is not offered."""
    return paths.datasets_dir() / name if name in {value for _, value in dataset_choices()} else None


def open_set(folder: Path, split: str | None = None, units: str | None = None) -> GroundingSet:
    """The set at ``folder``, read once per (folder, split, units) while its files are unchanged."""
    key = (str(folder), split or None, units or None, file_stamp(folder))
    return SETS.get(key, lambda: read_grounding_set(folder, split=split or None, units=units or None))


@dataclass(frozen=True)
class SceneTruth:
    """What ``save_scene_truth`` stores: a picture, its sentences and their masks."""

    id: str
    image: Image.Image
    sentence_texts: tuple[str, ...]
    masks: np.ndarray

    def sentence_masks(self) -> np.ndarray:
        return self.masks


def open_picture(dataset: GroundingSet, number, picks: Path, truth_folder: Path) -> tuple[str, str, Image.Image,
                                                                                          list[str]]:
    """(picture copy for the page, caption of its units, the picture with its truth drawn, lines about it)."""
    try:
        index = int(number)
    except (TypeError, ValueError) as error:
        raise ExplorerError(f"the picture number must be a whole number, not {str(number)[:40]!r}") from error
    if not 0 <= index < len(dataset.pictures):
        raise ExplorerError(f"the picture number must be 0..{len(dataset.pictures) - 1}")
    info = dataset.pictures[index]
    units = [dataset.units[i] for i in dataset.units_of(index)]
    working = working_picture(info.path)
    truths = np.stack(unit_truths(dataset, index, working.image.size))
    texts = tuple(u.text for u in units)
    save_scene_truth(SceneTruth(f"{dataset.layout} {info.id}", working.image, texts, truths), truth_folder)
    lines = [f"{dataset.layout} picture {index} ({info.id}): {len(units)} units, {units[0].truth} truth",
             *(f"{n + 1}. {u.text}" + (" (label only)" if u.label_only else "") for n, u in enumerate(units))]
    return str(copy_by_content(info.path, picks)), "\n\n".join(texts), overlay(working.image, truths), lines


def overlay(picture: Image.Image, truths: np.ndarray) -> Image.Image:
    """The picture with the union of the truths tinted."""
    pixels = np.asarray(picture, dtype=np.float32).copy()
    inside = truths.any(axis=0)
    pixels[inside] = 0.5 * pixels[inside] + 0.5 * np.array(OVERLAY, dtype=np.float32)
    return Image.fromarray(pixels.astype(np.uint8))


def worst_units(results_file: Path, model: str, kind: str | None = None, n: int = WORST) -> tuple[dict, list[list]]:
    """(the results' dataset block, rows [picture number, picture id, kind, auroc, pointing, text]) of the
    model's ``n`` worst units: lowest AUROC first (units without one last), then missed pointing."""
    try:
        result = json.loads(Path(results_file).read_text(encoding="utf-8"))
        units, dataset = result["units"], result["dataset"]
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise ExplorerError(f"{Path(results_file).name} is not an eval-grounding results file ({error})") from error
    rows = []
    for unit in units:
        for name, scores in (unit.get("scores") or {}).get(model, {}).items():
            if kind in (None, "", name):
                rows.append([unit["picture_index"], unit["picture"], name, scores.get("auroc"),
                             scores.get("pointing"), unit["text"]])
    if not rows:
        raise ExplorerError(f"the results hold no units scored by {model!r}" + (f" with {kind}" if kind else ""))
    rows.sort(key=lambda r: (r[3] is None, r[3] if r[3] is not None else 0.0, bool(r[4])))
    return dataset, rows[:n]


__all__ = ["dataset_choices", "open_picture", "open_set", "overlay", "worst_units"]
