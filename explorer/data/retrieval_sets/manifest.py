"""CSV and JSON Lines manifests: one row per (image, caption).

Layout::

    <root>/<name>.csv                  header with an image column (image | image_path | filepath)
                                       and a caption column (caption | text); optional split column
    <root>/<name>.jsonl (.jsonlines)   one object per line with the same keys
    images                             paths relative to the manifest's folder (or absolute)

Several rows may name the same image: one image, several captions, in the order the image first
appears. Without a split the whole file is read (``all``); with one, a ``split`` column filters
the rows (an unknown split lists the ones present). A folder with several manifests needs the
manifest itself, unless a split is asked and one is named after it (``test.csv``). The image id
is the path as the manifest writes it. ``root`` may be the manifest file.
DOCCI's ``docci_descriptions.jsonlines`` and this project's ``scenes.jsonl`` / ``samples.jsonl``
are not manifests (their own readers handle them).
"""

from __future__ import annotations

import csv
from pathlib import Path

from explorer.core.jsonl import JsonlError, read_jsonl
from explorer.data.errors import DatasetError
from explorer.data.retrieval_sets.base import RetrievalSet, build_set

NAME = "manifest"
EXPECTS = "a *.csv (header image,caption) or *.jsonl / *.jsonlines (keys image, caption) manifest"
IMAGE_KEYS = ("image", "image_path", "filepath")
CAPTION_KEYS = ("caption", "text")
SUFFIXES = (".csv", ".jsonl", ".jsonlines")
NOT_MANIFESTS = ("docci_descriptions.jsonlines", "scenes.jsonl", "samples.jsonl")


def _keys(names) -> tuple[str | None, str | None]:
    names = list(names)
    return (next((k for k in IMAGE_KEYS if k in names), None), next((k for k in CAPTION_KEYS if k in names), None))


def _header(file: Path) -> list[str]:
    """The column names (CSV header, or the first JSONL object's keys); [] when unreadable."""
    try:
        if file.suffix.lower() == ".csv":
            with open(file, encoding="utf-8-sig", newline="") as text:
                return [c.strip() for c in next(csv.reader(text), [])]
        for _, record in read_jsonl(file):
            return list(record) if isinstance(record, dict) else []
    except (OSError, ValueError, csv.Error):
        pass
    return []


def _is_manifest(file: Path) -> bool:
    if not file.is_file() or file.suffix.lower() not in SUFFIXES or file.name in NOT_MANIFESTS:
        return False
    return None not in _keys(_header(file))


def _candidates(root: Path) -> list[Path]:
    if root.is_file():
        return [root] if _is_manifest(root) else []
    return sorted(p for p in root.iterdir() if _is_manifest(p)) if root.is_dir() else []


def matches(root: Path) -> bool:
    return bool(_candidates(Path(root)))


def _rows(file: Path):
    """(where, row dict) for every row; a malformed row or file raises DatasetError naming it."""
    if file.suffix.lower() != ".csv":
        try:
            for number, record in read_jsonl(file):
                if not isinstance(record, dict):
                    raise DatasetError(f"{file}, line {number}: not a JSON object")
                yield f"line {number}", record
        except (JsonlError, UnicodeDecodeError) as error:
            raise DatasetError(f"{file}: {error}") from error
        return
    try:
        with open(file, encoding="utf-8-sig", newline="") as text:
            reader = csv.DictReader(text, strict=True)
            for row in reader:
                if None in row or None in row.values():
                    raise DatasetError(f"{file}, line {reader.line_num}: {len(reader.fieldnames or [])} columns "
                                       f"expected, the row has a different number")
                yield f"line {reader.line_num}", row
    except (csv.Error, UnicodeDecodeError) as error:
        raise DatasetError(f"{file}: not a readable CSV file ({error})") from error


def _pick(root: Path, split: str | None) -> Path:
    found = _candidates(root)
    if root.is_file() and not found:
        raise DatasetError(f"{root} is not a manifest: it needs columns {'/'.join(IMAGE_KEYS)} and "
                           f"{'/'.join(CAPTION_KEYS)}")
    if len(found) == 1:
        return found[0]
    named = [p for p in found if split is not None and p.stem == split]
    if len(named) == 1:
        return named[0]
    if not found:
        raise DatasetError(f"no manifest in {root}: expected {EXPECTS}")
    raise DatasetError(f"{root} holds several manifests ({', '.join(p.name for p in found)}); point at one of them")


def read(root: Path, split: str | None) -> RetrievalSet:
    root = Path(root)
    file = _pick(root, split)
    rows = list(_rows(file))
    image_key, caption_key = _keys(_header(file))
    has_split = any("split" in row for _, row in rows)
    named_after_split = split is not None and file.stem == split and not has_split
    if split not in (None, "all") and not named_after_split:
        present = sorted({str(row.get("split")) for _, row in rows if row.get("split") not in (None, "")})
        if split not in present:
            valid = ", ".join(present + ["all"]) if present else "all (the manifest has no split column)"
            raise DatasetError(f"unknown split {split!r} in {file}: the splits are {valid}")
        rows = [(where, row) for where, row in rows if str(row.get("split")) == split]
    folder, order, captions = file.parent, [], {}
    for where, row in rows:
        image = row.get(image_key)
        if not isinstance(image, str) or not image.strip() or caption_key not in row:
            raise DatasetError(f"{file}, {where}: needs an image path ({image_key}) and a caption ({caption_key})")
        if image not in captions:
            order.append(image)
            captions[image] = []
        captions[image].append(row[caption_key])
    pairs = [(folder / image, captions[image], image) for image in order]
    return build_set(NAME, root, split or "all", pairs, notes=[f"read {file.name}"], extra={"index": str(file)})
