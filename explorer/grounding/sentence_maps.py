"""Grounding: per-sentence maps of a caption over an image, cached.

The UI and the CLI both call ``ground``. Its result holds the maps at the
working picture's resolution, so re-colouring or changing the opacity only
re-renders (render.py); the model runs once per (model, image, sentences,
map kind), and the cache keeps the last few results.
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from dataclasses import dataclass, field

from PIL import Image

from explorer.core.images import load_image
from explorer.grounding.budget import CaptionAnalysis, analyse_caption
from explorer.models.methods.base import GENERIC_MAP
from explorer.models.model import Model, SentenceMaps

WORKING_SIDE = 768  # maps are computed at most this large: enough to see, cheap to upsample


@dataclass
class GroundingResult:
    image: Image.Image  # the working picture the maps are drawn on
    analysis: CaptionAnalysis
    maps: SentenceMaps
    model_name: str
    notes: list[str] = field(default_factory=list)  # what happened to the inputs, for the user


class MapCache:
    """Least-recently-used results, keyed by model, picture content, sentences and map kind.

    Shared by every session of the app, so the bookkeeping is locked; the computation runs
    outside the lock (two sessions asking for the same new key may both compute it once).
    """

    def __init__(self, capacity: int = 32):
        self.capacity = capacity
        self._items: OrderedDict[tuple, object] = OrderedDict()
        self._lock = threading.Lock()
        self.hits = self.misses = 0

    def get(self, key: tuple, compute):
        with self._lock:
            if key in self._items:
                self.hits += 1
                self._items.move_to_end(key)
                return self._items[key]
            self.misses += 1
        value = compute()
        with self._lock:
            self._items[key] = value
            self._items.move_to_end(key)
            while len(self._items) > self.capacity:
                self._items.popitem(last=False)
        return value


def image_digest(image: Image.Image) -> str:
    return hashlib.blake2b(image.tobytes(), digest_size=16).hexdigest() + f"-{image.width}x{image.height}"


def prepare_image(source, working_side: int = WORKING_SIDE):
    """Load any image input and shrink it to the working size; returns (picture, notes)."""
    loaded = load_image(source)
    picture, notes = loaded.image, list(loaded.notes)
    if max(picture.size) > working_side:
        picture = picture.copy()
        picture.thumbnail((working_side, working_side), Image.BICUBIC)
    return picture, notes


def ground(model: Model, image, caption: str, kind: str = GENERIC_MAP, cache: MapCache | None = None,
           working_side: int = WORKING_SIDE, dense_caption: str | None = None) -> GroundingResult:
    """Split the caption, and draw one map per sentence of the chosen kind.

    ``dense_caption`` goes to methods that read one (SEPS); when they get none, the long
    caption stands in for it, and the notes say so.
    """
    analysis = analyse_caption(caption)
    picture, notes = prepare_image(image, working_side)
    sentences = [s.text for s in analysis.sentences]
    if kind not in model.map_kinds:
        raise ValueError(f"{model.name} offers the maps {', '.join(model.map_kinds)}, not {kind!r}.")

    dense = None
    if model.uses_dense_caption:
        dense = (dense_caption or "").strip() or caption
        if not (dense_caption or "").strip():
            notes.append(f"{model.title} reads a dense caption; none was given, so the long caption stands in for it")

    def compute() -> SentenceMaps:
        return model.sentence_maps(picture, sentences, kind=kind, dense_caption=dense)

    key = (model.name, id(model), image_digest(picture), tuple(sentences), kind, dense)
    maps = cache.get(key, compute) if cache is not None else compute()
    if len(sentences) == 1:
        notes.append("one sentence: one map (split the caption with . ! ? to compare sentences)")
    cut = [i + 1 for i, n in enumerate(maps.n_cut) if n]
    if cut:
        notes.append(f"sentence(s) {', '.join(map(str, cut))} exceed {model.context_length} tokens "
                     "on their own and were truncated")
    if not model.trained:
        notes.append(f"{model.name} is UNTRAINED (random weights): its maps mean nothing")
    return GroundingResult(image=picture, analysis=analysis, maps=maps, model_name=model.name, notes=notes)
