"""The synthetic world's twin of FG-OVD: each drawn object's box, its own phrase, and negatives that change
its attribute words, so the demo zoo gets FG-OVD-shaped figures with nothing downloaded.

    read(root)                          # a folder of `explorer data synth`: every object of every scene
    write_twin(out, n_scenes=200)       # the same items as FG-OVD's benchmark files, with the pictures

An object's phrase names its size, colour, texture and shape as FG-OVD's captions name attributes and
a noun: "a small red striped circle". Every word is true of the object's crop by construction
(``explorer.data.vocabulary``). The negatives keep the noun (the shape) and change attribute words, as
FG-OVD's do, drawn without repeats from every phrase the world's vocabulary allows:

- ``hard``: one attribute word changed (colour, size or texture), ``medium``: two, ``easy``: all three;
- ``trivial``: another shape with any attributes (FG-OVD's shuffled negatives: captions of other things);
- ``color``: only the colour changed (9 negatives: every other colour); ``pattern``: only the texture (3).

Ten negatives where the vocabulary allows (as FG-OVD's files hold), fewer for the attribute splits.
FG-OVD's ``material`` and ``transparency`` have no counterpart in this world. The draws are seeded by
(seed, scene, object, split): the same folder gives the same items every time.
"""

from __future__ import annotations

import itertools
import json
from dataclasses import replace
from pathlib import Path

import numpy as np

from explorer.data.errors import DatasetError
from explorer.data.negatives_sets.base import NegativeItem, NegativesSet, Skipped, region
from explorer.data.negatives_sets.fg_ovd import FILES
from explorer.data.vocabulary import COLOURS, SHAPES, SIZES, TEXTURES

NAME = "synthetic"
SPLITS = ("hard", "medium", "easy", "trivial", "color", "pattern")
EXPECTS = "scenes.jsonl as `explorer data synth` writes it"
N_NEGATIVES = 10  # FG-OVD's ten per region
CHANGED = ("colour", "size", "texture")  # the attribute words a negative may change (the noun stays)
VALUES = {"colour": tuple(COLOURS), "size": tuple(SIZES), "texture": tuple(TEXTURES), "shape": SHAPES}
CHANGES = {"hard": 1, "medium": 2, "easy": 3}
ONLY = {"color": "colour", "pattern": "texture"}


def phrase(attributes: dict) -> str:
    """FG-OVD's caption shape, attributes then the noun: 'a small red striped circle'."""
    return f"a {attributes['size']} {attributes['colour']} {attributes['texture']} {attributes['shape']}"


def candidates(attributes: dict, split: str) -> list[dict]:
    """Every negative the vocabulary allows for ``split``, in a fixed order."""
    if split == "trivial":
        others = [s for s in SHAPES if s != attributes["shape"]]
        return [dict(shape=s, colour=c, size=z, texture=t) for s in others for c in VALUES["colour"]
                for z in VALUES["size"] for t in VALUES["texture"]]
    names = (ONLY[split],) if split in ONLY else None
    wanted = 1 if split in ONLY else CHANGES[split]
    out = []
    for changed in itertools.combinations(names or CHANGED, wanted):
        choices = [[v for v in VALUES[name] if v != attributes[name]] for name in changed]
        for values in itertools.product(*choices):
            out.append({**attributes, **dict(zip(changed, values))})
    return out


def negatives(attributes: dict, split: str, rng: np.random.Generator) -> tuple[str, ...]:
    """Up to ``N_NEGATIVES`` distinct negative phrases of ``split``, drawn without repeats."""
    pool = candidates(attributes, split)
    picked = rng.choice(len(pool), size=min(N_NEGATIVES, len(pool)), replace=False)
    return tuple(phrase(pool[i]) for i in sorted(int(i) for i in picked))


def items_of(scenes, splits, seed: int = 0) -> tuple[list[NegativeItem], list[Skipped]]:
    """Every object of every scene, once per split (module docstring); objects without a box are skipped."""
    items, skipped = [], []
    for split in splits:
        for number, scene in enumerate(scenes):
            for obj in scene.objects:
                ident = f"{split}/{scene.id}/{obj.index}"
                box = None if obj.box is None else (obj.box[0], obj.box[1], obj.box[2] - obj.box[0],
                                                    obj.box[3] - obj.box[1])
                box, why = region(box, (scene.image_size, scene.image_size)) if box else (None, "zero-area box")
                if box is None:
                    skipped.append(Skipped(ident, why))
                    continue
                rng = np.random.default_rng([seed, number, obj.index, SPLITS.index(split)])
                attributes = {"shape": obj.shape, "colour": obj.colour, "size": obj.size, "texture": obj.texture}
                items.append(NegativeItem(ident, split, scene.image_path, phrase(attributes),
                                          negatives(attributes, split, rng), box))
    return items, skipped


