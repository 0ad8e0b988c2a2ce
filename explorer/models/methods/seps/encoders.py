"""SEPS's encoders: a Hugging Face ViT and BERT, their projections to C, and the cross net.

Every size is read from the tensors; attention heads cannot be, so they are
width / 64 (at least 1), which is right for every released ViT/BERT and can be
overridden with the ``vision_heads`` / ``text_heads`` options. The image size
is the position table's; a model trained at another size (HF's
``interpolate_pos_encoding``) is loaded with the ``input_size`` option.

Features, as the official code:
- image: ``vision_proj(ViT(x).last_hidden_state)``, class token included;
- text: ``fc(BERT(x).last_hidden_state)`` under the attention mask
  ``ids != 0``; the projected ``[CLS]`` is the global embedding.
"""

from __future__ import annotations

import math
import re
from typing import Mapping

import torch
from torch import nn

from explorer.core.errors import CheckpointError
from explorer.models.methods.seps.hf import load_transformers
from explorer.models.methods.seps.key_layout import BERT_PREFIX, VIT_PREFIX, VitNaming
from explorer.models.nn.refinement import TokenRefiner

HEAD_WIDTH = 64  # ViT-B and BERT-base: 768 / 12
LAYER_NORM_EPS = 1e-12
DEFAULT_SPARSE_RATIO = 0.5
DEFAULT_AGGR_RATIO = 0.4
REFINER_HIDDEN_RATIO = 0.2  # LAPS/SEPS: hidden width of the aggregation MLP is int(0.2 C)


# ---- sizes read from the tensors -----------------------------------------------------------------


def heads_for(width: int, override: int | None = None) -> int:
    if override is not None:
        heads = int(override)
        if heads < 1 or width % heads:
            raise CheckpointError(f"{heads} attention heads do not divide the width {width}.")
        return heads
    heads = max(1, width // HEAD_WIDTH)
    while width % heads:
        heads -= 1
    return heads


def _layer_indices(tensors: Mapping[str, torch.Tensor], pattern: str) -> set[int]:
    regex = re.compile(pattern)
    return {int(m.group(1)) for key in tensors if (m := regex.match(key))}


def infer_vision(tensors: Mapping[str, torch.Tensor], naming: VitNaming, heads: int | None = None) -> dict:
    p = VIT_PREFIX
    width = tensors[p + "embeddings.cls_token"].shape[-1]
    patch_h, patch_w = tensors[p + "embeddings.patch_embeddings.projection.weight"].shape[2:]
    if patch_h != patch_w:
        raise CheckpointError(f"non-square patches {patch_h}x{patch_w}")
    n_positions = tensors[p + "embeddings.position_embeddings"].shape[1]
    grid = math.isqrt(n_positions - 1)
    if grid * grid != n_positions - 1:
        raise CheckpointError(f"the ViT position table has {n_positions} rows, not 1 + a square number of patches")
    layers = {parsed[0] for key in tensors if key.startswith(p) and (parsed := naming.parse(key[len(p):]))}
    if not layers:
        raise CheckpointError("the ViT has no encoder layers")
    return {"width": int(width), "layers": max(layers) + 1, "heads": heads_for(int(width), heads),
            "mlp": int(tensors[p + naming.key(0, "fc1", "weight")].shape[0]),
            "patch_size": int(patch_h), "image_size": int(grid * patch_h)}


def infer_text(tensors: Mapping[str, torch.Tensor], heads: int | None = None) -> dict:
    p = BERT_PREFIX
    vocab, width = tensors[p + "embeddings.word_embeddings.weight"].shape
    layers = _layer_indices(tensors, re.escape(p) + r"encoder\.layer\.(\d+)\.")
    if not layers:
        raise CheckpointError("BERT has no encoder layers")
    return {"width": int(width), "layers": max(layers) + 1, "heads": heads_for(int(width), heads),
            "mlp": int(tensors[p + "encoder.layer.0.intermediate.dense.weight"].shape[0]),
            "vocab_size": int(vocab),
            "max_positions": int(tensors[p + "embeddings.position_embeddings.weight"].shape[0]),
            "type_vocab_size": int(tensors[p + "embeddings.token_type_embeddings.weight"].shape[0])}


# ---- modules ---------------------------------------------------------------------------------------


def build_vit(vision: Mapping) -> nn.Module:
    tf = load_transformers()
    config = tf.ViTConfig(
        hidden_size=vision["width"], num_hidden_layers=vision["layers"], num_attention_heads=vision["heads"],
        intermediate_size=vision["mlp"], image_size=vision["image_size"], patch_size=vision["patch_size"],
        num_channels=3, hidden_act="gelu", layer_norm_eps=LAYER_NORM_EPS, qkv_bias=True,
        hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    return tf.ViTModel(config, add_pooling_layer=True)


def build_bert(text: Mapping) -> nn.Module:
    tf = load_transformers()
    config = tf.BertConfig(
        vocab_size=text["vocab_size"], hidden_size=text["width"], num_hidden_layers=text["layers"],
        num_attention_heads=text["heads"], intermediate_size=text["mlp"],
        max_position_embeddings=text["max_positions"], type_vocab_size=text["type_vocab_size"],
        hidden_act="gelu", layer_norm_eps=LAYER_NORM_EPS, pad_token_id=0)
    return tf.BertModel(config, add_pooling_layer=True)


def _projection(width: int, embed_dim: int) -> nn.Module:
    return nn.Identity() if width == embed_dim else nn.Linear(width, embed_dim)


class SepsImageEncoder(nn.Module):
    def __init__(self, vision: Mapping, embed_dim: int):
        super().__init__()
        self.visual_encoder = build_vit(vision)
        self.vision_proj = _projection(vision["width"], embed_dim)

    def forward(self, pixels: torch.Tensor) -> torch.Tensor:
        """[B, 1 + P, C]: projected class token, then the patch tokens."""
        # Images at another size than the position table's use HF's interpolated table.
        table = self.visual_encoder.config.image_size
        interpolate = tuple(pixels.shape[-2:]) != (table, table)
        out = self.visual_encoder(pixel_values=pixels, interpolate_pos_encoding=interpolate)
        return self.vision_proj(out.last_hidden_state)


class SepsTextEncoder(nn.Module):
    def __init__(self, text: Mapping, embed_dim: int):
        super().__init__()
        self.bert = build_bert(text)
        self.fc = _projection(text["width"], embed_dim)

    def forward(self, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return self.fc(self.bert(input_ids=ids, attention_mask=mask.long()).last_hidden_state)


def default_refiner(embed_dim: int, n_patches: int, aggr_ratio: float, sparse_ratio: float) -> dict:
    """The aggregation's sizes as LAPS/SEPS set them: N' = int(P * aggr_ratio * sparse_ratio) (at least 1)."""
    n_out = max(1, int(n_patches * aggr_ratio * sparse_ratio))
    return {"dim": embed_dim, "hidden": int(embed_dim * REFINER_HIDDEN_RATIO), "n_out": n_out}


class SepsCrossNet(nn.Module):
    """``aggr_net``: the aggregation (both scorings); ``score_net``: the paper's prior MLP (paper scoring only)."""

    def __init__(self, refiner: Mapping, score_hidden: int | None = None):
        super().__init__()
        self.aggr_net = TokenRefiner(**refiner)
        if score_hidden is not None:
            dim = int(refiner["dim"])
            self.score_net = nn.Sequential(nn.Linear(dim, score_hidden), nn.GELU(), nn.Linear(score_hidden, 1))
