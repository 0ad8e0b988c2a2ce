"""Captions: sentences, and how a caption fits the 77- and 248-token contexts.

Long captions are read sentence by sentence (sub-captions): every grounding
view draws one map per sentence, and the token budget shows where a CLIP
(77) or Long-CLIP (248) text tower would cut the whole caption.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from .errors import CaptionError
from .models.tokenizer import budget, count_tokens

CONTEXTS = (77, 248)
# A sentence ends at . ! ? (optionally followed by closing quotes/brackets) before white space,
# or at a blank line. Decimal numbers ("2.5 m") are not ends; closing quotes stay with their sentence.
_BOUNDARY = re.compile(r"(?<=[.!?])([\"')\]]*)\s+(?=[\"'(\[]?[A-Z0-9])|\n\s*\n")
_ABBREVIATIONS = ("e.g.", "i.e.", "etc.", "vs.", "mr.", "mrs.", "dr.", "st.", "no.")


_FALLBACK = re.compile(r"\s*(?:\n|;)\s*")  # line breaks and semicolons, for captions without . ! ?


def split_sentences(caption: str) -> list[str]:
    """Sentences of a caption, in order, stripped; empty pieces dropped.

    A caption with no sentence punctuation at all (a list of phrases, one per line, or joined
    by semicolons) is split at its line breaks and semicolons instead.
    """
    if not re.search(r"[.!?]", caption):
        return [piece for piece in (p.strip() for p in _FALLBACK.split(caption)) if piece]
    pieces, start = [], 0
    for match in _BOUNDARY.finditer(caption):
        end = match.end(1) if match.group(1) is not None else match.start()
        candidate = caption[start:end].strip()
        if candidate.lower().endswith(_ABBREVIATIONS):
            continue  # "e.g. A ..." is not a sentence end
        pieces.append(candidate)
        start = match.end()
    pieces.append(caption[start:].strip())
    return [p for p in pieces if p]


@dataclass(frozen=True)
class SentenceBudget:
    text: str
    n_tokens: int  # tokens of the sentence on its own (SOT and EOT included)
    start_token: int  # where its words start inside the whole caption's token sequence
    end_token: int  # one past its last word inside the whole caption

    def fits_whole_caption(self, context: int) -> bool:
        """Whether the whole caption, encoded at once, still holds every word of this sentence."""
        return self.end_token <= context - 1  # the last slot is EOT


@dataclass(frozen=True)
class CaptionAnalysis:
    caption: str
    sentences: list[SentenceBudget]
    n_tokens: int  # the whole caption, SOT and EOT included
    cut_at_char: dict[int, int | None]  # context -> first character dropped (None: it fits)

    def fits(self, context: int) -> bool:
        return self.cut_at_char[context] is None


def analyse_caption(caption: str) -> CaptionAnalysis:
    """Split and count; raise ``CaptionError`` if there is nothing to read."""
    if caption is None or not caption.strip():
        raise CaptionError("The caption is empty: type or paste at least one sentence.")
    sentences = split_sentences(caption)
    budgets, position = [], 1  # position 0 is SOT
    for sentence in sentences:
        n = count_tokens(sentence)
        words = n - 2
        budgets.append(SentenceBudget(sentence, n, position, position + words))
        position += words
    whole = budget(caption, CONTEXTS[0])
    cuts = {context: budget(caption, context).cut_at_char for context in CONTEXTS}
    return CaptionAnalysis(caption=caption, sentences=budgets, n_tokens=whole.n_tokens, cut_at_char=cuts)
