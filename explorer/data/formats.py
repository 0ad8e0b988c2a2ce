"""Long-caption retrieval sets on disk: DOCCI and Urban1k, read as they ship, and written from scenes.

Both readers return ``LongCaptionRecord`` (id, image path, long caption,
split), the one record type retrieval evaluation needs; ``read_records``
picks the reader from what a folder holds (DOCCI, Urban1k, or this package's
own synthetic layout).

DOCCI (Google, 2024), as released::

    <root>/docci_descriptions.jsonlines   one JSON object per line, with at least
                                           example_id, split (train | test | qual_dev | qual_test),
                                           image_file (a name inside images/), description
    <root>/images/<image_file>            e.g. images/test_00000.jpg

Urban1k (the Long-CLIP authors), as released::

    <root>/image/1.jpg ... 1000.jpg
    <root>/caption/1.txt ... 1000.txt     one long caption per file, same stem as its image

Urban1k has no splits: every record is ``test``. Records come in numeric
order of the stem (1, 2, ..., 10, not 1, 10, 2).

Exporting scenes: ``export_docci`` maps the synthetic splits train / val /
test to DOCCI's train / qual_dev / test, names examples ``<split>_<nnnnn>``
like the release, and adds one key the release does not have,
``explorer_scene_id``, which links a line back to its scene's ground truth
(readers of the real layout ignore it). ``export_urban1k`` numbers the given
scenes 1..N in the order given. Both write JPEG pictures, as the releases do.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from PIL import Image

from explorer.core.images import load_image
from explorer.core.jsonl import JsonlError, read_jsonl, write_jsonl
from explorer.data.errors import DatasetError
from explorer.data.scene import Scene
from explorer.data.store import SCENES_FILE, read_dataset

DOCCI_FILE = "docci_descriptions.jsonlines"
DOCCI_SPLITS = ("train", "test", "qual_dev", "qual_test")
DOCCI_KEYS = ("example_id", "split", "image_file", "description")
DOCCI_SPLIT_OF = {"train": "train", "val": "qual_dev", "test": "test"}  # synthetic split -> DOCCI split
URBAN1K_SPLIT = "test"
IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".webp", ".bmp")
JPEG_QUALITY = 95


@dataclass(frozen=True)
class LongCaptionRecord:
    id: str
    image_path: Path
    long_caption: str
    split: str
    source: str  # docci | urban1k | synthetic

    def load_image(self, max_side: int | None = None) -> Image.Image:
        """The picture as RGB, read safely (``explorer.core.images.load_image``)."""
        return load_image(self.image_path, max_side=max_side).image


def _check_missing(records: list[LongCaptionRecord], missing: str, where: Path) -> list[LongCaptionRecord]:
    if missing not in ("error", "skip"):
        raise ValueError(f"missing must be 'error' or 'skip', got {missing!r}")
    absent = [r for r in records if not r.image_path.is_file()]
    if absent and missing == "error":
        raise DatasetError(f"{len(absent)} of {len(records)} images are missing from {where} (first: "
                           f"{absent[0].image_path.name}); pass missing='skip' to read the others.")
    gone = {id(r) for r in absent}
    return [r for r in records if id(r) not in gone]


# -- DOCCI --------------------------------------------------------------------------------------------------

def read_docci(path: str | os.PathLike, split: str | None = None, *, images_dir: str | os.PathLike | None = None,
               missing: str = "error") -> list[LongCaptionRecord]:
    """DOCCI records from its folder (or its ``docci_descriptions.jsonlines``), optionally one split.

    ``images_dir`` defaults to ``images/`` beside the jsonlines file. Lines whose image is not on
    disk are an error, or left out with ``missing='skip'``.
    """
    if split is not None and split not in DOCCI_SPLITS:
        raise DatasetError(f"DOCCI has no split {split!r}: its splits are {', '.join(DOCCI_SPLITS)}")
    path = Path(path)
    file = path / DOCCI_FILE if path.is_dir() else path
    if not file.is_file():
        raise DatasetError(f"no {DOCCI_FILE} in {path}: point at the folder that holds DOCCI's descriptions.")
    images = Path(images_dir) if images_dir is not None else file.parent / "images"
    records = [LongCaptionRecord(id=str(item["example_id"]), image_path=images / item["image_file"],
                                 long_caption=str(item["description"]).strip(), split=str(item["split"]),
                                 source="docci")
               for item in docci_lines(file) if split is None or item["split"] == split]
    return _check_missing(records, missing, images)


def docci_lines(file: Path):
    """The lines of ``docci_descriptions.jsonlines``, each checked for DOCCI's fields (a
    ``DatasetError`` names the file and line of a bad one)."""
    try:
        for number, item in read_jsonl(file):
            absent = [k for k in DOCCI_KEYS if not isinstance(item, dict) or k not in item]
            if absent:
                raise DatasetError(f"{file}, line {number}: no {', '.join(absent)} (a DOCCI line has "
                                   f"{', '.join(DOCCI_KEYS)})")
            yield item
    except JsonlError as error:
        raise DatasetError(str(error)) from error


def export_docci(scenes: Iterable[Scene], out_dir: str | os.PathLike, *, split_of: dict[str, str] | None = None,
                 overwrite: bool = False) -> Path:
    """Write scenes in DOCCI's layout (long caption as the description); returns the jsonlines path.

    Scenes without a split go to DOCCI's ``test``.
    """
    split_of = dict(DOCCI_SPLIT_OF if split_of is None else split_of)
    root = Path(out_dir)
    file = root / DOCCI_FILE
    if file.exists() and not overwrite:
        raise DatasetError(f"{file} exists; pass overwrite=True to replace it.")
    (root / "images").mkdir(parents=True, exist_ok=True)
    counters: dict[str, int] = {}

    def lines():
        for scene in scenes:
            split = split_of.get(scene.split, "test") if scene.split is not None else "test"
            if split not in DOCCI_SPLITS:
                raise ValueError(f"{split!r} is not a DOCCI split ({', '.join(DOCCI_SPLITS)})")
            number = counters.get(split, 0)
            counters[split] = number + 1
            example_id = f"{split}_{number:05d}"
            image_file = f"{example_id}.jpg"
            scene.image.save(root / "images" / image_file, "JPEG", quality=JPEG_QUALITY)
            yield {"example_id": example_id, "split": split, "image_file": image_file,
                   "description": scene.long_caption, "explorer_scene_id": scene.id}

    return write_jsonl(file, lines())  # the file appears only once every picture is on disk


# -- Urban1k ------------------------------------------------------------------------------------------------

def _stem_order(stem: str) -> tuple:
    return (0, int(stem), stem) if stem.isdigit() else (1, 0, stem)


def read_urban1k(path: str | os.PathLike, split: str | None = None, *,
                 missing: str = "error") -> list[LongCaptionRecord]:
    """Urban1k records: every ``caption/<stem>.txt`` with its ``image/<stem>.jpg``, in numeric order."""
    if split not in (None, URBAN1K_SPLIT):
        raise DatasetError(f"Urban1k has only a {URBAN1K_SPLIT!r} split, not {split!r}")
    root = Path(path)
    captions, images = root / "caption", root / "image"
    if not captions.is_dir() or not images.is_dir():
        raise DatasetError(f"{root} is not an Urban1k folder: it needs caption/ (N.txt) and image/ (N.jpg).")
    by_stem: dict[str, Path] = {}
    for file in images.iterdir():
        if file.suffix.lower() in IMAGE_SUFFIXES:
            # .jpg first (what the release ships), then the other suffixes in IMAGE_SUFFIXES order
            known = by_stem.get(file.stem)
            if known is None or IMAGE_SUFFIXES.index(file.suffix.lower()) < IMAGE_SUFFIXES.index(known.suffix.lower()):
                by_stem[file.stem] = file
    texts = sorted((f for f in captions.iterdir() if f.suffix == ".txt" and f.is_file()),
                   key=lambda f: _stem_order(f.stem))
    records = []
    for text in texts:
        caption = text.read_text(encoding="utf-8", errors="replace").strip()
        if not caption:
            raise DatasetError(f"{text} is empty: every Urban1k caption file holds one long caption.")
        image = by_stem.get(text.stem, images / f"{text.stem}.jpg")
        records.append(LongCaptionRecord(id=text.stem, image_path=image, long_caption=caption,
                                         split=URBAN1K_SPLIT, source="urban1k"))
    return _check_missing(records, missing, images)


def export_urban1k(scenes: Iterable[Scene], out_dir: str | os.PathLike, *, overwrite: bool = False) -> Path:
    """Write scenes in Urban1k's layout, numbered 1..N in the order given; returns the folder."""
    root = Path(out_dir)
    captions, images = root / "caption", root / "image"
    ours = [f for d in (captions, images) if d.is_dir() for f in d.iterdir() if f.stem.isdigit()]
    if ours and not overwrite:
        raise DatasetError(f"{root} already holds Urban1k files; pass overwrite=True to replace them.")
    for file in ours:  # only the layout's own numbered files
        if file.suffix in (".txt", ".jpg"):
            file.unlink()
    captions.mkdir(parents=True, exist_ok=True)
    images.mkdir(parents=True, exist_ok=True)
    for number, scene in enumerate(scenes, 1):
        scene.image.save(images / f"{number}.jpg", "JPEG", quality=JPEG_QUALITY)
        (captions / f"{number}.txt").write_text(scene.long_caption, encoding="utf-8")
    return root


