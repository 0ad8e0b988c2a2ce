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

A bad row (not UTF-8, not JSON / not CSV, the wrong number of columns, no image path) is left out
and reported as ``Skipped("<file>:<line>", "bad line: ...")``; the other rows are read. A manifest
with no usable row at all is a ``DatasetError``.

This module also holds the tolerant text helpers the other line- and JSON-based readers share
(``json_lines``, ``read_json``, ``bad_text``, ``no_usable``, ``other_split``).
"""

from __future__ import annotations

import csv
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from explorer.data.errors import DatasetError
from explorer.data.readers.json_files import NOT_UTF8, bad_text, read_json
from explorer.data.retrieval_sets.base import RetrievalSet, Skipped, build_set

NAME = "manifest"
EXPECTS = "a *.csv (header image,caption) or *.jsonl / *.jsonlines (keys image, caption) manifest"
IMAGE_KEYS = ("image", "image_path", "filepath")
CAPTION_KEYS = ("caption", "text")
SUFFIXES = (".csv", ".jsonl", ".jsonlines")
NOT_MANIFESTS = ("docci_descriptions.jsonlines", "scenes.jsonl", "samples.jsonl")
HEAD_BYTES = 64 * 1024  # what detection looks at: the header / first usable line, never the whole file


# -- tolerant text helpers (shared by the line- and JSON-based readers) -------------------------------------

def json_lines(file: Path) -> Iterator[tuple[int, Any, str | None]]:
    """``(line number, value, None)`` for each JSON line of ``file``, or ``(line number, None, why)`` for
    a line that is not UTF-8 or not JSON. Blank lines are passed over; lines are numbered as
    ``explorer.core.jsonl.read_jsonl`` numbers them (ends at ``\\n``, ``\\r\\n`` or ``\\r``)."""
    number = 0
    with open(file, "rb") as handle:
        for chunk in handle:
            chunk = chunk[:-1] if chunk.endswith(b"\n") else chunk
            chunk = chunk[:-1] if chunk.endswith(b"\r") else chunk
            for raw in chunk.split(b"\r"):  # JSON escapes \r inside strings: a bare one ends a line
                number += 1
                if number == 1 and raw.startswith(b"\xef\xbb\xbf"):
                    raw = raw[3:]
                if not raw.strip():
                    continue
                try:
                    text = raw.decode("utf-8")
                except UnicodeDecodeError as error:
                    yield number, None, f"not UTF-8 (byte {error.start + 1} of the line)"
                    continue
                try:
                    yield number, json.loads(text), None
                except ValueError as error:
                    yield number, None, f"not JSON ({error})"


def no_usable(file: Path, bad: list[tuple[str, str]], what: str = "line") -> DatasetError:
    """The error for an index file none of whose lines (entries) could be read; ``bad`` holds
    (where, why) for each bad one, e.g. ("3", "not JSON (...)")."""
    where, why = bad[0]
    return DatasetError(f"{file} has no usable {what}: {len(bad)} bad, e.g. {what} {where}: {why}")


def other_split(record, split: str | None) -> bool:
    """Whether ``record`` says it belongs to a split other than ``split`` (so a reader reading ``split``
    leaves it out without reporting it, even when it is bad); ``split`` None or "all" means every one."""
    return (split not in (None, "all") and isinstance(record, dict) and isinstance(record.get("split"), str)
            and record["split"] != split)


# -- detection --------------------------------------------------------------------------------------------

def _keys(names) -> tuple[str | None, str | None]:
    names = list(names)
    return (next((k for k in IMAGE_KEYS if k in names), None), next((k for k in CAPTION_KEYS if k in names), None))


def _header(file: Path) -> list[str]:
    """The column names (CSV header, or the keys of the first JSON object among the first lines), read
    from the file's head only; [] when there are none."""
    try:
        with open(file, "rb") as handle:
            head = handle.read(HEAD_BYTES)
    except OSError:
        return []
    lines = head.decode("utf-8-sig", errors="replace").splitlines()
    if file.suffix.lower() == ".csv":
        try:
            return [c.strip() for c in next(csv.reader(lines[:1]), [])]
        except csv.Error:
            return []
    for line in lines[:-1] if len(head) == HEAD_BYTES else lines:  # a cut last line is not looked at
        try:
            record = json.loads(line) if line.strip() else None
        except ValueError:
            continue
        if isinstance(record, dict):
            return list(record)
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


