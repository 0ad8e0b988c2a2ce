"""A span of a sentence's words ("medium dotted blue cross") as an extra row of the maps board.

The span is mapped by every model of the drawn view as a sentence of its own (its board kind, on the same
working picture, from the features the board stored), and appended to the view as a span row
(``MapsView.span_of``): the board, the scores table and the focus view show it with its own scores, while the
per-model figures, the status line and the notes count the caption's sentences only. An export's settings record
the spans (``ViewSettings.spans``), so a replay draws the page's rows. Where the sentence it comes from has
truth, the span is scored against that sentence's mask (a span of an object's sentence names that object).
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

import numpy as np

from explorer.core.errors import InputError
from explorer.probe import find_word

if TYPE_CHECKING:  # maps_view draws the spans a replay asks for (``with_spans``): a copy's memo is its own
    from explorer.views.maps_view import MapsView

MAX_ROWS = 60  # a view's rows, spans included (the page's sentence cap is lower)


def with_span_row(view: MapsView, load, number: int, span: str, dense_caption: str = "") -> MapsView:
    """``view`` with the words ``span`` of sentence ``number`` (from 1) as one more row, or ``InputError``. The
    row is a span (``MapsView.span_of``): it has its own scores, and the per-model figures leave it out."""
    from explorer.models.model import SentenceMaps

    if isinstance(number, bool) or not isinstance(number, int) or not 1 <= number <= view.n_sentences:
        raise InputError(f"sentence {number!r} is past the caption: it has {view.n_sentences} sentence(s), "
                         "numbered from 1")
    if len(view.sentences) >= MAX_ROWS:
        raise InputError(f"the board holds at most {MAX_ROWS} rows")
    sentence = view.sentences[number - 1]
    found = find_word(sentence, span)  # the words as they stand in the sentence, contiguous
    text = found.text
    models = []
    for shown in view.models:
        model = load(shown.name)
        dense = (dense_caption or " ".join(view.sentences[:view.n_sentences])) if model.uses_dense_caption else None
        extra = model.sentence_maps(view.picture, [text], kind=shown.kind, dense_caption=dense)
        old = shown.result.maps
        maps = SentenceMaps(kind=old.kind, grid=np.concatenate([old.grid, extra.grid]),
                            sentences=[*old.sentences, text], n_cut=[*old.n_cut, *extra.n_cut], size=old.size)
        maps.precision = getattr(old, "precision", shown.precision)
        models.append(replace(shown, result=replace(shown.result, maps=maps)))
    truth = view.truth
    if truth is not None:
        truth = replace(truth, masks=[*truth.masks, truth.masks[number - 1]])
    return replace(view, sentences=[*view.sentences, text], models=models, truth=truth,
                   span_of=[*view.span_of, number])


def with_spans(view: MapsView, load, spans, dense_caption: str = "") -> MapsView:
    """``view`` with every span of a settings file (``ViewSettings.spans``: ``{"sentence", "words"}``) as its row,
    in order: what a replay of an export draws, the page's rows exactly."""
    for span in spans:
        view = with_span_row(view, load, span["sentence"], span["words"], dense_caption)
    return view


def span_entries(view: MapsView) -> list[dict]:
    """The view's span rows as ``ViewSettings.spans`` records them (the words as they stand in the sentence)."""
    return [{"sentence": number, "words": view.sentences[view.n_sentences + k]}
            for k, number in enumerate(view.span_of)]


__all__ = ["MAX_ROWS", "span_entries", "with_span_row", "with_spans"]
