"""ShareGPT4V-1k / ShareGPT4V-10k: long captions from the share-captioner json.

Layout: a JSON list of objects ``{"id"?, "image": <path>, "conversations": [<human turn>, <gpt turn>]}``;
the caption is ``conversations[1]["value"]`` with newlines turned into spaces. ``root`` is the
json file, or a folder holding it (the first ``*.json`` whose head names ``conversations``; for
``"10k"`` ``share4v_sam_10k.json`` is preferred, otherwise a ``share-captioner*.json``). Images
resolve against the json's folder, then against ``<json folder>/images/``.

Splits (which entries are read):

- ``"1k"``: the FIRST 1,000 entries of the file (ShareGPT4V-1k, from the share-captioner json);
- ``"10k"``: every entry (ShareGPT4V-10k is the ``share4v_sam_10k.json`` file);
- ``None`` / ``"all"``: every entry, split ``"all"``.

Entries naming the same image path become ONE image with all their captions (image -> text
retrieval then counts any of them as a hit); the 1k cut counts entries, not images. The image id
is the first entry's ``id``, else the path's stem. Notes say which file and how many entries were read.

An entry without ``image`` and ``conversations[1].value`` (or with bytes that are not UTF-8 in them)
is left out and reported as ``Skipped("<file>[<index>]", "bad entry: ...")``; the other entries are
read. A file with no usable entry is a ``DatasetError``.
"""

from __future__ import annotations

from pathlib import Path

from explorer.data.errors import DatasetError
from explorer.data.retrieval_sets.base import RetrievalSet, Skipped, build_set, find_image
from explorer.data.readers.json_files import bad_text, read_json
from explorer.data.retrieval_sets.manifest import no_usable

NAME = "sharegpt4v"
EXPECTS = "a share-captioner *.json (a list of {image, conversations})"
SAM_10K = "share4v_sam_10k.json"
SPLITS = ("1k", "10k", "all")
FIRST = 1000


def _looks_right(file: Path) -> bool:
    try:
        with open(file, "rb") as handle:  # a peek at the first entry, never a parse of the whole file
            head = handle.read(4096)
    except OSError:
        return False
    return head.lstrip().startswith(b"[") and b'"conversations"' in head


def _candidates(root: Path) -> list[Path]:
    if root.is_file():
        return [root] if root.suffix == ".json" and _looks_right(root) else []
    if not root.is_dir():
        return []
    return [f for f in sorted(root.glob("*.json")) if f.is_file() and _looks_right(f)]


def matches(root: Path) -> bool:
    return bool(_candidates(Path(root)))


def _pick(found: list[Path], split: str) -> Path:
    def rank(file: Path) -> int:
        sam, captioner = file.name == SAM_10K, file.name.startswith("share-captioner")
        return (0 if sam else 1 if captioner else 2) if split == "10k" else (0 if captioner else 1 if sam else 2)
    return min(found, key=rank)  # stable: sorted names break ties


def read(root: Path, split: str | None = None) -> RetrievalSet:
    root = Path(root)
    split = "all" if split is None else split
    if split not in SPLITS:
        raise DatasetError(f"ShareGPT4V has no split {split!r}; its splits are {', '.join(SPLITS)} "
                           f"(1k = the first {FIRST} entries, 10k/all = every entry)")
    found = _candidates(root)
    if not found:
        raise DatasetError(f"{root} holds no share-captioner json ({EXPECTS})")
    file = _pick(found, split)
    entries = read_json(file, "a JSON list of {image, conversations} objects", list)
    total = len(entries)
    if split == "1k":
        entries = entries[:FIRST]
    folder = file.parent
    grouped: dict[Path, tuple[list[str], str]] = {}
    bad = []
    for number, entry in enumerate(entries):
        try:
            image, caption = str(entry["image"]), entry["conversations"][1]["value"]
        except (TypeError, KeyError, IndexError):
            bad.append((f"[{number}]", "needs image and conversations[1].value"))
            continue
        if bad_text(image, caption, entry.get("id")):
            bad.append((f"[{number}]", "not UTF-8"))
            continue
        path = find_image(folder, image)
        image_id = str(entry.get("id", Path(image).stem))
        grouped.setdefault(path, ([], image_id))[0].append(str(caption).replace("\n", " "))
    if bad and not grouped:
        raise no_usable(file, bad, "entry")
    pairs = [(path, captions, image_id) for path, (captions, image_id) in grouped.items()]
    notes = [f"{file.name}: {len(entries)} of {total} entries read "
             + (f"(the first {FIRST}, ShareGPT4V-1k)" if split == "1k" else "(all of them)"),
             f"{len(grouped)} distinct images: entries sharing an image path are one image with all their captions",
             "caption = conversations[1].value, newlines to spaces"]
    skipped = [Skipped(f"{file}{where}", f"bad entry: {why}") for where, why in bad]
    return build_set(NAME, folder, split, pairs, skipped=skipped, notes=notes,
                     extra={"file": str(file), "entries": len(entries)})
