"""A synthetic twin of the refer toolkit's folder: the synthetic world's scenes as RefCOCO, RefCOCO+ and RefCOCOg.

    write_refer_twin("twin/", n_scenes=60, seed=1)
    explorer eval-grounding --data twin/ --layout refcoco --dataset refcoco --split testA ...

The same files and keys as the released data (``explorer.data.grounding_sets.refcoco``), so every code
path of the real evaluation runs offline and the demo zoo gets numbers on it::

    twin/refcoco/instances.json   images, one annotation per object (bbox, area, a polygon for the shapes
                                  drawn from one, else an RLE: compressed and uncompressed alternately),
                                  categories = the world's shapes
    twin/refcoco/refs(unc).p      one ref per object, split val / testA / testB by picture
    twin/refcoco+/...             refs(unc).p with no location words, as RefCOCO+'s rule
    twin/refcocog/...             refs(umd).p, split val / test: the world's longer sentence about the object
    twin/images/mscoco/images/train2014/COCO_train2014_<id:012d>.jpg

Each expression names exactly one object (the truth is that object's mask and box). The pickles hold
plain lists, dicts, strings and numbers only (what ``plain_pickle`` reads). Scenes come from the world's
test stream of ``seed`` (seed 1 by default: a world no demo model trained on). A polygon is the shape's
own outline (the one it was drawn from), so its mask equals the drawn object's up to edge pixels.
"""

from __future__ import annotations

import json
import os
import pickle
import shutil
from pathlib import Path

import numpy as np

from explorer.data.readers.coco_masks import encode_rle
from explorer.data.drawing import unit_polygon
from explorer.data.errors import DatasetError
from explorer.data.grounding_sets.refcoco import IMAGES, refs_file
from explorer.data.synthetic import generate_scenes
from explorer.data.vocabulary import SHAPES

SPLITS = {"refcoco": ("unc", ("val", "testA", "testB")), "refcoco+": ("unc", ("val", "testA", "testB")),
          "refcocog": ("umd", ("val", "test"))}
MARKER = "refer-twin.json"  # says explorer wrote the folder (overwrite replaces only such a folder)


def file_name(image_id: int) -> str:
    return f"COCO_train2014_{image_id:012d}.jpg"


def segmentation(scene, k: int, flavour: int):
    """A polygon (the shape's outline) for the shapes drawn from one, else an RLE of the drawn mask."""
    obj, size = scene.objects[k], scene.image_size
    outline = unit_polygon(obj.shape)
    if outline is not None:
        points = outline * (obj.extent * size) + np.array(obj.centre) * size
        return [[round(float(v), 2) for v in points.ravel()]]
    return encode_rle(scene.mask(k), compressed=flavour % 2 == 0)


def expression(scene, k: int, dataset: str) -> str:
    """What the dataset's annotators would have written: RefCOCO short with location words, RefCOCO+ by
    appearance only, RefCOCOg a full sentence."""
    obj = scene.objects[k]
    if dataset == "refcoco":
        return f"{obj.colour} {obj.shape} {obj.position}"
    if dataset == "refcoco+":
        return f"{obj.size} {obj.texture} {obj.colour} {obj.shape}"
    return scene.object_sentence(k).text


def sentence(text: str, sent_id: int) -> dict:
    clean = text.lower().rstrip(".").strip()
    return {"sent": clean, "raw": text, "tokens": clean.split(), "sent_id": sent_id}


def write_refer_twin(out: str | os.PathLike, n_scenes: int = 60, seed: int = 1, image_size: int = 224,
                     overwrite: bool = False) -> dict[str, int]:
    """Write the twin at ``out``; returns the number of refs per dataset."""
    if not isinstance(n_scenes, int) or n_scenes < 1:
        raise DatasetError(f"a refer twin needs at least one scene, not {n_scenes!r}")
    root = Path(out)
    _prepare(root, overwrite)
    pictures = root / IMAGES
    pictures.mkdir(parents=True)
    images, annotations, objects = [], [], []
    for index, scene in enumerate(generate_scenes(n_scenes, seed, image_size, split="test")):
        image_id = index + 1
        scene.image.save(pictures / file_name(image_id), quality=95)
        images.append({"id": image_id, "file_name": file_name(image_id), "width": image_size, "height": image_size})
        for k, obj in enumerate(scene.objects):
            x0, y0, x1, y1 = obj.box
            annotations.append({"id": image_id * 100 + k + 1, "image_id": image_id,
                                "category_id": SHAPES.index(obj.shape) + 1, "bbox": [x0, y0, x1 - x0, y1 - y0],
                                "area": int(scene.mask(k).sum()), "iscrowd": 0,
                                "segmentation": segmentation(scene, k, len(annotations))})
            objects.append((index, scene, k))
    instances = {"images": images, "annotations": annotations,
                 "categories": [{"id": i + 1, "name": s, "supercategory": "shape"} for i, s in enumerate(SHAPES)]}
    counts = {}
    for dataset, (split_by, splits) in SPLITS.items():
        folder = root / dataset
        folder.mkdir()
        (folder / "instances.json").write_text(json.dumps(instances), encoding="utf-8")
        refs = _refs(objects, dataset, splits)
        refs_file(folder, split_by).write_bytes(pickle.dumps(refs, protocol=2))  # plain data, as released
        counts[dataset] = len(refs)
    (root / MARKER).write_text(json.dumps({"format": "explorer-refer-twin/1", "scenes": n_scenes, "seed": seed,
                                           "image_size": image_size, "refs": counts}, indent=2) + "\n")
    return counts


def _refs(objects: list, dataset: str, splits: tuple[str, ...]) -> list[dict]:
    refs = []
    for ref_id, (index, scene, k) in enumerate(objects):
        image_id, text = index + 1, expression(scene, k, dataset)
        refs.append({"ref_id": ref_id, "ann_id": image_id * 100 + k + 1, "image_id": image_id,
                     "category_id": SHAPES.index(scene.objects[k].shape) + 1, "split": splits[index % len(splits)],
                     "file_name": f"COCO_train2014_{image_id:012d}_{image_id * 100 + k + 1}.jpg",
                     "sent_ids": [ref_id], "sentences": [sentence(text, ref_id)]})
    return refs


def _prepare(root: Path, overwrite: bool) -> None:
    if root.exists() and any(root.iterdir()):
        if not overwrite:
            raise DatasetError(f"{root} is not empty; pass overwrite (--overwrite) to replace a twin written here")
        if not (root / MARKER).is_file():
            raise DatasetError(f"{root} holds files explorer did not write as a refer twin: not replaced")
        shutil.rmtree(root)
    root.mkdir(parents=True, exist_ok=True)


__all__ = ["SPLITS", "write_refer_twin"]
