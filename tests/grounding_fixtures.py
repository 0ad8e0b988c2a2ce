"""Tiny grounding datasets written in exactly each released layout (DCI, PNG, Flickr30k Entities, IIW-400),
with the awkward cases the readers must survive: dangling requirement ids, label-only and bad masks, an
undecodable mask, string and int ids, a dangling segment id, a no-box phrase, chain 0, a malformed line
and a missing picture. Each writer returns the dataset's folder; the expected units are in the tests."""

from __future__ import annotations

import base64
import io
import json
from pathlib import Path

import numpy as np
from PIL import Image


def picture(path: Path, width: int, height: int, seed: int = 0) -> Path:
    rng = np.random.default_rng(seed)
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(rng.integers(0, 255, (height, width, 3), dtype=np.uint8)).save(path)
    return path


def one_bit_png(mask: np.ndarray) -> str:
    buffer = io.BytesIO()
    Image.fromarray(mask.astype(np.uint8) * 255).convert("1").save(buffer, format="PNG")
    return base64.b64encode(buffer.getvalue()).decode("ascii")


def rect(width, height, x0, y0, x1, y1) -> np.ndarray:
    mask = np.zeros((height, width), dtype=bool)
    mask[y0:y1, x0:x1] = True
    return mask


def dci_mask(idx, quality, label, caption, mask=None, requirements=(), outer=None) -> dict:
    return {"idx": idx, "parent": -1, "requirements": list(requirements), "label": label, "caption": caption,
            "mask_quality": quality, "area": int(mask.sum()) if mask is not None else 0,
            "bounds": {"topLeft": {"x": 0, "y": 0}, "bottomRight": {"x": 1, "y": 1}},
            "outer_mask": outer if outer is not None else one_bit_png(mask)}


def write_dci(root: Path, folder: str = "annotations") -> Path:
    """sa_1.jpg (40x30) with masks 0 (good, two sentences; requires 1 and the dangling 7), 1 (label only),
    2 (bad), 3 (undecodable), 4 (good, empty caption); a second annotation whose photo is missing."""
    base = root / "densely_captioned_images"
    picture(base / "photos" / "sa_1.jpg", 40, 30)
    masks = {
        "0": dci_mask(0, 0, "box", "A red box. It sits on the left.", rect(40, 30, 2, 5, 12, 15), [1, 7]),
        "1": dci_mask(1, 1, "lamp", "", rect(40, 30, 20, 0, 30, 30)),
        "2": dci_mask(2, 2, "junk", "Ignored.", rect(40, 30, 0, 0, 5, 5)),
        "3": dci_mask(3, 0, "ghost", "Never read.", outer="not base64!!"),
        "4": dci_mask(4, 0, "wall", "", rect(40, 30, 0, 20, 40, 30)),
    }
    annotation = {"image": "sa_1.jpg", "short_caption": "A box and a lamp.", "extra_caption": "Indoors.",
                  "width": 40, "height": 30, "mask_keys": list(masks), "mask_data": masks}
    (base / folder).mkdir(parents=True)
    (base / folder / "1-data.json").write_text(json.dumps(annotation))
    (base / folder / "2-data.json").write_text(json.dumps({**annotation, "image": "sa_2.jpg"}))
    (base / "splits.json").write_text(json.dumps({"train": [], "valid": [], "test": ["1-data.json", "2-data.json"]}))
    return root


SKY_ID = 112 + 256 * 17 + 256 * 256 * 1  # 70000: an id that needs all three channels


