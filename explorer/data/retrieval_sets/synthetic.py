"""This project's synthetic world, as ``explorer data synth`` (``explorer.data.write_dataset``) writes it.

Layout (see ``explorer.data.store.LAYOUT``)::

    <root>/scenes.jsonl        one scene per line, each with "image" (images/<id>.png) and "long_caption"
    <root>/images/<id>.png

One caption per image: the scene's long caption. Splits ``train``, ``val``, ``test`` (default
``test``); the image id is the scene id. The images and captions come out in exactly the order
``explorer.data.read_dataset(root, split)`` returns the scenes -- the order ``explorer eval``
(``explorer.evaluation.runner``) uses -- so retrieval numbers on the synthetic world can be
compared with ``explorer eval``'s. (A scene whose picture is missing is skipped and reported.)
``root`` may also be the ``scenes.jsonl`` file.
"""

from __future__ import annotations

from pathlib import Path

from explorer.data.errors import DatasetError
from explorer.data.retrieval_sets.base import RetrievalSet, Skipped, build_set
from explorer.data.store import SCENES_FILE, SPLITS, read_dataset

NAME = "synthetic"
EXPECTS = f"{SCENES_FILE} (written by `explorer data synth`)"
DEFAULT_SPLIT = "test"


def matches(root: Path) -> bool:
    root = Path(root)
    if root.is_file():
        return root.name == SCENES_FILE
    return (root / SCENES_FILE).is_file()


def read(root: Path, split: str | None) -> RetrievalSet:
    split = DEFAULT_SPLIT if split is None else split
    if split not in SPLITS:
        raise DatasetError(f"unknown split {split!r} for the synthetic world: the splits are {', '.join(SPLITS)}")
    root = Path(root)
    pairs, skipped = [], []
    for scene in read_dataset(root, split):
        if scene.image_path is None:
            skipped.append(Skipped(scene.id, "image missing"))
            continue
        pairs.append((scene.image_path, [scene.long_caption], scene.id))
    return build_set(NAME, root, split, pairs, skipped=skipped,
                     notes=["caption = each scene's long caption, in read_dataset order (as explorer eval)"])
