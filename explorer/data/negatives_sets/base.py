"""``NegativesSet``: items whose true caption must outscore its hard negatives.

An item is a picture (or a region of it: ``box``, (x, y, w, h) in the picture's pixels as COCO writes
it), one positive caption and its negatives. ``split`` names the file (FG-OVD's difficulty or attribute
benchmark, SugarCrepe's kind of change, the synthetic world's twin of either). Readers never decode
pictures; they check what the annotations alone can tell (a box of zero area, a crop under
``MIN_CROP_SIDE`` pixels, negatives that the file does not hold) and leave such items out in
``skipped`` with their reason.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path

from explorer.data.errors import DatasetError
from explorer.data.retrieval_sets.base import Skipped, skipped_by_reason

MIN_CROP_SIDE = 2  # pixels: a crop narrower than this holds no picture to score (a one-pixel crop)


@dataclass(frozen=True)
class NegativeItem:
    id: str  # unique in the set: "<split>/<the file's own id>"
    split: str
    picture: Path
    positive: str
    negatives: tuple[str, ...]
    box: tuple[float, float, float, float] | None = None  # (x, y, w, h); None: the whole picture


@dataclass(frozen=True)
class NegativesSet:
    layout: str
    root: Path
    splits: dict  # split -> the file it was read from
    items: tuple[NegativeItem, ...]
    skipped: tuple[Skipped, ...] = ()
    notes: tuple[str, ...] = ()
    extra: dict = field(default_factory=dict, compare=False)
    title: str = ""  # the name the papers' tables print ("FG-OVD"), set by its reader; "" when none names it

    def first(self, n: int) -> "NegativesSet":
        """The first ``n`` items of each split (``--limit``), so that every split is still measured."""
        kept, seen = [], {}
        for item in self.items:
            seen[item.split] = seen.get(item.split, 0) + 1
            if seen[item.split] <= n:
                kept.append(item)
        return replace(self, items=tuple(kept), notes=(*self.notes, f"only the first {n} items of each split"))

    def counts(self) -> dict[str, int]:
        counts = {split: 0 for split in self.splits}
        for item in self.items:
            counts[item.split] = counts.get(item.split, 0) + 1
        return counts

    def summary(self) -> str:
        per_split = ", ".join(f"{split} {n}" for split, n in self.counts().items())
        left_out = skipped_by_reason(self.skipped)
        said = "; left out: " + ", ".join(f"{n} {why}" for why, n in left_out.items()) if left_out else ""
        return f"{self.layout} at {self.root}: {len(self.items)} items ({per_split}){said}"


def region(box, size: tuple[int, int] | None) -> tuple[tuple[float, float, float, float] | None, str | None]:
    """(the box clamped to the picture, None) or (None, why it cannot be scored): a malformed box, a box of
    zero area, or a crop under ``MIN_CROP_SIDE`` pixels. ``size``: the picture's (width, height), if known."""
    try:
        x, y, w, h = (float(v) for v in box)
    except (TypeError, ValueError):
        return None, f"malformed box: {box!r}"
    if not w > 0 or not h > 0:
        return None, f"zero-area box: {[x, y, w, h]}"
    if size is not None:
        x0, y0 = max(x, 0.0), max(y, 0.0)
        x1, y1 = min(x + w, float(size[0])), min(y + h, float(size[1]))
        if x1 <= x0 or y1 <= y0:
            return None, f"zero-area box: {[x, y, w, h]} lies outside the {size[0]}x{size[1]} picture"
        x, y, w, h = x0, y0, x1 - x0, y1 - y0
    if w < MIN_CROP_SIDE or h < MIN_CROP_SIDE:
        return None, f"one-pixel crop: the box {[x, y, w, h]} is under {MIN_CROP_SIDE} px on a side"
    return (x, y, w, h), None


def picture_path(images: Path, file_name: str) -> Path | None:
    """Where ``file_name`` (COCO's ``val2017/000000139.jpg``, or a bare name) is under ``images``: as written,
    else by its last part (``--images`` given as the val2017 folder itself); None when neither exists."""
    for candidate in (images / file_name, images / Path(file_name).name):
        if candidate.is_file():
            return candidate
    return None


def splits_asked(available: dict, asked, layout: str, expected: str) -> dict:
    """The split files to read: ``asked`` (names, or None for every file present), each checked."""
    if asked is None or asked == [] or asked == "all":
        present = {name: path for name, path in available.items() if path.is_file()}
        if not present:
            raise DatasetError(f"no {layout} benchmark file found; the layout expects {expected}")
        return present
    asked = [asked] if isinstance(asked, str) else list(asked)
    chosen = {}
    for name in asked:
        if name not in available:
            raise DatasetError(f"unknown {layout} split {name!r}; the splits are {', '.join(available)}")
        if not available[name].is_file():
            raise DatasetError(f"split {name!r} reads {available[name]}, which does not exist")
        chosen[name] = available[name]
    return chosen


__all__ = ["MIN_CROP_SIDE", "NegativeItem", "NegativesSet", "Skipped", "picture_path", "region", "skipped_by_reason",
           "splits_asked"]
