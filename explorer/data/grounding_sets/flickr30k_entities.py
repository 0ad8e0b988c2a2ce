"""Flickr30k Entities: the phrases of Flickr30k's captions, each grounded to its coreference chain's boxes.

Layout::

    <root>/Sentences/<id>.txt     five sentences, phrases marked [/EN#<chain>/<type>[/<type>...] words]
    <root>/Annotations/<id>.xml   per object one or more <name> (chain ids) and a <bndbox> with 1-based
                                  inclusive xmin/ymin/xmax/ymax, or <nobndbox>/<scene> flags
    <root>/{train,val,test}.txt   ids of each split
    pictures <id>.jpg in root, root/flickr30k-images, root/flickr30k_images, root/images or the same
    folders beside root

A unit is a phrase; its truth is the union of its chain's boxes (0-based, exclusive ends: the official
utility's xmin-1 .. xmax-1 inclusive). Chain 0 is not visual ("chain 0"); a chain without a box
(nobndbox or scene only) is skipped ("no box"), a chain the annotation does not hold too ("chain not in
annotation"). The five sentences joined make the picture's long caption. An annotation with a DTD is
refused (no entity of any file is expanded). ``split`` defaults to "test".
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ElementTree
from pathlib import Path

from explorer.data.errors import DatasetError
from explorer.data.grounding_sets.base import (BOX, PHRASE, GroundingPicture, GroundingSet, SetBuilder, check_units,
                                               clean_text)

NAME = "flickr30k_entities"
EXPECTS = "Sentences/<id>.txt, Annotations/<id>.xml and {train,val,test}.txt"
UNITS = (PHRASE,)
SPLITS = ("test", "val", "train")
PICTURE_FOLDERS = ("", "flickr30k-images", "flickr30k_images", "images")
_PHRASE = re.compile(r"\[/EN#(\d+)((?:/[^\s\[\]/]+)*)\s+([^\[\]]+?)\]")


def matches(root: Path) -> bool:
    root = Path(root)
    return (root / "Sentences").is_dir() and (root / "Annotations").is_dir()


def parse_sentence(line: str) -> tuple[str, list[tuple[str, str]]] | None:
    """(plain sentence, [(chain id, phrase)]) of one marked line, or None when its brackets are malformed."""
    phrases = [(m.group(1), clean_text(m.group(3))) for m in _PHRASE.finditer(line)]
    plain = _PHRASE.sub(lambda m: m.group(3), line)
    if "[" in plain or "]" in plain:
        return None
    return clean_text(plain), phrases


def parse_annotation(data: bytes) -> tuple[tuple[int, int], dict[str, list[tuple[float, float, float, float]]]]:
    """((width, height), chain id -> boxes) of an annotation XML; ``DatasetError`` when it cannot be used."""
    if b"<!DOCTYPE" in data or b"<!ENTITY" in data:
        raise DatasetError("annotation refused: it declares a DTD or entities")
    try:
        root = ElementTree.fromstring(data)
        size = (int(root.findtext("size/width")), int(root.findtext("size/height")))
        boxes: dict[str, list] = {}
        for item in root.iter("object"):
            names = [clean_text(n.text) for n in item.findall("name")]
            box = item.find("bndbox")
            for name in names:
                entry = boxes.setdefault(name, [])
                if box is not None:
                    x0, y0, x1, y1 = (int(float(box.findtext(k))) for k in ("xmin", "ymin", "xmax", "ymax"))
                    entry.append((float(x0 - 1), float(y0 - 1), float(x1), float(y1)))
    except (ElementTree.ParseError, TypeError, ValueError) as error:
        raise DatasetError(f"bad annotation: {error}") from error
    return size, boxes


def find_picture(root: Path, picture_id: str) -> Path:
    candidates = [base / folder / f"{picture_id}.jpg" for base in (root, root.parent) for folder in PICTURE_FOLDERS]
    return next((c for c in candidates if c.is_file()), candidates[0])


def _ids(root: Path, split: str) -> list[str]:
    file = root / f"{split}.txt"
    if not file.is_file():
        raise DatasetError(f"{root} has no {file.name} (the ids of split {split!r})")
    return [line.strip() for line in file.read_text(encoding="utf-8", errors="replace").splitlines() if line.strip()]


def _phrase_units(builder: SetBuilder, where: str, lines: list[str], boxes: dict) -> tuple[list[str], list[dict]]:
    sentences, units = [], []
    for number, line in enumerate(lines, 1):
        parsed = parse_sentence(line)
        if parsed is None:
            builder.skip(f"{where} line {number}", "malformed sentence line")
            continue
        sentence, phrases = parsed
        sentences.append(sentence)
        for chain, phrase in phrases:
            if chain == "0":
                builder.skip(f"{where}: {phrase!r}", "chain 0 (not visual)")
            elif chain not in boxes:
                builder.skip(f"{where}: {phrase!r} (chain {chain})", "chain not in annotation")
            elif not boxes[chain]:
                builder.skip(f"{where}: {phrase!r} (chain {chain})", "no box")
            else:
                units.append({"text": phrase, "truth": BOX, "boxes": tuple(boxes[chain])})
    return sentences, units


def _read_one(builder: SetBuilder, root: Path, picture_id: str) -> None:
    text_file, xml_file = root / "Sentences" / f"{picture_id}.txt", root / "Annotations" / f"{picture_id}.xml"
    for file, reason in ((text_file, "sentences missing"), (xml_file, "annotation missing")):
        if not file.is_file():
            builder.skip(file, reason)
            return
    picture = find_picture(root, picture_id)
    if not picture.is_file():
        builder.skip(picture, "picture missing")
        return
    try:
        size, boxes = parse_annotation(xml_file.read_bytes())
    except DatasetError as error:
        builder.skip(xml_file, str(error))
        return
    lines = [line for line in text_file.read_text(encoding="utf-8", errors="replace").splitlines() if line.strip()]
    sentences, units = _phrase_units(builder, picture_id, lines, boxes)
    builder.add(GroundingPicture(id=picture_id, path=picture, caption=" ".join(sentences), size=size), units)


def read(root: Path, split: str | None = None, units: str | None = None, limit: int | None = None) -> GroundingSet:
    root = Path(root)
    if not matches(root):
        raise DatasetError(f"{root} is not a Flickr30k Entities folder: expected {EXPECTS}")
    units = check_units(units, UNITS, NAME)
    split = split or SPLITS[0]
    if split not in SPLITS:  # the split names a file: only the layout's own names are read
        raise DatasetError(f"Flickr30k Entities has splits {', '.join(SPLITS)}, not {str(split)[:40]!r}")
    builder = SetBuilder(limit)
    for picture_id in _ids(root, split):
        if builder.full:
            break
        _read_one(builder, root, picture_id)
    notes = ["unit: each phrase of the five sentences, truth = the union of its chain's boxes",
             "an object's box counts for every <name> it lists"]
    return builder.build(NAME, root, split, units, notes=notes)
