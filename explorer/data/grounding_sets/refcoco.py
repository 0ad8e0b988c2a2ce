"""RefCOCO, RefCOCO+ and RefCOCOg (G-Ref) as the refer toolkit lays them out: referring expressions on COCO.

Layout (the toolkit's ``data/`` folder)::

    <root>/refcoco/instances.json     COCO: images (id, file_name, width, height), annotations (id, image_id,
                                       category_id, bbox [x, y, w, h], segmentation: polygons or RLE),
                                       categories
    <root>/refcoco/refs(unc).p        a pickled list of refs: ref_id, ann_id, image_id, category_id, split,
                                       sentences [{sent, raw, tokens, sent_id}], sent_ids
    <root>/refcoco+/...               the same, refs(unc).p
    <root>/refcocog/...               refs(umd).p (the default) or refs(google).p
    <root>/images/mscoco/images/train2014/COCO_train2014_<id:012d>.jpg   (or ``images=DIR``)

``dataset`` picks the folder (default: refcoco when present, else the first present; ``root`` may also
be that folder itself, ``<root>/refcoco+``, which picks it), ``split_by`` the
refs file (refcoco and refcoco+: unc; refcocog: umd; google where it is there), ``split`` one of the
splits that the refs hold (unc: train, val, testA, testB; umd: train, val, test; default val).

The refs pickle is read with ``explorer.data.readers.plain_pickle`` (no global is resolved: a pickle naming a
class or a function is refused, nothing in it runs). One unit per sentence of each ref of the split: its
``raw`` text by default, as the reference codes read it (the RIS loaders' ``el['raw']``, ReCLIP's
``sentence["raw"].lower()``; the CLIP tokenizer lower-cases every text, so ReCLIP's ``lower()`` changes
nothing here), or ``text="sent"``, the toolkit's cleaned text (each falls back on the other when missing).
Its truth is the referred annotation's mask (polygons clipped to the picture, as pycocotools rasterizes
them), and its ``target`` the annotation's box, picked among the picture's ``proposals`` (box grounding,
ReCLIP's protocol): the picture's own COCO annotation boxes (ReCLIP's gold boxes), or a detections file in
any of the shapes ``proposals`` reads (``proposals=FILE``: MAttNet's list, ReCLIP's dict, ``{"dets": ...}``);
a picture the file gives no usable box gets the whole picture as its one box, as ReCLIP's ``main.py``.
The pictures are scored in their stored orientation (no EXIF turn): COCO's annotations are in the file's
pixel frame, and the refer toolkit (``io.imread``) and the RIS loaders (``Image.open``) do not rotate.

Skipped and counted with the reason: a ref that is malformed or names an annotation instances.json
lacks, a referred box of zero area, a segmentation that does not decode (a polygon far outside the
picture, an RLE of another size, an empty mask: ``explorer.data.readers.coco_masks``), a picture that is missing,
a proposal of zero area, wholly outside its picture or malformed.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from explorer.data.readers.coco_masks import SegmentationIssue, decode, pycocotools_mask
from explorer.data.errors import DatasetError
from explorer.data.grounding_sets.base import (MASK, SENTENCE, STORED, GroundingPicture, GroundingSet,
                                               SetBuilder, canonical_id, check_units, clean_text)
from explorer.data.grounding_sets.proposals import (OUTSIDE, WHOLE_PICTURE, ZERO_AREA, read_proposals, whole_picture,
                                                    within)
from explorer.data.readers.json_files import read_json
from explorer.data.readers.plain_pickle import load_plain

NAME = "refcoco"
DATASETS = ("refcoco", "refcoco+", "refcocog")
SPLIT_BY = {"refcoco": ("unc", "google"), "refcoco+": ("unc",), "refcocog": ("umd", "google")}  # default first
LABELS = {"refcoco": "RefCOCO", "refcoco+": "RefCOCO+", "refcocog": "G-Ref"}  # as CAFT's and SEPS's tables name them
IMAGES = Path("images", "mscoco", "images", "train2014")
EXPECTS = ("refcoco/, refcoco+/ or refcocog/ holding instances.json and refs(unc).p, refs(umd).p or "
           "refs(google).p; pictures under images/mscoco/images/train2014/")
UNITS = (SENTENCE,)
DEFAULT_SPLIT = "val"
COCO_BOXES = "the picture's COCO annotation boxes"
TEXTS = ("raw", "sent")  # the sentence field read, the reference codes' first


def matches(root: Path) -> bool:
    return any((Path(root) / name / "instances.json").is_file() for name in DATASETS) or dataset_folder(root)


def dataset_folder(root: Path) -> bool:
    """Whether ``root`` is one dataset's own folder (``.../refcoco+``): read as its parent with that dataset."""
    return Path(root).name in DATASETS and (Path(root) / "instances.json").is_file()


