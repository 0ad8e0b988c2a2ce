"""DOCCI (Google, 2024) as released: one long description per image.

Layout::

    <root>/docci_descriptions.jsonlines   one JSON object per line: example_id, split, image_file, description
    <root>/images/<image_file>            e.g. images/test_00000.jpg

Splits are train / test / qual_dev / qual_test; the default is ``test`` (5,000 pairs in the real
set), the split the long-caption retrieval papers report; ``all`` reads every line (each image's
own split is then in ``extra["split_of"]``, by example id). One caption per image; the image id is
``example_id``. ``root`` may also be the jsonlines file itself (images/ beside it, or ``images_dir``).

A line that is not UTF-8, not JSON, or lacks DOCCI's fields is left out and reported as
``Skipped("<file>:<line>", "bad line: ...")`` (unless it names another split than the one read); the
other lines are read. A file with no usable line at all is a ``DatasetError``.
"""

from __future__ import annotations

import os
from pathlib import Path

from explorer.data.errors import DatasetError
from explorer.data.retrieval_sets.base import RetrievalSet, Skipped, build_set
from explorer.data.retrieval_sets.manifest import json_lines, no_usable, other_split

NAME = "docci"
FILE = "docci_descriptions.jsonlines"
EXPECTS = f"{FILE} and images/"
SPLITS = ("train", "test", "qual_dev", "qual_test")
KEYS = ("example_id", "split", "image_file", "description")
DEFAULT_SPLIT = "test"


def _index(root: Path) -> Path:
    return root if root.is_file() else root / FILE


def matches(root: Path) -> bool:
    root = Path(root)
    return root.name == FILE if root.is_file() else (root / FILE).is_file()


def lines(index: Path, split: str = "all") -> tuple[list[dict], list[Skipped]]:
    """The usable lines of ``index`` in ``split`` (``all``: every split), and the bad ones, reported; a
    file with no usable line at all is a ``DatasetError``."""
    items, bad, usable = [], [], 0
    for number, item, why in json_lines(index):
        if why is None:
            absent = [k for k in KEYS if not isinstance(item, dict) or k not in item]
            why = f"no {', '.join(absent)} (a DOCCI line has {', '.join(KEYS)})" if absent else None
        if why is None:
            usable += 1
            if split == "all" or item["split"] == split:
                items.append(item)
        elif not other_split(item, split):
            bad.append((str(number), why))
    if bad and not usable:
        raise no_usable(index, bad)
    return items, [Skipped(f"{index}:{where}", f"bad line: {why}") for where, why in bad]


def read(root: Path, split: str | None = None, *, images_dir: str | os.PathLike | None = None) -> RetrievalSet:
    """The ``split`` of DOCCI at ``root``; pictures from ``images_dir`` (default: images/ beside the file)."""
    root = Path(root)
    split = DEFAULT_SPLIT if split is None else split
    if split not in SPLITS + ("all",):
        raise DatasetError(f"DOCCI has no split {split!r}; its splits are {', '.join(SPLITS)} (or 'all')")
    index = _index(root)
    if not index.is_file():
        raise DatasetError(f"{root} is not a DOCCI folder: it has no {FILE}")
    folder = index.parent
    images = folder / "images" if images_dir is None else Path(images_dir)
    if not images.is_dir():
        raise DatasetError(f"{folder} has {FILE} but no images/ folder: DOCCI's pictures go in images/"
                           if images_dir is None else f"no images folder at {images}")
    try:
        items, skipped = lines(index, split)
    except OSError as error:
        raise DatasetError(f"{index} cannot be read ({error})") from error
    pairs = [(images / str(item["image_file"]), [item["description"]], str(item["example_id"])) for item in items]
    notes = [f"split {split!r} of {FILE}: one description per image, image id = example_id"]
    extra = {"split_of": {str(item["example_id"]): str(item["split"]) for item in items}}
    return build_set(NAME, folder, split, pairs, skipped=skipped, notes=notes, extra=extra)
