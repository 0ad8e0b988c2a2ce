"""``RetrievalSet``: images and captions, and which image each caption describes.

The shape clip_benchmark uses for retrieval: a list of images, a flat list of captions, and for
each caption the index of its image (any number of captions per image: 1 for DOCCI and Urban1k,
5 for COCO and Flickr30k). Recall@K follows from it both ways.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from explorer.core.errors import InputError
from explorer.data.errors import DatasetError


@dataclass(frozen=True)
class Skipped:
    """Something a reader left out, and why (shown to the user, counted in the results)."""

    item: str  # the image path or caption file, as the dataset names it
    reason: str  # e.g. "image missing", "caption empty", "caption file is not UTF-8"


@dataclass(frozen=True)
class RetrievalSet:
    layout: str  # the reader that read it, e.g. "docci"
    root: Path
    split: str  # the split read ("test", ...; "all" when the layout has none)
    images: tuple[Path, ...]
    captions: tuple[str, ...]
    caption_image: tuple[int, ...]  # for each caption, the index of its image in ``images``
    image_ids: tuple[str, ...] = ()  # the dataset's own id per image (file stem when it has none)
    skipped: tuple[Skipped, ...] = ()
    notes: tuple[str, ...] = ()  # choices the reader made, e.g. "first line of each caption file"
    extra: dict = field(default_factory=dict, compare=False)  # layout-specific facts (e.g. DCI splits used)

    def __post_init__(self):
        if len(self.captions) != len(self.caption_image):
            raise DatasetError("every caption needs its image index")
        if any(not 0 <= i < len(self.images) for i in self.caption_image):
            raise DatasetError("a caption points at an image that is not in the set")
        if self.image_ids and len(self.image_ids) != len(self.images):
            raise DatasetError("image_ids, when given, name every image")

    def __len__(self) -> int:
        return len(self.images)

    def captions_of(self, image: int) -> list[int]:
        """Indices of the captions that describe image ``image``."""
        return [c for c, i in enumerate(self.caption_image) if i == image]

    def summary(self) -> str:
        text = (f"{self.layout} ({self.split}) at {self.root}: {len(self.images)} images, "
                f"{len(self.captions)} captions")
        if self.skipped:
            reasons = ", ".join(f"{n} {reason}" for reason, n in sorted(skipped_by_reason(self.skipped).items()))
            text += f"; {len(self.skipped)} left out ({reasons})"
        return text

    def keep_images(self, indices: Iterable[int], note: str | None = None,
                    skipped: Iterable[Skipped] = ()) -> RetrievalSet:
        """The set of only the pictures ``indices`` (kept in the set's order) with their captions: the
        captions of the others are dropped, ``caption_image`` counts in the new set and ``image_ids``
        stay aligned. ``note`` (why) is added to ``notes`` and ``skipped`` (what was dropped, with
        why) to ``skipped``; when every picture is kept, the set itself."""
        keep = sorted({int(i) for i in indices})
        if keep and not (0 <= keep[0] and keep[-1] < len(self.images)):
            raise InputError(f"picture indices must be 0..{len(self.images) - 1}")
        if len(keep) == len(self.images):
            return self
        new_index = {old: new for new, old in enumerate(keep)}
        pairs = [(c, new_index[i]) for c, i in zip(self.captions, self.caption_image) if i in new_index]
        return replace(self, images=tuple(self.images[i] for i in keep), captions=tuple(c for c, _ in pairs),
                       caption_image=tuple(i for _, i in pairs),
                       image_ids=tuple(self.image_ids[i] for i in keep) if self.image_ids else (),
                       skipped=self.skipped + tuple(skipped), notes=self.notes + ((note,) if note else ()))


def build_set(layout: str, root: Path, split: str, pairs: Iterable[tuple[Path, Sequence[str], str]],
              skipped: Iterable[Skipped] = (), notes: Iterable[str] = (), extra: dict | None = None) -> RetrievalSet:
    """A set from (image path, its captions, its id) in order: an image that is not on disk, or whose
    captions are all empty, is skipped with the reason; empty captions are dropped one by one."""
    images, ids, captions, caption_image, left = [], [], [], [], list(skipped)
    for path, texts, image_id in pairs:
        if not Path(path).is_file():
            left.append(Skipped(str(path), "image missing"))
            continue
        kept = [" ".join(str(t).split()) for t in texts if t is not None and str(t).strip()]
        left += [Skipped(f"{path} (caption {n + 1})", "caption empty")
                 for n, t in enumerate(texts) if t is None or not str(t).strip()]
        if not kept:
            continue
        captions += kept
        caption_image += [len(images)] * len(kept)
        images.append(Path(path))
        ids.append(str(image_id))
    return RetrievalSet(layout=layout, root=root, split=split, images=tuple(images), captions=tuple(captions),
                        caption_image=tuple(caption_image), image_ids=tuple(ids), skipped=tuple(left),
                        notes=tuple(notes), extra=dict(extra or {}))


def find_image(folder: Path, *relatives: str) -> Path:
    """The first of ``folder/<relative>`` and ``folder/images/<relative>`` (for each relative path, in
    order) that is a file; else the first of them, which ``build_set`` then reports as missing."""
    candidates = [base / relative for base in (folder, folder / "images") for relative in relatives]
    return next((path for path in candidates if path.is_file()), candidates[0])


def skipped_by_reason(items: Iterable[Skipped]) -> dict[str, int]:
    """How many items were left out for each kind of reason, in the order first met: the reason's text
    before its first ':' ("image unreadable: <the decoder's words>" counts as "image unreadable")."""
    counts: dict[str, int] = {}
    for item in items:
        kind = item.reason.split(":")[0]
        counts[kind] = counts.get(kind, 0) + 1
    return counts


__all__ = ["RetrievalSet", "Skipped", "build_set", "find_image", "skipped_by_reason"]