def refs_file(folder: Path, split_by: str) -> Path:
    return folder / f"refs({split_by}).p"


def table_label(dataset: str, split: str, split_by: str | None = None) -> str:
    """How a paper's table names a column: "RefCOCO val", "G-Ref val" (refcocog's umd), "G-Ref val (google)"."""
    default = SPLIT_BY[dataset][0]
    return f"{LABELS[dataset]} {split}" + ("" if split_by in (None, default) else f" ({split_by})")


def choose_dataset(root: Path, dataset: str | None) -> str:
    if dataset is None:
        present = [name for name in DATASETS if (root / name / "instances.json").is_file()]
        return present[0] if present else DATASETS[0]
    if dataset not in DATASETS:
        raise DatasetError(f"the refer toolkit's datasets are {', '.join(DATASETS)}, not {dataset!r}")
    return dataset


def choose_split_by(dataset: str, split_by: str | None) -> str:
    if split_by is None:
        return SPLIT_BY[dataset][0]
    if split_by not in SPLIT_BY[dataset]:
        raise DatasetError(f"{dataset} comes split by {' or '.join(SPLIT_BY[dataset])}, not {split_by!r}")
    return split_by


def read_refs(folder: Path, split_by: str) -> list:
    file = refs_file(folder, split_by)
    if not file.is_file():
        present = sorted(p.name for p in folder.glob("refs(*).p"))
        raise DatasetError(f"{folder} lacks {file.name} (the refer toolkit's refs of {folder.name} split by "
                           f"{split_by})" + (f"; it holds {', '.join(present)}" if present else ""))
    refs = load_plain(file)
    if not isinstance(refs, list):
        raise DatasetError(f"{file}: expected a list of refs, not {type(refs).__name__}")
    return refs


def read_instances(folder: Path) -> tuple[dict, dict, dict]:
    """(image id -> image, annotation id -> annotation, image id -> [annotations]) of instances.json."""
    file = folder / "instances.json"
    if not file.is_file():
        raise DatasetError(f"{folder} lacks instances.json (the COCO annotations the refs point at)")
    data = read_json(file, "COCO instances: images, annotations, categories", dict)
    for name in ("images", "annotations"):
        if not isinstance(data.get(name) or [], list):
            raise DatasetError(f"{file}: \"{name}\" should be a list, not a {type(data[name]).__name__}")
    images = {canonical_id(i.get("id")): i for i in data.get("images") or [] if isinstance(i, dict)}
    annotations, by_image = {}, {}
    for item in data.get("annotations") or []:
        if isinstance(item, dict) and item.get("id") is not None:
            annotations[canonical_id(item["id"])] = item
            by_image.setdefault(canonical_id(item.get("image_id")), []).append(item)
    return images, annotations, by_image


def corners(bbox) -> tuple[float, float, float, float] | None:
    """(x0, y0, x1, y1) of a COCO [x, y, w, h], or None when it is malformed or of zero area."""
    try:
        x, y, w, h = (float(v) for v in bbox)
    except (TypeError, ValueError):
        return None
    if not (w > 0 and h > 0) or any(v != v for v in (x, y)):  # NaN and zero or negative sides
        return None
    return (x, y, x + w, y + h)


def coco_proposals(builder: SetBuilder, image_id: str, annotations: list) -> list[tuple]:
    boxes = []
    for item in annotations:
        box = corners(item.get("bbox"))
        if box is None:
            builder.skip(f"{image_id}: annotation {item.get('id')}", ZERO_AREA)
        else:
            boxes.append(box)
    return boxes


