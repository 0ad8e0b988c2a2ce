"""FineLIP (papers/finelip.txt): Long-CLIP plus token refinement and late interaction.

Pictures: FineLIP's ``_transform``, OpenAI's (``Preprocess`` pipeline "openai").

Released checkpoints are Long-CLIP state dicts (two position tables,
``positional_embedding`` and ``positional_embedding_res``) plus
``cross_net.aggr_net.*`` (patch refinement) and ``cross_net.cap_aggr_net.*``
(text refinement), saved plainly with ``torch.save(state_dict)``. The
refiners work in the projected embedding space; their hidden width and N'
are read from the tensors (0.2 d and 39 at ViT-B/16 sizes, other sizes for
other models).

Scores, as the official code computes them:

- refined image tokens  V' = [v_cls, W_v P]      (W_v = refinement of the P patches, N' x P)
- refined text tokens   T' = [W_t X, t_eot]      (X = SOT + word tokens, padding and EOT excluded)
- fine score            R(I, T) = mean_{t in T'} max_{v in V'} s(t, v) + mean_{v in V'} max_{t in T'} s(t, v),
                        s = leaky_relu(cos, 0.1)
- modes: "fine" = R; "global" = cos(v_cls, t_eot); "finelip*" (default) = 0.8 global + 0.2 R.

Training (``losses``): the paper's objective (section 3.3, eq. 2), the
bidirectional triplet loss with the hardest negative (VSE++, margin 0.2)
on the fine score R alone. We add no separate global contrastive term:
the paper has none, and the training code we could read (a copy of the
official model file) computes CLIP's InfoNCE only when FineLIP is switched
off (its baseline). The global tokens take part through V' and T', which
keep v_cls and t_eot; FineLIP* (Table 1) is an inference-time blend only.
The objective has no temperature, so ``logit_scale`` (kept for the
Long-CLIP layout) is frozen.
"""

from __future__ import annotations

from typing import Mapping

import torch
import torch.nn.functional as F
from torch import nn

from explorer.core.errors import ConfigError, InputError
from explorer.models.batch import TrainingBatch
from explorer.models.features import ImageFeatures, TextFeatures
from explorer.models.methods import register
from explorer.models.methods.base import GENERIC_MAP, cosine_matrix
from explorer.models.methods.clip import ClipFamily
from explorer.models.nn.distributed import world
from explorer.models.nn.late_interaction import NEGATIVE_SLOPE, token_similarity
from explorer.models.nn.losses import hinge_hardest, hinge_pairs
from explorer.models.nn.refinement import TokenRefiner

IMAGE_PREFIX = "cross_net.aggr_net."
TEXT_PREFIX = "cross_net.cap_aggr_net."
MODES = ("finelip*", "global", "fine")
GLOBAL_WEIGHT = 0.8  # FineLIP*: 0.8 * global cosine + 0.2 * fine score
MARGIN = 0.2  # triplet margin (paper, section 3.3)
LATE_INTERACTION_MAP = "late-interaction"
REFINEMENT_MAP = "refinement-weights"
_SCORE_BUDGET = 1 << 24  # elements of one [images, texts, text tokens, image tokens] block in fine_scores


class FineLipCrossNet(nn.Module):
    def __init__(self, image: Mapping, text: Mapping):
        super().__init__()
        self.aggr_net = TokenRefiner(**image)
        self.cap_aggr_net = TokenRefiner(**text)


def eot_positions(text: TextFeatures) -> torch.Tensor:
    """[B] index of each caption's EOT (``TextFeatures.eot_positions``)."""
    return text.eot_positions()


def word_mask(text: TextFeatures) -> torch.Tensor:
    """[B, K] True at the word tokens: after SOT, before EOT (``TextFeatures.word_mask``)."""
    return text.word_mask()


