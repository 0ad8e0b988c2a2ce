"""The dataset behind a results file, found where the evaluation read it, or in the folder the user names.

A results file records its dataset's root (and a work file the layout's options: RefCOCO's dataset, split_by,
images folder). Units are drawn from there. A dataset that has moved is never guessed: ``DatasetMoved`` says
where it was, and the caller asks for the folder once (the CLI's ``--data``, the view's folder box). Paths the
evaluation recorded under the old root's parent (RefCOCO's train2014 folder) move with it.

``describe`` fills the picture and text of picked units that the work files keep only as ids (negatives'
items, zero-shot's pictures and classes, retrieval's captions and pictures), and marks a unit whose picture
file is gone as missing.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from explorer.core.cache import MB, BoundedCache
from explorer.core.files import file_stamp
from explorer.data.errors import DatasetError
from explorer.views.result_units import GROUNDING, NEGATIVES, RETRIEVAL, ZEROSHOT, Part, Results, ResultsError

SETS = BoundedCache("datasets of opened results", max_items=4, max_bytes=512 * MB)


class DatasetMoved(ResultsError):
    """The dataset a result was measured on is not where the result says: the folder must be given."""

    def __init__(self, recorded: str, label: str):
        self.recorded, self.label = recorded, label
        super().__init__(f"the dataset of {label} was read from {recorded}, which is not there now (moved, or "
                         "another machine): give its folder (--data DIR, or the folder box of the Results tab)")


def dataset_root(part: Part, folder: str | Path | None = None) -> Path:
    """The folder to read ``part``'s dataset from: ``folder`` when given, else the recorded root if it exists."""
    if folder:
        given = Path(folder).expanduser()
        if not given.exists():
            raise ResultsError(f"no folder at {given}")
        return given
    if part.root and Path(part.root).exists():
        return Path(part.root)
    raise DatasetMoved(part.root or "(no root recorded)", part.label)


def moved_options(options: dict, recorded: str, root: Path) -> dict:
    """The layout's options with paths under the recorded root's parent moved under the new root's parent."""
    if not recorded or Path(recorded) == root:
        return dict(options)
    old, new = Path(recorded).parent, root.parent
    moved = {}
    for key, value in options.items():
        if isinstance(value, str) and value.startswith(str(old) + "/"):
            value = str(new / Path(value).relative_to(old))
        moved[key] = value
    return moved


def open_dataset(results: Results, label: str, folder: str | Path | None = None):
    """The dataset object of ``label`` (a ``GroundingSet``, ``NegativesSet``, ``ClassSet`` or ``RetrievalSet``),
    read once while its files are unchanged."""
    part = results.parts.get(label)
    if part is None:
        raise ResultsError(f"no dataset {label!r} in {results.name}")
    root = dataset_root(part, folder)
    key = (results.family, str(root), part.label, part.split, file_stamp(root))
    return SETS.get(key, lambda: _read(results.family, part, root))


def _read(family: str, part: Part, root: Path):
    if family == GROUNDING:
        from explorer.data.grounding_sets import read_grounding_set

        options = {k: v for k, v in moved_options(part.options, part.root, root).items()
                   if k in ("dataset", "split_by", "images", "proposals") and v not in (None, "coco")}
        return read_grounding_set(root, split=part.split, units=part.units, layout=part.layout or None,
                                  options=options)
    if family == NEGATIVES:
        from explorer.data.negatives_sets import read_negatives_set

        splits = part.options.get("splits") or None
        try:
            return read_negatives_set(root, layout=part.layout or None, splits=splits)
        except DatasetError:  # FG-OVD records its benchmarks/ folder; its pictures are beside it, in the folder read
            if root.name != "benchmarks":
                raise
            return read_negatives_set(root.parent, layout=part.layout or None, splits=splits)
    if family == ZEROSHOT:
        from explorer.data.class_sets import read_class_set

        return read_class_set(root, part.layout or None)
    if family == RETRIEVAL:
        from explorer.evaluation.retrieval import read_evaluation_set

        return read_evaluation_set(root, split=part.split, layout=part.layout or None)
    raise ResultsError(f"{family} results keep no units to draw")


def picture_lookup(dataset) -> dict:
    """A grounding set's picture id -> index (kept on the set: built once)."""
    found = getattr(dataset, "_by_id", None)
    if found is None:
        found = {picture.id: index for index, picture in enumerate(dataset.pictures)}
        object.__setattr__(dataset, "_by_id", found)
    return found


