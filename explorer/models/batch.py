"""What a training step hands a method's ``losses``.

Raw strings, not token ids: each method tokenizes with its own tokenizer and
context (77, 248, BERT), so one data loader serves every method. Fields a
method does not use may be None; a method that needs one says so clearly.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import torch

from explorer.core.errors import InputError


@dataclass
class TrainingBatch:
    """One training step's data, what a method's ``losses`` receives. Texts are raw strings.

    Attributes:
        pixels: (B, 3, S, S) float, the pictures already preprocessed for the method (S its input size).
        captions: B long captions, one per picture.
        short_captions: B short summaries, or None. In the synthetic world a generated one-line summary that
            names each object by colour and shape and the background, not a sentence of the long caption;
            from a samples folder, its ``short_caption``.
        sentences: Each caption's sentences (sub-captions) in order: B lists of strings, or None.
        dense_captions: A dense caption per picture (SEPS), or None.
        negative_captions: For each picture, its caption rewritten to be false of it (one attribute or
            relation changed; NegCLIP): B lists of strings, or None.
        local_pixels: (B, 3, S, S) float, GOAL's local pair: the crop of the region FLISM chose, or None.
        local_sentences: B sentences matched to those regions, or None.
        local_boxes: (B, 4) float, those regions as (x0, y0, x1, y1) in [0, 1] of the whole picture, or None.
        extras: Anything else a method documents; the training loop adds "step" and "epoch" (from 0).

    A method that needs a field the batch lacks says so with ``batch.require("sentences", method=title)``.
    """

    pixels: torch.Tensor  # [B, 3, S, S], already preprocessed for the method
    captions: list[str]  # long captions, one per image
    short_captions: list[str] | None = None  # short summaries (the synthetic world's: generated, one line)
    sentences: list[list[str]] | None = None  # each caption's sub-captions, in order
    dense_captions: list[str] | None = None  # SEPS: a dense caption per image
    # NegCLIP: each caption rewritten so it is false of its image (one attribute or relation changed)
    negative_captions: list[list[str]] | None = None
    # GOAL: the local pair FLISM chose for each image
    local_pixels: torch.Tensor | None = None  # [B, 3, S, S] crop of the chosen region
    local_sentences: list[str] | None = None  # the sentence matched to that region
    local_boxes: torch.Tensor | None = None  # [B, 4] (x0, y0, x1, y1) in [0, 1] of the whole image
    # anything else a method documents; the training loop adds "step" and "epoch" (from 0)
    extras: dict = field(default_factory=dict)

    def __len__(self) -> int:
        return self.pixels.shape[0]

    def to(self, device, dtype: torch.dtype | None = None) -> "TrainingBatch":
        def move(t):
            return None if t is None else t.to(device, dtype) if t.is_floating_point() else t.to(device)

        return replace(self, pixels=move(self.pixels), local_pixels=move(self.local_pixels),
                       local_boxes=move(self.local_boxes))

    def require(self, *names: str, method: str = "") -> None:
        missing = [name for name in names if getattr(self, name) is None]
        if missing:
            raise InputError(f"{method or 'this method'} trains on {', '.join(missing)}, which the batch lacks")


EXAMPLE_COLOURS = ("red", "green", "blue", "yellow", "purple", "orange")
EXAMPLE_SHAPES = ("cube", "ball", "cone", "ring", "star", "disk")
EXAMPLE_PLACES = ("on the left", "on the right", "at the top", "at the bottom", "in the centre", "in a corner")


def example_batch(image_size: int, batch_size: int = 4, seed: int = 0) -> TrainingBatch:
    """A small batch with every field filled: random pixels and templated multi-sentence captions.

    For smoke tests and benchmarks of ``losses``; it carries no learnable signal.
    """
    generator = torch.Generator().manual_seed(seed)
    pixels = torch.randn(batch_size, 3, image_size, image_size, generator=generator)
    sentences = []
    for i in range(batch_size):
        n = 2 + i % 4  # 2..5 sentences, so chunking and padding paths run
        picks = torch.randint(0, len(EXAMPLE_COLOURS), (n, 3), generator=generator).tolist()
        sentences.append([f"A {EXAMPLE_COLOURS[c]} {EXAMPLE_SHAPES[s]} sits {EXAMPLE_PLACES[p]}." for c, s, p in picks])
    captions = [" ".join(parts) for parts in sentences]
    boxes = torch.tensor([[0.0, 0.0, 0.5, 0.5], [0.5, 0.0, 1.0, 0.5], [0.0, 0.5, 0.5, 1.0], [0.25, 0.25, 0.75, 0.75]])
    return TrainingBatch(
        pixels=pixels,
        captions=captions,
        short_captions=[parts[0] for parts in sentences],
        sentences=sentences,
        dense_captions=[caption + " The background is plain grey." for caption in captions],
        local_pixels=torch.randn(batch_size, 3, image_size, image_size, generator=generator),
        local_sentences=[parts[-1] for parts in sentences],
        local_boxes=boxes[torch.arange(batch_size) % len(boxes)],
    )
