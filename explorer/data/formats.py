"""DOCCI and Urban1k written from scenes, and any retrieval layout read as a list of records.

Reading has ONE reader per layout: ``explorer.data.retrieval_sets`` (``docci``, ``urban1k``, ...),
and one detector (``retrieval_sets.detect``). The functions here only reshape what those readers
return into ``LongCaptionRecord`` (id, image path, caption, split, source), one record per caption,
for callers that want a flat list:

- ``read_docci(path, split=None)``: ``retrieval_sets.docci`` (``None``: every split, each record
  with its own split); ``images_dir`` moves the pictures elsewhere.
- ``read_urban1k(path)``: ``retrieval_sets.urban1k`` -- the FIRST line of each caption file, as the
  official Urban1k scripts read it; the ``annotations.json`` form too.
- ``read_records(path, split)``: whatever ``retrieval_sets.detect`` finds; the synthetic world
  through ``read_dataset`` (``None``: every split), as ``synthetic_records``.

Anything a reader leaves out (a missing picture, an empty caption, a caption file or line that is
not UTF-8, a bad line) is a ``DatasetError`` naming it with ``missing='error'`` (the default), or
is dropped with ``missing='skip'``. ``explorer.data.retrieval_sets`` returns those reasons instead.

Exporting scenes: ``export_docci`` maps the synthetic splits train / val /
test to DOCCI's train / qual_dev / test, names examples ``<split>_<nnnnn>``
like the release, and adds one key the release does not have,
``explorer_scene_id``, which links a line back to its scene's ground truth
(readers of the real layout ignore it). ``export_urban1k`` numbers the given
scenes 1..N in the order given. Both write JPEG pictures, as the releases do.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from PIL import Image

from explorer.core.errors import InputError
from explorer.core.images import load_image
from explorer.core.jsonl import write_jsonl
from explorer.data.errors import DatasetError
from explorer.data.retrieval_sets import RetrievalSet, detect, docci, read_retrieval_set, urban1k
from explorer.data.scene import Scene
from explorer.data.store import read_dataset

DOCCI_FILE = docci.FILE
DOCCI_SPLITS = docci.SPLITS
DOCCI_SPLIT_OF = {"train": "train", "val": "qual_dev", "test": "test"}  # synthetic split -> DOCCI split
URBAN1K_SPLIT = urban1k.SPLIT
JPEG_QUALITY = 95


@dataclass(frozen=True)
class LongCaptionRecord:
    id: str
    image_path: Path
    long_caption: str
    split: str
    source: str  # the layout read: docci | urban1k | synthetic | any of retrieval_sets.LAYOUTS

    def load_image(self, max_side: int | None = None) -> Image.Image:
        """The picture as RGB, read safely (``explorer.core.images.load_image``)."""
        return load_image(self.image_path, max_side=max_side).image


def _records(data: RetrievalSet, missing: str, split_of: dict[str, str] | None = None) -> list[LongCaptionRecord]:
    """One record per caption of ``data``; what the reader left out is an error unless ``missing='skip'``."""
    if missing not in ("error", "skip"):
        raise InputError(f"missing must be 'error' or 'skip', got {missing!r}")
    if data.skipped and missing == "error":
        first = data.skipped[0]
        raise DatasetError(f"{data.summary()}; first: {first.item} ({first.reason}). "
                           f"Pass missing='skip' to read the others.")
    split_of = split_of or {}
    return [LongCaptionRecord(id=data.image_ids[image], image_path=data.images[image], long_caption=caption,
                              split=split_of.get(data.image_ids[image], data.split), source=data.layout)
            for caption, image in zip(data.captions, data.caption_image)]


# -- DOCCI --------------------------------------------------------------------------------------------------

def read_docci(path: str | os.PathLike, split: str | None = None, *, images_dir: str | os.PathLike | None = None,
               missing: str = "error") -> list[LongCaptionRecord]:
    """DOCCI records from its folder (or its ``docci_descriptions.jsonlines``), optionally one split,
    read by ``explorer.data.retrieval_sets.docci``.

    ``images_dir`` defaults to ``images/`` beside the jsonlines file. Lines whose image is not on
    disk (or that the reader leaves out for another reason) are an error, or left out with
    ``missing='skip'``.
    """
    data = docci.read(Path(path), "all" if split is None else split, images_dir=images_dir)
    return _records(data, missing, data.extra.get("split_of"))


def export_docci(scenes: Iterable[Scene], out_dir: str | os.PathLike, *, split_of: dict[str, str] | None = None,
                 overwrite: bool = False) -> Path:
    """Write scenes in DOCCI's layout (long caption as the description); returns the jsonlines path.

    Scenes without a split go to DOCCI's ``test``.
    """
    split_of = dict(DOCCI_SPLIT_OF if split_of is None else split_of)
    root = Path(out_dir)
    file = root / DOCCI_FILE
    if file.exists() and not overwrite:
        raise DatasetError(f"{file} exists; pass overwrite=True to replace it.")
    (root / "images").mkdir(parents=True, exist_ok=True)
    counters: dict[str, int] = {}

    def lines():
        for scene in scenes:
            split = split_of.get(scene.split, "test") if scene.split is not None else "test"
            if split not in DOCCI_SPLITS:
                raise DatasetError(f"{split!r} is not a DOCCI split ({', '.join(DOCCI_SPLITS)}): map the dataset's "
                                   "splits onto DOCCI's (split_of)")
            number = counters.get(split, 0)
            counters[split] = number + 1
            example_id = f"{split}_{number:05d}"
            image_file = f"{example_id}.jpg"
            scene.image.save(root / "images" / image_file, "JPEG", quality=JPEG_QUALITY)
            yield {"example_id": example_id, "split": split, "image_file": image_file,
                   "description": scene.long_caption, "explorer_scene_id": scene.id}

    return write_jsonl(file, lines())  # the file appears only once every picture is on disk


# -- Urban1k ------------------------------------------------------------------------------------------------

def read_urban1k(path: str | os.PathLike, split: str | None = None, *,
                 missing: str = "error") -> list[LongCaptionRecord]:
    """Urban1k records, read by ``explorer.data.retrieval_sets.urban1k``: the first line of every
    ``caption/<stem>.txt`` with its ``image/<stem>.jpg``, in numeric order (or ``annotations.json``)."""
    return _records(urban1k.read(Path(path), split), missing)


def export_urban1k(scenes: Iterable[Scene], out_dir: str | os.PathLike, *, overwrite: bool = False) -> Path:
    """Write scenes in Urban1k's layout, numbered 1..N in the order given; returns the folder."""
    root = Path(out_dir)
    captions, images = root / "caption", root / "image"
    ours = [f for d in (captions, images) if d.is_dir() for f in d.iterdir() if f.stem.isdigit()]
    if ours and not overwrite:
        raise DatasetError(f"{root} already holds Urban1k files; pass overwrite=True to replace them.")
    for file in ours:  # only the layout's own numbered files
        if file.suffix in (".txt", ".jpg"):
            file.unlink()
    captions.mkdir(parents=True, exist_ok=True)
    images.mkdir(parents=True, exist_ok=True)
    for number, scene in enumerate(scenes, 1):
        scene.image.save(images / f"{number}.jpg", "JPEG", quality=JPEG_QUALITY)
        (captions / f"{number}.txt").write_text(scene.long_caption, encoding="utf-8")
    return root


# -- any of them --------------------------------------------------------------------------------------------

def synthetic_records(path: str | os.PathLike, split: str | None = None) -> list[LongCaptionRecord]:
    """The synthetic layout's scenes as retrieval records (image path and long caption)."""
    return [LongCaptionRecord(id=s.id, image_path=s.image_path, long_caption=s.long_caption, split=s.split or "",
                              source="synthetic") for s in read_dataset(path, split)]


def detect_layout(path: str | os.PathLike) -> str:
    """Which layout ``path`` holds (a name in ``explorer.data.retrieval_sets.LAYOUTS``: 'synthetic',
    'docci', 'urban1k', ...); a ``DatasetError`` listing every layout tried when none matches."""
    return detect(path)


def read_records(path: str | os.PathLike, split: str | None = None, *,
                 missing: str = "error") -> list[LongCaptionRecord]:
    """Retrieval records from any supported layout, detected from what ``path`` holds (``split`` None:
    every split of the synthetic world and DOCCI, the layout's default split otherwise)."""
    layout = detect_layout(path)
    if layout == "synthetic":
        return synthetic_records(path, split)
    if layout == "docci":
        return read_docci(path, split, missing=missing)
    return _records(read_retrieval_set(path, split, layout=layout), missing)
