"""The synthetic world on disk: ``write_dataset`` and ``read_dataset``; ``ensure_dataset`` writes one
once, for any number of readers.

The layout is described in ``LAYOUT`` below, which is also written next to
the data as ``layout.md``, so a folder explains itself.
"""

from __future__ import annotations

import json
import os
import shutil
import threading
import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path

from PIL import Image

from explorer.core.errors import InputError
from explorer.core.jsonl import JsonlError, read_jsonl, write_jsonl
from explorer.data.errors import DatasetError
from explorer.data.scene import Scene
from explorer.data.synthetic import DEFAULT_IMAGE_SIZE, STREAMS, generate_scenes

FORMAT = "explorer-synthetic"
VERSION = 1
SPLITS = tuple(STREAMS)  # train, val, test
SCENES_FILE = "scenes.jsonl"
INFO_FILE = "info.json"
LAYOUT_FILE = "layout.md"
DEFAULT_SPLIT_FRACTIONS = {"train": 0.8, "val": 0.1, "test": 0.1}
_ensure_lock = threading.Lock()

LAYOUT = """\
# Synthetic long-caption world: on-disk layout

Written by `explorer.data.write_dataset`; read with `explorer.data.read_dataset`.

```
<root>/
  layout.md          this file
  info.json          {"format": "explorer-synthetic", "version": 1, "seed", "image_size",
                      "split_fractions", "counts": {"train": n, "val": n, "test": n}}
  scenes.jsonl       one JSON object per scene (below), train then val then test
  images/<id>.png    the picture, RGB, image_size x image_size
  masks/<id>.png     instance labels, 8-bit gray: 0 = background, k + 1 = object k
```

Scene ids are `<split>-<index>` (`train-000000`, `test-000041`). Scene `i` of a split is
generated from the seed `(seed, split code, i)` with split codes train 0, val 1, test 2, so
each split is its own stream: the test scenes of a seed are the same however many training
scenes are written, and `generate_scene(record["seed"], image_size)` regenerates any scene.

One line of `scenes.jsonl`:

```
{
  "id": "train-000000", "split": "train",
  "image": "images/train-000000.png", "mask": "masks/train-000000.png",
  "image_size": 224, "seed": [0, 0, 0],
  "background": {"kind": "gradient", "colour": "light blue", "name": "light blue gradient",
                 "direction": "vertical", "reverse": false},
  "objects": [{"index": 0, "label": 1, "shape": "triangle", "colour": "red", "size": "large",
               "texture": "striped", "position": "top left",
               "box": [x0, y0, x1, y1],            pixels, x1 / y1 exclusive, tight box of the mask
               "centre": [x, y], "extent": e,      fractions of the image side (layout truth)
               "pattern_angle": 45, "pattern_phase": [u, v]}, ...],
  "sentences": [{"text": "...", "kind": "summary" | "object" | "relation",
                 "objects": [indices into objects],  summary: all; object: one; relation: subject, object
                 "relation": null | "above" | "below" | "left of" | "right of" | "larger than" | "smaller than"},
                ...],                              in caption order, the summary first
  "long_caption": "...",                           the sentences joined by single spaces
  "short_caption": "...",                          objects by colour and shape, reading order, and the background
  "dense_caption": "...",                          long caption + a detail sentence per object + background
  "hard_negatives": [{"caption": "...", "attribute": "colour" | "shape" | "size" | "texture" | "position",
                      "object": k, "sentence": index into sentences, "original": "red",
                      "replacement": "blue", "start": character offset of original in long_caption,
                      "value": "blue"}, ...]      one per attribute
}
```

`hard_negatives[j].caption == long_caption[:start] + replacement + long_caption[start + len(original):]`.
`explorer.core.sentences.split_sentences(long_caption)` returns exactly the sentences' texts.
"""


def _fractions(split_fractions) -> list[float]:
    if isinstance(split_fractions, Mapping):
        unknown = set(split_fractions) - set(SPLITS)
        if unknown:
            raise InputError(f"unknown split(s) {sorted(unknown)}: the splits are {', '.join(SPLITS)}")
        fractions = [float(split_fractions.get(s, 0.0)) for s in SPLITS]
    else:
        fractions = [float(f) for f in split_fractions]
        if len(fractions) != len(SPLITS):
            raise InputError(f"split_fractions needs {len(SPLITS)} values (train, val, test), got {split_fractions!r}")
    if any(f < 0 for f in fractions) or abs(sum(fractions) - 1.0) > 1e-6:
        raise InputError(f"split fractions must be non-negative and sum to 1, got {fractions}")
    return fractions


def _split_counts(n_scenes: int, fractions: list[float]) -> dict[str, int]:
    test = min(n_scenes, round(n_scenes * fractions[2]))
    val = min(n_scenes - test, round(n_scenes * fractions[1]))
    return {"train": n_scenes - val - test, "val": val, "test": test}


