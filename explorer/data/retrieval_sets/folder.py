"""A plain folder: each picture with a ``.txt`` of the same stem beside it holding its caption.

Layout::

    <root>/cat.jpg  <root>/cat.txt     the whole text file is the caption (whitespace collapsed)

Only the folder's own files are read (no sub-folders), in name order with numbers compared as
numbers (2.jpg before 10.jpg). A picture without its ``.txt`` is skipped ("no caption file"), a
caption file that is not UTF-8 is skipped ("caption file is not UTF-8"), an empty one is
skipped as an empty caption. No splits: the set is ``all``. The image id is the file stem.
"""

from __future__ import annotations

import re
from pathlib import Path

from explorer.data.errors import DatasetError
from explorer.data.retrieval_sets.base import RetrievalSet, Skipped, build_set

NAME = "folder"
IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".webp", ".bmp")
EXPECTS = f"pictures ({', '.join(IMAGE_SUFFIXES)}) each with a same-stem .txt caption beside it"


def _images(root: Path) -> list[Path]:
    if not root.is_dir():
        return []
    return sorted((p for p in root.iterdir() if p.suffix.lower() in IMAGE_SUFFIXES and p.is_file()),
                  key=lambda p: [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", p.name)])


def matches(root: Path) -> bool:
    return any(p.with_suffix(".txt").is_file() for p in _images(Path(root)))


def read(root: Path, split: str | None) -> RetrievalSet:
    if split not in (None, "all"):
        raise DatasetError(f"unknown split {split!r}: a plain folder has no splits (only 'all')")
    root = Path(root)
    if not root.is_dir():
        raise DatasetError(f"{root} is not a folder: the plain layout is a folder of pictures with .txt captions")
    images = _images(root)
    if not images:
        raise DatasetError(f"no pictures in {root}: expected {EXPECTS}")
    pairs, skipped = [], []
    for image in images:
        text = image.with_suffix(".txt")
        if not text.is_file():
            skipped.append(Skipped(str(image), "no caption file"))
            continue
        try:
            caption = text.read_bytes().decode("utf-8")
        except UnicodeDecodeError:
            skipped.append(Skipped(str(text), "caption file is not UTF-8"))
            continue
        pairs.append((image, [" ".join(caption.split())], image.stem))
    return build_set(NAME, root, "all", pairs, skipped=skipped, notes=["the whole .txt file is the caption"])
