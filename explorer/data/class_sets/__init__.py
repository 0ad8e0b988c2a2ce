"""Zero-shot classification sets as released, read into one ``ClassSet`` (``explorer eval-zeroshot``).

Layouts: ``cifar10`` and ``cifar100`` (the binary release; the python pickle only with
``allow_pickle``), ``imagenet-v2`` (folders by class index), ``imagenet-o`` (folders by WordNet id) and
``folder`` (any folder of class folders). Class names and templates: ``names``; the fixed lists the official
code classifies with (CLIP's CIFAR templates, ImageNet-O's 200 classes): ``reference_lists``.
"""

from __future__ import annotations

import os
from pathlib import Path

from explorer.data.class_sets.base import ClassPicture, ClassSet
from explorer.data.errors import DatasetError

LAYOUTS = ("cifar10", "cifar100", "imagenet-v2", "imagenet-o", "folder")


def detect(root: str | os.PathLike) -> str:
    """The layout of ``root`` from its names alone: CIFAR's release files, class folders named 0 .. 999
    (ImageNet-V2) or by WordNet id (ImageNet-O), else a plain folder of classes."""
    from explorer.data.class_sets import cifar
    from explorer.data.class_sets.base import class_folders
    from explorer.data.class_sets.imagenet import WNID

    root = Path(root)
    for layout in cifar.RELEASES:
        if cifar.matches(root, layout):
            return layout
    folders = [f.name for f in class_folders(root)] if root.is_dir() else []
    if len(folders) == 1 and class_folders(root / folders[0]):  # a tarball's top folder
        folders = [f.name for f in class_folders(root / folders[0])]
    if folders and sum(name.isdigit() for name in folders) > len(folders) / 2:
        return "imagenet-v2"
    if folders and sum(bool(WNID.fullmatch(name)) for name in folders) > len(folders) / 2:
        return "imagenet-o"
    return "folder"


def read_class_set(root: str | os.PathLike, layout: str | None = None, limit: int | None = None,
                   allow_pickle: bool = False,
                   classnames: str | os.PathLike | None = None, class_set: str = "fixed") -> ClassSet:
    """The test pictures at ``root`` in ``layout`` (None: ``detect``); ``limit`` of them when given; ImageNet-O's
    classes by ``class_set`` ("fixed": clip_benchmark's 200, "present": the folders there)."""
    from explorer.data.class_sets import cifar, folder, imagenet

    root = Path(root)
    if not root.exists():
        raise DatasetError(f"no dataset at {root}: the path does not exist")
    names = Path(classnames) if classnames is not None else None
    layout = layout or detect(root)
    if layout in cifar.RELEASES:
        found = cifar.read(root, layout, allow_pickle)
    elif layout == "imagenet-v2":
        found = imagenet.read_v2(root, names)
    elif layout == "imagenet-o":
        found = imagenet.read_o(root, names, class_set)
    elif layout == "folder":
        found = folder.read(root)
    else:
        raise DatasetError(f"unknown classification layout {layout!r}; known: {', '.join(LAYOUTS)}")
    if limit is not None:
        if limit < 1:
            raise DatasetError(f"--limit must be at least 1, not {limit}")
        found = found.first(limit)
    return found


__all__ = ["ClassPicture", "ClassSet", "LAYOUTS", "detect", "read_class_set"]
