"""How well each generated picture matches the long caption, whole and sentence by sentence.

A chosen long-text model from the zoo scores every picture against the whole caption and
against each of its sentences, with the model's own score (the same sentence scores the
Grounding tab draws maps for). Scores of one model compare across pictures, not across
models, so for each sentence the question answered is which picture satisfies it best; and
sentences that start past token 77 are flagged, because stock SDXL never read them.
"""

from __future__ import annotations

from dataclasses import dataclass

from explorer.generation.generate import GenerationResult
from explorer.grounding.budget import analyse_caption
from explorer.models.nn.positional import SHORT_CONTEXT


@dataclass
class CaptionMatch:
    scorer: str  # "<model> (<score kind>)"
    keys: list[tuple[str, int]]  # (column, seed) per picture, in order
    whole: list[float]  # per picture: score against the whole caption
    sentences: list[str]
    past_stock_cut: list[bool]  # per sentence: stock SDXL's 77 tokens end before it ends
    per_sentence: list[list[float]]  # [picture][sentence]

    def best_picture(self, seed: int) -> list[str]:
        """Per sentence, the column whose picture (of this seed) scores it highest."""
        rows = [i for i, (_, s) in enumerate(self.keys) if s == seed]
        return [self.keys[max(rows, key=lambda i: self.per_sentence[i][j])][0] for j in range(len(self.sentences))]

    def wins(self, seed: int) -> dict[str, int]:
        """Per column: how many sentences its picture of this seed satisfies best."""
        counts = {column: 0 for column, s in self.keys if s == seed}
        for column in self.best_picture(seed):
            counts[column] += 1
        return counts

    def to_json(self) -> dict:
        return {"scorer": self.scorer, "sentences": self.sentences, "past_stock_cut": self.past_stock_cut,
                "pictures": [{"column": c, "seed": s, "whole": round(w, 5), "per_sentence": [round(v, 5) for v in p]}
                             for (c, s), w, p in zip(self.keys, self.whole, self.per_sentence)]}


def score_pictures(model, result: GenerationResult) -> CaptionMatch:
    """Score every picture of ``result`` with ``model`` (an explorer ``Model``)."""
    caption = result.settings.prompt
    analysis = analyse_caption(caption)  # CLIP's BPE: where stock SDXL's tokenizers cut
    sentences = [budget.text for budget in analysis.sentences]
    images = [picture.image for picture in result.pictures]
    scores = model.similarity(images, [caption, *sentences])  # [pictures, 1 + sentences]
    return CaptionMatch(
        scorer=f"{model.name} ({model.score_label})", keys=[(p.column, p.seed) for p in result.pictures],
        whole=scores[:, 0].tolist(), sentences=sentences,
        past_stock_cut=[not budget.fits_whole_caption(SHORT_CONTEXT) for budget in analysis.sentences],
        per_sentence=scores[:, 1:].tolist())
