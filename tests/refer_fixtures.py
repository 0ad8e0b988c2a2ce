"""A tiny refer-toolkit folder built in code, in the released layout (``refcoco/instances.json`` with polygon,
compressed RLE and uncompressed RLE masks, ``refcoco/refs(unc).p`` pickled by protocol 2 as Python 2 wrote
it, train2014 pictures, a detections file), with bad entries of each kind the layout must skip."""

from __future__ import annotations

import json
import pickle
from pathlib import Path

import numpy as np
from PIL import Image

W, H = 40, 30
TRAIN2014 = Path("images", "mscoco", "images", "train2014")


def rect(x0, y0, x1, y1) -> np.ndarray:
    """bool [H, W]: columns x0..x1-1, rows y0..y1-1."""
    mask = np.zeros((H, W), dtype=bool)
    mask[y0:y1, x0:x1] = True
    return mask


def counts(mask: np.ndarray) -> list[int]:
    """Uncompressed COCO RLE counts, written here independently: runs over the column-major pixels, 0s first."""
    flat = mask.ravel(order="F").tolist()
    runs, current, length = [], False, 0
    for value in flat:
        if value == current:
            length += 1
        else:
            runs.append(length)
            current, length = value, 1
    runs.append(length)
    return runs


def compressed(mask: np.ndarray) -> str:
    """COCO's compressed counts string, written here from the format's description (5-bit groups from '0',
    0x20 = more, 0x10 = sign of the last group, runs from the third on as differences to the run two before)."""
    runs, out = counts(mask), []
    for i, run in enumerate(runs):
        x = run - runs[i - 2] if i > 2 else run
        while True:
            c, x = x & 0x1F, x >> 5
            done = (x == 0 and not c & 0x10) or (x == -1 and c & 0x10)
            out.append(chr(48 + (c if done else c | 0x20)))
            if done:
                break
    return "".join(out)


def ann(ann_id, image_id, bbox, segmentation) -> dict:
    return {"id": ann_id, "image_id": image_id, "category_id": 1, "bbox": bbox, "iscrowd": 0,
            "area": 1.0, "segmentation": segmentation}


def ref(ref_id, ann_id, image_id, split, *sentences) -> dict:
    return {"ref_id": ref_id, "ann_id": ann_id, "image_id": image_id, "category_id": 1, "split": split,
            "file_name": f"COCO_train2014_{image_id:012d}_{ann_id}.jpg", "sent_ids": list(range(len(sentences))),
            "sentences": [{"sent": s, "raw": s.capitalize(), "tokens": s.split(), "sent_id": i}
                          for i, s in enumerate(sentences)]}


def write_refer(root: Path) -> Path:
    """The folder; val: picture 1 (4 usable refs, 5 sentences, and one bad ref of each kind) and picture 3
    (one ref); testA: picture 2, whose file is missing."""
    folder = root / "refcoco"
    folder.mkdir(parents=True)
    pictures = root / TRAIN2014
    pictures.mkdir(parents=True)
    for image_id in (1, 3):
        Image.new("RGB", (W, H), (90, 120, 150)).save(pictures / f"COCO_train2014_{image_id:012d}.jpg")
    images = [{"id": i, "file_name": f"COCO_train2014_{i:012d}.jpg", "width": W, "height": H} for i in (1, 2, 3)]
    annotations = [
        ann(1, 1, [2, 2, 10, 10], [[2, 2, 12, 2, 12, 12, 2, 12]]),  # polygon: columns 2..11, rows 2..11
        ann(2, 1, [20, 5, 10, 10], {"size": [H, W], "counts": compressed(rect(20, 5, 30, 15))}),
        ann(3, 1, [30, 20, 8, 8], {"size": [H, W], "counts": counts(rect(30, 20, 38, 28))}),
        ann(4, 1, [5, 5, 0, 4], [[5, 5, 6, 5, 6, 9]]),  # zero-area box
        ann(5, 1, [50, 50, 10, 10], [[100, 100, 160, 100, 160, 160]]),  # polygon far outside the picture
        ann(6, 1, [0, 0, 5, 5], {"size": [H, W], "counts": [W * H]}),  # empty mask
        ann(7, 3, [2, 2, 10, 10], [[2, 2, 12, 2, 12, 12, 2, 12]]),
        ann(8, 2, [1, 1, 5, 5], [[1, 1, 6, 1, 6, 6, 1, 6]]),
    ]
    instances = {"images": images, "annotations": annotations, "categories": [{"id": 1, "name": "thing"}]}
    (folder / "instances.json").write_text(json.dumps(instances))
    refs = [ref(0, 1, 1, "val", "left square", "the small box"), ref(1, 2, 1, "val", "middle square"),
            ref(2, 3, 1, "val", "right square"), ref(3, 4, 1, "val", "flat one"), ref(4, 5, 1, "val", "far one"),
            ref(5, 6, 1, "val", "nothing"), ref(6, 99, 1, "val", "ghost"), ref(7, 7, 3, "val", "left square"),
            ref(8, 8, 2, "testA", "lost picture")]
    (folder / "refs(unc).p").write_bytes(pickle.dumps(refs, protocol=2))
    return root


def write_detections(path: Path) -> Path:
    dets = [{"box": [20, 5, 10, 10], "image_id": 1, "score": 0.9}, {"box": [0, 0, 40, 30], "image_id": 1, "score": 0.5},
            {"box": [3, 3, 0, 0], "image_id": 1, "score": 0.1}, {"image_id": 1}, {"box": [2, 2, 10, 10], "image_id": 3}]
    path.write_text(json.dumps({"dets": dets}))
    return path
