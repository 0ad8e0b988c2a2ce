"""Any folder of class folders: ``ROOT/<class name>/<pictures>``, the folder's name as the class name
(underscores read as spaces: ``red_circle`` is "red circle"). A folder without pictures is left out
with its reason. ``explorer data classes-twin`` writes one from the synthetic world."""

from __future__ import annotations

from pathlib import Path

from explorer.data.class_sets.base import ClassPicture, ClassSet, Skipped, class_folders, pictures_in, spoken
from explorer.data.errors import DatasetError

NAME = "folder"
EXPECTS = "one folder per class, pictures inside (the folder's name is the class name)"


def matches(root: Path) -> bool:
    """Any folder: the layout tried last."""
    return root.is_dir()


def read(root: Path) -> ClassSet:
    if not root.is_dir():
        raise DatasetError(f"no dataset at {root}: it is not a folder")
    classes, pictures, skipped = [], [], []
    for folder in class_folders(root):
        files = pictures_in(folder)
        if not files:
            skipped.append(Skipped(folder.name, "unknown class folder: it holds no pictures"))
            continue
        pictures += [ClassPicture(f"{folder.name}/{p.name}", len(classes), p) for p in files]
        classes.append(spoken(folder.name))
    if len(classes) < 2:
        raise DatasetError(f"{root} holds {len(classes)} class folder(s) with pictures; the folder layout expects "
                           f"{EXPECTS}, at least two")
    return ClassSet("folder", root, tuple(classes), tuple(pictures), tuple(skipped), names_from="folder names")


__all__ = ["EXPECTS", "read"]
