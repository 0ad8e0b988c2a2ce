"""COCO and Flickr30k in Andrej Karpathy's split json (``dataset_coco.json``, ``dataset_flickr30k.json``).

Layout::

    <root>/dataset_<name>.json     {"images": [{"filepath": "val2014" (COCO only), "filename": "...jpg",
                                                "split": "train" | "val" | "test" | "restval",
                                                "cocoid" | "imgid": ..., "sentences": [{"raw": "..."}, ...]},
                                               ...], "dataset": "coco"}
    <root>/<filepath>/<filename>   the picture (COCO), or <root>/<filename> (Flickr30k),
                                   or either of those under <root>/images/

Any number of captions per image (5 in both releases). The default split is ``test`` (the 5k COCO
and 1k Flickr30k test images of the papers); ``all`` reads every split. The image id is ``cocoid``,
else ``imgid``, else the file name. ``root`` may also be the json file itself.
"""

from __future__ import annotations

from pathlib import Path

from explorer.data.errors import DatasetError
from explorer.data.retrieval_sets.base import RetrievalSet, build_set, find_image, load_json

NAME = "karpathy"
EXPECTS = "a Karpathy-split dataset_*.json (e.g. dataset_coco.json, dataset_flickr30k.json) with an images list"
SPLITS = ("train", "val", "test", "restval")
DEFAULT_SPLIT = "test"
PATTERN = "dataset_*.json"


def _is_index(path: Path) -> bool:
    return path.is_file() and path.match(PATTERN)


def matches(root: Path) -> bool:
    root = Path(root)
    if root.is_file():
        return _is_index(root)
    return root.is_dir() and any(_is_index(p) for p in root.glob(PATTERN))


def _index_file(root: Path) -> Path:
    if root.is_file():
        return root
    found = sorted(p for p in root.glob(PATTERN) if p.is_file()) if root.is_dir() else []
    if not found:
        raise DatasetError(f"no {PATTERN} in {root}: a Karpathy-split folder holds e.g. dataset_coco.json")
    if len(found) > 1:
        raise DatasetError(f"{root} holds several Karpathy files ({', '.join(p.name for p in found)}); "
                           f"point at one of them")
    return found[0]


def _image_path(folder: Path, filepath: str, filename: str) -> Path:
    """<root>/<filepath>/<filename>, else <root>/<filename>, else the same under images/."""
    return find_image(folder, *([f"{filepath}/{filename}"] if filepath else []), filename)


def _captions(file: Path, number: int, sentences) -> list:
    if not isinstance(sentences, list):
        raise DatasetError(f"{file}, images[{number}]: 'sentences' is not a list")
    texts = []
    for sentence in sentences:
        if isinstance(sentence, dict) and "raw" in sentence:
            texts.append(sentence["raw"])
        elif isinstance(sentence, dict) and isinstance(sentence.get("tokens"), list):
            texts.append(" ".join(map(str, sentence["tokens"])))
        else:
            raise DatasetError(f"{file}, images[{number}]: a sentence without 'raw' ({sentence!r:.80})")
    return texts


def read(root: Path, split: str | None) -> RetrievalSet:
    split = DEFAULT_SPLIT if split is None else split
    if split not in SPLITS + ("all",):
        raise DatasetError(f"unknown split {split!r} for a Karpathy json: the splits are "
                           f"{', '.join(SPLITS)} (or 'all')")
    root = Path(root)
    file = _index_file(root)
    data = load_json(file, 'a Karpathy json {"images": [...]}')
    images = data.get("images") if isinstance(data, dict) else None
    if not isinstance(images, list):
        raise DatasetError(f"{file}: no 'images' list (a Karpathy json is {{\"images\": [...], ...}})")
    folder, pairs = file.parent, []
    for number, entry in enumerate(images):
        if not isinstance(entry, dict) or not isinstance(entry.get("filename"), str) or "sentences" not in entry:
            raise DatasetError(f"{file}, images[{number}]: an image entry needs 'filename' and 'sentences'")
        if split != "all" and entry.get("split") != split:
            continue
        filename, filepath = entry["filename"], str(entry.get("filepath") or "")
        image_id = next((entry[k] for k in ("cocoid", "imgid") if entry.get(k) is not None), filename)
        pairs.append((_image_path(folder, filepath, filename), _captions(file, number, entry["sentences"]),
                      image_id))
    notes = [f"read {file.name}, split {split}"]
    return build_set(NAME, root, split, pairs, notes=notes, extra={"index": str(file)})
