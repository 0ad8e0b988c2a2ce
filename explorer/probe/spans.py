"""A map for any span of a sentence's words ("the small red cube"), and the object a swapped word names.

A span's map is a sentence map of the span's text alone (``Model.sentence_maps``), so it is drawn, masked and
scored as a sentence's is; where the sentence has truth, the span is scored against that sentence's mask (a
span of an object's sentence names that object).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Sequence

import numpy as np

from explorer.evaluation.metrics.maps import score_maps
from explorer.models.map_kinds import GENERIC_MAP
from explorer.probe.swaps import as_picture
from explorer.probe.text import span_text, words
from explorer.probe.vocabulary import word_type

if TYPE_CHECKING:
    from explorer.models.model import Model


@dataclass(frozen=True)
class SpanMap:
    model: str
    text: str  # the span's words as written
    kind: str
    map: np.ndarray  # [H, W] at the working picture's size
    iou: float | None = None  # against the sentence's truth, where it has one
    pointing: bool | None = None


def span_maps(models: Sequence[Model], picture, sentence: str, first: int, last: int, kind: str = GENERIC_MAP,
              truth: np.ndarray | None = None) -> list[SpanMap]:
    """Each model's map of words ``first`` .. ``last`` (0-based, inclusive) of ``sentence``; with ``truth`` (the
    sentence's bool mask at the working picture's size), its Otsu-mask IoU and pointing hit."""
    text = span_text(sentence, first, last)
    image = as_picture(picture)
    found = []
    for model in models:
        values = model.sentence_maps(image, [text], kind=kind).maps[0]
        iou = hit = None
        if truth is not None:
            ious, hits = score_maps(values[None], np.asarray(truth, dtype=bool)[None])
            iou, hit = ious[0], hits[0]
        found.append(SpanMap(model=model.name, text=text, kind=kind, map=values, iou=iou, pointing=hit))
    return found


def named_object(sentences: Sequence[str], masks: Sequence[np.ndarray | None], replacement: str,
                 swapped: str, skip: int | None = None) -> int | None:
    """Which sentence's truth is the object a swapped sentence now names, or None: among the sentences (other
    than ``skip``, the one swapped) that have truth and say ``replacement`` as a word, the one sharing most
    typed words (colour, shape, ...) with the swapped sentence; ties go to the smallest mask (one object, not a
    relation's two)."""
    wanted = " ".join(replacement.casefold().split())
    said = {w.key for w in words(swapped) if word_type(w.key)}
    best, best_key = None, None
    for index, (text, mask) in enumerate(zip(sentences, masks)):
        if index == skip or mask is None or not mask.any():
            continue
        keys = [w.key for w in words(text)]
        if f" {wanted} " not in f" {' '.join(keys)} ":  # the word (or phrase) whole
            continue
        shared = len(said & {k for k in keys if word_type(k)})
        key = (-shared, int(mask.sum()))
        if best_key is None or key < best_key:
            best, best_key = index, key
    return best


__all__ = ["SpanMap", "named_object", "span_maps"]
