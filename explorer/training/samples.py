"""What the trainer reads: samples, and sources of ``TrainingBatch``es made from them.

The dataset side is an interface, so any dataset (the synthetic world in
``explorer.data``, a folder on disk, an in-memory list) trains every method:

- a *sample* is any object (or mapping) with the fields of ``TrainingSample``:
  ``image`` (PIL), ``caption`` (the long caption), and optionally
  ``short_caption``, ``sentences``, ``dense_caption``, ``local_image``,
  ``local_box`` ((x0, y0, x1, y1) in [0, 1] of the image),
  ``local_sentence``, ``negative_captions`` and ``extras`` (named tensors, stacked into the batch's ``extras``);
- a ``BatchSource`` hands out the batches of an epoch, in an order fixed by
  the epoch number alone, and can start an epoch part-way (this is what makes
  a resumed run see exactly the batches an uninterrupted one would);
- ``SampleLoader`` is that source over a sequence of samples: it shuffles per
  epoch with its own seeded generator, preprocesses images with the method's
  ``preprocess`` and collates into ``TrainingBatch`` (optionally in worker
  processes through ``torch.utils.data.DataLoader``);
- ``BatchList`` replays ready batches (tests, benchmarks, precomputed data);
- ``SampleFolder`` reads a folder on disk: ``samples.jsonl`` with one JSON
  object per line, image paths relative to the folder.

An optional field is all or nothing within a batch: if some samples have a
dense caption and others do not, collation fails and names the samples,
rather than training a method on a silently half-filled field.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Iterator, Mapping, Protocol, Sequence, runtime_checkable

import torch
from PIL import Image

from explorer.core.errors import ConfigError, ExplorerError, InputError
from explorer.data.errors import DatasetError
from explorer.core.jsonl import read_jsonl
from explorer.models.batch import TrainingBatch
from explorer.models.preprocess import Preprocess

SAMPLES_FILE = "samples.jsonl"


@dataclass
class TrainingSample:
    image: Image.Image
    caption: str  # the long caption
    short_caption: str | None = None  # a summary (e.g. the first sentence)
    sentences: list[str] | None = None  # the caption's sentences, in order
    dense_caption: str | None = None  # SEPS's dense caption
    local_image: Image.Image | None = None  # crop of the local region (made from local_box when absent)
    local_box: tuple[float, float, float, float] | None = None  # (x0, y0, x1, y1) in [0, 1] of the image
    local_sentence: str | None = None  # the sentence matched to the local region
    negative_captions: list[str] | None = None  # the caption made false of the image, one change each (NegCLIP)
    extras: dict | None = None  # {name: tensor} a method's losses read; stacked into ``TrainingBatch.extras``


OPTIONAL_TEXT = {"short_caption": "short_captions", "sentences": "sentences", "dense_caption": "dense_captions",
                 "local_sentence": "local_sentences", "negative_captions": "negative_captions"}


@runtime_checkable
class BatchSource(Protocol):
    """Batches of one epoch at a time, in an order that depends on the epoch number only."""

    def __len__(self) -> int:
        """Batches per epoch."""

    def batches(self, epoch: int, start: int = 0) -> Iterator[TrainingBatch]:
        """The batches of ``epoch`` (0-based), from batch number ``start`` on."""


def field_of(sample, name: str):
    if isinstance(sample, Mapping):
        return sample.get(name)
    return getattr(sample, name, None)


def collate(samples: Sequence, preprocess: Preprocess, fit: str = "crop") -> TrainingBatch:
    """Preprocess the images and gather the texts of ``samples`` into one ``TrainingBatch``."""
    if not samples:
        raise InputError("cannot collate an empty list of samples")
    images = [field_of(s, "image") for s in samples]
    captions = [field_of(s, "caption") for s in samples]
    for i, (image, caption) in enumerate(zip(images, captions)):
        if not isinstance(image, Image.Image):
            raise DatasetError(f"sample {i} has no PIL image (got {type(image).__name__})")
        if not isinstance(caption, str) or not caption.strip():
            raise DatasetError(f"sample {i} has no caption: every sample needs a non-empty caption")
    texts = {batch_name: _all_or_none(samples, name) for name, batch_name in OPTIONAL_TEXT.items()}
    boxes = _all_or_none(samples, "local_box")
    crops = [field_of(s, "local_image") for s in samples]
    if boxes is not None:
        crops = [crop if crop is not None else crop_box(image, box) for crop, image, box in zip(crops, images, boxes)]
    present = [c is not None for c in crops]
    if any(present) and not all(present):
        raise DatasetError(f"samples {_indices(present, False)} lack local_image (and local_box) that others have")
    extras = _all_or_none(samples, "extras")
    return TrainingBatch(
        extras={} if extras is None else {name: torch.stack([e[name] for e in extras]) for name in extras[0]},
        pixels=preprocess(images, fit=fit),
        captions=list(captions),
        short_captions=texts["short_captions"],
        sentences=None if texts["sentences"] is None else [list(s) for s in texts["sentences"]],
        dense_captions=texts["dense_captions"],
        local_pixels=preprocess(crops, fit=fit) if all(present) else None,
        local_sentences=texts["local_sentences"],
        negative_captions=None if texts["negative_captions"] is None else [list(n) for n in texts["negative_captions"]],
        local_boxes=None if boxes is None else torch.tensor([list(map(float, b)) for b in boxes], dtype=torch.float32),
    )


def crop_box(image: Image.Image, box) -> Image.Image:
    """The part of ``image`` inside ``box`` (x0, y0, x1, y1) in [0, 1] (at least one pixel)."""
    x0, y0, x1, y1 = (float(v) for v in box)
    if not (0 <= x0 < x1 <= 1 and 0 <= y0 < y1 <= 1):
        raise DatasetError(f"local_box {tuple(box)} is not (x0, y0, x1, y1) with 0 <= x0 < x1 <= 1, 0 <= y0 < y1 <= 1")
    w, h = image.size
    left, top = min(int(x0 * w), w - 1), min(int(y0 * h), h - 1)
    right, bottom = max(left + 1, round(x1 * w)), max(top + 1, round(y1 * h))
    return image.crop((left, top, right, bottom))


def _all_or_none(samples: Sequence, name: str):
    values = [field_of(s, name) for s in samples]
    present = [v is not None for v in values]
    if not any(present):
        return None
    if not all(present):
        raise DatasetError(f"samples {_indices(present, False)} lack {name}, which samples "
                         f"{_indices(present, True)} have: a field is all or nothing within a batch")
    return values


def _indices(flags: list[bool], value: bool) -> str:
    picked = [str(i) for i, f in enumerate(flags) if f == value]
    return ", ".join(picked[:8]) + (" ..." if len(picked) > 8 else "")


class SampleLoader:
    """A ``BatchSource`` over a sequence of samples, preprocessed for one method.

    Epoch ``e`` visits the samples in ``randperm(n)`` drawn from a generator seeded with
    (seed, e) (or in order without ``shuffle``); with ``drop_last`` the last partial batch
    is left out, so every batch has ``batch_size`` samples. ``workers > 0`` decodes and
    preprocesses in that many worker processes (the samples must be picklable).
    """

    def __init__(self, samples: Sequence, preprocess: Preprocess, batch_size: int, shuffle: bool = True,
                 seed: int = 0, drop_last: bool = True, fit: str = "crop", workers: int = 0):
        if batch_size < 1:
            raise ConfigError(f"batch_size must be at least 1, got {batch_size}")
        self.samples, self.preprocess, self.batch_size = samples, preprocess, int(batch_size)
        self.shuffle, self.seed, self.drop_last, self.fit, self.workers = shuffle, int(seed), drop_last, fit, workers
        if len(self) == 0:
            raise ConfigError(f"{len(samples)} samples make no batch of {batch_size}"
                             + (" (drop_last=True)" if drop_last else ""))

    def __len__(self) -> int:
        n, b = len(self.samples), self.batch_size
        return n // b if self.drop_last else -(-n // b)

    def order(self, epoch: int) -> list[int]:
        n = len(self.samples)
        if not self.shuffle:
            return list(range(n))
        generator = torch.Generator().manual_seed(self.seed * 1_000_003 + int(epoch))
        return torch.randperm(n, generator=generator).tolist()

    def index_batches(self, epoch: int, start: int = 0) -> list[list[int]]:
        order, b = self.order(epoch), self.batch_size
        return [order[i * b:(i + 1) * b] for i in range(start, len(self))]

    def batches(self, epoch: int, start: int = 0) -> Iterator[TrainingBatch]:
        index_batches = self.index_batches(epoch, start)
        make = partial(_collate_indices, self.samples, self.preprocess, self.fit)
        if self.workers <= 0:
            for indices in index_batches:
                yield make(indices)
            return
        loader = torch.utils.data.DataLoader(index_batches, batch_size=None, shuffle=False, collate_fn=make,
                                             num_workers=self.workers)
        yield from loader


def _collate_indices(samples: Sequence, preprocess: Preprocess, fit: str, indices: list[int]) -> TrainingBatch:
    return collate([samples[i] for i in indices], preprocess, fit)


class BatchList:
    """A ``BatchSource`` that replays the same ready batches, in order, every epoch."""

    def __init__(self, batches: Sequence[TrainingBatch]):
        if not batches:
            raise InputError("BatchList needs at least one batch")
        self._batches = list(batches)

    def __len__(self) -> int:
        return len(self._batches)

    def batches(self, epoch: int, start: int = 0) -> Iterator[TrainingBatch]:
        yield from self._batches[start:]


class SampleFolder:
    """Samples on disk: ``<root>/samples.jsonl``, one JSON object per line, read lazily.

    Each line: {"image": "images/0001.png", "caption": "...", and optionally
    "short_caption", "sentences": [...], "dense_caption", "local_image": "crops/0001.png",
    "local_box": [x0, y0, x1, y1] in [0, 1], "local_sentence", "negative_captions": [...]}. Paths are relative to ``root``.
    """

    def __init__(self, root: str | Path):
        self.root = Path(root).expanduser()
        index = self.root / SAMPLES_FILE
        if not index.is_file():
            raise ExplorerError(f"No {SAMPLES_FILE} in {self.root}: a training folder lists its samples there, "
                                'one JSON object per line ({"image": ..., "caption": ..., ...}).')
        self.records = []
        for number, record in read_jsonl(index):  # a line that is not JSON: JsonlError, an ExplorerError
            if not isinstance(record, dict) or not record.get("image") or not record.get("caption"):
                raise ExplorerError(f"{index}, line {number}: a sample needs at least \"image\" and \"caption\".")
            unknown = sorted(set(record) - set(TrainingSample.__dataclass_fields__))
            if unknown:
                raise ExplorerError(f"{index}, line {number}: unknown field(s) {unknown}; known: "
                                    f"{sorted(TrainingSample.__dataclass_fields__)}.")
            negatives = record.get("negative_captions")
            if negatives is not None and not (isinstance(negatives, list)
                                              and all(isinstance(n, str) and n.strip() for n in negatives)):
                raise ExplorerError(f"{index}, line {number}: \"negative_captions\" is a list of captions (strings), "
                                    f"not {json.dumps(negatives)[:80]}.")
            self.records.append(record)
        if not self.records:
            raise ExplorerError(f"{index} lists no samples.")

    def __len__(self) -> int:
        return len(self.records)

    def __getitem__(self, index: int) -> TrainingSample:
        from explorer.core.images import load_image

        record = dict(self.records[index])
        record["image"] = load_image(self.root / record["image"]).image
        if record.get("local_image"):
            record["local_image"] = load_image(self.root / record["local_image"]).image
        if record.get("local_box") is not None:
            record["local_box"] = tuple(record["local_box"])
        return TrainingSample(**record)
