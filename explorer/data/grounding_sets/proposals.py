"""Detections used as box-grounding proposals, read in the three shapes people have them in.

- ``mattnet``: MAttNet's released detections (lichengunc/MAttNet, ``tools/run_detect.py``: the files of its
  ``detections.zip``, ``<dataset>_<split_by>/res101_coco_minus_refer_notime_dets.json``): a top-level list of
  ``{det_id, h5_id, box, image_id, category_id, category_name, score}``, ``box`` as ``[x, y, w, h]`` (MAttNet
  writes ``[x1, y1, x2 - x1 + 1, y2 - y1 + 1]``; read as it stands, as ReCLIP reads it). ReCLIP's
  ``main.py`` reads this list too, taking each item's ``image_id`` and ``box``.
- ``reclip``: the dict ReCLIP's ``main.py`` also reads, ``{image_id: [[x, y, w, h], ...]}`` (an item may be
  ``{"box": [x, y, w, h], ...}`` as well, the shape converters write).
- ``dets``: ``{"dets": [{"box": [x, y, w, h], "image_id", "score"}]}``, the shape this project read first.

The refer toolkit itself ships no detections: they come from MAttNet (or from a detector you run).

A proposal that is malformed, of zero area or (``within``) outside its picture is skipped and counted with its
reason. A picture left with no proposal gets the whole picture as its one box, as ReCLIP's ``main.py`` does
(``Box(x=0, y=0, w=img.width, h=img.height)``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from explorer.data.errors import DatasetError
from explorer.data.grounding_sets.base import canonical_id
from explorer.data.readers.json_files import read_json

SHAPES = {"mattnet": "MAttNet's list [{det_id, h5_id, box: [x, y, w, h], image_id, category_id, category_name, "
                     "score}]",
          "reclip": "ReCLIP's dict {image_id: [[x, y, w, h], ...]}",
          "dets": '{"dets": [{"box": [x, y, w, h], "image_id": ..., "score": ...}]}'}
EXPECTS = "; ".join(SHAPES.values())
MALFORMED, ZERO_AREA, OUTSIDE = "malformed detection", "zero-area proposal box", "proposal outside the picture"
WHOLE_PICTURE = "the whole picture (no proposal)"


@dataclass
class Proposals:
    """image id -> proposal boxes (x0, y0, x1, y1), in the file's order; what was left out, with why."""

    shape: str
    boxes: dict[str, list[tuple]] = field(default_factory=dict)
    skipped: list[tuple[str, str]] = field(default_factory=list)  # (item, reason)


def xywh_corners(box) -> tuple[float, float, float, float] | None:
    """(x0, y0, x1, y1) of ``[x, y, w, h]``; None when it is not four finite numbers."""
    if isinstance(box, (str, bytes)) or not hasattr(box, "__len__") or len(box) != 4:
        return None
    try:
        x, y, w, h = (float(v) for v in box)
    except (TypeError, ValueError):
        return None
    if any(v != v or v in (float("inf"), float("-inf")) for v in (x, y, w, h)):
        return None
    return (x, y, x + w, y + h)


def shape_of(data) -> str | None:
    """Which of ``SHAPES`` a file's JSON is, None for none of them."""
    if isinstance(data, list):
        return "mattnet" if all(isinstance(item, dict) for item in data) else None
    if isinstance(data, dict):
        if "dets" in data:
            return "dets" if isinstance(data["dets"], list) else None
        return "reclip" if all(isinstance(value, list) for value in data.values()) else None
    return None


def read_proposals(file: str | Path) -> Proposals:
    """The proposals of ``file`` in any of ``SHAPES``; a ``DatasetError`` naming them for anything else."""
    file = Path(file)
    if not file.is_file():
        raise DatasetError(f"no detections file at {file} (read: {EXPECTS})")
    data = read_json(file, EXPECTS)
    shape = shape_of(data)
    if shape is None:
        raise DatasetError(f"{file} is none of the proposal files read here: {EXPECTS}")
    proposals = Proposals(shape)
    if shape == "reclip":
        items = [(image_id, box) for image_id, boxes in data.items() for box in boxes]
    else:
        listed = data["dets"] if shape == "dets" else data
        items = [(item.get("image_id"), item.get("box")) if isinstance(item, dict) else (None, None)
                 for item in listed]
    for index, (image_id, box) in enumerate(items):
        _add(proposals, index, image_id, box["box"] if isinstance(box, dict) and "box" in box else box)
    return proposals


def _add(proposals: Proposals, index: int, image_id, box) -> None:
    corners = xywh_corners(box)
    if image_id is None or isinstance(image_id, (list, dict)) or corners is None:
        proposals.skipped.append((f"detection {index}", MALFORMED))
    elif not (corners[2] > corners[0] and corners[3] > corners[1]):
        proposals.skipped.append((f"detection {index}", ZERO_AREA))
    else:
        proposals.boxes.setdefault(canonical_id(image_id), []).append(corners)


def within(boxes: list[tuple], size: tuple[int, int]) -> tuple[list[tuple], int]:
    """(the boxes that overlap the picture of ``size`` (width, height), how many lie wholly outside it). A box
    reaching past the edge is kept as it is, as ReCLIP keeps it (its score's slice stops at the edge)."""
    width, height = size
    kept = [box for box in boxes if box[0] < width and box[1] < height and box[2] > 0 and box[3] > 0]
    return kept, len(boxes) - len(kept)


def whole_picture(size: tuple[int, int]) -> tuple[float, float, float, float]:
    return (0.0, 0.0, float(size[0]), float(size[1]))


__all__ = ["EXPECTS", "MALFORMED", "OUTSIDE", "SHAPES", "WHOLE_PICTURE", "ZERO_AREA", "Proposals", "read_proposals",
           "shape_of", "whole_picture", "within", "xywh_corners"]
