"""DCI, Densely Captioned Images (Meta, 2024), with its masks: one unit per sentence of a mask's caption.

Layout::

    <root>/densely_captioned_images/      (or root itself is that folder)
        splits.json                       {"train": [<n>-data.json, ...], "valid": [...], "test": [...]}
        annotations/<n>-data.json         (``complete/`` holds the same with extra LLM fields; read when
                                          ``annotations/`` is absent)
        photos/sa_<id>.jpg

An annotation has ``image`` (a file in photos/), ``short_caption``, ``extra_caption``, ``width``,
``height`` and ``mask_data`` = {"<idx>": {idx, parent, requirements, label, caption, mask_quality,
area, bounds, outer_mask}}, ``outer_mask`` being a base64 1-bit PNG the photo's size.

Units (as the official loader reads masks: quality 0 fine, 1 label only, 2 unusable):
- each sentence of a quality-0 mask's caption, grounded to that mask;
- a quality-1 mask gives its label as one unit, ``label_only`` (reported apart, not in ``n_units``);
- quality 2 is skipped ("bad mask"); so is a mask that does not decode, is empty or is not the photo's
  size; a requirement id with no mask stored is skipped once ("dangling requirement id").
The short and extra captions carry no mask: they are not units; joined they are the picture's caption.
``split=None`` reads every split (splits.json's order); without splits.json every annotation is read.
"""

from __future__ import annotations

import base64
import binascii
import io
from pathlib import Path

import numpy as np
from PIL import Image

from explorer.data.errors import DatasetError
from explorer.data.grounding_sets.base import (MASK, SENTENCE, GroundingPicture, GroundingSet, SetBuilder,
                                               canonical_id, check_units, clean_text, header_size)
from explorer.data.readers.json_files import read_json

NAME = "dci"
FOLDER = "densely_captioned_images"
EXPECTS = f"{FOLDER}/ with photos/ and annotations/ (or complete/), splits.json optional"
UNITS = (SENTENCE,)
GOOD, LABEL_ONLY, BAD = 0, 1, 2


def _base(root: Path) -> Path:
    return root / FOLDER if (root / FOLDER).is_dir() else root


def _annotations(base: Path) -> Path:
    return base / "annotations" if (base / "annotations").is_dir() else base / "complete"


def matches(root: Path) -> bool:
    base = _base(Path(root))
    return (base / "photos").is_dir() and _annotations(base).is_dir()


def decode_mask(text, size: tuple[int, int]) -> np.ndarray:
    """bool [H, W] of an ``outer_mask`` (base64 PNG), or a ``DatasetError`` saying why it cannot be used."""
    try:
        data = base64.b64decode(str(text), validate=True)
        with Image.open(io.BytesIO(data)) as image:
            if image.size != tuple(size):
                raise DatasetError(f"mask size differs: {image.size[0]}x{image.size[1]}, the photo "
                                   f"{size[0]}x{size[1]}")
            mask = np.asarray(image.convert("L")) > 0
    except (binascii.Error, OSError, ValueError, Image.DecompressionBombError) as error:
        raise DatasetError(f"mask undecodable: {error}") from error
    return mask


def picture_masks(picture: GroundingPicture, keys) -> dict[str, np.ndarray]:
    """The masks ``keys`` of a picture, read again from its annotation (``DatasetError`` when they cannot be)."""
    data = read_json(picture.source).get("mask_data") or {}
    entries = {canonical_id(k): v for k, v in data.items()}
    return {key: decode_mask(entries[key].get("outer_mask"), picture.size) for key in keys}


def _names(base: Path, split: str | None) -> tuple[list[str], str, list[str]]:
    """(annotation file names, the split's name, splits used)."""
    folder = _annotations(base)
    splits_file = base / "splits.json"
    if not splits_file.is_file():
        if split not in (None, "all"):
            raise DatasetError(f"{base} has no splits.json: only split 'all' can be read")
        return sorted(p.name for p in folder.glob("*.json")), "all", []
    splits = read_json(splits_file, "a map of split name to annotation file names")
    if not isinstance(splits, dict) or not all(isinstance(v, list) for v in splits.values()):
        raise DatasetError(f"{splits_file}: expected a JSON object mapping split names to lists of file names")
    if split not in (None, "all") and split not in splits:
        raise DatasetError(f"DCI has no split {split!r}; its splits are {', '.join(splits)} (or all)")
    used = list(splits) if split in (None, "all") else [split]
    names = [str(n) if str(n).endswith(".json") else f"{n}.json" for s in used for n in splits[s]]
    return list(dict.fromkeys(names)), "all" if split in (None, "all") else split, used


