"""SugarCrepe (Hsieh et al., NeurIPS 2023) as its repository releases it: one JSON file per kind of change.

``replace_obj.json``, ``replace_att.json``, ``replace_rel.json`` (a word replaced), ``swap_obj.json``,
``swap_att.json`` (two words swapped), ``add_obj.json``, ``add_att.json`` (a word added; an early release
named the object files ``*_ent.json``, read as the same splits); each maps an
id to ``{"filename": "000000391895.jpg", "caption": ..., "negative_caption": ...}`` (a list of such
entries is read too). The pictures are COCO val2017's, by ``filename``, under ``--images`` (default:
the folder's ``val2017/``, else the folder itself). The whole picture is scored against its one
positive and one negative caption. Left out, with the reason: an entry without its negative or its
positive caption, a picture that is not on disk.
"""

from __future__ import annotations

from pathlib import Path

from explorer.data.errors import DatasetError
from explorer.data.negatives_sets.base import NegativeItem, NegativesSet, Skipped, picture_path, splits_asked
from explorer.data.readers.json_files import read_json

NAME = "sugarcrepe"
TITLE = "SugarCrepe"
SPLITS = ("replace_obj", "replace_att", "replace_rel", "swap_obj", "swap_att", "add_obj", "add_att")
OLD_NAMES = {"replace_obj": "replace_ent", "swap_obj": "swap_ent", "add_obj": "add_ent"}  # an early release's files
EXPECTS = "SugarCrepe files (" + ", ".join(f"{s}.json" for s in SPLITS) + ")"


def split_file(root: Path, split: str) -> Path:
    """``<split>.json``, or the early release's name for it (``replace_ent.json`` for ``replace_obj``)."""
    file = root / f"{split}.json"
    old = root / f"{OLD_NAMES.get(split, split)}.json"
    return old if not file.is_file() and old.is_file() else file


def matches(root: Path) -> bool:
    return any(split_file(Path(root), split).is_file() for split in SPLITS)


def read(root: Path, splits=None, images: Path | None = None) -> NegativesSet:
    root = Path(root)
    chosen = splits_asked({split: split_file(root, split) for split in SPLITS}, splits, NAME, EXPECTS)
    images = Path(images) if images is not None else (root / "val2017" if (root / "val2017").is_dir() else root)
    if not images.is_dir():
        raise DatasetError(f"--images {images} is not a folder (it should hold COCO val2017's pictures)")
    items, skipped = [], []
    for split, file in chosen.items():
        data = read_json(file, "SugarCrepe entries (filename, caption, negative_caption)", (dict, list))
        entries = data.items() if isinstance(data, dict) else enumerate(data)
        for key, entry in entries:
            ident = f"{split}/{key}"
            item, reason = _item(entry, ident, split, images)
            if item is None:
                skipped.append(Skipped(ident, reason))
            else:
                items.append(item)
    if not items:
        raise DatasetError(f"no entry of {', '.join(map(str, chosen.values()))} could be scored; are the COCO "
                           f"val2017 pictures under {images}? Give --images DIR")
    return NegativesSet(NAME, root, {split: str(file) for split, file in chosen.items()}, tuple(items),
                        tuple(skipped), notes=("the whole picture scored against one positive and one negative",),
                        title=TITLE)


def _item(entry, ident: str, split: str, images: Path):
    if not isinstance(entry, dict) or not isinstance(entry.get("filename"), str):
        return None, "malformed entry: no filename"
    positive, negative = entry.get("caption"), entry.get("negative_caption")
    if not isinstance(negative, str) or not negative.strip():
        return None, "negatives missing: no negative_caption"
    if not isinstance(positive, str) or not positive.strip():
        return None, "positive missing: no caption"
    path = picture_path(images, entry["filename"])
    if path is None:
        return None, f"picture missing: {entry['filename']} is not under {images}"
    return NegativeItem(ident, split, path, positive, (negative,)), None


__all__ = ["EXPECTS", "NAME", "SPLITS", "matches", "read"]
