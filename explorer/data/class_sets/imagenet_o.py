"""ImageNet-O (Hendrycks et al., 2021): folders named by WordNet id, classified among clip_benchmark's fixed
200 classes (``class_set``: fixed, or present: the folders there); ``imagenet``'s reading, shared with
ImageNet-V2."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from explorer.data.class_sets import imagenet
from explorer.data.class_sets.base import ClassSet

NAME = "imagenet-o"
TITLE = "ImageNet-O"  # as MulCLIP's Table 7 names it
EXPECTS = imagenet.EXPECTS[NAME]


def matches(root: Path) -> bool:
    """Most class folders (or those of its one top folder) are WordNet ids."""
    return imagenet.mostly(root, lambda name: bool(imagenet.WNID.fullmatch(name)))


def read(root: Path, *, classnames: str | Path | None = None, class_set: str = "fixed") -> ClassSet:
    return replace(imagenet.read_o(root, Path(classnames) if classnames is not None else None, class_set), title=TITLE)


__all__ = ["EXPECTS", "NAME", "matches", "read"]
