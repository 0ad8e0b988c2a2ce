"""Captions: sentences, and how a caption fits the 77- and 248-token contexts.

Long captions are read sentence by sentence (sub-captions): every grounding
view draws one map per sentence, and the token budget shows where a CLIP
(77) or Long-CLIP (248) text tower would cut the whole caption.
"""

from __future__ import annotations

from dataclasses import dataclass

from explorer.core.errors import CaptionError
from explorer.core.sentences import split_sentences
from explorer.models.tokenizer import budget, count_tokens

CONTEXTS = (77, 248)


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
