"""FLAIR: text-conditioned attention pooling over CLIP patch tokens (CAFT's flat parent).

Released FLAIR checkpoints (open_clip based, context 77, exact GELU) hold
the open_clip text keys at the top level, ``visual.*`` without
``visual.proj``, ``image_post.proj`` [vision width, d] and
``text_post.proj`` [text width, d] (plain ``x @ proj`` matrices, i.e.
exactly what CLIP calls ``visual.proj`` and ``text_projection``, so they are
renamed onto those on load and back on save), the attention pooling
``visual_proj.{attn,ln_q,ln_k,ln_v}.*``, ``logit_scale`` and ``logit_bias``.
Training files are wrapped as ``{'state_dict': ...}`` with ``module.``.

The pooling is ``MultiheadAttention(d, 8 heads, add_zero_attn=True)`` on
LayerNorm'd query (the caption's global embedding), keys and values (the
projected patch tokens); the text-conditioned image embedding is compared
with the caption by cosine (times ``exp(logit_scale)`` plus ``logit_bias``
inside the sigmoid loss).
"""

from __future__ import annotations

from typing import Mapping

import torch
from torch import nn

from ..checkpoints import KeyReport, RawCheckpoint
from ..features import ImageFeatures, TextFeatures
from . import keys_with_prefix, register
from .base import cosine_matrix
from .clip import ClipFamily

POOL_PREFIX = "visual_proj."
RENAMES = {"image_post.proj": "visual.proj", "text_post.proj": "text_projection"}
DEFAULT_POOL_HEADS = 8


class TextConditionedPool(nn.Module):
    """FLAIR's ``visual_proj``: a caption queries the patch tokens; a zero slot lets it attend to nothing."""

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


@register
class FlairMethod(ClipFamily):
    name = "flair"
    title = "FLAIR"
    detect_priority = 20
    default_quick_gelu = False  # FLAIR is trained from scratch with open_clip's GELU

    def __init__(self, arch, pool_heads: int = DEFAULT_POOL_HEADS):
        super().__init__(arch, pool_heads=pool_heads)
        self.visual_proj = TextConditionedPool(arch.embed_dim, pool_heads)
        self.logit_bias = nn.Parameter(torch.tensor(-10.0))

    @classmethod
    def detect(cls, tensors, raw):
        if keys_with_prefix(tensors, POOL_PREFIX) and "image_post.proj" in tensors:
            return "flair"
        return None

    @classmethod
    def to_backbone_layout(cls, raw: RawCheckpoint, fmt: str, report: KeyReport):
        tensors = super().to_backbone_layout(raw, fmt, report)
        for released, ours in RENAMES.items():
            if released in tensors:
                tensors[ours] = tensors.pop(released)
        report.notes.append("image_post.proj -> visual.proj and text_post.proj -> text_projection (same x @ proj)")
        return tensors

    @classmethod
    def infer_architecture(cls, tensors, fmt, raw, report):
        from ..architecture import infer_clip_architecture

        return infer_clip_architecture(tensors, quick_gelu=False)

    def conditioned_image(self, image: ImageFeatures, text: TextFeatures) -> torch.Tensor:
        """[n_images, n_texts, d]: each image pooled by each caption."""
        queries = text.eot[None].expand(len(image), -1, -1)
        pooled, _ = self.visual_proj(queries, image.patches)
        return pooled

    def similarity(self, image: ImageFeatures, text: TextFeatures) -> torch.Tensor:
        pooled = self.conditioned_image(image, text)
        return torch.stack([cosine_matrix(pooled[i], text.eot).diagonal() for i in range(len(image))])


def released_flair_keys(tensors: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Our keys -> FLAIR's released names (for writing files in FLAIR's layout)."""
    back = {ours: released for released, ours in RENAMES.items()}
    return {back.get(k, k): v for k, v in tensors.items()}
