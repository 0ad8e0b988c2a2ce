"""ImageNet-V2 and ImageNet-O as released: a folder per class, pictures inside.

- ImageNet-V2 (Recht et al., 2019; any of its three test sets): folders ``0`` .. ``999``, named by the
  ImageNet class index; the names are open_clip's ``IMAGENET_CLASSNAMES`` in that order. ``--data`` is the
  folder holding them or the folder holding that one (as the tarball unpacks).
- ImageNet-O (Hendrycks et al., 2021): folders named by WordNet id (``n01443537``), 200 of ImageNet's
  classes. A WordNet id's name is ``IMAGENET_CLASSNAMES`` at its index in ImageNet's sorted WordNet ids
  (timm's list; ``--classnames FILE`` with ``wnid name`` lines instead). The pictures are classified
  among clip_benchmark's fixed 200 classes (``class_set="fixed"``, ``reference_lists.IMAGENET_O_WNIDS``),
  whatever folders the copy holds: a folder outside them is skipped, a class without a folder still
  competes. ``class_set="present"`` classifies among the folders present instead.

A folder that is not one of the layout's classes is counted and skipped with its reason.
"""

from __future__ import annotations

import re
from pathlib import Path

from explorer.data.class_sets.base import ClassPicture, ClassSet, Skipped, class_folders, pictures_in
from explorer.data.class_sets.names import imagenet_classnames, imagenet_wnids, read_classnames
from explorer.data.class_sets.reference_lists import IMAGENET_O_WNIDS
from explorer.data.errors import DatasetError

WNID = re.compile(r"n\d{8}")
CLASS_SETS = {"fixed": "clip_benchmark's fixed 200 ImageNet-O classes (clip_benchmark/datasets/builder.py)",
              "present": "the WordNet id folders present"}
EXPECTS = {"imagenet-v2": "class folders 0 .. 999 (ImageNet class indices)",
           "imagenet-o": "class folders named by WordNet id (n01443537, ...)"}


def _root(root: Path, wanted) -> Path:
    """``root``, or its one subfolder that holds the class folders (a tarball's top folder)."""
    if not root.is_dir():
        raise DatasetError(f"no dataset at {root}: it is not a folder")
    folders = class_folders(root)
    if any(wanted(f.name) for f in folders):
        return root
    inner = [f for f in folders if any(wanted(g.name) for g in class_folders(f))]
    return inner[0] if len(inner) == 1 else root


def mostly(root: Path, wanted) -> bool:
    """Whether most class folders of ``root`` (or of its one top folder, a tarball's) have ``wanted`` names."""
    folders = [f.name for f in class_folders(root)] if root.is_dir() else []
    if len(folders) == 1 and class_folders(root / folders[0]):  # a tarball's top folder
        folders = [f.name for f in class_folders(root / folders[0])]
    return bool(folders) and sum(bool(wanted(name)) for name in folders) > len(folders) / 2


def read_v2(root: Path, classnames_file: Path | None = None) -> ClassSet:
    root = _root(root, str.isdigit)
    names = read_classnames(classnames_file) if classnames_file else imagenet_classnames()
    if not isinstance(names, list) or len(names) != 1000:
        raise DatasetError("--classnames for imagenet-v2 lists the 1000 names in class-index order, one a line")
    pictures, skipped = [], []
    for folder in class_folders(root):
        if not (folder.name.isdigit() and 0 <= int(folder.name) < 1000):
            skipped.append(Skipped(folder.name, f"unknown class folder: not a class index 0 .. 999 "
                                                f"({len(pictures_in(folder))} pictures)"))
            continue
        pictures += [ClassPicture(f"{folder.name}/{p.name}", int(folder.name), p) for p in pictures_in(folder)]
    if not pictures:
        raise DatasetError(f"no pictures in class folders at {root}: the imagenet-v2 layout expects "
                           f"{EXPECTS['imagenet-v2']}")
    source = str(classnames_file) if classnames_file else "open_clip's IMAGENET_CLASSNAMES"
    return ClassSet("imagenet-v2", root, tuple(names), tuple(pictures), tuple(skipped), names_from=source)


def read_o(root: Path, classnames_file: Path | None = None, class_set: str = "fixed") -> ClassSet:
    if class_set not in CLASS_SETS:
        raise DatasetError(f"unknown --class-set {class_set!r}; the choices are {', '.join(CLASS_SETS)}")
    root = _root(root, WNID.fullmatch)
    named, source = _wnid_names(classnames_file)
    folders = {f.name: f for f in class_folders(root)}
    wnids = list(IMAGENET_O_WNIDS) if class_set == "fixed" else [w for w in folders if w in named]
    unnamed = [w for w in wnids if w not in named]
    if unnamed:
        raise DatasetError(f"{classnames_file}: no name for {len(unnamed)} of ImageNet-O's classes ({unnamed[0]}, ...)")
    label = {wnid: index for index, wnid in enumerate(wnids)}
    outside = "one of the 200 classes" if class_set == "fixed" else "a known WordNet id"
    skipped = [Skipped(name, f"unknown class folder: not {outside} ({len(pictures_in(folder))} pictures)")
               for name, folder in folders.items() if name not in label]
    pictures = [ClassPicture(f"{wnid}/{p.name}", label[wnid], p) for wnid in wnids if wnid in folders
                for p in pictures_in(folders[wnid])]
    if not pictures:
        raise DatasetError(f"no pictures in class folders at {root}: the imagenet-o layout expects "
                           f"{EXPECTS['imagenet-o']}")
    absent = sum(wnid not in folders for wnid in wnids)
    notes = [f"classified among {CLASS_SETS[class_set]}: {len(wnids)} classes"
             + (f", {absent} of them with no folder here" if absent else "")]
    return ClassSet("imagenet-o", root, tuple(named[w] for w in wnids), tuple(pictures), tuple(skipped),
                    notes=tuple(notes), names_from=source)


def _wnid_names(classnames_file: Path | None) -> tuple[dict, str]:
    """({WordNet id: class name}, where the names came from): ``--classnames`` lines, else ImageNet-1k's names
    by timm's sorted WordNet ids."""
    if classnames_file:
        given = read_classnames(classnames_file)
        if not isinstance(given, dict):
            raise DatasetError(f"{classnames_file}: imagenet-o needs 'wnid name' lines (n01443537 goldfish)")
        return given, str(classnames_file)
    wnids = imagenet_wnids()
    if wnids is None:
        raise DatasetError("ImageNet's WordNet id list (timm's imagenet_synsets.txt) is not installed: give "
                           "--classnames FILE with one 'wnid name' line per class")
    return dict(zip(wnids, imagenet_classnames())), "open_clip's IMAGENET_CLASSNAMES by timm's sorted WordNet ids"


__all__ = ["CLASS_SETS", "EXPECTS", "read_o", "read_v2"]
