"""Region proposals for FLISM: YOLOS from a local directory, or Felzenszwalb segments.

FAST-GOAL's FLISM (explorer/grounding/flism.py) proposes detector boxes besides its
quadrants and centre box; the paper's detector is YOLOS. Nothing may be
downloaded, so YOLOS is used only when a local Hugging Face directory holding
one is configured (``load_detector(DIR)`` or ``EXPLORER_DETECTOR=DIR``).
Otherwise, or when that directory cannot be loaded, the proposals come from a
classical method that needs no weights: the boxes of Felzenszwalb-Huttenlocher
graph segments (scikit-image) at a few scales. ``load_detector`` never fails
on a bad directory; it falls back and returns a note saying why, for the UI.

Both detectors follow flism's ``Detector`` protocol: ``detector(image)`` ->
``list[Region]`` with source "detector" and boxes in pixels of that image.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import torch
from PIL import Image

from explorer.core.cache import GB, BoundedCache
from explorer.core.errors import ExplorerError
from explorer.core.files import read_json
from explorer.core.regions import Region, clip_box
from explorer.grounding.flism import Detector

DETECTOR_ENV = "EXPLORER_DETECTOR"  # a local Hugging Face directory with a YOLOS model
CLASSICAL = "felzenszwalb"  # the detector setting that names the classical proposals
_WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin",
                 "pytorch_model.bin.index.json")


class DetectorError(ExplorerError):
    """A detector directory is missing, incomplete, or holds something that is not YOLOS."""


# ---- Felzenszwalb segments ----------------------------------------------------------------------


class SegmentProposals:
    """Boxes of Felzenszwalb segments at several scales (scikit-image), deduplicated by NMS.

    A larger ``scale`` merges more, so the scales give small, middle and large
    parts. A segment is kept if it covers at least ``min_fraction`` of the
    image and its box at most ``max_fraction`` (a box as large as the image
    adds nothing to FLISM's quadrants and centre box). Score: the segment's
    share of the image times how much of its own box it fills, i.e. large,
    compact segments first; sprawling ones (a background wrapped around an
    object) rank lower. Greedy NMS at ``nms_iou`` removes the same part found
    at several scales; the ``max_boxes`` best remain, best first.
    """

    name = "Felzenszwalb segments (scikit-image)"

    def __init__(self, scales: Sequence[float] = (100, 300, 1000), sigma: float = 0.8,
                 min_fraction: float = 0.02, max_fraction: float = 0.9, max_boxes: int = 8,
                 working_side: int = 256, nms_iou: float = 0.7):
        if not scales or any(scale <= 0 for scale in scales):
            raise DetectorError(f"Felzenszwalb scales are positive numbers, got {tuple(scales)}")
        if not 0 <= min_fraction < max_fraction <= 1:
            raise DetectorError(f"need 0 <= min_fraction < max_fraction <= 1, got {min_fraction}, {max_fraction}")
        if max_boxes < 1 or working_side < 8 or not 0 < nms_iou <= 1 or sigma < 0:
            raise DetectorError("need max_boxes >= 1, working_side >= 8, 0 < nms_iou <= 1 and sigma >= 0")
        self.scales = tuple(float(scale) for scale in scales)
        self.sigma, self.min_fraction, self.max_fraction = float(sigma), float(min_fraction), float(max_fraction)
        self.max_boxes, self.working_side, self.nms_iou = int(max_boxes), int(working_side), float(nms_iou)

    def __call__(self, image: Image.Image) -> list[Region]:
        picture = image if image.mode == "RGB" else image.convert("RGB")
        width, height = picture.size
        small = _shrink(picture, self.working_side)  # segmentation cost grows with pixels; boxes do not need them
        pixels = np.asarray(small)
        boxes, scores, labels = [], [], []
        from skimage.segmentation import felzenszwalb  # on first use, not when the page starts

        for scale in self.scales:
            segments = felzenszwalb(pixels, scale=scale, sigma=self.sigma)
            for box, score in self._segment_boxes(segments):
                boxes.append(box)
                scores.append(score)
                labels.append(f"segment s={scale:g}")
        keep = _nms(np.array(boxes, dtype=np.float64).reshape(-1, 4), np.array(scores), self.nms_iou)
        sx, sy = width / small.width, height / small.height
        regions = []
        for index in keep[: self.max_boxes]:
            x0, y0, x1, y1 = boxes[index]
            box = clip_box((x0 * sx, y0 * sy, x1 * sx, y1 * sy), width, height)
            if box is not None:
                regions.append(Region(box, "detector", labels[index]))
        return regions

    def _segment_boxes(self, segments: np.ndarray) -> list[tuple[tuple[int, int, int, int], float]]:
        """(box (x0, y0, x1, y1), score) of each segment within the size limits."""
        from scipy import ndimage

        total = segments.size
        areas = np.bincount(segments.ravel())
        found = []
        for label, slices in enumerate(ndimage.find_objects(segments + 1)):  # find_objects skips label 0
            if slices is None:
                continue
            rows, cols = slices
            box_area = (rows.stop - rows.start) * (cols.stop - cols.start)
            share = areas[label] / total
            if share < self.min_fraction or box_area / total > self.max_fraction:
                continue
            fill = areas[label] / box_area
            found.append(((cols.start, rows.start, cols.stop, rows.stop), float(share * fill)))
        return found


def _shrink(picture: Image.Image, side: int) -> Image.Image:
    """A copy whose longer side is at most ``side`` (never enlarged)."""
    factor = side / max(picture.size)
    if factor >= 1:
        return picture
    size = (max(1, round(picture.width * factor)), max(1, round(picture.height * factor)))
    return picture.resize(size, Image.Resampling.BILINEAR)


def _nms(boxes: np.ndarray, scores: np.ndarray, iou_threshold: float) -> list[int]:
    """Greedy non-maximum suppression: indices kept, best score first (ties: earlier box first)."""
    order = list(np.argsort(-scores, kind="stable"))
    areas = (boxes[:, 2] - boxes[:, 0]) * (boxes[:, 3] - boxes[:, 1])
    keep: list[int] = []
    while order:
        best, rest = order[0], np.array(order[1:], dtype=int)
        keep.append(int(best))
        if rest.size == 0:
            break
        x0 = np.maximum(boxes[best, 0], boxes[rest, 0])
        y0 = np.maximum(boxes[best, 1], boxes[rest, 1])
        x1 = np.minimum(boxes[best, 2], boxes[rest, 2])
        y1 = np.minimum(boxes[best, 3], boxes[rest, 3])
        overlap = np.clip(x1 - x0, 0, None) * np.clip(y1 - y0, 0, None)
        iou = overlap / (areas[best] + areas[rest] - overlap)
        order = list(rest[iou <= iou_threshold])
    return keep


# ---- YOLOS --------------------------------------------------------------------------------------


class YolosDetector:
    """A YOLOS object detector read from a local Hugging Face directory (never the hub)."""

    def __init__(self, directory: str | os.PathLike, threshold: float = 0.5, max_boxes: int = 8,
                 device: str = "cpu"):
        if not 0 <= threshold < 1 or max_boxes < 1:
            raise DetectorError(f"need 0 <= threshold < 1 and max_boxes >= 1, got {threshold}, {max_boxes}")
        self.directory = Path(directory).expanduser().resolve()
        self.threshold, self.max_boxes, self.device = float(threshold), int(max_boxes), str(device)
        self.processor, self.model = LOADED_DETECTORS.get((str(self.directory), self.device),
                                                          lambda: load_yolos(str(self.directory), self.device))
        self.name = f"YOLOS ({self.directory.name})"

    def __call__(self, image: Image.Image) -> list[Region]:
        picture = image if image.mode == "RGB" else image.convert("RGB")
        width, height = picture.size
        inputs = self.processor(images=picture, return_tensors="pt").to(self.device)
        with torch.inference_mode():
            outputs = self.model(**inputs)
        found = self.processor.post_process_object_detection(
            outputs, threshold=self.threshold, target_sizes=[(height, width)])[0]
        scores, classes, boxes = (found[key].detach().cpu() for key in ("scores", "labels", "boxes"))
        regions = []
        for index in torch.argsort(scores, descending=True, stable=True).tolist():
            box = clip_box(boxes[index].tolist(), width, height)
            if box is None:  # wholly outside the picture
                continue
            label = f"{self._class_name(int(classes[index]))} {float(scores[index]):.2f}"
            regions.append(Region(box, "detector", label))
            if len(regions) == self.max_boxes:
                break
        return regions

    def _class_name(self, index: int) -> str:
        names = self.model.config.id2label or {}
        return str(names.get(index, names.get(str(index), f"class {index}")))


# The app asks per request; a detector is loaded once per (directory, device) and kept while used.
LOADED_DETECTORS = BoundedCache("YOLOS detectors", max_items=2, max_bytes=2 * GB)


def load_yolos(directory: str, device: str) -> tuple[Any, Any]:
    """(image processor, model) from ``directory``; DetectorError saying what is wrong otherwise."""
    _check_directory(Path(directory))
    from explorer.core.runtime import prepare_libraries

    prepare_libraries()  # before transformers: its image processors import torchvision
    from transformers import AutoImageProcessor, YolosForObjectDetection

    try:
        processor = AutoImageProcessor.from_pretrained(directory, local_files_only=True)
        model = YolosForObjectDetection.from_pretrained(directory, local_files_only=True)
        model = model.eval().to(device)
    except Exception as error:  # transformers raises many kinds; all mean "this directory does not load"
        reason = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise DetectorError(f"cannot load YOLOS from {directory}: {reason}") from error
    if not hasattr(processor, "post_process_object_detection"):
        raise DetectorError(f"cannot load YOLOS from {directory}: its image processor "
                            f"({type(processor).__name__}) does not post-process detections")
    return processor, model


def _check_directory(directory: Path) -> None:
    """The cheap checks, with plain messages, before transformers is imported at all."""
    where = f"detector directory {directory}"
    if not directory.is_dir():
        raise DetectorError(f"{where} does not exist" if not directory.exists() else f"{where} is not a folder")
    config_file = directory / "config.json"
    if not config_file.is_file():
        raise DetectorError(f"{where} has no config.json")
    config = read_json(config_file, DetectorError, where=where)
    model_type = config.get("model_type") if isinstance(config, dict) else None
    if model_type != "yolos":
        raise DetectorError(f"{where}: config.json describes model_type {model_type!r}, not 'yolos'")
    if not any((directory / name).is_file() for name in _WEIGHT_FILES):
        raise DetectorError(f"{where} has no weights (none of {', '.join(_WEIGHT_FILES)})")
    if not (directory / "preprocessor_config.json").is_file():
        raise DetectorError(f"{where} has no preprocessor_config.json (the image processor's settings)")


# ---- choosing one -------------------------------------------------------------------------------


def detector_setting(directory: str | os.PathLike | None = None) -> str:
    """What a saved figure should record: the YOLOS directory in use (absolute), or ``CLASSICAL``.

    An empty setting means "$EXPLORER_DETECTOR if set"; resolving it when the settings are made
    keeps a figure's regions the same wherever it is regenerated.
    """
    if directory is None or not str(directory).strip():
        directory = os.environ.get(DETECTOR_ENV, "")
    directory = str(directory).strip()
    if not directory or directory == CLASSICAL:
        return CLASSICAL
    return str(Path(directory).expanduser().resolve())


def load_detector(directory: str | os.PathLike | None = None, **options) -> tuple[Detector, list[str]]:
    """(detector, notes): YOLOS from ``directory`` (default: $EXPLORER_DETECTOR), else segment proposals.

    ``options`` go to ``YolosDetector`` (threshold, max_boxes, device); the
    fallback takes only ``max_boxes``. A directory that does not load never
    raises here: the fallback is returned with a note that says why.
    """
    if directory is None:
        directory = os.environ.get(DETECTOR_ENV)
    fallback = SegmentProposals(**{key: options[key] for key in ("max_boxes",) if key in options})
    if str(directory).strip() == CLASSICAL:  # asked for by name (saved settings say exactly what they used)
        return fallback, [f"detector boxes: {fallback.name}"]
    if directory is None or not str(directory).strip():
        return fallback, [f"no detector configured (set {DETECTOR_ENV}=DIR for YOLOS): using {fallback.name}"]
    try:
        detector = YolosDetector(directory, **options)
    except DetectorError as error:
        return fallback, [f"{error}; using {fallback.name} instead"]
    return detector, [f"detector: YOLOS from {detector.directory}"]


__all__ = ["CLASSICAL", "DETECTOR_ENV", "DetectorError", "detector_setting", "SegmentProposals", "YolosDetector", "load_detector"]
