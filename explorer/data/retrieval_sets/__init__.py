"""Retrieval benchmark datasets as they sit on disk, read into one ``RetrievalSet``.

One module per layout; each has ``NAME``, ``matches(root) -> bool`` (cheap: looks at file names,
never reads a picture) and ``read(root, split) -> RetrievalSet``. ``read_retrieval_set`` picks the
layout with ``detect``, which says which layouts were tried (and what each looks for) when none
matches. Layouts are tried in ``LAYOUTS`` order, the most specific first.

Readers never decode pictures: they list paths. A picture that is missing is skipped, counted and
reported in ``RetrievalSet.skipped`` (with its captions); so is an empty caption or a caption file
that is not UTF-8. Retrieval (``explorer.retrieval``, a layer above) embeds and searches them.
"""

from __future__ import annotations

import os
from pathlib import Path

from explorer.data.layouts import Layouts, check_split
from explorer.data.retrieval_sets.base import RetrievalSet

# The order layouts are tried in: specific file names first, the plain folder last.
LAYOUTS = ("docci", "urban1k", "dci", "sharegpt4v", "karpathy", "goal_json", "synthetic", "manifest", "folder")


REGISTRY = Layouts(__name__, LAYOUTS, "dataset")
layout_module, detect = REGISTRY.module, REGISTRY.detect


def read_retrieval_set(root: str | os.PathLike, split: str | None = None, layout: str | None = None) -> RetrievalSet:
    """The dataset at ``root`` (a folder, or the layout's index file), in ``layout`` or the one detected."""
    split = check_split(split)
    name = layout or detect(root)
    return layout_module(name).read(Path(root), split)


__all__ = ["LAYOUTS", "RetrievalSet", "detect", "layout_module", "read_retrieval_set"]