@register
class FineLipMethod(ClipFamily):
    """FineLIP: refined tokens, late interaction, hinge loss; FineLIP* blends in the global cosine."""

    name = "finelip"
    title = "FineLIP"
    detect_priority = 20
    native_map_kinds = (LATE_INTERACTION_MAP, REFINEMENT_MAP)
    preferred_native_map = LATE_INTERACTION_MAP
    new_module_prefixes = ("cross_net.",)
    # bench/precision.py: W is a softmax over the patches of the refined tokens' logits; in bf16 0.923 median IoU
    # on a random ViT-B/16, 0.993 with the cross net alone in fp32.
    fp32_heads = {REFINEMENT_MAP: "cross_net"}
    export_leaves_out = ("the token refiners (cross_net.*) and the late-interaction fine score: the export scores with "
                         "the global cosine, FineLIP's \"global\" mode, not FineLIP*")
    token_modules = (("image_refiner", TokenRefiner, IMAGE_PREFIX), ("text_refiner", TokenRefiner, TEXT_PREFIX))

    def __init__(self, arch, image_refiner: Mapping | None = None, text_refiner: Mapping | None = None,
                 mode: str = "finelip*"):
        default = {"dim": arch.embed_dim, "hidden": int(arch.embed_dim * 0.2), "n_out": 39}
        image_refiner, text_refiner = dict(image_refiner or default), dict(text_refiner or default)
        super().__init__(arch, image_refiner=image_refiner, text_refiner=text_refiner, mode=mode)
        if mode not in MODES:
            raise ConfigError(f"FineLIP mode must be one of {MODES}, not {mode!r}")
        self.mode = mode
        self.cross_net = FineLipCrossNet(image_refiner, text_refiner)
        # The hinge loss compares cosines; no temperature enters FineLIP's objective or scores.
        self.logit_scale.requires_grad_(False)

    @classmethod
    def score_description(cls, options=None) -> str:
        mode = (options or {}).get("mode", "finelip*")
        return {"global": "cosine", "fine": "late interaction R"}.get(
            mode, f"FineLIP* = {GLOBAL_WEIGHT:g} cosine + {1 - GLOBAL_WEIGHT:g} R")

    @classmethod
    def extra_config_from(cls, tensors):
        return {**super().extra_config_from(tensors), "mode": "finelip*"}  # listed so a manifest can choose the mode

    def released_state_dict(self) -> dict:
        """Long-CLIP's two position tables (rows < 20 read from the first, the rest from ``_res``) + cross_net.*"""
        tensors = dict(self.state_dict())
        tensors["positional_embedding_res"] = tensors["positional_embedding"].clone()
        return tensors

    # ---- refined tokens ------------------------------------------------------------------------

    def refined_image_tokens(self, image: ImageFeatures) -> torch.Tensor:
        """[B, 1 + N', d]: class token in front of the refined patches."""
        refined, _ = self.cross_net.aggr_net(image.patches)
        return torch.cat([image.cls[:, None], refined], dim=1)

    def refined_text_tokens(self, text: TextFeatures) -> torch.Tensor:
        """[B, N' + 1, d]: refined SOT + word tokens, then the EOT token."""
        positions = torch.arange(text.tokens.shape[1], device=text.tokens.device)
        before_eot = positions[None, :] < eot_positions(text)[:, None]  # SOT + words
        refined, _ = self.cross_net.cap_aggr_net(text.tokens, before_eot)
        return torch.cat([refined, text.eot[:, None]], dim=1)

    # ---- scores --------------------------------------------------------------------------------

    def fine_scores(self, image: ImageFeatures, text: TextFeatures) -> torch.Tensor:
        """[n_images, n_texts] late-interaction score R of the refined tokens (in [-0.2, 2])."""
        v = F.normalize(self.refined_image_tokens(image).float(), dim=-1)  # [I, Pv, d]
        t = F.normalize(self.refined_text_tokens(text).float(), dim=-1)  # [T, Kt, d]
        return late_interaction_scores(v, t)

    @property
    def global_score(self) -> bool:
        return self.mode == "global"

    def similarity(self, image: ImageFeatures, text: TextFeatures) -> torch.Tensor:
        if self.mode == "global":
            return cosine_matrix(image.cls, text.eot)
        fine = self.fine_scores(image, text)
        if self.mode == "fine":
            return fine
        return GLOBAL_WEIGHT * cosine_matrix(image.cls, text.eot) + (1 - GLOBAL_WEIGHT) * fine

    # ---- training ------------------------------------------------------------------------------

    def losses(self, batch: TrainingBatch) -> dict[str, torch.Tensor]:
        """Bidirectional hinge with the hardest negative (margin 0.2) on the fine score R.

        Whatever ``mode`` is set for inference, training uses R (paper section 3.3; the official
        code trains FineLIP with this loss alone and FineLIP* only reweights at inference).

        Under DDP the negatives are the global batch's: the refined, normalised tokens are gathered
        (``losses.hinge_pairs``), so the refinement runs once per sample, on its own rank.
        """
        image = self.encode_image(batch.pixels)
        text = self.encode_captions(batch.captions)
        if world()[1] == 1:
            return {"hinge": hinge_hardest(self.fine_scores(image, text), margin=MARGIN)}
        v = F.normalize(self.refined_image_tokens(image).float(), dim=-1)
        t = F.normalize(self.refined_text_tokens(text).float(), dim=-1)
        return {"hinge": hinge_pairs(v, t, late_interaction_scores, margin=MARGIN)}

    # ---- maps ----------------------------------------------------------------------------------

    def refinement_weights(self, image: ImageFeatures) -> torch.Tensor:
        """[N', rows, cols]: row j of the patch refinement W, i.e. which patches feed refined token j.

        Each map sums to 1 over the grid (W is a softmax over the patches).
        """
        _single(image)
        rows, cols = image.grid_hw
        weights = self.cross_net.aggr_net.assignment(image.patches)[0]  # [N', P]
        return weights.reshape(weights.shape[0], rows, cols)

    def best_refined_token(self, image: ImageFeatures, text: TextFeatures) -> torch.Tensor:
        """[M] index j of the refined patch token whose cosine with each sentence's EOT is highest."""
        _single(image)
        refined, _ = self.cross_net.aggr_net(image.patches)  # [1, N', d]
        return cosine_matrix(text.eot, refined[0]).argmax(dim=1)

    def late_interaction_maps(self, image: ImageFeatures, text: TextFeatures) -> torch.Tensor:
        """[M, rows, cols]: for each patch, max over the sentence's word tokens of leaky_relu(cos, 0.1).

        Computed on the UNREFINED projected tokens: a refined token is a soft mixture of many
        patches (or words), so a similarity to it has no single place on the grid; only the
        original patch tokens correspond one-to-one with grid cells. SOT, EOT and padding are left
        out; a sentence without word tokens (an empty string) falls back to its EOT token.
        """
        _single(image)
        rows, cols = image.grid_hw
        words = word_mask(text)
        empty = ~words.any(dim=1)
        if empty.any():  # no words: use the EOT token alone
            eot = eot_positions(text)
            words = words.clone()
            words[empty, eot[empty]] = True
        sim = token_similarity(text.tokens.flatten(0, 1), image.patches[0])  # [M * K, P]
        sim = sim.reshape(len(text), text.tokens.shape[1], -1).masked_fill(~words[:, :, None], float("-inf"))
        return sim.amax(dim=1).reshape(len(text), rows, cols)

    def sentence_maps(self, image: ImageFeatures, text: TextFeatures, kind: str = GENERIC_MAP) -> torch.Tensor:
        """Native kinds:

        - "late-interaction": ``late_interaction_maps`` (per sentence, its words' best match per patch).
        - "refinement-weights": W is per image, not per sentence, so each sentence gets the row of W
          of the refined image token its EOT matches best (``best_refined_token``): "the patches
          that feed the refined token this sentence is closest to". All N' rows, sentence-free,
          come from ``refinement_weights``.
        """
        if kind == LATE_INTERACTION_MAP:
            return self.late_interaction_maps(image, text)
        if kind == REFINEMENT_MAP:
            return self.refinement_weights(image)[self.best_refined_token(image, text)]
        return super().sentence_maps(image, text, kind)


def late_interaction_scores(v: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
    """[I, T] FineLIP's score R of normalised refined image tokens ``v`` [I, Pv, d] and text tokens ``t``
    [T, Kt, d]: mean over text tokens of the best image token + mean over image tokens of the best text
    token, of leaky_relu(cosine, 0.1); in blocks of texts that fit the memory budget."""
    per_text = v.shape[0] * v.shape[1] * t.shape[1]
    step = max(1, _SCORE_BUDGET // max(per_text, 1))
    blocks = []
    for start in range(0, t.shape[0], step):
        sim = F.leaky_relu(torch.einsum("ipd,jkd->ijkp", v, t[start:start + step]), NEGATIVE_SLOPE)
        # text -> image: each text token's best image token; image -> text: the converse
        blocks.append(sim.amax(dim=3).mean(dim=2) + sim.amax(dim=2).mean(dim=2))
    return torch.cat(blocks, dim=1)


def _single(image: ImageFeatures) -> None:
    if len(image) != 1:
        raise InputError(f"maps are drawn for one image at a time, got {len(image)}")
