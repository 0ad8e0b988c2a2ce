"""What a model does not read of a dataset's captions: how many are cut at its context, and where.

A 77-token model sees the first ~60 words of a DOCCI description; a 248-token one sees most of it.
Retrieval numbers mean little without saying so, so every evaluation reports, per dataset and
model: how many captions were cut, how many tokens were lost, and where the cut fell (in which
sentence, and how much of the caption was still read). Counting uses the model's own tokenizer
(``Model.token_counter``: CLIP's BPE, SEPS's word pieces). A method that reads past its context
(CAFT's 77-token chunks) cuts nothing.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Sequence

import numpy as np

from explorer.core.sentences import split_sentences


@dataclass
class CutCaption:
    caption: int  # index in the dataset's captions
    tokens: int  # tokens the caption needs (special tokens included)
    lost: int  # tokens past the context
    sentence: int  # 1-based sentence in which the cut falls
    sentences: int  # sentences in the caption
    read_share: float  # share of the caption's characters before the cut


@dataclass
class TruncationReport:
    context_length: int
    captions: int
    cut: int
    reads_whole_caption: bool = False
    median_tokens: float = 0.0
    max_tokens: int = 0
    examples: list[CutCaption] = field(default_factory=list)  # every cut caption, in dataset order

    @property
    def share_cut(self) -> float:
        return self.cut / self.captions if self.captions else 0.0

    def summary(self) -> str:
        if self.reads_whole_caption:
            return (f"nothing cut: the method reads past {self.context_length} tokens in chunks "
                    f"(captions: median {self.median_tokens:.0f} tokens, longest {self.max_tokens})")
        if not self.cut:
            return (f"nothing cut at {self.context_length} tokens (captions: median {self.median_tokens:.0f} "
                    f"tokens, longest {self.max_tokens})")
        lost = np.array([c.lost for c in self.examples])
        read = np.array([c.read_share for c in self.examples])
        where = np.array([c.sentence for c in self.examples])
        return (f"{self.cut} of {self.captions} captions ({100 * self.share_cut:.1f}%) cut at {self.context_length} "
                f"tokens: median {np.median(lost):.0f} tokens lost, cut in sentence {np.median(where):.0f} "
                f"(median), {100 * np.median(read):.0f}% of the text read (median)")

    def as_dict(self, examples: int = 20) -> dict:
        """JSON-ready; ``examples``: how many cut captions to list (the first ones, in dataset order)."""
        out = {k: v for k, v in asdict(self).items() if k != "examples"}
        out.update(share_cut=self.share_cut, summary=self.summary(),
                   examples=[asdict(c) for c in self.examples[:examples]])
        return out


def truncation_report(model, captions: Sequence[str]) -> TruncationReport:
    """How ``model`` (anything with ``token_counter``, ``context_length``, ``reads_whole_caption``) reads
    ``captions``: which are cut at its context, how many tokens each loses, and where."""
    counter, limit = model.token_counter, int(model.context_length)
    whole = bool(getattr(model, "reads_whole_caption", False))
    counts, cut = [], []
    for index, caption in enumerate(captions):
        budget = counter.budget(caption, limit)
        counts.append(budget.n_tokens)
        if whole or budget.fits or budget.cut_at_char is None:
            continue
        sentences = split_sentences(caption) or [caption]
        cut.append(CutCaption(caption=index, tokens=budget.n_tokens, lost=budget.n_cut,
                              sentence=_sentence_at(caption, sentences, budget.cut_at_char),
                              sentences=len(sentences), read_share=budget.cut_at_char / max(1, len(caption))))
    return TruncationReport(context_length=limit, captions=len(counts), cut=len(cut), reads_whole_caption=whole,
                            median_tokens=float(np.median(counts)) if counts else 0.0,
                            max_tokens=max(counts, default=0), examples=cut)


def _sentence_at(caption: str, sentences: list[str], position: int) -> int:
    """1-based index of the sentence holding character ``position`` of ``caption``."""
    start = 0
    for number, sentence in enumerate(sentences, 1):
        found = caption.find(sentence, start)
        if found < 0:
            continue
        start = found + len(sentence)
        if position < start:
            return number
    return len(sentences)
