"""Hard-negative benchmarks as they sit on disk, read into one ``NegativesSet`` (``explorer eval-negatives``).

One module per layout (chosen through ``data.layouts.Layouts``), each with ``NAME``, ``EXPECTS``, ``matches(root)`` and ``read(root, splits,
images)``: ``fg-ovd`` (FG-OVD's benchmark JSONs), ``sugarcrepe`` (SugarCrepe's JSON files) and
``synthetic`` (the synthetic world's objects, FG-OVD's twin). Readers list pictures, never decode them.
"""

from __future__ import annotations

import os
from pathlib import Path

from explorer.data.errors import DatasetError
from explorer.data.layouts import Layouts
from explorer.data.negatives_sets.base import NegativeItem, NegativesSet

LAYOUTS = ("fg-ovd", "sugarcrepe", "synthetic")
REGISTRY = Layouts(__name__, LAYOUTS, "hard-negative")
layout_module, detect = REGISTRY.module, REGISTRY.detect


def read_negatives_set(root: str | os.PathLike, layout: str | None = None, splits=None,
                       images: str | os.PathLike | None = None, limit: int | None = None) -> NegativesSet:
    """The benchmark at ``root`` in ``layout`` (or the one detected): ``splits`` (None: every file present),
    pictures under ``images`` (the layout's default when None), the first ``limit`` items of each split."""
    root = Path(root)
    if not root.exists():
        raise DatasetError(f"no dataset at {root}: the path does not exist")
    name = layout or detect(root)
    found = layout_module(name).read(root, splits, Path(images) if images is not None else None)
    if limit is not None:
        if limit < 1:
            raise DatasetError(f"--limit must be at least 1, not {limit}")
        found = found.first(limit)
    return found


__all__ = ["LAYOUTS", "NegativeItem", "NegativesSet", "detect", "layout_module", "read_negatives_set"]
