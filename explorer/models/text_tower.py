"""A method's CLIP text tower on its own: what SDXL's ``text_encoder`` slot can take.

Long-CLIP, FineLIP, MulCLIP and GOAL read long captions with one CLIP text transformer at 248
positions; that tower (token table, positions, blocks, final LayerNorm, projection) is all a
text-to-image pipeline needs. ``Method.text_tower()`` hands it out as tensors in the OpenAI
layout plus the shape they were read with, so the generation layer can rebuild it as a
transformers ``CLIPTextModel`` without reaching into the method's modules.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

import torch

# The OpenAI-layout keys that belong to the text tower (everything else is the image side or
# a method's own modules).
TEXT_KEYS = ("token_embedding.", "positional_embedding", "transformer.", "ln_final.", "text_projection")


@dataclass(frozen=True)
class TextTower:
    """One CLIP text transformer, as tensors (OpenAI layout) and its shape."""

    tensors: Mapping[str, torch.Tensor]
    width: int
    layers: int
    heads: int
    mlp_width: int
    context_length: int
    vocab_size: int
    projection_dim: int
    quick_gelu: bool
    source: str  # who it came from, for messages ("demo-longclip (Long-CLIP)")

    @property
    def activation(self) -> str:
        return "quick_gelu" if self.quick_gelu else "gelu"


def text_keys(state_dict: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The text tower's entries of an OpenAI-layout state dict."""
    return {key: value for key, value in state_dict.items() if key.startswith(TEXT_KEYS)}