def _splits(splits) -> list[str]:
    if splits in (None, [], "all"):
        return list(SPLITS)
    splits = [splits] if isinstance(splits, str) else list(splits)
    unknown = [s for s in splits if s not in SPLITS]
    if unknown:
        raise DatasetError(f"unknown synthetic split {unknown[0]!r}; the splits are {', '.join(SPLITS)}")
    return splits


def matches(root: Path) -> bool:
    return (Path(root) / "scenes.jsonl").is_file()


def read(root: Path, splits=None, images: Path | None = None, seed: int = 0) -> NegativesSet:
    from explorer.data.store import read_dataset

    root = Path(root)
    if not matches(root):
        raise DatasetError(f"no scenes.jsonl in {root}: the synthetic layout reads a folder written by "
                           "`explorer data synth` (or write FG-OVD's twin with `explorer data negatives-twin`)")
    splits = _splits(splits)
    items, skipped = items_of(read_dataset(root), splits, seed)
    return NegativesSet(NAME, root, {split: str(root / "scenes.jsonl") for split in splits}, tuple(items),
                        tuple(skipped), notes=("each object's crop against its phrase and negatives changing its "
                                               "attribute words",))


def fg_ovd_document(items, sizes: dict) -> dict:
    """The items of one split as FG-OVD writes a benchmark file (COCO detection JSON, captions as categories);
    ``sizes``: picture path -> (width, height)."""
    captions: dict[str, int] = {}
    images: dict[Path, int] = {}
    annotations = []
    for number, item in enumerate(items, 1):
        ids = [captions.setdefault(text, len(captions) + 1) for text in (item.positive, *item.negatives)]
        image_id = images.setdefault(item.picture, len(images) + 1)
        x, y, w, h = item.box
        annotations.append({"id": number, "image_id": image_id, "bbox": [x, y, w, h], "area": w * h,
                            "category_id": ids[0], "neg_category_ids": ids[1:]})
    return {"images": [{"id": i, "file_name": f"val2017/{path.name}", "width": sizes[path][0],
                        "height": sizes[path][1]} for path, i in images.items()],
            "annotations": annotations,
            "categories": [{"id": i, "name": text} for text, i in captions.items()]}


def write_twin(out, n_scenes: int = 200, seed: int = 1, image_size: int = 224, overwrite: bool = False) -> dict:
    """FG-OVD's twin at ``out``: ``val2017/`` (the pictures) and ``benchmarks/`` (one file per split, FG-OVD's
    file names); scenes from the world's test stream of ``seed`` (the demo zoo trained on seed 0's train
    stream). Returns {split: regions}."""
    from explorer.data.synthetic import generate_scenes

    out = Path(out)
    folder, pictures = out / "benchmarks", out / "val2017"
    if folder.exists() and any(folder.iterdir()) and not overwrite:
        raise DatasetError(f"{folder} already holds files; pass --overwrite to replace them")
    folder.mkdir(parents=True, exist_ok=True)
    pictures.mkdir(parents=True, exist_ok=True)
    scenes = []
    for scene in generate_scenes(n_scenes, seed, image_size, split="test"):
        path = pictures / f"{scene.id}.png"
        scene.image.save(path, compress_level=1)
        scenes.append(replace(scene, image_path=path))  # the items name the picture written
    items, _ = items_of(scenes, SPLITS, seed)
    sizes = {s.image_path: (s.image_size, s.image_size) for s in scenes}
    counts = {}
    for split in SPLITS:
        mine = [item for item in items if item.split == split]
        (folder / FILES[split]).write_text(json.dumps(fg_ovd_document(mine, sizes)), encoding="utf-8")
        counts[split] = len(mine)
    return counts


__all__ = ["EXPECTS", "NAME", "SPLITS", "candidates", "fg_ovd_document", "items_of", "matches", "negatives",
           "phrase", "read", "write_twin"]