def _prepare(root: Path, overwrite: bool) -> None:
    info = root / INFO_FILE
    if (root / SCENES_FILE).exists() or info.exists():
        if not overwrite:
            raise DatasetError(f"{root} already holds a dataset; pass overwrite=True to replace it.")
        try:
            written_by_us = json.loads(info.read_text()).get("format") == FORMAT
        except (OSError, ValueError):
            written_by_us = False
        if not written_by_us:
            raise DatasetError(f"{root} holds a {SCENES_FILE} that explorer did not write (no {INFO_FILE} saying "
                               f"{FORMAT!r}); refusing to delete anything there. Choose an empty folder.")
        for name in ("images", "masks"):
            shutil.rmtree(root / name, ignore_errors=True)
        for name in (SCENES_FILE, INFO_FILE, LAYOUT_FILE):
            (root / name).unlink(missing_ok=True)
    (root / "images").mkdir(parents=True, exist_ok=True)
    (root / "masks").mkdir(parents=True, exist_ok=True)


def write_dataset(out_dir: str | os.PathLike, n_scenes: int, seed: int = 0, image_size: int = DEFAULT_IMAGE_SIZE,
                  split_fractions: Sequence[float] | Mapping[str, float] = DEFAULT_SPLIT_FRACTIONS, *,
                  n_objects: int | tuple[int, int] | None = None, overwrite: bool = False) -> dict[str, int]:
    """Generate ``n_scenes`` scenes and write them in the layout above; returns the count per split.

    ``split_fractions``: (train, val, test) or a mapping; counts are rounded, train takes the rest.
    A folder that already holds a dataset is only replaced with ``overwrite=True``, and only if
    explorer wrote it.
    """
    if not isinstance(n_scenes, int) or n_scenes < 0:
        raise InputError(f"n_scenes must be a non-negative integer, got {n_scenes!r}")
    fractions = _fractions(split_fractions)
    counts = _split_counts(n_scenes, fractions)
    root = Path(out_dir)
    _prepare(root, overwrite)

    def records():
        for split in SPLITS:
            for scene in generate_scenes(counts[split], seed, image_size, split=split, n_objects=n_objects):
                image, mask = f"images/{scene.id}.png", f"masks/{scene.id}.png"
                scene.image.save(root / image, compress_level=1)
                Image.fromarray(scene.labels, "L").save(root / mask, compress_level=1)
                yield scene.to_record(image, mask)

    write_jsonl(root / SCENES_FILE, records())  # the dataset exists only once every scene is on disk
    info = {"format": FORMAT, "version": VERSION, "seed": seed, "image_size": image_size,
            "split_fractions": dict(zip(SPLITS, fractions)),
            "n_objects": list(n_objects) if isinstance(n_objects, tuple) else n_objects, "counts": counts}
    (root / INFO_FILE).write_text(json.dumps(info, indent=2) + "\n")
    (root / LAYOUT_FILE).write_text(LAYOUT)
    return counts


def ensure_dataset(root: str | os.PathLike, n_scenes: int, seed: int = 0, image_size: int = DEFAULT_IMAGE_SIZE,
                   split_fractions: Sequence[float] | Mapping[str, float] = DEFAULT_SPLIT_FRACTIONS, *,
                   what: str = "the synthetic world") -> Path:
    """``root``, holding a world written by ``write_dataset`` the first time it is asked for: written
    beside it and renamed into place, so a reader (another thread, another process) never sees half of
    it. A folder left at ``root`` without its scenes file is replaced; one written meanwhile by another
    process is kept. A ``DatasetError`` naming ``what`` when it cannot be written."""
    root = Path(root)
    with _ensure_lock:
        if (root / SCENES_FILE).is_file():
            return root
        scratch = root.parent / f".{root.name}-{uuid.uuid4().hex[:8]}"
        try:
            write_dataset(scratch, n_scenes, seed=seed, image_size=image_size, split_fractions=split_fractions)
            if root.exists() and not (root / SCENES_FILE).is_file():
                shutil.rmtree(root)  # a folder left without its scenes file: not a dataset
            os.rename(scratch, root)
        except OSError as error:
            if not (root / SCENES_FILE).is_file():  # else another process wrote it first: fine
                raise DatasetError(f"cannot write {what} at {root}: {error}") from error
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
    return root


def read_dataset(path: str | os.PathLike, split: str | None = None) -> list[Scene]:
    """The scenes of a dataset folder (or its ``scenes.jsonl``), optionally one split; pixels load lazily."""
    if split is not None and split not in SPLITS:
        raise DatasetError(f"unknown split {split!r}: the splits are {', '.join(SPLITS)}")
    path = Path(path)
    file = path / SCENES_FILE if path.is_dir() else path
    if not file.is_file():
        raise DatasetError(f"no {SCENES_FILE} in {path}: write one with explorer.data.write_dataset.")
    scenes = []
    try:
        for number, record in read_jsonl(file):
            try:
                if split is not None and record.get("split") != split:
                    continue
                scenes.append(Scene.from_record(record, root=file.parent))
            except (AttributeError, ValueError, KeyError, TypeError) as error:
                raise DatasetError(f"{file}, line {number}: not a scene record ({error!r})") from error
    except JsonlError as error:
        raise DatasetError(str(error)) from error
    return scenes
