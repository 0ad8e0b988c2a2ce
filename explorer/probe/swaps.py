"""What one word changes: each model's own score of a sentence and of the sentence with one word swapped,
and how far its map moves.

    from explorer.probe import swap_scores
    record = swap_scores([model_a, model_b], "cat.png", "A small red cube sits on the left.", "red",
                         ["blue", "green"])          # None: every other word of the word's type
    record.models[0].swaps[0].margin                   # original score minus the swapped one

Scores are the method's own (``Model.similarity``, the score its retrieval ranks by) of the whole picture,
as its maps see it (``fit="squash"``; the same as the method's centre crop for a square picture), from the
features the maps board already stored in ``PICTURE_FEATURES``: a swap costs text forwards only. Maps are the board's (``Model.sentence_maps`` on the
working picture), which reuse the picture's features (or, for the explainers, the tower's trunk): a swapped
sentence's map costs its text forward and the explained blocks. Two maps are compared by the IoU of their
Otsu masks (``explorer.grounding.masks``) and the distance in pixels between their peaks.

A swap is "noticed" when the original sentence wins by more than ``margin`` (default 0: a tie is missed).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from typing import TYPE_CHECKING, Mapping, Sequence

import numpy as np
from PIL import Image

from explorer.grounding.masks import otsu_mask
from explorer.evaluation.metrics.maps import mask_iou
from explorer.grounding.sentence_maps import WorkingPicture, working_picture
from explorer.models.map_kinds import GENERIC_MAP
from explorer.probe.text import SwapError, find_word, swap_text
from explorer.probe.vocabulary import alternatives

if TYPE_CHECKING:
    from explorer.models.model import Model

MAX_SWAPS = 32  # swaps one request may ask for (the page's bound; a library caller may pass more)


@dataclass(frozen=True)
class MapShift:
    """How a sentence's map moved when one word was swapped."""

    iou: float  # IoU of the two Otsu masks (1: the same pixels; two empty masks count as 1)
    peak_shift_px: float  # distance between the two maps' peaks, in pixels of the working picture
    original_peak: tuple[int, int]  # (x, y)
    swapped_peak: tuple[int, int]


@dataclass(frozen=True)
class Swap:
    replacement: str
    text: str  # the swapped sentence
    score: float  # the method's own score of ``text`` against the picture
    margin: float  # original score minus ``score``: positive when the original wins
    noticed: bool  # margin > the record's margin setting
    map_iou: float | None = None  # None: maps were not asked for
    peak_shift_px: float | None = None


@dataclass(frozen=True)
class ModelSwaps:
    name: str
    original_score: float
    score_label: str  # what the scores are ("cosine", FLAIR's "logits"...)
    kind: str | None  # the map kind compared (None: no maps)
    swaps: tuple[Swap, ...]

    @property
    def noticed_share(self) -> float:
        return float(np.mean([s.noticed for s in self.swaps])) if self.swaps else float("nan")


@dataclass(frozen=True)
class SwapScores:
    """``swap_scores``' record: per model, per swap: score, margin, noticed, map IoU and peak shift."""

    sentence: str
    word: str  # as written in the sentence
    word_type: str | None  # colour, shape, size, material, texture, position, count; None: no known type
    margin: float  # the setting "noticed" compares with
    models: tuple[ModelSwaps, ...]

    @property
    def replacements(self) -> list[str]:
        return [s.replacement for s in self.models[0].swaps] if self.models else []

    def swapped_text(self, replacement: str) -> str:
        """The sentence with ``replacement`` swapped in (one of ``replacements``)."""
        return self.models[0].swaps[self.replacements.index(replacement)].text

    def to_json(self) -> dict:
        """``{"sentence", "word", "models": [{"name", "original_score", "swaps": [{"replacement", "text",
        "score", "margin", "noticed", "map_iou", "peak_shift_px"}]}]}`` and a few more fields."""
        return {"sentence": self.sentence, "word": self.word, "word_type": self.word_type, "margin": self.margin,
                "models": [{"name": m.name, "original_score": m.original_score, "score_label": m.score_label,
                            "kind": m.kind, "noticed_share": m.noticed_share,
                            "swaps": [asdict(s) for s in m.swaps]} for m in self.models]}


def with_margin(record: SwapScores, margin: float) -> SwapScores:
    """The same scores judged against another margin (no model runs): "noticed" is margin > ``margin``."""
    models = tuple(replace(m, swaps=tuple(replace(s, noticed=bool(s.margin > margin)) for s in m.swaps))
                   for m in record.models)
    return replace(record, margin=float(margin), models=models)