# -- any of them --------------------------------------------------------------------------------------------

def synthetic_records(path: str | os.PathLike, split: str | None = None) -> list[LongCaptionRecord]:
    """The synthetic layout's scenes as retrieval records (image path and long caption)."""
    return [LongCaptionRecord(id=s.id, image_path=s.image_path, long_caption=s.long_caption, split=s.split or "",
                              source="synthetic") for s in read_dataset(path, split)]


def detect_layout(path: str | os.PathLike) -> str:
    """'synthetic', 'docci' or 'urban1k': which layout a folder (or file) holds."""
    path = Path(path)
    if path.is_file():
        if path.name == SCENES_FILE:
            return "synthetic"
        if path.suffix == ".jsonlines":
            return "docci"
    elif (path / SCENES_FILE).is_file():
        return "synthetic"
    elif (path / DOCCI_FILE).is_file():
        return "docci"
    elif (path / "caption").is_dir() and (path / "image").is_dir():
        return "urban1k"
    raise DatasetError(f"{path} holds no dataset this reads: expected {SCENES_FILE} (synthetic), "
                       f"{DOCCI_FILE} (DOCCI) or caption/ and image/ folders (Urban1k).")


def read_records(path: str | os.PathLike, split: str | None = None) -> list[LongCaptionRecord]:
    """Retrieval records from any supported layout, detected from what ``path`` holds."""
    layout = detect_layout(path)
    if layout == "synthetic":
        return synthetic_records(path, split)
    if layout == "docci":
        return read_docci(path, split)
    return read_urban1k(path, split)
