"""Zero-shot classification sets as released, read into one ``ClassSet`` (``explorer eval-zeroshot``).

One module per released layout, chosen through ``data.layouts.Layouts``: ``cifar10`` and ``cifar100`` (the
binary release, read by ``cifar``; the python pickle only with ``allow_pickle``), ``imagenet-v2`` (folders by
class index) and ``imagenet-o`` (folders by WordNet id), read by ``imagenet``, and ``folder`` (any folder of
class folders). Class names and templates: ``names``; the fixed lists the official
code classifies with (CLIP's CIFAR templates, ImageNet-O's 200 classes): ``reference_lists``.
"""

from __future__ import annotations

import os
from pathlib import Path

from explorer.data.class_sets.base import ClassPicture, ClassSet
from explorer.data.errors import DatasetError
from explorer.data.layouts import Layouts

LAYOUTS = ("cifar10", "cifar100", "imagenet-v2", "imagenet-o", "folder")
REGISTRY = Layouts(__name__, LAYOUTS, "classification")


def detect(root: str | os.PathLike) -> str:
    """The layout of ``root`` from its names alone: CIFAR's release files, class folders named 0 .. 999
    (ImageNet-V2) or by WordNet id (ImageNet-O), else a plain folder of classes."""
    root = Path(root)
    return next(name for name in LAYOUTS if REGISTRY.module(name).matches(root)) if root.is_dir() else "folder"


def read_class_set(root: str | os.PathLike, layout: str | None = None, limit: int | None = None,
                   allow_pickle: bool = False,
                   classnames: str | os.PathLike | None = None, class_set: str = "fixed") -> ClassSet:
    """The test pictures at ``root`` in ``layout`` (None: ``detect``); ``limit`` of them when given; ImageNet-O's
    classes by ``class_set`` ("fixed": clip_benchmark's 200, "present": the folders there)."""
    root = Path(root)
    if not root.exists():
        raise DatasetError(f"no dataset at {root}: the path does not exist")
    found = REGISTRY.read(layout or detect(root), root, allow_pickle=allow_pickle, classnames=classnames,
                          class_set=class_set)
    if limit is not None:
        if limit < 1:
            raise DatasetError(f"--limit must be at least 1, not {limit}")
        found = found.first(limit)
    return found


__all__ = ["ClassPicture", "ClassSet", "LAYOUTS", "detect", "read_class_set"]