def choose_text(text: str | None) -> str:
    if text is None:
        return TEXTS[0]
    if text not in TEXTS:
        raise DatasetError(f"--text must be one of {', '.join(TEXTS)} (the refs' sentence fields), not {text!r}")
    return text


def sentence_texts(ref: dict, field: str = TEXTS[0]) -> list[str]:
    """Each sentence's ``field`` (raw or sent), the other one where it is missing."""
    other = TEXTS[1] if field == TEXTS[0] else TEXTS[0]
    texts = []
    sentences = ref.get("sentences")
    for sentence in sentences if isinstance(sentences, list) else []:  # anything else: no sentence, skipped
        if isinstance(sentence, dict):
            texts.append(clean_text(sentence.get(field)) or clean_text(sentence.get(other)))
    return texts


def _ref_units(builder: SetBuilder, ref, annotations: dict, size: tuple[int, int],
               field: str = TEXTS[0]) -> tuple[list[dict], dict]:
    """(units of one ref, {annotation key: segmentation}); a ref that cannot be used is skipped with why."""
    where = f"ref {ref.get('ref_id')}"
    annotation = annotations.get(canonical_id(ref.get("ann_id")))
    if annotation is None:
        builder.skip(where, "annotation not in instances.json")
        return [], {}
    box = corners(annotation.get("bbox"))
    if box is None:
        builder.skip(where, "zero-area box")
        return [], {}
    try:
        decode(annotation.get("segmentation"), size[1], size[0])
    except SegmentationIssue as issue:  # counted by its kind ("malformed RLE"), the details kept with the item
        builder.skip(f"{where}: {issue}", str(issue).split(":")[0].split(" (")[0])
        return [], {}
    key = canonical_id(annotation["id"])
    units = [{"text": text, "truth": MASK, "segments": (key,), "target": box} for text in sentence_texts(ref, field)]
    if not units:
        builder.skip(where, "no sentence")
    return units, {key: annotation.get("segmentation")}


def _grouped(builder: SetBuilder, refs: list, split: str) -> dict[str, list[dict]]:
    """image id -> refs of ``split``, in the refs' order (a picture's refs become contiguous units)."""
    grouped: dict[str, list[dict]] = {}
    for ref in refs:
        if not isinstance(ref, dict) or ref.get("image_id") is None or ref.get("ann_id") is None:
            builder.skip("ref", "malformed ref")
        elif ref.get("split") == split:
            grouped.setdefault(canonical_id(ref["image_id"]), []).append(ref)
    return grouped


def _size(info: dict) -> tuple[int, int] | None:
    width, height = info.get("width"), info.get("height")
    ok = isinstance(width, int) and isinstance(height, int) and width > 0 and height > 0
    return (width, height) if ok else None


