"""CLIP BPE tokenization at 77 or 248 tokens, honest about what it cuts.

Truncation follows OpenAI/Long-CLIP: keep the first ``context_length``
ids and overwrite the last kept one with EOT, so the pooled token is
always an EOT. Every call reports how many tokens were dropped, and
``budget`` says at which character of the text the cut falls, so the UI
can show it.

BPE's cost grows with the square of a word's length (a 20,000-letter word
took 5.8 s to count), so a run of more than ``LONG_RUN`` characters without
a space is read in pieces of ``LONG_RUN``: no real word is that long, and a
visitor's text cannot hold a core for minutes. open_clip's per-word BPE
cache is bounded (``BPE_CACHE_WORDS``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # counting tokens (the page's budget) needs no torch; ``tokenize`` imports it
    import torch


@lru_cache(maxsize=1)
def _bpe():
    # Reading the BPE merges takes ~0.3 s: do it once per process. open_clip (with torchvision, ~3 s)
    # is imported here, on the first caption, not when the page starts.
    from explorer.core.runtime import prepared_import

    tokenizer = prepared_import("open_clip.tokenizer").SimpleTokenizer()
    tokenizer.cache = BoundedCache(tokenizer.cache, BPE_CACHE_WORDS)  # open_clip's grows with every new word
    return tokenizer


LONG_RUN = 32  # characters without a space read as one BPE word; longer runs are read in pieces this long
BPE_CACHE_WORDS = 2**16
_LONG_RUN = re.compile(r"\S{%d,}" % (LONG_RUN + 1))


class BoundedCache(dict):
    """open_clip's word -> BPE cache with at most ``limit`` words: past it, the words it learned are
    forgotten (the special tokens it was built with stay)."""

    def __init__(self, initial: dict, limit: int):
        super().__init__(initial)
        self.kept, self.limit = dict(initial), limit

    def __setitem__(self, key, value):
        if len(self) >= self.limit:
            self.clear()
            self.update(self.kept)
        super().__setitem__(key, value)


def _pieces(text: str) -> str:
    """``text`` with every run of more than ``LONG_RUN`` non-space characters split into pieces of it."""
    return _LONG_RUN.sub(lambda m: " ".join(m.group()[i:i + LONG_RUN] for i in range(0, len(m.group()), LONG_RUN)),
                         text)


def encode(text: str) -> list[int]:
    """CLIP's BPE ids of ``text`` (no special tokens), long runs in pieces (see the module's note)."""
    return _bpe().encode(_pieces(text))


def bpe_tables() -> tuple[dict[str, int], list[tuple[str, str]]]:
    """CLIP's vocabulary (token -> id) and its merges in rank order, as open_clip ships them."""
    bpe = _bpe()
    merges = sorted(bpe.bpe_ranks, key=bpe.bpe_ranks.get)
    return dict(bpe.encoder), merges


SOT_ID = 49406
EOT_ID = 49407
SPECIAL_TOKENS = 2  # start-of-text and end-of-text
_WORD = re.compile(r"\S+")


@dataclass(frozen=True)
class TokenBatch:
    ids: torch.Tensor  # [B, context_length], 0-padded
    n_tokens: list[int]  # tokens each text needs, SOT and EOT included
    n_cut: list[int]  # tokens dropped from each text (0 when it fits)

    @property
    def any_cut(self) -> bool:
        return any(self.n_cut)

    def unpadded(self) -> "TokenBatch":
        """The batch with its ids cut after its longest text (``explorer.models.unpadded``): what every text
        forward reads, so it costs the longest text, not the context. Counts and cuts stay as they were."""
        import torch

        from explorer.models.unpadded import unpadded

        kept = torch.as_tensor([min(n, self.ids.shape[1]) for n in self.n_tokens], dtype=torch.long)
        real = torch.arange(self.ids.shape[1])[None, :] < kept[:, None]
        return TokenBatch(ids=unpadded(self.ids, real), n_tokens=self.n_tokens, n_cut=self.n_cut)


@dataclass(frozen=True)
class TokenBudget:
    """How a text fits a context: the count and, if it does not fit, where it is cut."""

    n_tokens: int  # SOT and EOT included
    limit: int
    cut_at_char: int | None  # index in the text of the first character that is dropped

    @property
    def fits(self) -> bool:
        return self.n_tokens <= self.limit

    @property
    def n_cut(self) -> int:
        return max(0, self.n_tokens - self.limit)


class TokenCounter:
    """How many tokens texts take in one tokenizer, and where a context cuts them.

    Both tokenizers here (CLIP's BPE, BERT's word pieces) never merge across white space, so a
    text's count is the sum of its white-space separated words' counts plus the special tokens;
    walking the words finds the first one that no longer fits. A method whose tokenizer is not
    CLIP's gives its own counter (``Method.token_counter``).
    """

    name = "CLIP BPE"
    specials = SPECIAL_TOKENS  # start-of-text and end-of-text

    def word_tokens(self, word: str) -> int:
        return len(encode(word))

    def count(self, text: str) -> int:
        """Tokens the whole text takes, special tokens included."""
        return sum(self.word_tokens(m.group()) for m in _WORD.finditer(text)) + self.specials

    def budget(self, text: str, limit: int) -> TokenBudget:
        """Count the text's tokens against ``limit`` and find where truncation would cut."""
        room = limit - self.specials
        used, cut_at = 0, None
        for match in _WORD.finditer(text):
            used += self.word_tokens(match.group())
            if cut_at is None and used > room:
                cut_at = match.start()
        return TokenBudget(n_tokens=used + self.specials, limit=limit, cut_at_char=cut_at)


class ClipTokenCounter(TokenCounter):
    def count(self, text: str) -> int:
        return len(encode(text)) + self.specials  # one call: the same sum, less Python per word

    def word_tokens(self, word: str) -> int:
        if len(word) > CACHED_WORD_CHARS:  # a run of characters a visitor typed is counted, not kept
            return super().word_tokens(word)
        return _clip_word_tokens(word)


CACHED_WORD_CHARS = 64  # 2**16 remembered words of at most 64 characters: a few MB at most


@lru_cache(maxsize=2**16)
def _clip_word_tokens(word: str) -> int:
    """A word's CLIP tokens, remembered: captions repeat their words, and each encode cleans the word with
    ftfy first (a retrieval set's truncation report walked 46,000 words of 560 captions in 8 s)."""
    return len(encode(word))


CLIP_TOKENS = ClipTokenCounter()


def count_tokens(text: str) -> int:
    """Tokens the text takes in a CLIP context, SOT and EOT included."""
    return len(encode(text)) + SPECIAL_TOKENS


def tokenize(texts: list[str], context_length: int) -> TokenBatch:
    import torch

    ids = torch.zeros(len(texts), context_length, dtype=torch.long)
    n_tokens, n_cut = [], []
    for row, text in enumerate(texts):
        tokens = [SOT_ID, *encode(text), EOT_ID]
        n_tokens.append(len(tokens))
        n_cut.append(max(0, len(tokens) - context_length))
        if len(tokens) > context_length:
            tokens = tokens[:context_length]
            tokens[-1] = EOT_ID
        ids[row, : len(tokens)] = torch.tensor(tokens)
    return TokenBatch(ids=ids, n_tokens=n_tokens, n_cut=n_cut)



def budget(text: str, limit: int) -> TokenBudget:
    """How ``text`` fits ``limit`` CLIP tokens (``TokenCounter.budget``)."""
    return CLIP_TOKENS.budget(text, limit)