def describe(results: Results, picked: pd.DataFrame, folder: str | Path | None = None) -> pd.DataFrame:
    """``picked`` with its picture (a path), text and ``missing`` (the picture file is gone) filled in from the
    dataset; ``DatasetMoved`` when the dataset is not where it was and no folder is given."""
    if picked.empty:
        return picked.assign(missing=pd.Series(dtype=bool))
    out = picked.copy()
    by_part = {}
    for label in dict.fromkeys(out["dataset"]):
        by_part[label] = open_dataset(results, label, folder)
    filler = {GROUNDING: _grounding, NEGATIVES: _negatives, ZEROSHOT: _zeroshot, RETRIEVAL: _retrieval}[results.family]
    described = [filler(by_part[row["dataset"]], row) for row in out.to_dict(orient="records")]
    for name in dict.fromkeys(k for d in described for k in d):
        out[name] = [d.get(name) for d in described]
    if "path" in out:  # a unit without a picture id of its own (negatives, retrieval) is named by its file
        out["picture"] = [p if p else path for p, path in zip(out["picture"], out["path"])]
    return out


def _exists(path) -> bool:
    return path is not None and Path(path).is_file()


def _grounding(dataset, row: dict) -> dict:
    index = picture_lookup(dataset).get(row["picture"])
    if index is None:
        return {"path": "", "text": row["text"], "missing": True}
    path = dataset.pictures[index].path
    return {"path": str(path), "text": row["text"], "missing": not _exists(path)}


def _negatives(dataset, row: dict) -> dict:
    items = getattr(dataset, "_by_id", None)
    if items is None:
        items = {item.id: item for item in dataset.items}
        object.__setattr__(dataset, "_by_id", items)
    item = items.get(row["unit_id"])
    if item is None:
        return {"path": "", "text": "", "missing": True, "negative_text": ""}
    beaten = int(row.get("negative", 0))
    return {"path": str(item.picture), "text": item.positive, "missing": not _exists(item.picture),
            "negative_text": item.negatives[beaten] if beaten < len(item.negatives) else "",
            "box": list(item.box) if item.box else None}


def _zeroshot(dataset, row: dict) -> dict:
    pictures = getattr(dataset, "_by_id", None)
    if pictures is None:
        pictures = {p.id: p for p in dataset.pictures}
        object.__setattr__(dataset, "_by_id", pictures)
    picture, names = pictures.get(row["unit_id"]), dataset.classnames
    label, predicted = int(row["label"]), int(row["predicted"])
    text = f"{_name(names, label)} taken for {_name(names, predicted)}" if label != predicted else _name(names, label)
    if picture is None:
        return {"path": "", "text": text, "missing": True}
    in_memory = picture.path is None  # CIFAR's pictures are arrays in its batches
    return {"path": str(picture.path) if picture.path else "", "text": text,
            "missing": not in_memory and not _exists(picture.path), "class": _name(names, label),
            "taken_for": _name(names, predicted)}


def _name(names, index: int) -> str:
    return names[index] if 0 <= index < len(names) else f"class {index}"


def _retrieval(dataset, row: dict) -> dict:
    query = int(row["query"])
    if row["kind"] == "t2i":
        answer = int(row["answer"][0]) if len(row["answer"]) else -1
        text = dataset.captions[query] if query < len(dataset.captions) else ""
        path = dataset.images[answer] if 0 <= answer < len(dataset.images) else None
    else:
        path = dataset.images[query] if query < len(dataset.images) else None
        text = dataset.captions[int(row["answer"][0])] if len(row["answer"]) else ""
    return {"path": str(path) if path else "", "text": text, "missing": not _exists(path)}


def gallery(dataset, row: dict) -> list[tuple[str, float, bool]]:
    """Retrieval: what ranked above the right answer, as (picture path or caption, score, is right) in order."""
    answers = {int(a) for a in row["answer"]}
    above = []
    for candidate, score in row["top"]:
        if row["kind"] == "t2i":
            above.append((str(dataset.images[int(candidate)]), float(score), int(candidate) in answers))
        else:
            above.append((dataset.captions[int(candidate)], float(score), int(candidate) in answers))
        if int(candidate) in answers:
            break
    return above


__all__ = ["DatasetMoved", "dataset_root", "describe", "gallery", "moved_options", "open_dataset", "picture_lookup"]