def read(root: Path, split: str | None = None, units: str | None = None, limit: int | None = None, *,
         dataset: str | None = None, split_by: str | None = None, images: str | Path | None = None,
         proposals: str | Path | None = None, text: str | None = None) -> GroundingSet:
    root = Path(root)
    if not matches(root):
        raise DatasetError(f"{root} is not a refer toolkit folder: expected {EXPECTS}")
    if dataset_folder(root):
        if dataset not in (None, root.name):
            raise DatasetError(f"{root} is the {root.name} folder, not {dataset}'s")
        root, dataset = root.parent, root.name
    dataset = choose_dataset(root, dataset)
    split_by = choose_split_by(dataset, split_by)
    field = choose_text(text)
    folder = root / dataset
    units = check_units(units, UNITS, NAME)
    refs = read_refs(folder, split_by)
    split = split or DEFAULT_SPLIT
    splits = sorted({ref.get("split") for ref in refs if isinstance(ref, dict) and isinstance(ref.get("split"), str)})
    if split not in splits:
        raise DatasetError(f"{dataset} ({split_by}) has splits {', '.join(splits) or 'none'}, not {split!r}")
    image_info, annotations, by_image = read_instances(folder)
    picture_dir = Path(images) if images is not None else root / IMAGES
    if not picture_dir.is_dir():
        raise DatasetError(f"no pictures folder at {picture_dir} (the COCO train2014 pictures: "
                           f"{IMAGES.as_posix()} under the root, or --images DIR)")
    builder = SetBuilder(limit)
    detections = read_proposals(proposals) if proposals is not None else None
    for item, reason in detections.skipped if detections is not None else ():
        builder.skip(item, reason)
    whole = []  # pictures the detections gave no usable box: the whole picture is their one proposal
    for image_id, image_refs in _grouped(builder, refs, split).items():
        if builder.full:
            break
        _read_picture(builder, Picture(image_id, image_refs, image_info, annotations, by_image, field), detections,
                      picture_dir, folder, whole)
    shape = "coco" if detections is None else detections.shape
    notes = [f"unit: each sentence of each ref (the toolkit's '{field}'); truth: the referred object's mask",
             f"box grounding proposals: {COCO_BOXES if proposals is None else f'the detections in {proposals}'} "
             f"({shape})"] + ([f"{len(whole)} pictures with no proposal: {WHOLE_PICTURE} is their one box"]
                              if whole else [])
    extra = {"dataset": dataset, "split_by": split_by, "label": table_label(dataset, split, split_by),
             "proposals": "coco" if proposals is None else str(Path(proposals).resolve()),
             "images": str(picture_dir.resolve()),
             "protocol": {"text": field, "lowercased": False, "proposals": shape,
                          "whole_picture_pictures": len(whole), "polygons": polygon_decoder()}}
    # the set's root is the dataset's own folder: what reads this very set again (a results file names it)
    return builder.build(NAME, folder, split, units, notes=notes, extra=extra, orientation=STORED,
                         title=extra["label"], read_masks=picture_masks)


@dataclass(frozen=True)
class Picture:
    """One picture's refs and what is looked up for them (instances.json's tables, the text field)."""

    image_id: str
    refs: list
    image_info: dict
    annotations: dict
    by_image: dict
    field: str


def _read_picture(builder: SetBuilder, entry: Picture, detections, picture_dir: Path, folder: Path,
                  whole: list) -> None:
    image_id = entry.image_id
    info = entry.image_info.get(image_id)
    size = _size(info) if info is not None else None
    if size is None:
        builder.skip(image_id, "image not in instances.json" if info is None else "image without a size")
        return
    path = picture_dir / str(info.get("file_name") or f"COCO_train2014_{image_id:0>12}.jpg")
    if not path.is_file():
        builder.skip(path, "picture missing")
        return
    units, regions = [], {}
    for ref in entry.refs:
        ref_units, ref_regions = _ref_units(builder, ref, entry.annotations, size, entry.field)
        units += ref_units
        regions.update(ref_regions)
    if detections is None:
        boxes = coco_proposals(builder, image_id, entry.by_image.get(image_id, []))
    else:
        boxes = detections.boxes.get(image_id, [])
    boxes, outside = within(boxes, size)
    for _ in range(outside):
        builder.skip(f"{image_id}: a proposal", OUTSIDE)
    if detections is not None and not boxes and units:
        boxes = [whole_picture(size)]
        whole.append(image_id)
    picture = GroundingPicture(id=image_id, path=path, caption="", size=size, source=folder / "instances.json",
                               proposals=tuple(boxes), regions=regions)
    builder.add(picture, units)


def polygon_decoder() -> str:
    """How polygons become masks in this run, for the results' protocol block."""
    return "clipped to the picture: " + ("pycocotools" if pycocotools_mask() is not None
                                         else "explorer's rasterizer (pycocotools is not installed)")


def picture_masks(picture: GroundingPicture, keys) -> dict:
    """The masks of annotation ids ``keys`` at the picture's size, decoded from the encodings kept at reading."""
    width, height = picture.size
    return {key: decode(picture.regions[key], height, width) for key in keys}


__all__ = ["DATASETS", "LABELS", "NAME", "SPLIT_BY", "TEXTS", "UNITS", "matches", "picture_masks", "read", "table_label"]
