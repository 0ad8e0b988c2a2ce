"""Urban1k (the Long-CLIP authors): 1,000 urban pictures, one long caption each.

Layout, as released::

    <root>/image/<stem>.jpg               1.jpg ... 1000.jpg
    <root>/caption/<stem>.txt             one caption per file, same stem as its image

The official evaluation scripts read only the FIRST LINE of each caption file
(``f.readlines()[0]``); so does this reader, and it says so in the set's notes. Pairs come in
numeric stem order (1, 2, ..., 10, not 1, 10, 2). A caption file that is not UTF-8 is skipped
("caption file is not UTF-8") with its image; the rest keeps going.

Also read: the ``annotations.json`` form, a JSON list of ``{"image_id", "image", "caption"}`` with
``image`` relative to the folder holding the json (the whole caption is used; entries naming the
same image become one image with all its captions). ``root`` may be that json file. An entry
without ``image`` and ``caption`` (or with bytes that are not UTF-8 in them) is left out and reported
as ``Skipped("<file>[<index>]", "bad entry: ...")``; a file with no usable entry is a ``DatasetError``.

Urban1k has no splits: the set's split is ``test`` (``None`` or ``"test"``; anything else is an error).
"""

from __future__ import annotations

from pathlib import Path

from explorer.data.errors import DatasetError
from explorer.data.retrieval_sets.base import RetrievalSet, Skipped, build_set
from explorer.data.readers.json_files import bad_text, read_json
from explorer.data.retrieval_sets.manifest import no_usable

NAME = "urban1k"
ANNOTATIONS = "annotations.json"
EXPECTS = f"image/ + caption/ (N.jpg, N.txt), or {ANNOTATIONS} (image_id, image, caption)"
SPLIT = "test"
SUFFIXES = (".jpg", ".jpeg", ".png", ".webp", ".bmp")


def _folders(root: Path) -> bool:
    return (root / "image").is_dir() and (root / "caption").is_dir()


def _annotations(root: Path) -> Path | None:
    file = root if root.is_file() else root / ANNOTATIONS
    if file.name != ANNOTATIONS or not file.is_file():
        return None
    with open(file, "rb") as handle:  # a peek, not a parse: the list's first object names "caption"
        head = handle.read(4096)
    return file if head.lstrip().startswith(b"[") and b'"caption"' in head else None


def matches(root: Path) -> bool:
    root = Path(root)
    return (root.is_dir() and _folders(root)) or _annotations(root) is not None


def read(root: Path, split: str | None = None) -> RetrievalSet:
    root = Path(root)
    if split not in (None, SPLIT):
        raise DatasetError(f"Urban1k has no split {split!r}; its only split is {SPLIT!r}")
    if root.is_dir() and _folders(root):
        return _read_folders(root)
    file = root if root.is_file() else root / ANNOTATIONS
    if file.is_file():
        return _read_annotations(file)
    raise DatasetError(f"{root} is not an Urban1k folder: it needs image/ and caption/ "
                       f"(N.jpg and N.txt), or {ANNOTATIONS}")


def _order(stem: str) -> tuple:
    return (0, int(stem), stem) if stem.isdigit() else (1, 0, stem)


def _image(folder: Path, stem: str) -> Path:
    for suffix in SUFFIXES + tuple(s.upper() for s in SUFFIXES):
        if (folder / f"{stem}{suffix}").is_file():
            return folder / f"{stem}{suffix}"
    return folder / f"{stem}.jpg"


def _read_folders(root: Path) -> RetrievalSet:
    texts = sorted((f for f in (root / "caption").iterdir() if f.suffix == ".txt" and f.is_file()),
                   key=lambda f: _order(f.stem))
    pairs, skipped = [], []
    for text in texts:
        try:
            content = text.read_bytes().decode("utf-8-sig")
        except UnicodeDecodeError:
            skipped.append(Skipped(str(text), "caption file is not UTF-8"))
            continue
        lines = content.splitlines()
        pairs.append((_image(root / "image", text.stem), [lines[0] if lines else ""], text.stem))
    notes = ["first line of each caption file only, as the official Urban1k scripts read it",
             "pairs in numeric stem order (1, 2, ..., 10)"]
    return build_set(NAME, root, SPLIT, pairs, skipped=skipped, notes=notes)


def _read_annotations(file: Path) -> RetrievalSet:
    entries = read_json(file, "a JSON list of {image_id, image, caption} objects", list)
    grouped: dict[Path, tuple[list[str], str]] = {}
    bad = []
    for number, entry in enumerate(entries):
        if not isinstance(entry, dict) or "image" not in entry or "caption" not in entry:
            bad.append((f"[{number}]", "needs image and caption (and image_id)"))
            continue
        if bad_text(entry["image"], entry["caption"], entry.get("image_id")):
            bad.append((f"[{number}]", "not UTF-8"))
            continue
        path = file.parent / str(entry["image"])
        image_id = str(entry.get("image_id", Path(str(entry["image"])).stem))
        grouped.setdefault(path, ([], image_id))[0].append(entry["caption"])
    if bad and not grouped:
        raise no_usable(file, bad, "entry")
    pairs = [(path, captions, image_id) for path, (captions, image_id) in grouped.items()]
    notes = [f"{ANNOTATIONS}: {len(entries)} entries, images relative to {file.parent}, whole captions"]
    skipped = [Skipped(f"{file}{where}", f"bad entry: {why}") for where, why in bad]
    return build_set(NAME, file.parent, SPLIT, pairs, skipped=skipped, notes=notes)