# -- reading ----------------------------------------------------------------------------------------------

def _csv_rows(file: Path) -> Iterator[tuple[int, dict | None, str | None]]:
    """(first line of the row, row, None) or (line, None, why) for each data row of a CSV manifest."""
    with open(file, encoding="utf-8-sig", errors="surrogateescape", newline="") as text:
        reader = csv.reader(text, strict=True)
        try:
            fields = [c.strip() for c in next(reader, [])]
        except csv.Error as error:
            raise DatasetError(f"{file}: not a readable CSV file ({error})") from error
        last = reader.line_num
        while True:
            start = last + 1
            try:
                row = next(reader)
            except StopIteration:
                return
            except csv.Error as error:
                last = reader.line_num
                yield start, None, f"not CSV ({error})"
                continue
            last = reader.line_num
            if not any(cell.strip() for cell in row):
                continue
            if NOT_UTF8.search("".join(row)):
                yield start, None, "not UTF-8"
            elif len(row) != len(fields):
                yield start, None, f"{len(row)} columns, the header has {len(fields)}"
            else:
                yield start, dict(zip(fields, row)), None


def _rows(file: Path, image_key: str, caption_key: str) -> tuple[list[tuple[int, dict]], list[tuple[int, Any, str]]]:
    """The usable rows (line, row) and the bad ones (line, what was read, why); a file with no usable
    row is an error."""
    found = _csv_rows(file) if file.suffix.lower() == ".csv" else json_lines(file)
    rows, bad = [], []
    for number, row, why in found:
        if why is None and not isinstance(row, dict):
            why = "not a JSON object"
        elif why is None and (not isinstance(row.get(image_key), str) or not row[image_key].strip()):
            why = f"no image path ({image_key!r})"
        elif why is None and caption_key not in row:
            why = f"no caption ({caption_key!r})"
        if why is None:
            rows.append((number, row))
        else:
            bad.append((number, row, why))
    if bad and not rows:
        raise no_usable(file, [(str(number), why) for number, _, why in bad])
    return rows, bad


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
    image_key, caption_key = _keys(_header(file))
    try:
        rows, bad = _rows(file, image_key, caption_key)
    except OSError as error:
        raise DatasetError(f"{file}: cannot be read ({error})") from error
    has_split = any("split" in row for _, row in rows)
    named_after_split = split is not None and file.stem == split and not has_split
    if split not in (None, "all") and not named_after_split:
        present = sorted({str(row.get("split")) for _, row in rows if row.get("split") not in (None, "")})
        if split not in present:
            valid = ", ".join(present + ["all"]) if present else "all (the manifest has no split column)"
            raise DatasetError(f"unknown split {split!r} in {file}: the splits are {valid}")
        rows = [(number, row) for number, row in rows if str(row.get("split")) == split]
        bad = [(number, row, why) for number, row, why in bad if not other_split(row, split)]
    folder, order, captions = file.parent, [], {}
    for _, row in rows:
        image = row[image_key]
        if image not in captions:
            order.append(image)
            captions[image] = []
        captions[image].append(row[caption_key])
    pairs = [(folder / image, captions[image], image) for image in order]
    skipped = [Skipped(f"{file}:{number}", f"bad line: {why}") for number, _, why in bad]
    return build_set(NAME, root, split or "all", pairs, skipped=skipped, notes=[f"read {file.name}"],
                     extra={"index": str(file)})