def write_png(root: Path) -> Path:
    """COCO image 139 (20x10): segment 5 (left half), 70000 (right half); a narrative with string ids, one
    int id, a dangling id (999), a noun with no segment; image 285 is annotated but its picture is missing."""
    ann = root / "annotations"
    picture(root / "images" / "val2017" / "000000000139.jpg", 20, 10)
    ids = np.zeros((10, 20, 3), dtype=np.uint8)
    ids[:, :10] = (5, 0, 0)
    ids[:, 10:] = (112, 17, 1)
    (ann / "panoptic_segmentation" / "val2017").mkdir(parents=True)
    Image.fromarray(ids).save(ann / "panoptic_segmentation" / "val2017" / "000000000139.png")
    panoptic = {"images": [{"id": 139, "file_name": "000000000139.jpg", "width": 20, "height": 10},
                           {"id": 285, "file_name": "000000000285.jpg", "width": 20, "height": 10}],
                "annotations": [{"image_id": 139, "file_name": "000000000139.png",
                                 "segments_info": [{"id": 5, "category_id": 18, "bbox": [0, 0, 10, 10], "area": 100},
                                                   {"id": SKY_ID, "category_id": 187, "bbox": [10, 0, 10, 10],
                                                    "area": 100}]},
                                {"image_id": 285, "file_name": "000000000285.png", "segments_info": []}],
                "categories": [{"id": 18, "name": "dog"}, {"id": 187, "name": "sky"}]}
    (ann / "panoptic_val2017.json").write_text(json.dumps(panoptic))
    narratives = [
        {"image_id": "139", "caption": "A dog sits here. The sky is blue and a cat.",
         "segments": [{"utterance": "A dog", "noun": True, "segment_ids": ["5"]},
                      {"utterance": "sits here.", "noun": False, "segment_ids": []},
                      {"utterance": "The sky", "noun": True, "segment_ids": [SKY_ID, "999"]},
                      {"utterance": "is blue and", "noun": False, "segment_ids": []},
                      {"utterance": "a cat.", "noun": True, "segment_ids": []}]},
        {"image_id": 285, "caption": "Nothing.", "segments": []},
    ]
    (ann / "png_coco_val2017.json").write_text(json.dumps(narratives))
    return root


def write_flickr(root: Path) -> Path:
    """Picture 100 (50x40): chain 1 has two boxes (one shared with chain 2), chain 3 is scene only (no box),
    chain 0 is not visual, one line is malformed; picture 101 is listed but missing."""
    (root / "Sentences").mkdir(parents=True)
    (root / "Annotations").mkdir()
    picture(root / "flickr30k-images" / "100.jpg", 50, 40)
    (root / "Sentences" / "100.txt").write_text(
        "[/EN#1/people A man] in [/EN#2/clothing/other a red hat] looks at [/EN#0/notvisual something] .\n"
        "[/EN#3/scene The beach] is empty .\n"
        "[/EN#1/people A broken line .\n")
    (root / "Annotations" / "100.xml").write_text(
        "<annotation><filename>100.jpg</filename><size><width>50</width><height>40</height><depth>3</depth></size>"
        "<object><name>1</name><bndbox><xmin>1</xmin><ymin>1</ymin><xmax>10</xmax><ymax>20</ymax></bndbox></object>"
        "<object><name>2</name><name>1</name><bndbox><xmin>21</xmin><ymin>11</ymin><xmax>30</xmax><ymax>20</ymax>"
        "</bndbox></object>"
        "<object><name>3</name><nobndbox>0</nobndbox><scene>1</scene></object></annotation>")
    for name in ("101.txt", "101.xml"):
        folder = "Sentences" if name.endswith(".txt") else "Annotations"
        source = root / folder / ("100" + Path(name).suffix)
        (root / folder / name).write_text(source.read_text())
    (root / "test.txt").write_text("100\n101\n")
    return root


def write_iiw(root: Path) -> Path:
    """k1.jpg (100x50) with one good object and one with bad coordinates; a line that is not JSON; k2 missing."""
    picture(root / "k1.jpg", 100, 50)
    lines = [json.dumps({"image/key": "k1", "IIW": "A desk with a cup. The wall is white.",
                         "objects": [{"label": "cup", "description": "A white cup on the desk.",
                                      "normalized_coords": ["100", "200", "500", "600"]},
                                     {"label": "x", "description": "bad", "normalized_coords": ["a"]}]}),
             "{not json",
             json.dumps({"image/key": "k2", "IIW": "Gone.", "objects": [
                 {"label": "y", "description": "Gone too.", "normalized_coords": ["0", "0", "999", "999"]}]})]
    root.mkdir(parents=True, exist_ok=True)
    (root / "data.jsonl").write_text("\n".join(lines) + "\n")
    return root
