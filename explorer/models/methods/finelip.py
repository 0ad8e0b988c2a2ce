"""FineLIP (papers/finelip.txt): Long-CLIP plus token refinement and late interaction.

Released checkpoints are Long-CLIP state dicts plus ``cross_net.aggr_net.*``
(patch refinement) and ``cross_net.cap_aggr_net.*`` (text refinement),
saved plainly with ``torch.save(state_dict)``. The refiners work in the
projected embedding space; their hidden width and N' are read from the
tensors (0.2 d and 39 at ViT-B/16 sizes, other sizes for other models).

Inference, as the official code: the image keeps its projected class token
in front of the N' refined patches; the text refines SOT + word tokens and
keeps EOT at the end; the fine score is the late interaction of the two.
"""

from __future__ import annotations

from typing import Mapping

import torch
from torch import nn

from ..features import ImageFeatures, TextFeatures
from ..late_interaction import late_interaction_score
from ..refinement import TokenRefiner
from . import keys_with_prefix, register
from .base import cosine_matrix
from .clip import ClipFamily, is_clip_layout

IMAGE_PREFIX = "cross_net.aggr_net."
TEXT_PREFIX = "cross_net.cap_aggr_net."
MODES = ("finelip*", "global", "fine")
GLOBAL_WEIGHT = 0.8  # FineLIP*: 0.8 * global cosine + 0.2 * fine score


class FineLipCrossNet(nn.Module):
    def __init__(self, image: Mapping, text: Mapping):
        super().__init__()
        self.aggr_net = TokenRefiner(**image)
        self.cap_aggr_net = TokenRefiner(**text)


@register
class FineLipMethod(ClipFamily):
    name = "finelip"
    title = "FineLIP"
    detect_priority = 20

    def __init__(self, arch, image_refiner: Mapping | None = None, text_refiner: Mapping | None = None,
                 mode: str = "finelip*"):
        default = {"dim": arch.embed_dim, "hidden": int(arch.embed_dim * 0.2), "n_out": 39}
        image_refiner, text_refiner = dict(image_refiner or default), dict(text_refiner or default)
        super().__init__(arch, image_refiner=image_refiner, text_refiner=text_refiner, mode=mode)
        if mode not in MODES:
            raise ValueError(f"FineLIP mode must be one of {MODES}, not {mode!r}")
        self.mode = mode
        self.cross_net = FineLipCrossNet(image_refiner, text_refiner)

    @classmethod
    def detect(cls, tensors, raw):
        if is_clip_layout(tensors) and keys_with_prefix(tensors, IMAGE_PREFIX):
            return "finelip"
        return None

    @classmethod
    def extra_config_from(cls, tensors):
        return {"image_refiner": TokenRefiner.sizes_from(tensors, IMAGE_PREFIX),
                "text_refiner": TokenRefiner.sizes_from(tensors, TEXT_PREFIX)}

    # ---- refined tokens ------------------------------------------------------------------------

    def refined_image_tokens(self, image: ImageFeatures) -> torch.Tensor:
        """[B, 1 + N', d]: class token in front of the refined patches."""
        refined, _ = self.cross_net.aggr_net(image.patches)
        return torch.cat([image.cls[:, None], refined], dim=1)

    def refined_text_tokens(self, text: TextFeatures) -> torch.Tensor:
        """[B, N' + 1, d]: refined SOT + word tokens, then the EOT token."""
        lengths = text.mask.sum(dim=1)  # SOT + words + EOT
        eot_index = lengths - 1
        positions = torch.arange(text.tokens.shape[1], device=text.tokens.device)
        words = positions[None, :] < eot_index[:, None]
        refined, _ = self.cross_net.cap_aggr_net(text.tokens, words)
        return torch.cat([refined, text.eot[:, None]], dim=1)

    def fine_scores(self, image: ImageFeatures, text: TextFeatures) -> torch.Tensor:
        image_tokens = self.refined_image_tokens(image)
        text_tokens = self.refined_text_tokens(text)
        return torch.stack([
            torch.stack([late_interaction_score(t, v) for t in text_tokens]) for v in image_tokens
        ])

    def similarity(self, image: ImageFeatures, text: TextFeatures) -> torch.Tensor:
        if self.mode == "global":
            return cosine_matrix(image.cls, text.eot)
        fine = self.fine_scores(image, text)
        if self.mode == "fine":
            return fine
        return GLOBAL_WEIGHT * cosine_matrix(image.cls, text.eot) + (1 - GLOBAL_WEIGHT) * fine
