"""Ground truth for the picture being grounded.

When the truth of a picture is known, the Grounding view shows, per sentence,
the IoU of the predicted mask with the true one and whether the map's peak
lies inside it (``explorer.evaluation.metrics.maps.score_sentences``). Truth comes from:

- a synthetic scene (``truth_from_scene``): each caption sentence takes the
  mask of the scene sentence with the same text (``normalise_sentence``), so
  an edited sentence simply has no truth. The example pictures are recognised
  by their pixels (``save_scene_truth`` / ``find_truth``): uploads reach the
  app under temporary names, so the registry is keyed by ``image_digest``.
- a mask file the user uploads (``truth_from_mask_file``): a single-channel
  label image where pixel value k marks sentence k (1-based, caption order)
  and 0 marks nothing; a plain binary mask (only 0 and 255, or a 1-bit image)
  is one object that every sentence is compared with.

Masks are bool [H, W] at the working picture's size, (width, height) =
``size``; a truth drawn at another size with the same aspect ratio is resized
with nearest-neighbour sampling, and ``notes`` says so.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import numpy as np
from PIL import Image

from explorer.core.errors import ExplorerError, ImageError
from explorer.core.files import atomic_write
from explorer.core.images import decode_image, decode_slot, image_digest, open_image

log = logging.getLogger(__name__)

ASPECT_TOLERANCE = 0.01  # a mask whose aspect ratio is this close to the picture's is resized onto it
_BINARY_VALUES = (255, 65535)  # the "object" value of a plain 8- or 16-bit binary mask
_REGISTRY_VERSION = 1


class MaskError(ExplorerError):
    """An uploaded mask cannot be read, or does not fit the picture."""


@dataclass
class Truth:
    masks: list[np.ndarray | None]  # bool [H, W] per caption sentence; None: no truth for that sentence
    source: str  # where it came from, for the user: 'synthetic scene test-000003', 'mask file cat.png'
    notes: list[str] = field(default_factory=list)  # what was done to it / what is missing, for the user

    @property
    def available(self) -> bool:
        return any(mask is not None for mask in self.masks)


def normalise_sentence(text: str) -> str:
    """The form sentences are matched in: case-folded, white space collapsed, stripped."""
    return " ".join(text.casefold().split())


# ---- synthetic scenes ------------------------------------------------------------------------------


def truth_from_scene(scene, sentences: Sequence[str], size: tuple[int, int]) -> Truth:
    """Each caption sentence gets the mask of the scene sentence with the same (normalised) text."""
    return _truth_by_text(scene.sentence_texts, scene.sentence_masks(), sentences, size,
                          f"synthetic scene {scene.id}")


def _truth_by_text(texts: Sequence[str], masks: np.ndarray, sentences: Sequence[str], size: tuple[int, int],
                   source: str) -> Truth:
    width, height = int(size[0]), int(size[1])
    lookup: dict[str, np.ndarray] = {}
    for text, mask in zip(texts, masks):
        lookup.setdefault(normalise_sentence(text), mask)  # a repeated sentence keeps its first mask
    found = [lookup.get(normalise_sentence(sentence)) for sentence in sentences]
    notes = []
    native = (masks.shape[2], masks.shape[1]) if masks.ndim == 3 else (width, height)
    if native != (width, height) and any(mask is not None for mask in found):
        found = [None if mask is None else _resize_nearest(mask, (width, height)) for mask in found]
        notes.append(f"masks resized from {_size(native)} to {_size((width, height))} (nearest)")
    missing = [i + 1 for i, mask in enumerate(found) if mask is None]
    if missing:
        notes.append(f"{_sentence_list(missing)} no ground truth (the text is not a sentence of {source})")
    return Truth(masks=[None if mask is None else np.asarray(mask, dtype=bool) for mask in found], source=source,
                 notes=notes)


# ---- mask files ------------------------------------------------------------------------------------


def truth_from_mask_file(path, sentences: Sequence[str], size: tuple[int, int],
                         original_size: tuple[int, int] | None = None) -> Truth:
    """Read a label image (value k: sentence k, 0: nothing) as the truth of the caption's sentences.

    ``size`` is the working picture's (width, height); ``original_size`` the picture as uploaded,
    before it was shrunk. Raises ``MaskError`` for anything that cannot be read or does not fit.
    """
    name = Path(path).name if isinstance(path, (str, os.PathLike)) else "the mask"
    notes: list[str] = []
    labels, binary = _read_labels(path, name, notes)
    labels = _fit(labels, name, size, original_size, notes)

    values = np.unique(labels)
    nonzero = [int(v) for v in values if v != 0]
    n = len(sentences)
    masks: list[np.ndarray | None]
    if not nonzero:
        masks = [None] * n
        notes.append(f"{name} is empty (every pixel is 0): no sentence has ground truth")
    elif binary or (len(nonzero) == 1 and nonzero[0] in _BINARY_VALUES):
        mask = labels != 0
        masks = [mask.copy() for _ in range(n)]
        notes.append("a binary mask: its one object is the truth of every sentence")
    else:
        masks = [None] * n
        for k in nonzero:
            if 1 <= k <= n:
                masks[k - 1] = labels == k
        extra = [k for k in nonzero if not 1 <= k <= n]
        if extra:
            notes.append(f"label(s) {_listing(extra)} have no sentence (the caption has {n})")
        missing = [i + 1 for i, mask in enumerate(masks) if mask is None]
        if missing:
            notes.append(f"{_sentence_list(missing)} no ground truth (no pixel is labelled with "
                         f"{'its' if len(missing) == 1 else 'their'} number)")
        if nonzero == [1] and n > 1:
            notes.append("only label 1 is used; a binary mask meant for every sentence marks the object with 255")
    return Truth(masks=masks, source=f"mask file {name}", notes=notes)


def _read_labels(path, name: str, notes: list[str]) -> tuple[np.ndarray, bool]:
    """(labels [H, W] integer array, whether the file is a 1-bit image), or ``MaskError``.

    The pixel-count limit, decoding errors and EXIF orientation are those of ``explorer.core.images``.
    """
    try:
        opened, label = open_image(path)
    except ImageError as error:
        raise MaskError(f"The mask cannot be read: {error}") from error
    try:
        if opened.format == "JPEG":
            raise MaskError(f"{name} is a JPEG: lossy compression changes label values along edges, so it "
                            "cannot be read as a mask. Save the mask as PNG (or another lossless format).")
        with decode_slot():  # a full-size decode: one of the process's slots, as every picture's
            try:
                image = decode_image(opened, label, notes)
            except ImageError as error:
                raise MaskError(f"The mask cannot be read: {error}") from error
            mode = image.mode
            if mode == "1":
                return np.asarray(image, dtype=np.uint8), True
            if mode in ("L", "P") or mode == "I" or mode.startswith("I;16"):
                return np.asarray(image), False
            if mode in ("LA", "PA"):
                notes.append(f"the mask's transparency ({mode}) was ignored")
                return np.asarray(image)[..., 0], False
            if mode in ("RGB", "RGBA"):
                rgb = np.asarray(image)[..., :3]
                if (rgb[..., 0] == rgb[..., 1]).all() and (rgb[..., 0] == rgb[..., 2]).all():
                    notes.append(f"{mode} mask with equal channels read as a grey label image")
                    return np.ascontiguousarray(rgb[..., 0]), False
                raise MaskError(f"a mask is a single-channel label image (grey or palette: pixel value k marks "
                                f"sentence k, 0 marks nothing), but {name} is a colour {mode} image whose channels "
                                "differ. Save it as an 8-bit greyscale PNG.")
            raise MaskError(f"a mask is a single-channel label image (grey or palette: pixel value k marks "
                            f"sentence k, 0 marks nothing), but {name} has mode {mode}. Save it as an 8-bit "
                            "greyscale PNG.")
    finally:
        opened.close()


def _fit(labels: np.ndarray, name: str, size: tuple[int, int], original_size: tuple[int, int] | None,
         notes: list[str]) -> np.ndarray:
    """The labels at the picture's size: as they are, resized (nearest) if the aspect ratio agrees, or refused."""
    width, height = int(size[0]), int(size[1])
    have = (labels.shape[1], labels.shape[0])
    if have == (width, height):
        return labels
    original = tuple(int(v) for v in original_size) if original_size is not None else None
    same_aspect = abs((have[0] / have[1]) / (width / height) - 1) <= ASPECT_TOLERANCE
    if not (same_aspect or have == original):
        uploaded = f" (uploaded at {_size(original)})" if original is not None and original != (width, height) else ""
        raise MaskError(f"The mask {name} is {_size(have)} but the picture is {_size((width, height))}{uploaded}: "
                        "their aspect ratios differ, so the mask cannot be laid on the picture. Use a mask of the "
                        "picture's size.")
    notes.append(f"mask resized from {_size(have)} to {_size((width, height))} (nearest)")
    return _resize_nearest(labels, (width, height))


