"""Grounding datasets as they sit on disk (real pictures with human masks or boxes), read into a
``GroundingSet`` (``base``).

One module per layout; each has ``NAME``, ``EXPECTS``, ``UNITS`` (the unit kinds it offers, its
default first), ``matches(root)`` (cheap: file names only) and ``read(root, split, units, limit)``;
the mask layouts also ``picture_masks(picture, keys)``, which their ``read`` hands to the set
(``GroundingSet.read_masks``) for ``truth`` to call when a picture is scored. ``detect`` says what each layout looks for when a folder matches none. A layout may take
options of its own (``options``: RefCOCO's dataset, split_by, images, proposals, text). Nothing is
unpickled but RefCOCO's refs pickle, and that with no global resolved (``explorer.data.readers.plain_pickle``).
"""

from __future__ import annotations

import os
from pathlib import Path

from explorer.data.errors import DatasetError
from explorer.data.grounding_sets.base import GroundingPicture, GroundingSet, GroundingUnit
from explorer.data.layouts import Layouts, check_split

LAYOUTS = ("dci", "png", "flickr30k_entities", "iiw", "refcoco")


REGISTRY = Layouts(__name__, LAYOUTS, "grounding", folders_only=True)
layout_module, detect = REGISTRY.module, REGISTRY.detect


def layout_options(name: str) -> tuple[str, ...]:
    """The options a layout takes (RefCOCO's dataset, split_by, images, proposals, text); what they mean is
    declared once, by the grounding task (``evaluation.tasks.grounding``)."""
    return REGISTRY.options(name)


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
    takes = layout_options(name)
    if options and not takes:
        with_options = [layout for layout in LAYOUTS if layout_options(layout)]
        raise DatasetError(f"the {name} layout takes no {', '.join(sorted(options))}: these are for "
                           f"{', '.join(with_options)}")
    unknown = sorted(set(options) - set(takes))
    if unknown:
        raise DatasetError(f"the {name} layout takes {', '.join(takes)}, not {', '.join(unknown)}")
    return layout_module(name).read(Path(root), split, units, limit, **options)


__all__ = ["LAYOUTS", "GroundingPicture", "GroundingSet", "GroundingUnit", "detect", "layout_module",
           "layout_options", "read_grounding_set"]
