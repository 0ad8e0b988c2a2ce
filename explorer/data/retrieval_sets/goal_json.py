"""GOAL's evaluation jsons: a JSON list of ``{"filename": ..., "caption": ...}``.

Layout::

    <root>/<name>.json         [{"filename": "a.jpg", "caption": "..."}, ...]  (exactly those two keys)
    <root>/<filename>          the picture, or <root>/images/<filename>

The file has no splits: the set is ``all`` (``test`` is accepted as the same thing, since these
files are evaluation sets). Entries naming the same file are one image with several captions, in
the order the image first appears. The image id is its file name. ``root`` may be the json itself.

Detection is cheap: it looks at file names and the first ``HEAD_BYTES`` of each ``*.json`` (a list
whose first object has exactly the keys filename and caption), never parsing a whole file. Reading
is exact: an entry without ``filename`` (a string) and ``caption``, or with bytes that are not UTF-8
in them, is left out and reported as ``Skipped("<file>[<index>]", "bad entry: ...")``; the other
entries are read. A file with no usable entry is a ``DatasetError``.
"""

from __future__ import annotations

import json
from pathlib import Path

from explorer.data.errors import DatasetError
from explorer.data.retrieval_sets.base import RetrievalSet, Skipped, build_set, find_image
from explorer.data.readers.json_files import bad_text, read_json
from explorer.data.retrieval_sets.manifest import no_usable

NAME = "goal_json"
EXPECTS = "a *.json holding a list of {\"filename\", \"caption\"} objects (GOAL's evaluation files)"
KEYS = {"filename", "caption"}
HEAD_BYTES = 64 * 1024  # what detection reads of each json: enough for the first entry


def _first_entry(file: Path):
    """The list's first entry, parsed from the file's head alone; None when the head holds no list
    or the entry does not end within it."""
    with open(file, "rb") as handle:
        head = handle.read(HEAD_BYTES)
    text = head.decode("utf-8", errors="ignore").lstrip("\ufeff \t\r\n")
    if not text.startswith("["):
        return None
    try:
        return json.JSONDecoder().raw_decode(text[1:].lstrip())[0]
    except ValueError:
        return None


def _is_goal(file: Path) -> bool:
    """Cheap check: a json whose first character is '[' and whose first entry has exactly KEYS."""
    try:
        if not file.is_file() or file.suffix.lower() != ".json":
            return False
        entry = _first_entry(file)
    except OSError:
        return False
    return isinstance(entry, dict) and set(entry) == KEYS


def _candidates(root: Path) -> list[Path]:
    if root.is_file():
        return [root] if _is_goal(root) else []
    return sorted(p for p in root.glob("*.json") if _is_goal(p)) if root.is_dir() else []


def matches(root: Path) -> bool:
    return bool(_candidates(Path(root)))


def _problem(entry) -> str | None:
    if not isinstance(entry, dict) or not isinstance(entry.get("filename"), str) or "caption" not in entry:
        return "needs 'filename' (a string) and 'caption'"
    if bad_text(entry["filename"], entry["caption"]):
        return "not UTF-8"
    return None


def read(root: Path, split: str | None) -> RetrievalSet:
    if split not in (None, "all", "test"):
        raise DatasetError(f"unknown split {split!r}: a GOAL json has no splits (use 'all' or 'test')")
    root = Path(root)
    if root.is_file():
        file = root
    else:
        found = _candidates(root)
        if not found:
            raise DatasetError(f"no GOAL json in {root}: expected a *.json list of {{filename, caption}}")
        if len(found) > 1:
            raise DatasetError(f"{root} holds several GOAL jsons ({', '.join(p.name for p in found)}); "
                               f"point at one of them")
        file = found[0]
    data = read_json(file, "a JSON list of {filename, caption} objects", list)
    folder, order, captions, bad = file.parent, [], {}, []
    for number, entry in enumerate(data):
        problem = _problem(entry)
        if problem is not None:
            bad.append((f"[{number}]", problem))
            continue
        name = entry["filename"]
        if name not in captions:
            order.append(name)
            captions[name] = []
        captions[name].append(entry["caption"])
    if bad and not order:
        raise no_usable(file, bad, "entry")
    pairs = [(find_image(folder, name), captions[name], name) for name in order]
    skipped = [Skipped(f"{file}{where}", f"bad entry: {why}") for where, why in bad]
    return build_set(NAME, root, "all", pairs, skipped=skipped, notes=[f"read {file.name}"], extra={"index": str(file)})
