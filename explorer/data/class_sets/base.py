"""``ClassSet``: labelled pictures and their class names, for zero-shot classification.

A picture is a file (``ClassPicture.path``) or, for CIFAR's binary release, 32x32 RGB pixels held in
memory (``pixels``). ``label`` indexes ``classnames``. Readers list what they find; a folder that is not
one of the layout's classes, an unreadable record, a class without pictures is said in ``skipped`` or
``notes``, never a crash.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np
from PIL import Image

from explorer.data.retrieval_sets.base import Skipped, skipped_by_reason

PICTURE_SUFFIXES = frozenset({".jpg", ".jpeg", ".png", ".bmp", ".webp", ".gif", ".tif", ".tiff", ".jfif"})


@dataclass(frozen=True)
class ClassPicture:
    id: str
    label: int
    path: Path | None = None
    pixels: np.ndarray | None = field(default=None, compare=False, repr=False)  # uint8 [H, W, 3]

    def image(self) -> Image.Image:
        if self.pixels is not None:
            return Image.fromarray(self.pixels, "RGB")
        from explorer.core.images import load_image

        return load_image(self.path, exif=False).image  # as stored: torchvision's ImageFolder loader (clip_benchmark)


@dataclass(frozen=True)
class ClassSet:
    layout: str
    root: Path
    classnames: tuple[str, ...]
    pictures: tuple[ClassPicture, ...]
    skipped: tuple[Skipped, ...] = ()
    notes: tuple[str, ...] = ()
    names_from: str = ""  # where the class names came from
    # the template set its official evaluation reads ("cifar": CLIP's 18 for CIFAR; "openai": CLIP's 80 ImageNet
    # templates, clip_benchmark's default for every other set): used when no --templates is given
    templates: str = "openai"
    title: str = ""  # the name the papers' tables print ("CIFAR-10"), set by its reader; "" when none names it

    def first(self, n: int) -> "ClassSet":
        """``n`` pictures spread evenly over the set (``--limit``): folders are read class by class, so the
        first ``n`` would be the first classes only."""
        if n >= len(self.pictures):
            return self
        picked = np.linspace(0, len(self.pictures) - 1, n).round().astype(int)
        return replace(self, pictures=tuple(self.pictures[i] for i in picked),
                       notes=(*self.notes, f"only {n} pictures, spread evenly over the set"))

    def summary(self) -> str:
        left_out = skipped_by_reason(self.skipped)
        said = "; left out: " + ", ".join(f"{n} {why}" for why, n in left_out.items()) if left_out else ""
        return (f"{self.layout} at {self.root}: {len(self.pictures)} pictures, {len(self.classnames)} classes "
                f"(names: {self.names_from}){said}")


def pictures_in(folder: Path) -> list[Path]:
    """The picture files directly in ``folder``, sorted by name."""
    return sorted(p for p in folder.iterdir() if p.is_file() and p.suffix.lower() in PICTURE_SUFFIXES)


def class_folders(root: Path) -> list[Path]:
    return sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith("."))


def spoken(name: str) -> str:
    """A folder's or a release's class name as words: underscores read as spaces."""
    return " ".join(name.replace("_", " ").split())


__all__ = ["ClassPicture", "ClassSet", "PICTURE_SUFFIXES", "Skipped", "class_folders", "pictures_in",
           "skipped_by_reason", "spoken"]
