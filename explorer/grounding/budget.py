"""Captions: sentences, and how a caption fits the 77- and 248-token contexts.

Long captions are read sentence by sentence (sub-captions): every grounding
view draws one map per sentence, and the token budget shows where a CLIP
(77) or Long-CLIP (248) text tower would cut the whole caption.
"""

from __future__ import annotations

from dataclasses import dataclass

from explorer.core.errors import CaptionError
from explorer.core.sentences import has_words, split_pieces, split_sentences  # noqa: F401 (re-exported)
from explorer.models.contexts import LONG_CONTEXT, SHORT_CONTEXT
from explorer.models.tokenizer import CLIP_TOKENS, TokenCounter

CONTEXTS = (SHORT_CONTEXT, LONG_CONTEXT)


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
    dropped: tuple[str, ...] = ()  # pieces between sentence ends with no word in them ("...", emoji)

    def fits(self, context: int) -> bool:
        return self.cut_at_char[context] is None

    @property
    def notes(self) -> list[str]:
        """What was done to the caption, for the user (empty when every piece became a sentence)."""
        return [dropped_note(self.dropped)] if self.dropped else []


def dropped_note(dropped) -> str:
    """The note for pieces of a caption left out because they hold no word."""
    shown = ", ".join(f'"{_excerpt(piece)}"' for piece in dropped)
    return (f"{len(dropped)} piece(s) of the caption with no letter or digit left out (not sentences, "
            f"no map drawn): {shown}")


def _excerpt(text: str, limit: int = 30) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit - 1] + "…"


def caption_pieces(caption: str) -> list[str]:
    """Every piece of the caption, wordless ones included; ``CaptionError`` if none holds a word."""
    if caption is None or not caption.strip():
        raise CaptionError("The caption is empty: type or paste at least one sentence.")
    pieces = split_pieces(caption)
    if not any(has_words(piece) for piece in pieces):
        raise CaptionError(f'The caption has no words: "{_excerpt(caption)}" is only punctuation or symbols. '
                           "Write at least one sentence with letters or digits.")
    return pieces


def caption_sentences(caption: str) -> list[str]:
    """The caption's sentences (pieces with no word left out); ``CaptionError`` if there is nothing to read."""
    return [piece for piece in caption_pieces(caption) if has_words(piece)]


def analyse_caption(caption: str, counter: TokenCounter = CLIP_TOKENS,
                    contexts: tuple[int, ...] = CONTEXTS) -> CaptionAnalysis:
    """Split and count with ``counter`` (a model's own tokenizer; CLIP's BPE by default) against
    each context; raise ``CaptionError`` if there is nothing to read."""
    budgets, dropped, position = [], [], 1  # position 0 is the start token
    for piece in caption_pieces(caption):
        n = counter.count(piece)
        words = n - counter.specials
        if has_words(piece):
            budgets.append(SentenceBudget(piece, n, position, position + words))
        else:
            dropped.append(piece)  # not a sentence, but its tokens are still in the whole caption
        position += words
    cuts = {context: counter.budget(caption, context).cut_at_char for context in contexts}
    return CaptionAnalysis(caption=caption, sentences=budgets, n_tokens=counter.count(caption), cut_at_char=cuts,
                           dropped=tuple(dropped))
