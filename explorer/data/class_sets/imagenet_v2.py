"""ImageNet-V2 (Recht et al., 2019; any of its three test sets): folders ``0`` .. ``999`` named by the ImageNet
class index (``imagenet``'s reading, shared with ImageNet-O)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from explorer.data.class_sets import imagenet
from explorer.data.class_sets.base import ClassSet

NAME = "imagenet-v2"
TITLE = "ImageNet-V2"  # as MulCLIP's Table 7 names it
EXPECTS = imagenet.EXPECTS[NAME]


def matches(root: Path) -> bool:
    """Most class folders (or those of its one top folder, as the tarball unpacks) are class indices."""
    return imagenet.mostly(root, str.isdigit)


def read(root: Path, *, classnames: str | Path | None = None) -> ClassSet:
    return replace(imagenet.read_v2(root, Path(classnames) if classnames is not None else None), title=TITLE)


__all__ = ["EXPECTS", "NAME", "matches", "read"]
