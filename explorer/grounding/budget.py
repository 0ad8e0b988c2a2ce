"""Captions: sentences, and how a caption fits the 77- and 248-token contexts.

Long captions are read sentence by sentence (sub-captions): every grounding
view draws one map per sentence, and the token budget shows where a CLIP
(77) or Long-CLIP (248) text tower would cut the whole caption.
"""

from __future__ import annotations

from dataclasses import dataclass

from explorer.core.errors import CaptionError
from explorer.core.sentences import split_sentences
from explorer.models.tokenizer import CLIP_TOKENS, TokenCounter

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


def caption_sentences(caption: str) -> list[str]:
    """The caption's sentences; ``CaptionError`` if there is nothing to read."""
    if caption is None or not caption.strip():
        raise CaptionError("The caption is empty: type or paste at least one sentence.")
    return split_sentences(caption)


def analyse_caption(caption: str, counter: TokenCounter = CLIP_TOKENS,
                    contexts: tuple[int, ...] = CONTEXTS) -> CaptionAnalysis:
    """Split and count with ``counter`` (a model's own tokenizer; CLIP's BPE by default) against
    each context; raise ``CaptionError`` if there is nothing to read."""
    sentences = caption_sentences(caption)
    budgets, position = [], 1  # position 0 is the start token
    for sentence in sentences:
        n = counter.count(sentence)
        words = n - counter.specials
        budgets.append(SentenceBudget(sentence, n, position, position + words))
        position += words
    cuts = {context: counter.budget(caption, context).cut_at_char for context in contexts}
    return CaptionAnalysis(caption=caption, sentences=budgets, n_tokens=counter.count(caption), cut_at_char=cuts)
