"""DCI, Densely Captioned Images (Meta, 2024), as the long-text retrieval papers use it.

Layout::

    <root>/densely_captioned_images/      (or root itself is that folder, or its splits.json)
        annotations/<name>.json           one per image: image (a file in photos/), short_caption,
                                          extra_caption (and the dense masks, not read here)
        photos/<image>
        splits.json                       {"train": [<name>.json, ...], "valid": [...], "test": [...]}

Caption = ``short_caption + " " + extra_caption``, as the long-text papers build it; one caption
per image, the image id is the annotation's file stem. ``split=None`` reads ALL splits (7,805 images
in the real set) and the set's split is ``"all"``; ``extra["splits_used"]`` and a note say which
splits were read. An annotation named in splits.json but absent is skipped ("annotation missing");
one that is not JSON, has no ``image``, or has bytes that are not UTF-8 in the fields read is skipped
("bad annotation: ..."); the other annotations are read. A bad ``splits.json`` is a ``DatasetError``.
"""

from __future__ import annotations

from pathlib import Path

from explorer.data.errors import DatasetError
from explorer.data.retrieval_sets.base import RetrievalSet, Skipped, build_set
from explorer.data.readers.json_files import bad_text, read_json

NAME = "dci"
FOLDER = "densely_captioned_images"
SPLITS_FILE = "splits.json"
EXPECTS = f"{FOLDER}/ with annotations/, photos/ and {SPLITS_FILE}"


def _base(root: Path) -> Path:
    if root.is_file():
        return root.parent
    return root / FOLDER if (root / FOLDER).is_dir() else root


def matches(root: Path) -> bool:
    root = Path(root)
    if root.is_file() and root.name != SPLITS_FILE:
        return False
    base = _base(root)
    return (base / "annotations").is_dir() and (base / SPLITS_FILE).is_file()


def _annotation(file: Path) -> tuple[dict | None, str]:
    """The annotation in ``file`` and "", or None and why it cannot be used."""
    try:
        item = read_json(file)
    except DatasetError as error:
        return None, f"not valid JSON ({error.__cause__ or error})"
    except OSError as error:
        return None, f"cannot be read ({error})"
    if not isinstance(item, dict) or not isinstance(item.get("image"), str):
        return None, "no image (a DCI annotation has image, short_caption and extra_caption)"
    if bad_text(item["image"], item.get("short_caption"), item.get("extra_caption")):
        return None, "not UTF-8"
    return item, ""


def read(root: Path, split: str | None = None) -> RetrievalSet:
    root = Path(root)
    base = _base(root)
    lacking = [n for n in ("annotations", "photos") if not (base / n).is_dir()]
    lacking += [SPLITS_FILE] if not (base / SPLITS_FILE).is_file() else []
    if lacking:
        raise DatasetError(f"{root} is not a DCI folder: {base} lacks {', '.join(lacking)} ({EXPECTS})")
    splits_file = base / SPLITS_FILE
    splits = read_json(splits_file, "a map of split name to annotation file names")
    if not isinstance(splits, dict) or not all(isinstance(v, list) for v in splits.values()):
        raise DatasetError(f"{splits_file}: expected a JSON object mapping split names to lists of file names")
    if split is not None and split != "all" and split not in splits:
        raise DatasetError(f"DCI has no split {split!r}; its splits are {', '.join(splits)} (or None for all)")
    used = list(splits) if split in (None, "all") else [split]
    names = list(dict.fromkeys(str(n) for s in used for n in splits[s]))  # in order, once each
    pairs, skipped = [], []
    for name in names:
        file = base / "annotations" / (name if name.endswith(".json") else f"{name}.json")
        if not file.is_file():
            skipped.append(Skipped(str(file), "annotation missing"))
            continue
        item, why = _annotation(file)
        if item is None:
            skipped.append(Skipped(str(file), f"bad annotation: {why}"))
            continue
        caption = f"{item.get('short_caption') or ''} {item.get('extra_caption') or ''}".strip()
        pairs.append((base / "photos" / str(item["image"]), [caption], file.stem))
    notes = [f"splits used: {', '.join(used)}", "caption = short_caption + ' ' + extra_caption"]
    return build_set(NAME, base, "all" if split is None else split, pairs, skipped=skipped, notes=notes,
                     extra={"splits_used": used})
