"""Panoptic Narrative Grounding (PNG): Localized Narratives on COCO, their nouns grounded to panoptic segments.

Layout::

    <root>/annotations/png_coco_{train,val}2017.json      [{image_id, caption, segments: [{utterance, noun,
                                                           segment_ids}]}]
    <root>/annotations/panoptic_{split}2017.json           COCO panoptic: images, annotations (segments_info)
    <root>/annotations/panoptic_segmentation/{split}2017/<image_id:012d>.png   id = R + 256 G + 256^2 B
    <root>/images/{split}2017/<file_name>

Ids (image_id, segment_ids) may be strings or ints: both are read as the same id. The utterances of a
narrative are located in its caption in order; a sentence's truth is the union of the segments of its
noun utterances. Units:
- ``sentence`` (default): each sentence of the narrative that holds a noun with segments;
- ``phrase``: each noun utterance with segments.
A segment id that the picture's panoptic annotation does not hold is skipped ("dangling segment id");
an utterance not found in the caption, a missing picture or panoptic PNG, a record without image_id
are skipped, each counted by reason. ``split`` is "val" (default) or "train".
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from PIL import Image

from explorer.data.errors import DatasetError
from explorer.data.grounding_sets.base import (MASK, PHRASE, SENTENCE, GroundingPicture, GroundingSet, SetBuilder,
                                               canonical_id, check_units, clean_text, header_size,
                                               sentence_spans)
from explorer.data.readers.json_files import read_json

NAME = "png"
EXPECTS = "annotations/png_coco_{train,val}2017.json with annotations/panoptic_{split}2017.json"
UNITS = (SENTENCE, PHRASE)
SPLITS = ("val", "train")


def matches(root: Path) -> bool:
    return any((Path(root) / "annotations" / f"png_coco_{s}2017.json").is_file() for s in SPLITS)


def segment_ids(png: np.ndarray) -> np.ndarray:
    """int [H, W]: the panoptic id of each pixel of an RGB panoptic PNG (R + 256 G + 256^2 B; 0 = void)."""
    rgb = png.astype(np.int64)
    return rgb[..., 0] + 256 * rgb[..., 1] + 256 * 256 * rgb[..., 2]


def picture_masks(picture: GroundingPicture, keys) -> dict[str, np.ndarray]:
    """The masks of segment ids ``keys`` of a picture, from its panoptic PNG (``DatasetError`` when unreadable)."""
    try:
        with Image.open(picture.source) as image:
            if image.size != tuple(picture.size):
                raise DatasetError(f"panoptic PNG is {image.size}, the picture {picture.size}")
            ids = segment_ids(np.asarray(image.convert("RGB")))
    except (OSError, ValueError, Image.DecompressionBombError) as error:
        raise DatasetError(f"panoptic PNG undecodable: {error}") from error
    return {key: ids == int(key) for key in keys}


def _panoptic(root: Path, split: str) -> tuple[dict, dict]:
    """(image id -> image record, image id -> {segment id}) from the COCO panoptic file."""
    file = root / "annotations" / f"panoptic_{split}2017.json"
    if not file.is_file():
        raise DatasetError(f"{root} lacks {file.relative_to(root)} (the COCO panoptic annotations PNG grounds to)")
    data = read_json(file, "COCO panoptic annotations", dict)
    images = {canonical_id(i.get("id")): i for i in data.get("images") or [] if isinstance(i, dict)}
    segments = {}
    for item in data.get("annotations") or []:
        if isinstance(item, dict):
            info = item.get("segments_info") or []
            segments[canonical_id(item.get("image_id"))] = (
                item.get("file_name"), {canonical_id(s.get("id")) for s in info if isinstance(s, dict)})
    return images, segments


def _utterances(builder: SetBuilder, where: str, caption: str, record: dict, known: set[str]) -> list[tuple]:
    """(start, text, segment ids) of each noun utterance with segments, located in the caption in order."""
    found, cursor = [], 0
    for piece in record.get("segments") or []:
        if not isinstance(piece, dict):
            builder.skip(where, "malformed segment entry")
            continue
        text = clean_text(piece.get("utterance"))
        start = caption.find(text, cursor) if text else -1
        if start < 0:
            builder.skip(f"{where}: {text!r}", "utterance not found in caption")
            continue
        cursor = start + len(text)
        if not piece.get("noun"):
            continue
        ids = []
        for raw in piece.get("segment_ids") or []:
            key = canonical_id(raw)
            if key in known:
                ids.append(key)
            else:
                builder.skip(f"{where}: segment {raw}", "dangling segment id")
        if ids:
            found.append((start, text, tuple(dict.fromkeys(ids))))
    return found


def _units(caption: str, utterances: list[tuple], units: str) -> list[dict]:
    if units == PHRASE:
        return [{"text": text, "truth": MASK, "segments": ids} for _, text, ids in utterances]
    out = []
    for start, end, sentence in sentence_spans(caption):
        ids = [i for at, _, seg in utterances if start <= at < end for i in seg]
        if ids:
            out.append({"text": sentence, "truth": MASK, "segments": tuple(dict.fromkeys(ids))})
    return out


def _read_record(builder: SetBuilder, root: Path, split: str, units: str, record, images: dict, segments: dict,
                 seen: dict) -> None:
    if not isinstance(record, dict) or record.get("image_id") is None:
        builder.skip(f"png_coco_{split}2017.json entry", "malformed record: no image_id")
        return
    image_id = canonical_id(record["image_id"])
    info, (png_name, known) = images.get(image_id), segments.get(image_id, (None, set()))
    if info is None or image_id not in segments:
        builder.skip(image_id, "image not in the panoptic annotations")
        return
    picture_path = root / "images" / f"{split}2017" / str(info.get("file_name") or f"{image_id:0>12}.jpg")
    panoptic = (root / "annotations" / "panoptic_segmentation" / f"{split}2017"
                / str(png_name or f"{image_id:0>12}.png"))
    if not picture_path.is_file():
        builder.skip(picture_path, "picture missing")
        return
    if not panoptic.is_file():
        builder.skip(panoptic, "panoptic PNG missing")
        return
    caption = clean_text(record.get("caption"))
    seen[image_id] = seen.get(image_id, 0) + 1  # an image with several narratives: one entry each
    picture_id = image_id if seen[image_id] == 1 else f"{image_id}#{seen[image_id]}"
    size = _size(info) or header_size(panoptic)
    if size is None:
        builder.skip(panoptic, "panoptic PNG undecodable")
        return
    picture = GroundingPicture(id=picture_id, path=picture_path, caption=caption, size=size, source=panoptic)
    utterances = _utterances(builder, picture_id, caption, record, known)
    builder.add(picture, _units(caption, utterances, units))


def _size(info: dict) -> tuple[int, int] | None:
    width, height = info.get("width"), info.get("height")
    ok = isinstance(width, int) and isinstance(height, int) and width > 0 and height > 0
    return (width, height) if ok else None


def read(root: Path, split: str | None = None, units: str | None = None, limit: int | None = None) -> GroundingSet:
    root = Path(root)
    if not matches(root):
        raise DatasetError(f"{root} is not a PNG folder: expected {EXPECTS}")
    split = split or SPLITS[0]
    if split not in SPLITS:
        raise DatasetError(f"PNG has splits {', '.join(SPLITS)}, not {split!r}")
    units = check_units(units, UNITS, NAME)
    file = root / "annotations" / f"png_coco_{split}2017.json"
    if not file.is_file():
        raise DatasetError(f"{root} has no PNG narratives for split {split!r} ({file.relative_to(root)})")
    narratives = read_json(file, "a list of narratives", list)
    images, segments = _panoptic(root, split)
    builder = SetBuilder(limit)
    seen: dict[str, int] = {}
    for record in narratives:
        if builder.full:
            break
        _read_record(builder, root, split, units, record, images, segments, seen)
    notes = ["unit: each sentence of the narrative, truth = the union of its nouns' segments" if units == SENTENCE
             else "unit: each noun utterance, truth = its segments"]
    return builder.build(NAME, root, split, units, notes=notes, read_masks=picture_masks)
