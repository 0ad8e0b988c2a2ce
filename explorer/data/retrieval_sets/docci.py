"""DOCCI (Google, 2024) as released: one long description per image.

Layout::

    <root>/docci_descriptions.jsonlines   one JSON object per line: example_id, split, image_file, description
    <root>/images/<image_file>            e.g. images/test_00000.jpg

Splits are train / test / qual_dev / qual_test; the default is ``test`` (5,000 pairs in the real
set), the split the long-caption retrieval papers report. One caption per image; the image id is
``example_id``. ``root`` may also be the jsonlines file itself (images/ beside it).
"""

from __future__ import annotations

from pathlib import Path

from explorer.data.errors import DatasetError
from explorer.data.formats import docci_lines
from explorer.data.retrieval_sets.base import RetrievalSet, build_set

NAME = "docci"
FILE = "docci_descriptions.jsonlines"
EXPECTS = f"{FILE} and images/"
SPLITS = ("train", "test", "qual_dev", "qual_test")
DEFAULT_SPLIT = "test"


def _index(root: Path) -> Path:
    return root if root.is_file() else root / FILE


def matches(root: Path) -> bool:
    root = Path(root)
    return root.name == FILE if root.is_file() else (root / FILE).is_file()


def read(root: Path, split: str | None = None) -> RetrievalSet:
    root = Path(root)
    split = DEFAULT_SPLIT if split is None else split
    if split not in SPLITS:
        raise DatasetError(f"DOCCI has no split {split!r}; its splits are {', '.join(SPLITS)}")
    index = _index(root)
    if not index.is_file():
        raise DatasetError(f"{root} is not a DOCCI folder: it has no {FILE}")
    folder = index.parent
    images = folder / "images"
    if not images.is_dir():
        raise DatasetError(f"{folder} has {FILE} but no images/ folder: DOCCI's pictures go in images/")
    try:
        pairs = [(images / str(item["image_file"]), [item["description"]], str(item["example_id"]))
                 for item in docci_lines(index) if item["split"] == split]
    except UnicodeDecodeError as error:
        raise DatasetError(f"{index} is not UTF-8 ({error.reason})") from error
    notes = [f"split {split!r} of {FILE}: one description per image, image id = example_id"]
    return build_set(NAME, folder, split, pairs, notes=notes)
