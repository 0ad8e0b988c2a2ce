"""Grounding datasets as they sit on disk (real pictures with human masks or boxes), read into a
``GroundingSet`` (``base``).

One module per layout; each has ``NAME``, ``EXPECTS``, ``UNITS`` (the unit kinds it offers, its
default first), ``matches(root)`` (cheap: file names only) and ``read(root, split, units, limit)``;
the mask layouts also ``picture_masks(picture, keys)``, which ``truth`` calls when a picture is
scored. ``detect`` says what each layout looks for when a folder matches none. A layout may take
options of its own (``options``: RefCOCO's dataset, split_by, images, proposals, text). Nothing is
unpickled but RefCOCO's refs pickle, and that with no global resolved (``explorer.data.plain_pickle``).
"""

from __future__ import annotations

import os
from pathlib import Path

from explorer.data.errors import DatasetError
from explorer.data.grounding_sets.base import GroundingPicture, GroundingSet, GroundingUnit
from explorer.data.layouts import Layouts, check_split

LAYOUTS = ("dci", "png", "flickr30k_entities", "iiw", "refcoco")


LAYOUT_OPTIONS = {"refcoco": ("dataset", "split_by", "images", "proposals", "text")}
REGISTRY = Layouts(__name__, LAYOUTS, "grounding", folders_only=True)
layout_module, detect = REGISTRY.module, REGISTRY.detect


def read_grounding_set(root: str | os.PathLike, split: str | None = None, units: str | None = None,
                       limit: int | None = None, layout: str | None = None,
                       options: dict | None = None) -> GroundingSet:
    """The grounding set at ``root`` (first ``limit`` pictures with units), in ``layout`` or the one detected;
    ``options``: the layout's own (None values left out), a ``DatasetError`` for a layout without them."""
    if limit is not None and limit < 1:
        raise DatasetError(f"limit must be at least 1, not {limit}")
    split = check_split(split)
    name = layout or detect(root)
    options = {key: value for key, value in (options or {}).items() if value is not None}
    if options and name not in LAYOUT_OPTIONS:
        raise DatasetError(f"the {name} layout takes no {', '.join(sorted(options))}: these are for "
                           f"{', '.join(LAYOUT_OPTIONS)}")
    unknown = sorted(set(options) - set(LAYOUT_OPTIONS.get(name, ())))
    if unknown:
        raise DatasetError(f"the {name} layout takes {', '.join(LAYOUT_OPTIONS[name])}, not {', '.join(unknown)}")
    return layout_module(name).read(Path(root), split, units, limit, **options)


__all__ = ["LAYOUTS", "LAYOUT_OPTIONS", "GroundingPicture", "GroundingSet", "GroundingUnit", "detect", "layout_module",
           "read_grounding_set"]