def plan_swaps(sentence: str, word: str, replacements: Sequence[str] | None = None,
               limit: int | None = MAX_SWAPS) -> tuple[str, str | None, list[tuple[str, str]]]:
    """(the word as written, its type, [(replacement, swapped sentence)]), or ``SwapError``: a word not in the
    sentence, an empty replacement or one equal to the word, no alternatives, more than ``limit`` swaps.
    ``replacements`` None: every other word of the word's type."""
    found = find_word(sentence, word)
    if replacements is None:
        replacements = alternatives(found.text)
        if not replacements:
            raise SwapError(f"{found.text!r} is not a word of a known type (colour, shape, size, material, texture, "
                            "position, count): give the replacements")
    replacements = list(replacements)
    if not replacements:
        raise SwapError("there is no replacement to swap in")
    if limit is not None and len(replacements) > limit:
        raise SwapError(f"{len(replacements)} swaps asked for; at most {limit} a request")
    swaps = [(" ".join(r.split()) if isinstance(r, str) else r, swap_text(sentence, found, r)) for r in replacements]
    return found.text, found.type, swaps


def swap_scores(models: Sequence[Model], picture, sentence: str, word: str,
                replacements: Sequence[str] | None = None, *, margin: float = 0.0,
                kind: str | Mapping[str, str] | None = GENERIC_MAP, limit: int | None = MAX_SWAPS) -> SwapScores:
    """Each model's own score of ``sentence`` and of it with ``word`` swapped for each replacement, against
    ``picture`` (a path, the working PIL picture, or a ``WorkingPicture``), and how far its map moves.

    ``replacements`` None: every other word of ``word``'s type. ``kind``: the map kind compared (one for all,
    or {model name: kind}); None: scores only (no maps). ``SwapError`` for a swap that cannot be made.
    """
    said, kind_of_word, swaps = plan_swaps(sentence, word, replacements, limit)
    image = as_picture(picture)
    texts = [text for _, text in swaps]
    results = []
    for model in models:
        scores = score_texts(model, image, [sentence, *texts])
        chosen = kind.get(model.name, GENERIC_MAP) if isinstance(kind, Mapping) else kind
        shifts = map_shifts(model, image, sentence, texts, chosen) if chosen is not None else [None] * len(texts)
        results.append(ModelSwaps(
            name=model.name, original_score=scores[0], score_label=model.score_label, kind=chosen,
            swaps=tuple(_swap(replacement, text, scores[0], score, margin, shift)
                        for (replacement, text), score, shift in zip(swaps, scores[1:], shifts))))
    return SwapScores(sentence=sentence, word=said, word_type=kind_of_word, margin=float(margin),
                      models=tuple(results))


def as_picture(picture) -> Image.Image:
    """The working picture of a path or upload (decoded and shrunk as the board's), or the picture given (a PIL
    image is taken as the working picture it is: the board's own)."""
    if isinstance(picture, WorkingPicture):
        return picture.image
    if isinstance(picture, Image.Image):
        return picture
    return working_picture(picture).image


def _swap(replacement: str, text: str, original: float, score: float, margin: float, shift: MapShift | None) -> Swap:
    difference = original - score
    return Swap(replacement=replacement, text=text, score=score, margin=difference,
                noticed=bool(difference > margin), map_iou=None if shift is None else shift.iou,
                peak_shift_px=None if shift is None else shift.peak_shift_px)


def score_texts(model: Model, picture, texts: Sequence[str], fit: str = "squash") -> list[float]:
    """The method's own score of each text against the picture (``Model.similarity`` on its stored features:
    the whole picture, as the maps see it, or ``fit="crop"``, as the method's retrieval reads it)."""
    features = model.picture_features(picture, fit=fit)
    return [float(v) for v in model.similarity(features, list(texts))[0]]


def sentence_maps(model: Model, picture, texts: Sequence[str], kind: str) -> np.ndarray:
    """[M, H, W] maps of ``texts`` at the picture's size (the board's maps of that kind)."""
    return model.sentence_maps(picture, list(texts), kind=kind).maps


def map_shifts(model: Model, picture, sentence: str, swapped: Sequence[str], kind: str) -> list[MapShift]:
    """How the map of ``sentence`` moves for each swapped text: one ``sentence_maps`` call for all of them."""
    maps = sentence_maps(model, picture, [sentence, *swapped], kind)
    return [compare_maps(maps[0], other) for other in maps[1:]]


def compare_maps(original: np.ndarray, swapped: np.ndarray) -> MapShift:
    """The IoU of two maps' Otsu masks and the distance between their peaks (pixels; first maximum)."""
    iou = mask_iou(otsu_mask(original)[0], otsu_mask(swapped)[0])
    first, second = peak(original), peak(swapped)
    return MapShift(iou=iou, peak_shift_px=float(np.hypot(first[0] - second[0], first[1] - second[1])),
                    original_peak=first, swapped_peak=second)


def peak(values: np.ndarray) -> tuple[int, int]:
    """(x, y) of a map's highest finite value (the first in reading order)."""
    array = np.where(np.isfinite(values), values, -np.inf)
    y, x = np.unravel_index(int(np.argmax(array)), array.shape)
    return int(x), int(y)


__all__ = ["MAX_SWAPS", "MapShift", "ModelSwaps", "Swap", "SwapScores", "as_picture", "compare_maps", "map_shifts", "peak",
           "plan_swaps", "score_texts", "sentence_maps", "swap_scores", "with_margin"]
