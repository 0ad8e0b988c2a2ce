"""A span of a sentence's words ("medium dotted blue cross") as an extra row of the maps board.

The span is mapped by every model of the drawn view as a sentence of its own (its board kind, on the same
working picture, from the features the board stored), and appended to the view as one more row: the board,
the scores table, the focus view and the exports then treat it as any sentence. Where the sentence it comes
from has truth, the span is scored against that sentence's mask (a span of an object's sentence names that
object), so the row carries the same IoU and pointing game.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from explorer.core.errors import InputError
from explorer.probe import find_word
from explorer.views.maps_view import MapsView, display_memo

MAX_ROWS = 60  # a view's rows, spans included (the page's sentence cap is lower)


def with_span_row(view: MapsView, load, number: int, span: str, dense_caption: str = "") -> MapsView:
    """``view`` with the words ``span`` of sentence ``number`` (from 1) as one more row, or ``InputError``."""
    from explorer.models.model import SentenceMaps

    if not 1 <= number <= len(view.sentences):
        raise InputError(f"sentence {number} is past the caption: it has {len(view.sentences)}")
    if len(view.sentences) >= MAX_ROWS:
        raise InputError(f"the board holds at most {MAX_ROWS} rows")
    sentence = view.sentences[number - 1]
    found = find_word(sentence, span)  # the words as they stand in the sentence, contiguous
    text = found.text
    models = []
    for shown in view.models:
        model = load(shown.name)
        dense = (dense_caption or " ".join(view.sentences)) if model.uses_dense_caption else None
        extra = model.sentence_maps(view.picture, [text], kind=shown.kind, dense_caption=dense)
        old = shown.result.maps
        maps = SentenceMaps(kind=old.kind, grid=np.concatenate([old.grid, extra.grid]),
                            sentences=[*old.sentences, text], n_cut=[*old.n_cut, *extra.n_cut], size=old.size)
        maps.precision = getattr(old, "precision", shown.precision)
        models.append(replace(shown, result=replace(shown.result, maps=maps), _memo=display_memo()))
    truth = view.truth
    if truth is not None:
        truth = replace(truth, masks=[*truth.masks, truth.masks[number - 1]])
    return replace(view, sentences=[*view.sentences, text], models=models, truth=truth, _memo=display_memo())


__all__ = ["MAX_ROWS", "with_span_row"]
