"""GOAL's evaluation jsons: a JSON list of ``{"filename": ..., "caption": ...}``.

Layout::

    <root>/<name>.json         [{"filename": "a.jpg", "caption": "..."}, ...]  (exactly those two keys)
    <root>/<filename>          the picture, or <root>/images/<filename>

The file has no splits: the set is ``all`` (``test`` is accepted as the same thing, since these
files are evaluation sets). Entries naming the same file are one image with several captions, in
the order the image first appears. The image id is its file name. ``root`` may be the json itself.
"""

from __future__ import annotations

from pathlib import Path

from explorer.data.errors import DatasetError
from explorer.data.retrieval_sets.base import RetrievalSet, build_set, find_image, load_json

NAME = "goal_json"
EXPECTS = "a *.json holding a list of {\"filename\", \"caption\"} objects (GOAL's evaluation files)"
KEYS = {"filename", "caption"}
MAX_BYTES = 200 * 1024 * 1024  # larger json files are not looked into when detecting


def _load(file: Path):
    return load_json(file, "a JSON list of {filename, caption} objects")


def _is_goal(file: Path) -> bool:
    """Cheap check: a small json whose first character is '[' and whose entries all have exactly KEYS."""
    try:
        if not file.is_file() or file.suffix.lower() != ".json" or file.stat().st_size > MAX_BYTES:
            return False
        with open(file, "rb") as head:
            if head.read(4096).lstrip(b"\xef\xbb\xbf \t\r\n")[:1] != b"[":
                return False
        data = _load(file)
    except (OSError, DatasetError):
        return False
    return bool(data) and isinstance(data, list) and all(isinstance(e, dict) and set(e) == KEYS for e in data)


def _candidates(root: Path) -> list[Path]:
    if root.is_file():
        return [root] if _is_goal(root) else []
    return sorted(p for p in root.glob("*.json") if _is_goal(p)) if root.is_dir() else []


def matches(root: Path) -> bool:
    return bool(_candidates(Path(root)))


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
    data = _load(file)
    if not isinstance(data, list):
        raise DatasetError(f"{file}: not a list of {{filename, caption}} objects")
    folder, order, captions = file.parent, [], {}
    for number, entry in enumerate(data):
        if not isinstance(entry, dict) or not isinstance(entry.get("filename"), str) or "caption" not in entry:
            raise DatasetError(f"{file}, entry {number}: needs 'filename' (a string) and 'caption'")
        name = entry["filename"]
        if name not in captions:
            order.append(name)
            captions[name] = []
        captions[name].append(entry["caption"])
    pairs = []
    for name in order:
        pairs.append((find_image(folder, name), captions[name], name))
    return build_set(NAME, root, "all", pairs, notes=[f"read {file.name}"], extra={"index": str(file)})
