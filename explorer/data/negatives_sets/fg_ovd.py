"""FG-OVD (Bianchi et al., CVPR 2024) as its official repository releases it in ``benchmarks/``.

Each benchmark file is COCO detection JSON: ``images`` (``id``, ``file_name`` such as
``val2017/000000239627.jpg``, ``width``, ``height``), ``categories`` whose ``name`` is a whole caption
("a dark brown wooden table"), and ``annotations`` with a ``bbox`` (x, y, w, h), the positive caption's
``category_id`` and the negatives' ``neg_category_ids`` (ten per region in the released files). The
pictures are COCO 2017's, found by ``file_name`` under ``--images`` (the COCO root holding ``val2017/``,
or that folder itself; default: the folder given as the data).

The files by split (``FILES``): difficulty (how many attribute words each negative changes: hard 1,
medium 2, easy 3; trivial: negatives drawn from other regions' captions) and attribute (the changed
word is a colour, material, pattern or transparency). Left out, with the reason: a region whose
negatives the file does not hold (none listed, or an id that is not a category), a positive that is
not a category, a zero-area box, a crop under two pixels, a picture that is not on disk.
"""

from __future__ import annotations

from pathlib import Path

from explorer.data.errors import DatasetError
from explorer.data.negatives_sets.base import (NegativeItem, NegativesSet, Skipped, picture_path, region,
                                               splits_asked)
from explorer.data.readers.json_files import read_json

NAME = "fg-ovd"
TITLE = "FG-OVD"  # as MulCLIP's and CAFT's tables name it
FILES = {"hard": "1_attributes.json", "medium": "2_attributes.json", "easy": "3_attributes.json",
         "trivial": "shuffle_negatives.json", "color": "color.json", "material": "material.json",
         "pattern": "pattern.json", "transparency": "transparency.json"}
EXPECTS = "FG-OVD benchmark files (" + ", ".join(FILES.values()) + "), in the folder or its benchmarks/"


def benchmark_folder(root: Path) -> Path:
    """The folder holding the JSON files: ``root`` itself, or the official repository's ``benchmarks/``."""
    if root.is_file():
        return root.parent
    nested = root / "benchmarks"
    if not any((root / name).is_file() for name in FILES.values()) and nested.is_dir():
        return nested
    return root


def matches(root: Path) -> bool:
    return any((benchmark_folder(root) / name).is_file() for name in FILES.values())


def read(root: Path, splits=None, images: Path | None = None) -> NegativesSet:
    folder = benchmark_folder(Path(root))
    chosen = splits_asked({split: folder / name for split, name in FILES.items()}, splits, NAME, EXPECTS)
    images = Path(images) if images is not None else Path(root) if Path(root).is_dir() else folder
    if not images.is_dir():
        raise DatasetError(f"--images {images} is not a folder (it should hold COCO 2017's val2017/ pictures)")
    items, skipped = [], []
    for split, file in chosen.items():
        read_file(file, split, images, items, skipped)
    if not items:
        reasons = sorted({s.reason.split(":")[0] for s in skipped})
        raise DatasetError(f"no region of {', '.join(map(str, chosen.values()))} could be scored"
                           + (f" ({', '.join(reasons)}); are the COCO pictures under {images}?" if reasons else ""))
    return NegativesSet(NAME, folder, {split: str(file) for split, file in chosen.items()}, tuple(items),
                        tuple(skipped), notes=("positive and negatives scored on the region's crop",), title=TITLE)


def read_file(file: Path, split: str, images: Path, items: list, skipped: list) -> None:
    data = read_json(file, "FG-OVD benchmark JSON (images, annotations, categories)", dict)
    try:
        captions = {int(c["id"]): str(c["name"]) for c in data["categories"]}
        pictures = {int(p["id"]): p for p in data["images"]}
        annotations = list(data["annotations"])
    except (KeyError, TypeError, ValueError) as error:
        raise DatasetError(f"{file}: not FG-OVD's COCO layout (categories, images, annotations): {error!r}") \
            from error
    found: dict[int, Path | None] = {}
    for index, annotation in enumerate(annotations):
        ident = f"{split}/{annotation.get('id', index) if isinstance(annotation, dict) else index}"
        item, reason = _item(annotation, ident, split, captions, pictures, images, found)
        if item is None:
            skipped.append(Skipped(ident, reason))
        else:
            items.append(item)


def _item(annotation, ident: str, split: str, captions: dict, pictures: dict, images: Path, found: dict):
    """(NegativeItem, None) or (None, why it is left out)."""
    if not isinstance(annotation, dict):
        return None, "malformed annotation: not an object"
    negatives = annotation.get("neg_category_ids")
    if not isinstance(negatives, list) or not negatives:
        return None, "negatives missing: the region lists no neg_category_ids"
    absent = [n for n in negatives if not isinstance(n, int) or n not in captions]
    if absent:
        return None, f"negatives missing: neg_category_ids {absent[:5]} are not categories of the file"
    if _get(captions, annotation.get("category_id")) is None:
        return None, f"positive missing: category_id {annotation.get('category_id')!r} is not a category"
    picture = _get(pictures, annotation.get("image_id"))
    if not isinstance(picture, dict) or "file_name" not in picture:
        return None, f"picture missing: image_id {annotation.get('image_id')!r} is not among the images"
    box, why = region(annotation.get("bbox"), _size(picture))
    if box is None:
        return None, why
    key = annotation["image_id"]
    if key not in found:
        found[key] = picture_path(images, str(picture["file_name"]))
    if found[key] is None:
        return None, f"picture missing: {picture['file_name']} is not under {images}"
    return NegativeItem(ident, split, found[key], captions[annotation["category_id"]],
                        tuple(captions[n] for n in negatives), box), None


def _get(table: dict, key):
    """``table[key]``, or None when absent or when ``key`` cannot be one (a list or an object for an id)."""
    try:
        return table.get(key)
    except TypeError:
        return None


def _size(picture: dict) -> tuple | None:
    """The picture's (width, height) as the file gives them, or None when either is missing or not a number
    (the box is then not clamped here; the crop is, once the picture is read)."""
    size = (picture.get("width"), picture.get("height"))
    try:
        [float(value) for value in size]
    except (TypeError, ValueError):
        return None
    return size


__all__ = ["EXPECTS", "FILES", "NAME", "matches", "read"]
