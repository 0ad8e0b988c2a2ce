"""Grounding datasets as they sit on disk (real pictures with human masks or boxes), read into a
``GroundingSet`` (``base``).

One module per layout; each has ``NAME``, ``EXPECTS``, ``UNITS`` (the unit kinds it offers, its
default first), ``matches(root)`` (cheap: file names only) and ``read(root, split, units, limit)``;
the mask layouts also ``picture_masks(picture, keys)``, which ``truth`` calls when a picture is
scored. ``detect`` says what each layout looks for when a folder matches none. Nothing is unpickled
(RefCOCO's refs(unc).p is not a layout here).
"""

from __future__ import annotations

import importlib
import os
from pathlib import Path

from explorer.data.errors import DatasetError
from explorer.data.grounding_sets.base import GroundingPicture, GroundingSet, GroundingUnit

LAYOUTS = ("dci", "png", "flickr30k_entities", "iiw")


def layout_module(name: str):
    if name not in LAYOUTS:
        raise DatasetError(f"unknown grounding layout {name!r}; known: {', '.join(LAYOUTS)}")
    return importlib.import_module(f"explorer.data.grounding_sets.{name}")


def detect(root: str | os.PathLike) -> str:
    """The first layout whose files ``root`` holds; a ``DatasetError`` naming what each layout looks for."""
    root = Path(root)
    if not root.is_dir():
        raise DatasetError(f"no grounding dataset at {root}: it is not a folder")
    for name in LAYOUTS:
        if layout_module(name).matches(root):
            return name
    tried = "; ".join(f"{name}: {layout_module(name).EXPECTS}" for name in LAYOUTS)
    raise DatasetError(f"{root} matches no grounding layout. Looked for: {tried}")


def read_grounding_set(root: str | os.PathLike, split: str | None = None, units: str | None = None,
                       limit: int | None = None, layout: str | None = None) -> GroundingSet:
    """The grounding set at ``root`` (first ``limit`` pictures with units), in ``layout`` or the one detected."""
    if limit is not None and limit < 1:
        raise DatasetError(f"limit must be at least 1, not {limit}")
    name = layout or detect(root)
    return layout_module(name).read(Path(root), split, units, limit)


__all__ = ["LAYOUTS", "GroundingPicture", "GroundingSet", "GroundingUnit", "detect", "layout_module",
           "read_grounding_set"]
