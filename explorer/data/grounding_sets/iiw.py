"""IIW-400 (ImageInWords, Google, 2024): object descriptions with their human-drawn boxes.

Layout::

    <root>/data.jsonl      one record a line: image/key, IIW (the picture's description), objects
                           [{label, description, normalized_coords: [y_min, x_min, y_max, x_max]}]
                           (strings or numbers on a 0-999 scale)
    <root>/<key>.jpg       (or <root>/images/<key>.jpg)

A unit is each object's description (box truth); the IIW description is the picture's long caption.
Coordinates go to pixels as value / 1000 * side (a 0-999 scale is 1000 bins of the side; inferred, the
release does not say where a bin's edge lies). A line that is not JSON or lacks image/key, a picture
missing or unreadable, and an object whose coordinates are not four numbers in order are skipped,
counted by reason. The set has one split, "all".
"""

from __future__ import annotations

import json
from pathlib import Path

from explorer.data.errors import DatasetError
from explorer.data.grounding_sets.base import (BOX, SENTENCE, GroundingPicture, GroundingSet, SetBuilder,
                                               check_units, clean_text, header_size)
from explorer.data.retrieval_sets.base import find_image

NAME = "iiw"
FILE = "data.jsonl"
EXPECTS = f"{FILE} with image/key, IIW and objects (pictures <key>.jpg beside it or in images/)"
UNITS = (SENTENCE,)
SCALE = 1000.0


def matches(root: Path) -> bool:
    return (Path(root) / FILE).is_file()


def object_box(coords, size: tuple[int, int]) -> tuple[float, float, float, float] | None:
    """(x0, y0, x1, y1) in pixels of [y_min, x_min, y_max, x_max] on the 0-999 scale, or None when malformed."""
    try:
        y0, x0, y1, x1 = (float(c) for c in coords)
    except (TypeError, ValueError):
        return None
    if not (0 <= x0 < x1 <= SCALE and 0 <= y0 < y1 <= SCALE):
        return None
    width, height = size
    return (x0 / SCALE * width, y0 / SCALE * height, x1 / SCALE * width, y1 / SCALE * height)


def _record(builder: SetBuilder, number: int, line: str) -> dict | None:
    try:
        record = json.loads(line)
    except ValueError as error:
        builder.skip(f"{FILE} line {number}", f"malformed line: {error}")
        return None
    if not isinstance(record, dict) or not isinstance(record.get("image/key"), str) \
            or not isinstance(record.get("objects", []), list):
        builder.skip(f"{FILE} line {number}", "malformed line: no image/key or objects")
        return None
    return record


def _read_line(builder: SetBuilder, root: Path, number: int, line: str) -> None:
    record = _record(builder, number, line)
    if record is None:
        return
    key = record["image/key"]
    picture = find_image(root, f"{key}.jpg")
    if not picture.is_file():
        builder.skip(picture, "picture missing")
        return
    size = header_size(picture)
    if size is None:
        builder.skip(picture, "picture unreadable")
        return
    units = []
    for index, item in enumerate(record.get("objects") or []):
        box = object_box(item.get("normalized_coords"), size) if isinstance(item, dict) else None
        if box is None:
            builder.skip(f"{key} object {index}", "bad normalized_coords")
            continue
        units.append({"text": item.get("description"), "truth": BOX, "boxes": (box,)})
    builder.add(GroundingPicture(id=key, path=picture, caption=clean_text(record.get("IIW")), size=size), units)


def read(root: Path, split: str | None = None, units: str | None = None, limit: int | None = None) -> GroundingSet:
    root = Path(root)
    if not matches(root):
        raise DatasetError(f"{root} is not an IIW folder: expected {EXPECTS}")
    if split not in (None, "all"):
        raise DatasetError(f"IIW-400 has one split, 'all', not {split!r}")
    units = check_units(units, UNITS, NAME)
    builder = SetBuilder(limit)
    with open(root / FILE, encoding="utf-8", errors="replace") as lines:
        for number, line in enumerate(lines, 1):
            if builder.full:
                break
            if line.strip():
                _read_line(builder, root, number, line)
    notes = ["unit: each object's description, truth = its box",
             "normalized_coords [y_min, x_min, y_max, x_max] / 1000 * side"]
    return builder.build(NAME, root, "all", units, notes=notes)
