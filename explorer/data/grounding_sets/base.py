"""``GroundingSet``: real pictures, text units, and where in each picture each unit is.

A unit is one text (a sentence, a phrase, an object's description) with its truth: a mask
(``truth == "mask"``: the union of the picture's masks named in ``segments``) or a box
(``truth == "box"``: the union of ``boxes``, (x0, y0, x1, y1) with exclusive ends). A unit may also
name one ``target`` box among its picture's ``proposals`` (box grounding: RefCOCO). Boxes and
masks are in the picture's annotation frame, ``GroundingPicture.size`` (width, height): its
original pixels. The picture's ``caption`` is its full long caption, the context of its units.

Masks are not kept in the set (DCI's alone would fill memory): ``explorer.data.grounding_sets.truth``
reads a picture's masks again when it is scored. Units of one picture are contiguous, so they share
one image forward.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

from explorer.core.sentences import split_sentences
from explorer.data.errors import DatasetError
from explorer.data.retrieval_sets.base import Skipped, skipped_by_reason

MASK, BOX = "mask", "box"
SENTENCE, PHRASE = "sentence", "phrase"
# How a picture is turned before its annotations apply: EXIF (upright, as an upload is shown) or STORED (the
# file's own pixel frame: COCO's annotations are in it, and the reference loaders do not rotate)
EXIF, STORED = "exif", "stored"


@dataclass(frozen=True)
class GroundingUnit:
    picture: int  # index into GroundingSet.pictures
    text: str
    truth: str  # MASK or BOX
    boxes: tuple[tuple[float, float, float, float], ...] = ()  # BOX truth, in the annotation frame
    segments: tuple[str, ...] = ()  # MASK truth: keys of the picture's masks (DCI mask idx, PNG segment id)
    label_only: bool = False  # a DCI mask with a label but no usable caption: reported apart, not in n_units
    target: tuple[float, float, float, float] | None = None  # the referred object's box (box grounding), if any


@dataclass(frozen=True)
class GroundingPicture:
    id: str  # the dataset's own id (annotation stem, COCO image id, Flickr id, IIW key)
    path: Path
    caption: str  # the picture's full long caption
    size: tuple[int, int]  # (width, height) of the annotation frame: boxes and masks are in these pixels
    source: Path | None = None  # where its masks are (a DCI annotation file, a panoptic PNG)
    proposals: tuple[tuple[float, float, float, float], ...] = ()  # boxes a unit's map picks from (box grounding)
    regions: dict = field(default_factory=dict, compare=False)  # masks kept as their encodings (RefCOCO's)


@dataclass(frozen=True)
class GroundingSet:
    layout: str
    root: Path
    split: str
    units_kind: str  # SENTENCE or PHRASE
    pictures: tuple[GroundingPicture, ...]
    units: tuple[GroundingUnit, ...]
    skipped: tuple[Skipped, ...] = ()
    notes: tuple[str, ...] = ()
    extra: dict = field(default_factory=dict, compare=False)
    orientation: str = EXIF  # EXIF or STORED: how its pictures are read for scoring
    title: str = ""  # the name the papers' tables print ("RefCOCO testA"), set by its reader; "" when none does
    # (picture, keys) -> {key: bool mask}: its layout's ``picture_masks``, which ``truth`` calls when a picture is
    # scored (the masks are not kept in the set); None for a layout whose truth is boxes only
    read_masks: Callable | None = field(default=None, compare=False, repr=False)

    def __post_init__(self):
        order = [u.picture for u in self.units]
        if order != sorted(order) or any(not 0 <= i < len(self.pictures) for i in order):
            raise DatasetError("units must point at pictures of the set, grouped by picture in order")

    def units_of(self, picture: int) -> list[int]:
        """Indices of the units of picture ``picture`` (contiguous: found by bisection)."""
        start = bisect.bisect_left(self.units, picture, key=lambda unit: unit.picture)
        end = bisect.bisect_right(self.units, picture, lo=start, key=lambda unit: unit.picture)
        return list(range(start, end))

    def first(self, n: int, note: str | None = None) -> GroundingSet:
        """The set of its first ``n`` pictures and their units."""
        if n >= len(self.pictures):
            return self
        return replace(self, pictures=self.pictures[:n], units=tuple(u for u in self.units if u.picture < n),
                       notes=self.notes + ((note,) if note else ()))

    def summary(self) -> str:
        scored = sum(not u.label_only for u in self.units)
        text = (f"{self.layout} ({self.split}, {self.units_kind} units) at {self.root}: {len(self.pictures)} "
                f"pictures, {scored} units")
        if scored != len(self.units):
            text += f" (+{len(self.units) - scored} label-only)"
        if self.skipped:
            reasons = ", ".join(f"{n} {why}" for why, n in skipped_by_reason(self.skipped).items())
            text += f"; {len(self.skipped)} left out ({reasons})"
        return text


class SetBuilder:
    """Collects pictures and their units in order; a picture with no unit is not kept (and says why)."""

    def __init__(self, limit: int | None = None):
        self.pictures: list[GroundingPicture] = []
        self.units: list[GroundingUnit] = []
        self.skipped: list[Skipped] = []
        self.limit = limit

    @property
    def full(self) -> bool:
        return self.limit is not None and len(self.pictures) >= self.limit

    def skip(self, item, reason: str) -> None:
        self.skipped.append(Skipped(str(item), reason))

    def add(self, picture: GroundingPicture, units: list[dict]) -> None:
        """``units``: GroundingUnit fields less ``picture``; empty texts are skipped one by one."""
        kept = []
        for fields in units:
            text = clean_text(fields.get("text"))
            if not text:
                self.skip(f"{picture.id}: {fields.get('text')!r}", "text empty")
                continue
            kept.append(GroundingUnit(picture=len(self.pictures), **{**fields, "text": text}))
        if not kept:
            self.skip(picture.id, "no unit")
            return
        self.pictures.append(picture)
        self.units += kept

    def build(self, layout: str, root: Path, split: str, units_kind: str, notes=(), extra=None,
              orientation: str = EXIF, title: str = "", read_masks: Callable | None = None) -> GroundingSet:
        return GroundingSet(layout=layout, root=root, split=split, units_kind=units_kind,
                            pictures=tuple(self.pictures), units=tuple(self.units), skipped=tuple(self.skipped),
                            notes=tuple(notes), extra=dict(extra or {}), orientation=orientation, title=title,
                            read_masks=read_masks)


def clean_text(text) -> str:
    """White space collapsed; "" for None or non-text."""
    return " ".join(text.split()) if isinstance(text, str) else ""


def sentence_spans(text: str) -> list[tuple[int, int, str]]:
    """(start, end, sentence) of each sentence of ``text`` (``split_sentences``), located in order."""
    spans, cursor = [], 0
    for sentence in split_sentences(text):
        start = text.find(sentence, cursor)
        if start < 0:  # the splitter strips; it never rewrites, but be safe: fall back to a search anywhere
            start = max(text.find(sentence), cursor)
        spans.append((start, start + len(sentence), sentence))
        cursor = start + len(sentence)
    return spans


def canonical_id(value) -> str:
    """An id that may come as int or string ("139", 139, "0139") in one comparable form."""
    text = str(value).strip()
    return str(int(text)) if re.fullmatch(r"[+-]?\d+", text) else text


def check_units(units: str | None, offered: tuple[str, ...], layout: str) -> str:
    """The unit kind asked for, or the layout's first when None; a ``DatasetError`` for one it lacks."""
    from explorer.data.errors import DatasetError

    if units is None:
        return offered[0]
    if units not in offered:
        raise DatasetError(f"{layout} offers {' and '.join(offered)} units, not {units!r}")
    return units




def header_size(path: Path) -> tuple[int, int] | None:
    """(width, height) from a picture's header (nothing decoded), or None when it cannot be opened."""
    from PIL import Image

    try:
        with Image.open(path) as image:
            return image.size
    except (OSError, ValueError, Image.DecompressionBombError):
        return None


__all__ = ["BOX", "EXIF", "MASK", "PHRASE", "STORED", "SENTENCE", "GroundingPicture", "GroundingSet", "GroundingUnit", "SetBuilder",
           "Skipped", "canonical_id", "check_units", "clean_text", "header_size", "sentence_spans", "skipped_by_reason"]
