"""Text-conditioned attention pooling (FLAIR's ``visual_proj``, reused by CAFT) and its maps.

A caption (or sub-caption) queries the image's tokens through multi-head attention with a zero
slot (``add_zero_attn``): the slot lets a sentence attend to nothing. The pooling weights are the
method's own grounding map; ``AttentionPoolMaps`` serves them as the map kinds "attention-pool"
(heads averaged) and "attention-pool/head-k", for any method that says what queries and what is
queried.
"""

from __future__ import annotations

import re

import torch
from torch import nn

from explorer.core.errors import InputError
from explorer.models.features import ImageFeatures, TextFeatures
from explorer.models.methods.base import GENERIC_MAP

DEFAULT_POOL_HEADS = 8
ATTENTION_MAP = "attention-pool"
HEAD_KIND = re.compile(re.escape(ATTENTION_MAP) + r"/head-(\d+)")


class TextConditionedPool(nn.Module):
    """A caption queries the tokens; a zero slot lets it attend to nothing."""

    def __init__(self, dim: int, heads: int = DEFAULT_POOL_HEADS):
        super().__init__()
        self.attn = nn.MultiheadAttention(dim, heads, batch_first=True, add_zero_attn=True)
        self.ln_q, self.ln_k, self.ln_v = nn.LayerNorm(dim), nn.LayerNorm(dim), nn.LayerNorm(dim)

    def forward(self, queries: torch.Tensor, tokens: torch.Tensor, average_heads: bool = True):
        """queries [B, Q, d], tokens [B, P, d] -> pooled [B, Q, d] and weights [B, (heads,) Q, P + 1].

        The last column of the weights is the zero-attention slot.
        """
        return self.attn(self.ln_q(queries), self.ln_k(tokens), self.ln_v(tokens),
                         need_weights=True, average_attn_weights=average_heads)


class AttentionPoolMaps:
    """Maps from a ``TextConditionedPool`` held as ``self.visual_proj``.

    A method says what queries the pool (``pool_queries``: [M, d] for M sentences) and what is
    queried (``pool_tokens``: [T, d] of one image); ``patch_attention`` carries the weights over
    the queried tokens back to the patch grid (the identity when the tokens are the patches).
    """

    visual_proj: TextConditionedPool

    def pool_queries(self, text: TextFeatures) -> torch.Tensor:
        raise NotImplementedError

    def pool_tokens(self, image: ImageFeatures) -> torch.Tensor:
        raise NotImplementedError

    @property
    def pool_heads(self) -> int:
        return self.visual_proj.attn.num_heads

    @property
    def head_map_kinds(self) -> tuple[str, ...]:
        return tuple(f"{ATTENTION_MAP}/head-{k}" for k in range(self.pool_heads))

    def attention_weights(self, image: ImageFeatures, text: TextFeatures, average_heads: bool = True):
        """The pooling weights of each sentence over ONE image's queried tokens: [M, T + 1]
        (head-averaged) or [heads, M, T + 1]; the last column is the zero-attention slot."""
        if len(image) != 1:
            raise InputError(f"maps are drawn for one image at a time, got {len(image)}")
        _, weights = self.visual_proj(self.pool_queries(text)[None], self.pool_tokens(image),
                                      average_heads=average_heads)
        return weights[0]

    def zero_slot_weight(self, image: ImageFeatures, text: TextFeatures) -> torch.Tensor:
        """[M] head-averaged attention mass each sentence puts on the zero slot (1 = attends to nothing)."""
        return self.attention_weights(image, text)[:, -1]

    def patch_attention(self, image: ImageFeatures, text: TextFeatures, average_heads: bool = True):
        """The pooling weights over the patches, zero slot dropped: [(heads,) M, P]."""
        return self.attention_weights(image, text, average_heads)[..., :-1]

    def sentence_maps(self, image: ImageFeatures, text: TextFeatures, kind: str = GENERIC_MAP) -> torch.Tensor:
        """Native kinds:

        - "attention-pool": the head-averaged pooling attention of each sentence over the patches,
          with the zero slot dropped and NOT renormalised: a map sums to 1 - ``zero_slot_weight``,
          so a sentence that attends to nothing draws a flat, near-zero map.
        - "attention-pool/head-k": the same for head k alone (the head maps average to the first).
        """
        match = HEAD_KIND.fullmatch(kind)
        if kind == ATTENTION_MAP:
            maps = self.patch_attention(image, text)
        elif match and int(match.group(1)) < self.pool_heads:
            maps = self.patch_attention(image, text, average_heads=False)[int(match.group(1))]
        else:
            return super().sentence_maps(image, text, kind)
        rows, cols = image.grid_hw
        return maps.reshape(len(text), rows, cols)