def _mask_units(builder: SetBuilder, file: Path, size, masks: dict) -> list[dict]:
    """The units of one annotation's masks, in idx order; what cannot be used is skipped with why."""
    units = []
    for key in sorted(masks, key=_number_first):
        entry = masks[key]
        where = f"{file.name} mask {key}"
        if not isinstance(entry, dict):
            builder.skip(where, "bad mask entry: not an object")
            continue
        for required in entry.get("requirements") or []:
            if canonical_id(required) not in masks:
                builder.skip(f"{where} requirement {required}", "dangling requirement id")
        quality = entry.get("mask_quality", GOOD)
        if quality == BAD:
            builder.skip(where, "bad mask (mask_quality 2)")
            continue
        try:
            if not decode_mask(entry.get("outer_mask"), size).any():
                builder.skip(where, "mask empty")
                continue
        except DatasetError as error:
            builder.skip(where, str(error))
            continue
        if quality == LABEL_ONLY:
            units.append({"text": entry.get("label"), "truth": MASK, "segments": (key,), "label_only": True})
            continue
        sentences = _sentences(entry.get("caption"))
        if not sentences:
            builder.skip(where, "caption empty")
        units += [{"text": s, "truth": MASK, "segments": (key,)} for s in sentences]
    return units


def _number_first(key: str):
    """Sort key: numeric mask ids in numeric order, then any others by name."""
    return (0, int(key), "") if key.lstrip("-").isdigit() else (1, 0, key)


def _sentences(caption) -> list[str]:
    from explorer.core.sentences import split_sentences

    return split_sentences(clean_text(caption))


def _read_one(builder: SetBuilder, base: Path, file: Path) -> None:
    if not file.is_file():
        builder.skip(file, "annotation missing")
        return
    try:
        item = read_json(file)
    except (DatasetError, OSError) as error:
        builder.skip(file, f"bad annotation: {error}")
        return
    if not isinstance(item, dict) or not isinstance(item.get("image"), str) \
            or not isinstance(item.get("mask_data"), dict):
        builder.skip(file, "bad annotation: no image or mask_data")
        return
    photo = base / "photos" / item["image"]
    if not photo.is_file():
        builder.skip(photo, "picture missing")
        return
    size = _size(item, photo)
    if size is None:
        builder.skip(photo, "picture unreadable")
        return
    masks = {canonical_id(k): v for k, v in item["mask_data"].items()}
    caption = clean_text(f"{item.get('short_caption') or ''} {item.get('extra_caption') or ''}")
    picture = GroundingPicture(id=file.stem, path=photo, caption=caption, size=size, source=file)
    builder.add(picture, _mask_units(builder, file, size, masks))


def _size(item: dict, photo: Path) -> tuple[int, int] | None:
    width, height = item.get("width"), item.get("height")
    if isinstance(width, int) and isinstance(height, int) and width > 0 and height > 0:
        return width, height
    return header_size(photo)


def read(root: Path, split: str | None = None, units: str | None = None, limit: int | None = None) -> GroundingSet:
    root = Path(root)
    base = _base(root)
    if not matches(root):
        raise DatasetError(f"{root} is not a DCI folder: expected {EXPECTS}")
    units = check_units(units, UNITS, NAME)
    names, split_name, used = _names(base, split)
    builder = SetBuilder(limit)
    folder = _annotations(base)
    for name in names:
        if builder.full:
            break
        _read_one(builder, base, folder / name)
    notes = [f"annotations from {folder.name}/", "unit: each sentence of a good mask's caption (mask_quality 0); "
             "label-only masks (1) give their label, reported apart"]
    notes += [f"splits used: {', '.join(used)}"] if used else []
    return builder.build(NAME, base, split_name, units, notes=notes, read_masks=picture_masks)