# ---- scores ----------------------------------------------------------------------------------------


# ---- registry of the example scenes ----------------------------------------------------------------


def truth_path(picture: Image.Image, directory: Path) -> Path:
    """Where the truth of a picture with these pixels is stored: ``directory / '<image_digest>.npz'``."""
    return Path(directory) / f"{image_digest(picture)}.npz"


def save_scene_truth(scene, directory: Path) -> Path:
    """Store a scene's sentence texts and masks (bit-packed) under the digest of its picture."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    path = truth_path(scene.image, directory)
    masks = np.asarray(scene.sentence_masks(), dtype=bool)
    payload = {"version": np.int64(_REGISTRY_VERSION), "scene_id": np.array(str(scene.id)),
               "sentences": np.array(list(scene.sentence_texts), dtype=str),
               "shape": np.array(masks.shape, dtype=np.int64), "masks": np.packbits(masks, axis=-1)}
    with atomic_write(path, binary=True) as file:  # readers never see a half-written file
        np.savez_compressed(file, **payload)
    return path


def find_truth(picture: Image.Image, sentences: Sequence[str], directory: Path,
               size: tuple[int, int] | None = None, source: str | Path | None = None) -> Truth | None:
    """The stored truth of a picture with exactly these pixels, matched to ``sentences``; None if unknown.

    ``size`` (width, height) defaults to the picture's own; give it when the maps are drawn on a
    shrunk copy of the picture looked up. A damaged entry is logged and treated as unknown. A shipped example
    scene (``explorer.data.example_scenes``: listed beside ``source``, the picture's file, or known by its
    digest) is found on a fresh home folder too, and stored in ``directory`` for the next look-up.
    """
    path = truth_path(picture, directory)
    if not path.is_file():
        scene = known_example(picture, source)
        if scene is None:
            return None
        try:
            save_scene_truth(scene, directory)
        except OSError as error:  # a read-only home: the truth still comes from the example itself
            log.warning("could not store the truth of %s in %s: %s", scene.id, directory, error)
            return truth_from_scene(scene, sentences, size or picture.size)
    try:
        with np.load(path, allow_pickle=False) as data:
            shape = tuple(int(v) for v in data["shape"])
            texts = [str(t) for t in data["sentences"]]
            scene_id = str(data["scene_id"])
            if len(shape) != 3 or shape[0] != len(texts) or shape[1:] != (picture.height, picture.width):
                raise ValueError(f"masks of shape {shape} for {len(texts)} sentences of a "
                                 f"{picture.width}x{picture.height} picture")
            masks = np.unpackbits(data["masks"], axis=-1, count=shape[2]).astype(bool)
            if masks.shape != shape:
                raise ValueError(f"packed masks unpack to {masks.shape}, not {shape}")
    except Exception as error:  # noqa: BLE001 - a damaged registry entry is no truth, never a crash
        log.warning("ignoring unreadable ground truth %s: %s", path, error)
        return None
    return _truth_by_text(texts, masks, sentences, size or picture.size, f"synthetic scene {scene_id}")


def known_example(picture: Image.Image, source: str | Path | None = None):
    """The shipped example scene with these pixels (``explorer.data.example_scenes``), or None."""
    from explorer.data.example_scenes import example_scene

    return example_scene(picture, source)


def is_known_scene(picture: Image.Image, directory: Path, source: str | Path | None = None) -> bool:
    """Whether truth is stored for this picture or it is a shipped example scene: a picture of the synthetic
    world, even when none of its caption's sentences has truth (an edited caption)."""
    return truth_path(picture, directory).is_file() or known_example(picture, source) is not None


# ---- helpers ---------------------------------------------------------------------------------------


def _resize_nearest(array: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    """[H, W] -> [height, width] by nearest-neighbour sampling of pixel centres (any dtype)."""
    width, height = size
    rows = np.minimum(((np.arange(height) + 0.5) * array.shape[0] / height).astype(np.int64), array.shape[0] - 1)
    cols = np.minimum(((np.arange(width) + 0.5) * array.shape[1] / width).astype(np.int64), array.shape[1] - 1)
    return array[rows[:, None], cols[None, :]]


def _size(size) -> str:
    return f"{size[0]}x{size[1]}"


def _listing(values: Sequence[int], limit: int = 10) -> str:
    shown = ", ".join(str(v) for v in values[:limit])
    return shown if len(values) <= limit else f"{shown}, ... ({len(values)} in all)"


def _sentence_list(numbers: Sequence[int]) -> str:
    """'sentence 4 has' / 'sentences 2, 4 have' (1-based numbers)."""
    if len(numbers) == 1:
        return f"sentence {numbers[0]} has"
    return f"sentences {_listing(numbers)} have"
