"""CIFAR-100's test set as Krizhevsky releases it (the binary release; the python pickle only with
``allow_pickle``): the reading is ``cifar``'s, shared with CIFAR-10."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from explorer.data.class_sets import cifar
from explorer.data.class_sets.base import ClassSet

NAME = "cifar100"
TITLE = "CIFAR-100"  # as MulCLIP's Table 7 names it
EXPECTS = cifar.expects(NAME)


def matches(root: Path) -> bool:
    return cifar.matches(root, NAME)


def read(root: Path, *, allow_pickle: bool = False) -> ClassSet:
    return replace(cifar.read(root, NAME, allow_pickle), title=TITLE)


__all__ = ["EXPECTS", "NAME", "matches", "read"]
