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

An image entry without ``filename`` or without any sentence, and a sentence without ``raw`` (or
``tokens``), or with bytes that are not UTF-8, is left out and reported as
``Skipped("<file>:images[<i>]", "bad entry: ...")`` (``...images[<i>].sentences[<j>]`` for a
sentence); the rest is read. Entries that name another split than the one read are not looked at.
A file with no usable image entry is a ``DatasetError``.
"""

from __future__ import annotations

from pathlib import Path

from explorer.data.errors import DatasetError
from explorer.data.retrieval_sets.base import RetrievalSet, Skipped, build_set, find_image
from explorer.data.readers.json_files import bad_text, read_json
from explorer.data.retrieval_sets.manifest import no_usable, other_split

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


def _captions(sentences) -> tuple[list, list[tuple[str, str]]]:
    """The captions of an image entry's sentences, and (where, why) for each sentence left out."""
    texts, bad = [], []
    for number, sentence in enumerate(sentences):
        if isinstance(sentence, dict) and "raw" in sentence:
            text = sentence["raw"]
        elif isinstance(sentence, dict) and isinstance(sentence.get("tokens"), list):
            text = " ".join(map(str, sentence["tokens"]))
        else:
            bad.append((f".sentences[{number}]", f"a sentence without 'raw' ({sentence!r:.80})"))
            continue
        if bad_text(text):
            bad.append((f".sentences[{number}]", "not UTF-8"))
        else:
            texts.append(text)
    return texts, bad


def _problem(entry) -> str | None:
    if not isinstance(entry, dict) or not isinstance(entry.get("filename"), str):
        return "an image entry needs 'filename'"
    if not isinstance(entry.get("sentences"), list) or not entry["sentences"]:
        return "an image entry needs 'sentences' (a list of {raw})"
    if bad_text(entry["filename"], entry.get("filepath")):
        return "not UTF-8"
    return None


def read(root: Path, split: str | None) -> RetrievalSet:
    split = DEFAULT_SPLIT if split is None else split
    if split not in SPLITS + ("all",):
        raise DatasetError(f"unknown split {split!r} for a Karpathy json: the splits are "
                           f"{', '.join(SPLITS)} (or 'all')")
    root = Path(root)
    file = _index_file(root)
    data = read_json(file, 'a Karpathy json {"images": [...]}')
    images = data.get("images") if isinstance(data, dict) else None
    if not isinstance(images, list):
        raise DatasetError(f"{file}: no 'images' list (a Karpathy json is {{\"images\": [...], ...}})")
    folder, pairs, bad, usable = file.parent, [], [], 0
    for number, entry in enumerate(images):
        where, problem = f":images[{number}]", _problem(entry)
        usable += problem is None
        if other_split(entry, split):
            continue
        if problem is not None:
            bad.append((where, problem))
            continue
        if split != "all" and entry.get("split") != split:
            continue
        filename, filepath = entry["filename"], str(entry.get("filepath") or "")
        image_id = next((entry[k] for k in ("cocoid", "imgid") if entry.get(k) is not None), filename)
        texts, left = _captions(entry["sentences"])
        bad += [(where + part, why) for part, why in left]
        pairs.append((_image_path(folder, filepath, filename), texts, image_id))
    if bad and not usable:
        raise no_usable(file, [(where.lstrip(":"), why) for where, why in bad], "entry")
    notes = [f"read {file.name}, split {split}"]
    skipped = [Skipped(f"{file}{where}", f"bad entry: {why}") for where, why in bad]
    return build_set(NAME, root, split, pairs, skipped=skipped, notes=notes, extra={"index": str(file)})
