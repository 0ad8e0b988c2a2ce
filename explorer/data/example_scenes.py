"""The shipped example scenes recognised from their pixels, wherever the picture came from: the truth travels
with the example, not with the app's registry (issue 58).

A picture is a shipped scene when

1. a manifest of examples (``manifest.json``, ``explorer assets write``) sits beside it and lists it with its
   sentences' masks (a copy of ``assets/``, an exported figure's inputs); or
2. its digest (``image_digest``: pixels and size) is one the package lists in ``example_scenes.json``: the
   scene is then drawn again from the synthetic world (the examples are the first test-split scenes of seed 0,
   ``examples.SYNTHETIC``) and checked against the picture, so an installed package with no ``assets/``
   knows them too.

``example_scene`` returns an object with ``id``, ``sentence_texts`` and ``sentence_masks()`` (an ``Example``
or a ``Scene``), what ``explorer.grounding.truth`` stores and matches captions against; None for any other
picture. ``examples.write_scene_digests`` rewrites the table (``explorer assets write`` does; a test checks it).
"""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path

from PIL import Image

from explorer.core.errors import ExplorerError
from explorer.core.images import image_digest
from explorer.data.examples import DIGESTS, MANIFEST, SYNTHETIC, read_examples


def example_scene(picture: Image.Image, path: str | Path | None = None):
    """The shipped example scene with exactly these pixels (found beside ``path``, else by digest), or None."""
    beside = _listed_beside(Path(path)) if path else None
    if beside is not None:
        return beside
    digest = image_digest(picture)
    index = scene_digests().get(digest)
    if index is None:
        return None
    scene = _scene(index)
    return scene if image_digest(scene.image) == digest else None  # a stale table names no scene


def scene_digests() -> dict[str, int]:
    """The package's table: digest of each example scene's picture -> its index among the examples (read each
    time: a few lines)."""
    try:
        table = json.loads(DIGESTS.read_text(encoding="utf-8"))["scenes"]
        return {str(key): int(value) for key, value in table.items()}
    except (OSError, ValueError, KeyError, TypeError, AttributeError):  # no table: only the files beside tell
        return {}


@lru_cache(maxsize=8)
def _scene(index: int):
    from explorer.data.synthetic import generate_scenes

    return next(iter(generate_scenes(1, seed=SYNTHETIC["seed"], image_size=SYNTHETIC["image_size"],
                                     split=SYNTHETIC["split"], start=index)))


def _listed_beside(path: Path):
    """The example a manifest in the picture's own folder lists for this file, if it has truth."""
    if not (path.parent / MANIFEST).is_file():
        return None
    try:
        examples = read_examples(path.parent)
        target = path.resolve()
    except (ExplorerError, OSError):  # a damaged manifest names nothing; the digest may still
        return None
    return next((e for e in examples if e.sentence_texts and e.picture.resolve() == target), None)


__all__ = ["example_scene", "scene_digests"]
