"""The swap probe over a synthetic world: every scene through every swap type, and the hard-negative test again.

``world_rates``: for each scene and each type the world writes (colour, shape, size, texture, position,
count), the first sentence with a word of that type has it swapped for every other word of the type in the
world's own vocabulary; each model's share "noticed" per type (its own score of the sentence against the
scene's picture beats the swapped one by more than the margin).

``eval_negatives``: exactly the negatives of ``explorer eval``'s hard-negative test (``evaluation.runner``):
one swap per attribute, the scene's own (its seed drew the object, the attribute's new value and where it
stands: ``Scene.hard_negatives``), made here as swaps of the long caption at the recorded place, kept where
the model reads them apart from the caption (``in_reach``), scored with the method's own score on the
pictures as eval encodes them; a tie is a miss. Its accuracy per attribute is eval's
``hard_negative_acc/<attribute>``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Sequence

import numpy as np

from explorer.core.errors import ExplorerError
from explorer.evaluation.runner import encode_images, in_reach
from explorer.probe.text import find_word, swap_text, swappable
from explorer.probe.vocabulary import WORLD_WORDS

if TYPE_CHECKING:
    from explorer.models.model import Model

WORLD_TYPES = tuple(WORLD_WORDS)


@dataclass
class Rates:
    """Per model and type: (noticed, swaps) counts."""

    types: tuple[str, ...]
    counts: dict[str, dict[str, list[int]]] = field(default_factory=dict)  # model -> type -> [noticed, total]

    def add(self, model: str, kind: str, noticed: bool) -> None:
        cell = self.counts.setdefault(model, {t: [0, 0] for t in self.types}).setdefault(kind, [0, 0])
        cell[0] += int(noticed)
        cell[1] += 1

    def rate(self, model: str, kind: str) -> float | None:
        noticed, total = self.counts.get(model, {}).get(kind, [0, 0])
        return noticed / total if total else None

    def to_json(self) -> dict:
        return {model: {kind: {"noticed": n, "swaps": total, "rate": (n / total if total else None)}
                        for kind, (n, total) in cells.items()} for model, cells in self.counts.items()}

    def table(self) -> str:
        """A Markdown table: a row per model, a column per type, the share noticed (and of how many)."""
        head = "| model | " + " | ".join(self.types) + " |\n|---|" + "---|" * len(self.types) + "\n"
        rows = []
        for model, cells in self.counts.items():
            values = [f"{100 * n / total:.1f}% ({total})" if total else "–"
                      for n, total in (cells.get(t, [0, 0]) for t in self.types)]
            rows.append(f"| {model} | " + " | ".join(values) + " |")
        return head + "\n".join(rows) + "\n"


def world_swaps(scene, kind: str) -> list[tuple[str, str]]:
    """The swaps of ``kind`` for one scene: [(original sentence, swapped sentence)], from the first sentence
    with a word of that type, through every other word of the type in the world's vocabulary."""
    for sentence in scene.sentence_texts:
        for word in swappable(sentence):
            if word.type == kind and word.key in WORLD_WORDS[kind]:
                return [(sentence, swap_text(sentence, word, other)) for other in WORLD_WORDS[kind]
                        if other != word.key]
    return []


def world_rates(models: Sequence[Model], scenes: Sequence, types: Sequence[str] = WORLD_TYPES,
                margin: float = 0.0, batch: int = 32) -> Rates:
    """Each model's share of swaps noticed, per type, over ``scenes`` (see the module docstring)."""
    unknown = [t for t in types if t not in WORLD_WORDS]
    if unknown:
        raise ExplorerError(f"the synthetic world swaps {', '.join(WORLD_TYPES)}, not {', '.join(unknown)}")
    if not scenes:
        raise ExplorerError("there are no scenes to probe: check the world's folder and its split")
    rates = Rates(tuple(types))
    plans = [{kind: world_swaps(scene, kind) for kind in types} for scene in scenes]
    for model in models:
        features = encode_images(model, [s.image for s in scenes], batch)
        for index, plan in enumerate(plans):
            for kind, swaps in plan.items():
                if not swaps:
                    continue
                scores = model.similarity(features[index:index + 1], [swaps[0][0], *(t for _, t in swaps)])[0]
                for score in scores[1:]:
                    rates.add(model.name, kind, float(scores[0]) - float(score) > margin)
    return rates


def negative_swap(scene, negative) -> str:
    """One hard negative made as a swap: the long caption with ``negative.original`` swapped for its
    replacement at the recorded place (the word is found whole there; the article is left as the test left
    it). Checked against the stored negative: the two must be the same text."""
    head, tail = scene.long_caption[:negative.start], scene.long_caption[negative.start:]
    word = find_word(tail, negative.original)
    if word.start != 0:
        raise ExplorerError(f"scene {scene.id}: the hard negative's word {negative.original!r} is not at its place")
    made = head + swap_text(tail, word, negative.replacement, fix_article=False)
    if made != negative.caption:
        raise ExplorerError(f"scene {scene.id}: the {negative.attribute} swap does not give the stored negative")
    return made


def eval_negatives(model: Model, scenes: Sequence, seed: int = 0, batch: int = 32) -> dict[str, float | None]:
    """``hard_negative_acc/<attribute>`` as ``explorer eval`` reports it, from the swaps (module docstring)."""
    import torch

    outcomes: dict[str, list[bool]] = {}
    with torch.random.fork_rng(devices=[]):  # eval runs each model seeded so
        torch.manual_seed(seed)
        features = encode_images(model, [s.image for s in scenes], batch)
        for index, scene in enumerate(scenes):
            if not scene.hard_negatives:
                continue
            kept = [n for n, within in zip(scene.hard_negatives, in_reach(model, scene)) if within]
            if not kept:
                continue
            texts = [scene.long_caption, *(negative_swap(scene, n) for n in kept)]
            scores = model.similarity(features[index:index + 1], texts)[0].double().numpy()
            for negative, score in zip(kept, scores[1:]):
                outcomes.setdefault(negative.attribute, []).append(bool(scores[0] > score))  # a tie is a miss
    return {f"hard_negative_acc/{a}": (float(np.mean(v)) if v else None) for a, v in sorted(outcomes.items())}


__all__ = ["Rates", "WORLD_TYPES", "eval_negatives", "negative_swap", "world_rates", "world_swaps"]
