"""SEPS (papers/seps.txt): patch slimming with sparse and dense text, built on LAPS.

Released checkpoints (``model_best.pth``) are ``{'model': state_dict, 'opt':
argparse.Namespace, 'epoch', 'best_rsum', 'Eiters'}``; the Namespace means the
file can only be read after the user opts in to unpickling. The state dict:

- ``img_enc.visual_encoder.*``: a Hugging Face ``ViTModel`` (with pooler) under
  transformers 4.x key names (``encoder.layer.N.attention.attention.query.*``);
- ``img_enc.vision_proj.*``: Linear(vision width, C), absent when C equals the
  vision width (an ``nn.Identity`` then);
- ``txt_enc.bert.*``: a Hugging Face ``BertModel`` (with pooler), 4.x names;
  ``embeddings.position_ids`` may be present (a buffer: ignored, with reason);
- ``txt_enc.fc.*``: Linear(text width, C), absent when C equals the text width;
- ``cross_net.aggr_net.*``: the LAPS/SEPS aggregation (``TokenRefiner``'s
  layout), whose width, hidden size and N' are read from the tensors.

Every size is read from the tensors; attention heads cannot be, so they are
width / 64 (at least 1), which is right for every released ViT/BERT and can be
overridden with the ``vision_heads`` / ``text_heads`` options. The image size
is the position table's; a model trained at another size (HF's
``interpolate_pos_encoding``) is loaded with the ``input_size`` option, and a
note says so when N' disagrees with the ratios. The installed
transformers may name ViT keys differently from the released 4.x names
(5.x: ``layers.N.attention.q_proj``, ``layers.N.mlp.fc1``, ...); which names it
uses is read off a ViTModel built here, and the released names are mapped onto
them on load (and back by ``released_state_dict`` for writing released files).
LAPS checkpoints share this layout and load as SEPS.

The two poolers (``*.pooler.dense.*``) are in the released files because Hugging
Face builds both encoders with their pooling layer, but SEPS never reads them:
the official code leaves them without gradient, and here they are frozen
(``requires_grad=False``; ``parameters_without_gradient`` names them), so the
optimizer carries no state for them. Nothing else is left without gradient.

Inference, as the official code:
- image: squash-resize (no crop) bicubic, ImageNet mean/std; features are
  ``vision_proj(ViT(x).last_hidden_state)``, class token included;
- text: BERT wordpiece ``[CLS] ... [SEP]``, attention mask ``ids != 0``,
  features ``fc(BERT(x).last_hidden_state)``; the projected ``[CLS]`` is the
  global embedding. The vocabulary is not in the checkpoint: set
  ``"options": {"vocab_file": "/path/to/vocab.txt"}`` in the manifest (a
  ``vocab.txt`` or a Hugging Face tokenizer folder).

Two scorings, chosen with the ``scoring`` option (the default ``"official"`` is
what released checkpoints were trained with):

``"official"`` (per (image, caption) branch): patch score = cos(patch, mean
patch) + cos(patch, mean caption token); the top ceil(P * sparse_ratio)
patches are kept and aggregated into N' tokens by ``cross_net.aggr_net``, the
dropped ones folded into one extra token weighted by the softmax of their
scores; the image tokens ``[CLS, N' aggregated, extra]`` meet the caption's
tokens in the late interaction of ``late_interaction.py``. The sparse branch
(with the caption) and the dense branch (with the dense caption) run
separately and their scores are summed (``similarity_with_dense``). The keep
count is fixed, so the keep ratio is the constant ceil(P rho) / P.

``"paper"`` (paper Sec. 3.2, eqs. 1-5), on the projected patches v_i (d = C):
- prior ``s_p = sigmoid(MLP(v_i))``, a new two-layer MLP
  ``cross_net.score_net`` (Linear(C, h) -> GELU -> Linear(h, 1), h = C // 4);
  it exists only in this variant, so the official key layout stays exact;
- views ``s_st, s_dt, s_im = minmax_i(v_i . E / d)`` with E the sparse-text,
  dense-text and image global embeddings (projected ``[CLS]`` tokens);
  min-max runs over the patches of one image, and a constant row gives 0;
- ``s_s = (1 - b) s_p + b (s_st + s_im) / 2``, ``s_d = (1 - b) s_p + b (s_dt +
  s_im) / 2`` with b = 0.6;
- selection (eq. 4) with pi = (s, 1 - s) per patch (keep / drop):
  training: a hard keep decision from a two-class Gumbel-softmax at tau = 1
  (the paper gives no tau; 1 is DynamicViT's, whose ratio constraint the paper
  follows), straight-through, so its forward value is exactly 0 / 1 and its
  gradient is the soft sample's; how many patches are kept is free, and the
  ratio loss pulls it to rho = sparse_ratio (at least one patch is kept).
  Eval: deterministic top ceil(P rho) of the score (what the ratio loss trains
  the sampled count towards);
- re-synthesis (eq. 5): ``v_hat = W_s V + W_d V`` with W = the aggregation's
  softmax restricted to each branch's kept patches (the same
  ``cross_net.aggr_net`` routes both). The masking multiplies the softmax
  numerators by the decisions, so the straight-through gradient reaches the
  scores, the prior MLP and the views through dropped patches too;
- score: the late interaction of the caption's tokens with the N_c tokens
  ``v_hat`` alone (eq. 6 aligns V_hat with T; no class token, no extra token,
  and SGMA's learned residual phi is not implemented: released code has none).
  So the dense caption enters the paper score only through the selection.

``similarity`` is the score without a dense caption: the official sparse
branch alone (the full official score with the caption as its own dense text
is exactly twice that), and for the paper variant the full score with the
caption as its own dense text (v_hat is then 2 W_s V, whose direction, all the
late interaction sees, is W_s V).

Dense captions pair with captions: ``dense_text[j]`` goes with ``text[j]``
(``dense_for="caption"``, the explorer's long-standing convention and, in a
training batch, the dense caption of caption j's own image). The paper defines
the dense text per image (T_d = F_MLLM(I)); ``dense_for="image"`` pairs
``dense_text[i]`` with image i instead, which is the leak-free choice for
retrieval (the caption side never sees a description of its target image).

Training (``losses``): hinge with the hardest negatives (margin 0.2) on the
[B, B] matrix of full scores (official: sparse + dense branch; paper: the
joint score), plus ``2.0 * mean_pairs (lambda_1 r_s + lambda_2 r_d - rho)^2``
with r_s, r_d the keep ratios of the two branches per (image, caption) pair,
lambda_1 = lambda_2 = 0.5 (eq. 8; the paper gives no values), so the target is
the mean keep ratio of the two branches. For the official top-k it is the
constant 2 (ceil(P rho) / P - rho)^2 (0 when P rho is whole) and trains nothing.

Maps (``native_map_kinds``): ``kept-sparse`` / ``kept-dense`` (1 where a branch
keeps the patch, deterministic selection), ``word-max`` (per sentence, the max
over its word tokens, ``[CLS]``/``[SEP]`` left out, of the leaky-ReLU cosine with
each projected, unaggregated patch) and ``selection-score`` (the sparse
branch's selection score). ``sentence_maps`` gets no dense caption, so there
the dense branch uses the sentence itself (kept-dense then equals kept-sparse);
``dense_maps`` and ``kept_masks`` take dense captions.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import math
import os
import re
import tempfile
import warnings
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Mapping

import torch
import torch.nn.functional as F
from PIL import Image
from torch import nn

from explorer.core import compat
from explorer.core.errors import CheckpointError, CheckpointMismatchError
from explorer.models.batch import TrainingBatch
from explorer.models.features import ImageFeatures, TextFeatures
from explorer.models.io.checkpoints import KeyReport, RawCheckpoint, pop_ignored, strict_load
from explorer.models.methods import keys_with_prefix, register
from explorer.models.methods.base import GENERIC_MAP, Method
from explorer.models.nn.late_interaction import NEGATIVE_SLOPE, token_similarity
from explorer.models.nn.losses import hinge_hardest
from explorer.models.nn.refinement import TokenRefiner
from explorer.models.preprocess import IMAGENET_MEAN, IMAGENET_STD, Preprocess
from explorer.models.tokenizer import TokenBatch

VIT_PREFIX = "img_enc.visual_encoder."
VISION_PROJ_PREFIX = "img_enc.vision_proj."
BERT_PREFIX = "txt_enc.bert."
TEXT_FC_PREFIX = "txt_enc.fc."
AGGR_PREFIX = "cross_net.aggr_net."
SCORE_NET_PREFIX = "cross_net.score_net."  # the paper variant's prior MLP (not in official files)
POOLER_PREFIXES = (VIT_PREFIX + "pooler.", BERT_PREFIX + "pooler.")

DEFAULT_SPARSE_RATIO = 0.5
DEFAULT_AGGR_RATIO = 0.4
REFINER_HIDDEN_RATIO = 0.2  # LAPS/SEPS: hidden width of the aggregation MLP is int(0.2 C)
HEAD_WIDTH = 64  # ViT-B and BERT-base: 768 / 12
LAYER_NORM_EPS = 1e-12

SCORINGS = ("official", "paper")
DENSE_PAIRINGS = ("caption", "image")
PRIOR_HIDDEN_DIVISOR = 4  # the prior MLP's hidden width is C // 4 (the paper gives none)
CONSENSUS_BETA = 0.6  # b in s = (1 - b) s_p + b (s_text + s_im) / 2 (paper: 0.6)
GUMBEL_TAU = 1.0  # the paper gives none; DynamicViT's
MARGIN = 0.2  # hinge margin (LAPS/SEPS)
RATIO_LOSS_WEIGHT = 2.0
BRANCH_RATIO_WEIGHTS = (0.5, 0.5)  # lambda_1 (sparse), lambda_2 (dense) of eq. 8

KEPT_SPARSE_MAP = "kept-sparse"
KEPT_DENSE_MAP = "kept-dense"
WORD_MAX_MAP = "word-max"
SELECTION_SCORE_MAP = "selection-score"
KEPT_PATCHES_MAP = "kept-patches"  # earlier name of kept-sparse, still accepted
NATIVE_MAPS = (KEPT_SPARSE_MAP, KEPT_DENSE_MAP, WORD_MAX_MAP, SELECTION_SCORE_MAP)

IGNORED_KEYS = {
    "embeddings.position_ids": "BERT buffer (0..max_positions-1), rebuilt by the model",
    "embeddings.token_type_ids": "BERT buffer (zeros), rebuilt by the model",
}
OPTIONS = ("vocab_file", "do_lower_case", "sparse_ratio", "aggr_ratio", "vision_heads", "text_heads", "input_size",
           "scoring")


def _transformers():
    compat.ensure_torchvision_importable()
    import transformers

    return transformers


# ---- ViT key names: released (transformers 4.x) <-> installed -----------------------------------


@dataclass(frozen=True)
class VitNaming:
    """Where one transformers version keeps a ViT layer's weights."""

    label: str
    layer: str  # prefix of layer N, with {} for N
    parts: tuple[tuple[str, str], ...]  # (role, module path inside the layer)

    def key(self, index: int, role: str, leaf: str) -> str:
        return self.layer.format(index) + dict(self.parts)[role] + "." + leaf

    def parse(self, key: str) -> tuple[int, str, str] | None:
        """(layer index, role, leaf) of a layer key in this naming, or None."""
        head, _, tail = self.layer.partition("{}")
        match = re.fullmatch(re.escape(head) + r"(\d+)" + re.escape(tail) + r"(.+)\.([^.]+)", key)
        if match is None:
            return None
        by_path = {path: role for role, path in self.parts}
        role = by_path.get(match.group(2))
        return None if role is None else (int(match.group(1)), role, match.group(3))


RELEASED_VIT_NAMING = VitNaming("transformers 4.x", "encoder.layer.{}.", (
    ("q", "attention.attention.query"), ("k", "attention.attention.key"), ("v", "attention.attention.value"),
    ("o", "attention.output.dense"), ("fc1", "intermediate.dense"), ("fc2", "output.dense"),
    ("ln1", "layernorm_before"), ("ln2", "layernorm_after"),
))
V5_VIT_NAMING = VitNaming("transformers 5.x", "layers.{}.", (
    ("q", "attention.q_proj"), ("k", "attention.k_proj"), ("v", "attention.v_proj"),
    ("o", "attention.o_proj"), ("fc1", "mlp.fc1"), ("fc2", "mlp.fc2"),
    ("ln1", "layernorm_before"), ("ln2", "layernorm_after"),
))
KNOWN_VIT_NAMINGS = (RELEASED_VIT_NAMING, V5_VIT_NAMING)


@lru_cache(maxsize=1)
def installed_vit_naming() -> VitNaming:
    """The naming the installed transformers' ViTModel uses, read off a tiny one built on meta."""
    tf = _transformers()
    config = tf.ViTConfig(hidden_size=8, num_hidden_layers=1, num_attention_heads=1, intermediate_size=8,
                          image_size=4, patch_size=2)
    with torch.device("meta"):
        keys = set(tf.ViTModel(config).state_dict())
    for naming in KNOWN_VIT_NAMINGS:
        if all(naming.key(0, role, "weight") in keys for role, _ in naming.parts):
            return naming
    sample = ", ".join(sorted(keys)[:12])
    raise CheckpointError(f"The installed transformers {tf.__version__} names ViTModel weights in a way this "
                          f"explorer does not know ({sample}); SEPS checkpoints cannot be mapped onto it.")


def rename_vit_keys(tensors: Mapping[str, torch.Tensor], source: VitNaming, target: VitNaming,
                    prefix: str = VIT_PREFIX) -> dict[str, torch.Tensor]:
    """Rename the ViT layer keys under ``prefix`` from one naming to another (others unchanged)."""
    if source == target:
        return dict(tensors)
    out = {}
    for key, value in tensors.items():
        if key.startswith(prefix):
            parsed = source.parse(key[len(prefix):])
            if parsed is not None:
                key = prefix + target.key(*parsed)
        out[key] = value
    return out


def released_state_dict(state_dict: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Our module's state dict -> the released SEPS layout (transformers 4.x ViT names)."""
    return rename_vit_keys(state_dict, installed_vit_naming(), RELEASED_VIT_NAMING)


def from_released_layout(tensors: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Released SEPS keys -> the installed transformers' ViT names (a no-op where they agree)."""
    return rename_vit_keys(tensors, RELEASED_VIT_NAMING, installed_vit_naming())


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
        raise ValueError(f"non-square patches {patch_h}x{patch_w}")
    n_positions = tensors[p + "embeddings.position_embeddings"].shape[1]
    grid = math.isqrt(n_positions - 1)
    if grid * grid != n_positions - 1:
        raise ValueError(f"the ViT position table has {n_positions} rows, not 1 + a square number of patches")
    layers = {parsed[0] for key in tensors if key.startswith(p) and (parsed := naming.parse(key[len(p):]))}
    if not layers:
        raise ValueError("the ViT has no encoder layers")
    return {"width": int(width), "layers": max(layers) + 1, "heads": heads_for(int(width), heads),
            "mlp": int(tensors[p + naming.key(0, "fc1", "weight")].shape[0]),
            "patch_size": int(patch_h), "image_size": int(grid * patch_h)}


def infer_text(tensors: Mapping[str, torch.Tensor], heads: int | None = None) -> dict:
    p = BERT_PREFIX
    vocab, width = tensors[p + "embeddings.word_embeddings.weight"].shape
    layers = _layer_indices(tensors, re.escape(p) + r"encoder\.layer\.(\d+)\.")
    if not layers:
        raise ValueError("BERT has no encoder layers")
    return {"width": int(width), "layers": max(layers) + 1, "heads": heads_for(int(width), heads),
            "mlp": int(tensors[p + "encoder.layer.0.intermediate.dense.weight"].shape[0]),
            "vocab_size": int(vocab),
            "max_positions": int(tensors[p + "embeddings.position_embeddings.weight"].shape[0]),
            "type_vocab_size": int(tensors[p + "embeddings.token_type_embeddings.weight"].shape[0])}


# ---- modules ---------------------------------------------------------------------------------------


def build_vit(vision: Mapping) -> nn.Module:
    tf = _transformers()
    config = tf.ViTConfig(
        hidden_size=vision["width"], num_hidden_layers=vision["layers"], num_attention_heads=vision["heads"],
        intermediate_size=vision["mlp"], image_size=vision["image_size"], patch_size=vision["patch_size"],
        num_channels=3, hidden_act="gelu", layer_norm_eps=LAYER_NORM_EPS, qkv_bias=True,
        hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    return tf.ViTModel(config, add_pooling_layer=True)


def build_bert(text: Mapping) -> nn.Module:
    tf = _transformers()
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


class SepsCrossNet(nn.Module):
    """``aggr_net``: the aggregation (both scorings); ``score_net``: the paper's prior MLP (paper scoring only)."""

    def __init__(self, refiner: Mapping, score_hidden: int | None = None):
        super().__init__()
        self.aggr_net = TokenRefiner(**refiner)
        if score_hidden is not None:
            dim = int(refiner["dim"])
            self.score_net = nn.Sequential(nn.Linear(dim, score_hidden), nn.GELU(), nn.Linear(score_hidden, 1))


@dataclass(frozen=True)
class SquashPreprocess(Preprocess):
    """SEPS's official resize: the whole image squashed to the square, never cropped.

    The public ``Model`` asks for ``fit="crop"`` for scores and ``"squash"`` for
    maps; SEPS was trained and evaluated on squashed images, so both squash.
    """

    def resize(self, image: Image.Image, fit: str = "squash") -> Image.Image:
        if fit not in ("crop", "squash"):
            raise ValueError(f"fit must be 'crop' or 'squash', not {fit!r}")
        return super().resize(image, "squash")


# ---- tokenizer ---------------------------------------------------------------------------------------


def read_vocab(path: Path) -> dict[str, int]:
    """A BERT vocab.txt: one wordpiece a line, its id the line number."""
    with open(path, encoding="utf-8") as handle:
        tokens = [line.rstrip("\r\n") for line in handle]
    while tokens and not tokens[-1]:
        tokens.pop()
    vocab: dict[str, int] = {}
    for index, token in enumerate(tokens):
        vocab.setdefault(token, index)
    return vocab


def build_bert_tokenizer(vocab_file: str | Path, do_lower_case: bool = True):
    """A BERT wordpiece tokenizer from a vocab.txt or a Hugging Face tokenizer folder (never downloaded)."""
    tf = _transformers()
    path = Path(vocab_file).expanduser()
    if not path.exists():
        raise CheckpointError(f"SEPS vocabulary {path} does not exist; set \"options\": {{\"vocab_file\": "
                              "\"/path/to/bert-base-uncased/vocab.txt\"}} in the manifest.")
    try:
        if path.is_dir():
            return tf.BertTokenizer.from_pretrained(str(path), local_files_only=True)
        vocab = read_vocab(path)
        for special in ("[PAD]", "[UNK]", "[CLS]", "[SEP]"):
            if special not in vocab:
                raise CheckpointError(f"{path} is not a BERT vocabulary: it lacks {special}.")
        # transformers 5 takes the vocabulary itself (and silently ignores vocab_file=...);
        # transformers 4 takes the file.
        import inspect

        if "vocab" in inspect.signature(tf.BertTokenizer.__init__).parameters:
            tokenizer = tf.BertTokenizer(vocab=vocab, do_lower_case=do_lower_case)
        else:
            tokenizer = tf.BertTokenizerFast(vocab_file=str(path), do_lower_case=do_lower_case)
    except (OSError, ValueError, UnicodeDecodeError) as error:
        raise CheckpointError(f"Cannot build a BERT tokenizer from {path} ({error}).") from error
    if len(tokenizer.get_vocab()) != len(vocab):
        raise CheckpointError(f"The tokenizer built from {path} has {len(tokenizer.get_vocab())} tokens, "
                              f"the file {len(vocab)}: the installed transformers did not take the vocabulary.")
    return tokenizer




# ---- selection, re-synthesis, losses: pure functions -------------------------------------------------


def late_interaction_batch(text_tokens: torch.Tensor, image_tokens: torch.Tensor) -> torch.Tensor:
    """``late_interaction_score`` of one caption ([K, d]) against a batch of images ([B, N, d]) -> [B]."""
    text = F.normalize(text_tokens.float(), dim=-1)
    image = F.normalize(image_tokens.float(), dim=-1)
    sim = F.leaky_relu(torch.einsum("kd,bnd->bkn", text, image), NEGATIVE_SLOPE)
    return sim.max(dim=2).values.mean(dim=1) + sim.max(dim=1).values.mean(dim=1)


def min_max(values: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """(x - min) / (max - min) along ``dim``, into [0, 1]; a constant row gives 0."""
    low = values.amin(dim=dim, keepdim=True)
    high = values.amax(dim=dim, keepdim=True)
    return (values - low) / (high - low).clamp_min(1e-12)


def view_scores(patches: torch.Tensor, anchors: torch.Tensor, per_image: bool = False) -> torch.Tensor:
    """Paper eq. 2: ``minmax_i(v_i . E / d)`` over the patches of each image.

    ``patches`` [B, P, d]; ``anchors`` [M, d] (one per text: -> [B, M, P]) or,
    with ``per_image``, [B, d] (one per image: -> [B, 1, P]).
    """
    patches = patches.float()
    d = patches.shape[-1]
    if per_image:
        dots = torch.einsum("bpd,bd->bp", patches, anchors.float())[:, None]
    else:
        dots = torch.einsum("bpd,md->bmp", patches, anchors.float())
    return min_max(dots / d, dim=-1)


def consensus(prior: torch.Tensor, text_view: torch.Tensor, image_view: torch.Tensor,
              beta: float = CONSENSUS_BETA) -> torch.Tensor:
    """Paper eq. 3: ``(1 - beta) s_p + beta (s_text + s_im) / 2`` (broadcasting)."""
    return (1 - beta) * prior + beta * (text_view + image_view) / 2


def top_k_mask(scores: torch.Tensor, k: int) -> torch.Tensor:
    """1.0 at the ``k`` highest scores of each row (ties: the earlier patch), else 0.0; no gradient."""
    scores = scores.detach()
    order = torch.sort(scores, dim=-1, descending=True, stable=True).indices
    return torch.zeros_like(scores).scatter(-1, order[..., :k], 1.0)


def gumbel_keep(scores: torch.Tensor, tau: float = GUMBEL_TAU, generator: torch.Generator | None = None,
                eps: float = 1e-6) -> torch.Tensor:
    """Paper eq. 4 per patch, classes (keep, drop) with pi = (s, 1 - s): a hard straight-through sample.

    The value is exactly 1.0 (kept) or 0.0; the gradient is that of the soft
    Gumbel-softmax probability of "keep". A row that would keep nothing keeps
    its highest-scoring patch.
    """
    s = scores.float().clamp(eps, 1 - eps)
    logits = torch.stack([s.log(), (-s).log1p()], dim=-1)
    uniform = torch.rand(logits.shape, generator=generator, device=logits.device).clamp(1e-10, 1 - 1e-10)
    soft = ((logits - (-uniform.log()).log()) / tau).softmax(dim=-1)[..., 0]
    hard = (soft > 0.5).float()
    empty = hard.sum(dim=-1, keepdim=True) == 0
    best = F.one_hot(s.argmax(dim=-1), s.shape[-1]).float()
    hard = torch.where(empty, torch.maximum(hard, best), hard)
    return hard + (soft - soft.detach())


def select_patches(scores: torch.Tensor, ratio: float, stochastic: bool, tau: float = GUMBEL_TAU,
                   generator: torch.Generator | None = None) -> torch.Tensor:
    """Keep decisions [..., P]: a Gumbel sample while training, else the top ceil(P * ratio)."""
    if stochastic:
        return gumbel_keep(scores, tau, generator)
    return top_k_mask(scores, math.ceil(scores.shape[-1] * ratio))


def aggregate_kept(aggr_net: TokenRefiner, patches: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
    """Re-synthesis of the kept patches into N_c tokens: [B, P, d] patches, [B, M, P] decisions -> [B, M, N_c, d].

    ``W = softmax_over_kept(scale * MLP(V)^T)`` (the aggregation's assignment
    restricted to the kept patches), written as ``keep_i exp(l_i) / sum_k keep_k
    exp(l_k)`` so that, with hard 0/1 decisions, it equals running ``aggr_net``
    on the kept patches alone, and a straight-through decision gets a gradient
    even where it dropped the patch.
    """
    logits = (aggr_net.weight(patches).transpose(1, 2) * aggr_net.scale).float()[:, None]  # [B, 1, N_c, P]
    kept = keep.detach()[..., None, :] > 0.5
    ref = logits.masked_fill(~kept, float("-inf")).amax(dim=-1, keepdim=True)
    ref = torch.where(torch.isfinite(ref), ref, logits.amax(dim=-1, keepdim=True)).detach()
    numerators = keep.float()[..., None, :] * torch.exp((logits - ref).clamp(max=50.0))
    weights = numerators / numerators.sum(dim=-1, keepdim=True).clamp_min(1e-12)
    return weights @ patches.float()[:, None]


def seps_loss_terms(scores: torch.Tensor, keep_sparse: torch.Tensor, keep_dense: torch.Tensor, target: float,
                    margin: float = MARGIN, ratio_weight: float = RATIO_LOSS_WEIGHT,
                    branch_weights: tuple[float, float] = BRANCH_RATIO_WEIGHTS) -> dict[str, torch.Tensor]:
    """The weighted SEPS loss terms.

    ``scores`` [B, B] image x caption (positives on the diagonal); ``keep_*``
    [B, B, P] the decisions of each pair's branches. ``hinge``: VSE++'s hardest
    negative hinge summed over the batch; ``ratio``: ``ratio_weight * mean over
    pairs of (l1 r_s + l2 r_d - target)^2``, r = the pair's mean decision.
    """
    l1, l2 = branch_weights
    ratio = l1 * keep_sparse.float().mean(dim=-1) + l2 * keep_dense.float().mean(dim=-1)
    return {"hinge": hinge_hardest(scores, margin),
            "ratio": ratio_weight * ((ratio - target) ** 2).mean()}


@dataclass
class PairOutputs:
    """Everything SEPS computes for images x captions (each [B, M] or [B, M, P])."""

    scores: torch.Tensor  # the full score (official: sparse + dense branch; paper: joint)
    keep_sparse: torch.Tensor  # keep decisions of the sparse branch (0/1 values)
    keep_dense: torch.Tensor  # ... of the dense branch
    score_sparse: torch.Tensor  # the selection score the sparse branch ranks by
    score_dense: torch.Tensor  # ... the dense branch


# ---- example vocabulary ---------------------------------------------------------------------------------

_EXAMPLE_WORDS = ("a an the of on in at to is are and with sits left right top bottom centre corner background "
                  "plain grey red green blue yellow purple orange cube ball cone ring star disk cat dog mat floor "
                  ". , ##s").split()


def example_vocabulary() -> list[str]:
    """A tiny BERT vocabulary: the specials, then every word of ``example_batch``'s captions (and a few more)."""
    from explorer.models import batch as batch_module

    words = set(_EXAMPLE_WORDS)
    for name in ("_COLOURS", "_SHAPES", "_PLACES"):
        for phrase in getattr(batch_module, name, ()):
            words.update(phrase.lower().split())
    return ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *sorted(words)]


def example_vocab_file() -> Path:
    """Write the example vocabulary once (content-addressed, atomically) under the temp folder."""
    text = "\n".join(example_vocabulary()) + "\n"
    digest = hashlib.sha256(text.encode()).hexdigest()[:12]
    path = Path(tempfile.gettempdir()) / "explorer-seps" / f"vocab-{digest}.txt"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
        tmp.write_text(text, encoding="utf-8")
        tmp.replace(path)
    return path


def example_sizes(size: str, vocab_size: int) -> dict:
    if size == "tiny":
        return {"vision": {"width": 64, "layers": 2, "heads": 1, "mlp": 128, "patch_size": 16, "image_size": 64},
                "text": {"width": 64, "layers": 2, "heads": 1, "mlp": 128, "vocab_size": vocab_size,
                         "max_positions": 64, "type_vocab_size": 2},
                "embed_dim": 32}
    if size == "base":  # ViT-B/16 + BERT-base, C = 512
        return {"vision": {"width": 768, "layers": 12, "heads": 12, "mlp": 3072, "patch_size": 16,
                           "image_size": 224},
                "text": {"width": 768, "layers": 12, "heads": 12, "mlp": 3072, "vocab_size": max(30522, vocab_size),
                         "max_positions": 512, "type_vocab_size": 2},
                "embed_dim": 512}
    raise ValueError(f"size must be 'tiny' or 'base', not {size!r}")


# ---- the method ------------------------------------------------------------------------------------------


@register
class SepsMethod(nn.Module, Method):
    name = "seps"
    title = "SEPS"
    detect_priority = 30
    native_map_kinds = NATIVE_MAPS
    new_module_prefixes = ("cross_net.",)  # the aggregation and, in the paper variant, the prior MLP
    # Released weights SEPS never reads (frozen here; see the module docstring).
    parameters_without_gradient = POOLER_PREFIXES

    def __init__(self, vision: Mapping, text: Mapping, embed_dim: int, refiner: Mapping | None = None,
                 sparse_ratio: float = DEFAULT_SPARSE_RATIO, aggr_ratio: float = DEFAULT_AGGR_RATIO,
                 vocab_file: str | None = None, do_lower_case: bool = True, input_size: int | None = None,
                 scoring: str = "official", score_hidden: int | None = None):
        super().__init__()
        if not 0 < float(sparse_ratio) <= 1:
            raise ValueError(f"sparse_ratio must be in (0, 1], not {sparse_ratio}")
        if scoring not in SCORINGS:
            raise ValueError(f"scoring must be one of {', '.join(SCORINGS)}, not {scoring!r}")
        if scoring == "official" and score_hidden is not None:
            raise ValueError("score_hidden sizes the paper variant's prior MLP; the official scoring has none")
        self.vision, self.text = dict(vision), dict(text)
        self.embed_dim = int(embed_dim)
        # input_size: the pixels the model is fed; the ViT's position table is for vision["image_size"]
        self.input_size = int(input_size or self.vision["image_size"])
        if self.input_size % self.vision["patch_size"]:
            raise ValueError(f"input size {self.input_size} is not a multiple of the patch size")
        grid = self.input_size // self.vision["patch_size"]
        if refiner is None:
            n_out = max(1, int(grid * grid * aggr_ratio * sparse_ratio))
            refiner = {"dim": self.embed_dim, "hidden": int(self.embed_dim * REFINER_HIDDEN_RATIO), "n_out": n_out}
        self.refiner = {k: int(v) for k, v in refiner.items()}
        if self.refiner["dim"] != self.embed_dim:
            raise ValueError(f"the aggregation works on {self.refiner['dim']}-d tokens, the embeddings are "
                             f"{self.embed_dim}-d")
        self.sparse_ratio, self.aggr_ratio = float(sparse_ratio), float(aggr_ratio)
        self.scoring = scoring
        self.score_hidden = None
        if scoring == "paper":
            self.score_hidden = int(score_hidden or max(1, self.embed_dim // PRIOR_HIDDEN_DIVISOR))
        self.vocab_file = None if vocab_file is None else str(vocab_file)
        self.do_lower_case = bool(do_lower_case)
        self._tokenizer = None
        self._warned_no_dense = False
        self.grid_hw = (grid, grid)
        self.preprocess = SquashPreprocess(self.input_size, IMAGENET_MEAN, IMAGENET_STD)
        self.img_enc = SepsImageEncoder(self.vision, self.embed_dim)
        self.txt_enc = SepsTextEncoder(self.text, self.embed_dim)
        self.cross_net = SepsCrossNet(self.refiner, self.score_hidden)
        for name, parameter in self.named_parameters():
            if name.startswith(POOLER_PREFIXES):
                parameter.requires_grad_(False)

    # ---- what the model is ---------------------------------------------------------------------

    @property
    def context_length(self) -> int:
        return self.text["max_positions"]

    @property
    def n_patches(self) -> int:
        return self.grid_hw[0] * self.grid_hw[1]

    @property
    def n_keep(self) -> int:
        """Patches the deterministic selection keeps: ceil(P * sparse_ratio), as the official TokenSparse."""
        return math.ceil(self.n_patches * self.sparse_ratio)

    @property
    def architecture_name(self) -> str:
        v, t = self.vision, self.text
        if (v["width"], v["layers"], v["patch_size"]) == (768, 12, 16):
            vision = "ViT-B/16"
        else:
            vision = f"ViT-w{v['width']}-l{v['layers']}/{v['patch_size']}"
        if self.input_size != 224:
            vision += f"@{self.input_size}"
        text = "BERT-base" if (t["width"], t["layers"]) == (768, 12) else f"BERT-w{t['width']}-l{t['layers']}"
        return f"{vision} + {text}" + (" (paper scoring)" if self.scoring == "paper" else "")

    def config(self) -> dict:
        return {"vision": dict(self.vision), "text": dict(self.text), "embed_dim": self.embed_dim,
                "refiner": dict(self.refiner), "sparse_ratio": self.sparse_ratio, "aggr_ratio": self.aggr_ratio,
                "vocab_file": self.vocab_file, "do_lower_case": self.do_lower_case, "input_size": self.input_size,
                "scoring": self.scoring, "score_hidden": self.score_hidden}

    @classmethod
    def build(cls, config: Mapping) -> "SepsMethod":
        return cls(**config)

    @classmethod
    def merge_config(cls, config: Mapping, overrides: Mapping | None) -> dict:
        merged = {**config, **(overrides or {})}
        before, after = config.get("scoring", "official"), merged.get("scoring", "official")
        if after not in SCORINGS:
            raise CheckpointError(f"SEPS scoring must be one of {', '.join(SCORINGS)}, not {after!r}.")
        if before != after:
            raise CheckpointError(
                f"This SEPS file was saved with scoring={before!r}; scoring={after!r} needs "
                + ("the paper variant's prior MLP (cross_net.score_net.*), which it does not hold."
                   if after == "paper" else "no prior MLP, but the file holds one (cross_net.score_net.*).")
                + " Load it with its own scoring.")
        return merged

    @classmethod
    def example(cls, size: str = "tiny", seed: int = 0, scoring: str = "official",
                vocab_file: str | Path | None = None, **extra) -> "SepsMethod":
        """A random model ("tiny": ViT/BERT of width 64, C = 32, 64 px; "base": ViT-B/16 + BERT-base, C = 512).

        Without ``vocab_file`` it tokenizes with ``example_vocab_file()``, which
        covers the words of ``explorer.models.batch.example_batch``.
        """
        vocab_file = Path(vocab_file) if vocab_file is not None else example_vocab_file()
        sizes = example_sizes(size, len(read_vocab(vocab_file)) if vocab_file.is_file() else 30522)
        torch.manual_seed(seed)
        return cls(**sizes, vocab_file=str(vocab_file), scoring=scoring, **extra)

    # ---- loading -------------------------------------------------------------------------------

    @classmethod
    def detect(cls, tensors, raw):
        if keys_with_prefix(tensors, VIT_PREFIX) and keys_with_prefix(tensors, BERT_PREFIX):
            return "seps"
        return None

    @classmethod
    def from_checkpoint(cls, raw: RawCheckpoint, fmt: str, overrides: Mapping | None = None,
                        dry_run: bool = False):
        report = KeyReport(source=str(raw.path), format=fmt)
        options = dict(overrides or {})
        unknown = sorted(set(options) - set(OPTIONS))
        if unknown:
            raise CheckpointError(f"SEPS has no option(s) {', '.join(unknown)}; it takes {', '.join(OPTIONS)}.")
        tensors = dict(raw.tensors)
        pop_ignored(tensors, IGNORED_KEYS, report)
        installed = installed_vit_naming()
        renamed = from_released_layout(tensors)
        if renamed.keys() != tensors.keys():
            report.notes.append(f"renamed ViT keys from the released {RELEASED_VIT_NAMING.label} names to the "
                                f"installed {installed.label} names")
        tensors = renamed
        scoring, score_hidden = cls._scoring_of(tensors, options.get("scoring"), raw, report)
        try:
            vision = infer_vision(tensors, installed, options.get("vision_heads"))
            text = infer_text(tensors, options.get("text_heads"))
            refiner = TokenRefiner.sizes_from(tensors, AGGR_PREFIX)
        except (KeyError, ValueError) as error:
            raise CheckpointMismatchError(f"{raw.path}: cannot read a SEPS architecture: missing or odd "
                                          f"{error}", report) from error
        for part, sizes, option in (("ViT", vision, "vision_heads"), ("BERT", text, "text_heads")):
            if option not in options:
                report.notes.append(f"{part}: {sizes['heads']} attention heads assumed (width / {HEAD_WIDTH}); "
                                    f"set the option {option} if the model differs")
        opt = raw.extras.get("opt")
        ratios = {}
        for name, default in (("sparse_ratio", DEFAULT_SPARSE_RATIO), ("aggr_ratio", DEFAULT_AGGR_RATIO)):
            if name in options:
                try:
                    ratios[name], source = float(options[name]), "the options"
                except (TypeError, ValueError) as error:
                    raise CheckpointError(f"SEPS option {name} must be a number, not {options[name]!r}.") from error
            elif opt is not None and getattr(opt, name, None) is not None:
                ratios[name], source = float(getattr(opt, name)), "the file's opt"
            else:
                ratios[name], source = default, "the default"
            report.notes.append(f"{name} = {ratios[name]:g} (from {source})")
        input_size = int(options.get("input_size") or vision["image_size"])
        if input_size != vision["image_size"]:
            report.notes.append(f"images at {input_size} px with the ViT's {vision['image_size']} px position "
                                "table interpolated (option input_size)")
        n_patches = (input_size // vision["patch_size"]) ** 2
        expected = int(n_patches * ratios["aggr_ratio"] * ratios["sparse_ratio"])
        if expected != refiner["n_out"]:
            report.notes.append(f"the aggregation makes {refiner['n_out']} tokens, but {n_patches} patches x "
                                f"aggr_ratio x sparse_ratio gives {expected}: the model may have been trained at "
                                "another image size (option input_size) or with other ratios")
        vocab_file = options.get("vocab_file")
        if vocab_file is not None and not Path(vocab_file).expanduser().exists():
            raise CheckpointError(f"SEPS vocabulary {vocab_file} (option vocab_file) does not exist.")
        if vocab_file is None:
            report.notes.append('no BERT vocabulary: set "options": {"vocab_file": ".../vocab.txt"} to tokenize')
        with torch.device("meta") if dry_run else contextlib.nullcontext():
            try:
                model = cls(vision, text, embed_dim=refiner["dim"], refiner=refiner, vocab_file=vocab_file,
                            do_lower_case=bool(options.get("do_lower_case", True)), input_size=input_size,
                            scoring=scoring, score_hidden=score_hidden, **ratios)
            except ValueError as error:
                raise CheckpointError(f"{raw.path}: cannot build SEPS with these options ({error}).") from error
        strict_load(model, tensors, report, dry_run=dry_run)
        return model, report

    @staticmethod
    def _scoring_of(tensors: Mapping[str, torch.Tensor], asked: str | None, raw: RawCheckpoint,
                    report: KeyReport) -> tuple[str, int | None]:
        """Which scoring a file is loaded with, and the prior MLP's hidden width (paper only)."""
        has_prior = keys_with_prefix(tensors, SCORE_NET_PREFIX)
        if asked is not None and asked not in SCORINGS:
            raise CheckpointError(f"SEPS option scoring must be one of {', '.join(SCORINGS)}, not {asked!r}.")
        if asked == "paper" and not has_prior:
            raise CheckpointError(
                f"{raw.path}: scoring='paper' needs the learned patch prior s_p = sigmoid(MLP(v)) "
                f"({SCORE_NET_PREFIX}*), which this file does not hold: official SEPS checkpoints were trained "
                "with the official scoring (cosine with the mean patch and the mean caption token, top-k). Load "
                "it with scoring='official' (the default), or train the paper variant first.")
        if asked == "official" and has_prior:
            raise CheckpointError(
                f"{raw.path} holds the paper variant's prior MLP ({SCORE_NET_PREFIX}*), which scoring='official' "
                "would leave unused; load it with scoring='paper' (the default for such a file).")
        scoring = asked or ("paper" if has_prior else "official")
        if has_prior:
            if asked is None:
                report.notes.append(f"scoring = paper (the file holds the prior MLP {SCORE_NET_PREFIX}*)")
            key = SCORE_NET_PREFIX + "0.weight"
            if key not in tensors:
                raise CheckpointMismatchError(f"{raw.path}: the prior MLP lacks {key}", report)
            return scoring, int(tensors[key].shape[0])
        return scoring, None

    def released_state_dict(self) -> dict:
        """The weights under the released SEPS names (the paper variant adds ``cross_net.score_net.*``)."""
        return released_state_dict(self.state_dict())

    def released_file_object(self) -> dict:
        """What the official training script saves: ``{'model', 'opt', 'epoch', 'best_rsum', 'Eiters'}``."""
        opt = argparse.Namespace(embed_size=self.embed_dim, sparse_ratio=self.sparse_ratio,
                                 aggr_ratio=self.aggr_ratio, num_patches=self.n_patches, img_res=self.input_size)
        return {"model": self.released_state_dict(), "opt": opt, "epoch": 0, "best_rsum": 0.0, "Eiters": 0}

    def release_load_options(self) -> dict:
        """The ``explorer.load`` options a released file of this model needs (the vocabulary is not in it)."""
        return {"vocab_file": self.vocab_file} if self.vocab_file else {}

    # ---- inputs ----------------------------------------------------------------------------------

    def set_vocab_file(self, vocab_file: str | Path, do_lower_case: bool | None = None) -> None:
        self.vocab_file = str(vocab_file)
        if do_lower_case is not None:
            self.do_lower_case = bool(do_lower_case)
        self._tokenizer = None

    @property
    def tokenizer(self):
        if self._tokenizer is None:
            if self.vocab_file is None:
                raise CheckpointError(
                    "SEPS needs the BERT vocabulary (bert-base-uncased vocab.txt), which its checkpoint does not "
                    'hold: set "options": {"vocab_file": "/path/to/vocab.txt"} in the model\'s manifest '
                    "(or pass options={'vocab_file': ...} to explorer.load).")
            tokenizer = build_bert_tokenizer(self.vocab_file, self.do_lower_case)
            if len(tokenizer.get_vocab()) > self.text["vocab_size"]:
                raise CheckpointError(f"{self.vocab_file} has {len(tokenizer.get_vocab())} tokens; this BERT "
                                      f"knows only {self.text['vocab_size']}.")
            self._tokenizer = tokenizer
        return self._tokenizer

    def tokenize(self, texts: list[str]) -> TokenBatch:
        """``[CLS] wordpieces [SEP]``, 0-padded to BERT's positions; a long text keeps its head and [SEP]."""
        tokenizer = self.tokenizer
        limit = self.context_length
        pieces = tokenizer(list(texts), add_special_tokens=False)["input_ids"] if texts else []
        ids = torch.zeros(len(texts), limit, dtype=torch.long)
        n_tokens, n_cut = [], []
        for row, body in enumerate(pieces):
            tokens = [tokenizer.cls_token_id, *body, tokenizer.sep_token_id]
            n_tokens.append(len(tokens))
            n_cut.append(max(0, len(tokens) - limit))
            if len(tokens) > limit:
                tokens = tokens[: limit - 1] + [tokenizer.sep_token_id]
            ids[row, : len(tokens)] = torch.tensor(tokens)
        return TokenBatch(ids=ids, n_tokens=n_tokens, n_cut=n_cut)

    # ---- features --------------------------------------------------------------------------------

    def encode_image(self, pixels: torch.Tensor) -> ImageFeatures:
        tokens = self.img_enc(pixels)
        return ImageFeatures(cls=tokens[:, 0], patches=tokens[:, 1:], grid_hw=self.grid_hw)

    def encode_text(self, ids: torch.Tensor) -> TextFeatures:
        mask = ids != 0
        used = mask.any(dim=0).nonzero()
        length = int(used.max()) + 1 if len(used) else 1
        ids, mask = ids[:, :length], mask[:, :length]  # padding changes nothing under the attention mask
        tokens = self.txt_enc(ids, mask)
        return TextFeatures(eot=tokens[:, 0], tokens=tokens, mask=mask)

    def encode_captions(self, captions: list[str]) -> TextFeatures:
        """Tokenize and encode on the model's device (for losses)."""
        return self.encode_text(self.tokenize(captions).ids.to(self.cross_net.aggr_net.scale.device))

    # ---- official selection --------------------------------------------------------------------------

    @staticmethod
    def _words(text: TextFeatures, index: int) -> torch.Tensor:
        return text.tokens[index][text.mask[index]]

    @staticmethod
    def official_scores(image: ImageFeatures, text: TextFeatures) -> torch.Tensor:
        """[B, M, P] cos(patch, mean patch) + cos(patch, mean caption token), as the official code."""
        patches = image.patches.float()
        normed = F.normalize(patches, dim=-1)
        image_global = F.normalize(patches.mean(dim=1), dim=-1)
        mask = text.mask[..., None].float()
        word_mean = (text.tokens.float() * mask).sum(dim=1) / mask.sum(dim=1).clamp_min(1)
        text_global = F.normalize(word_mean, dim=-1)
        to_image = (normed * image_global[:, None]).sum(dim=-1)  # [B, P]
        return to_image[:, None] + torch.einsum("bpd,md->bmp", normed, text_global)

    def selection_scores(self, image: ImageFeatures, words: torch.Tensor) -> torch.Tensor:
        """[B, P] the official score for one caption's tokens ([K, C], valid tokens only)."""
        mask = torch.ones(1, words.shape[0], dtype=torch.bool, device=words.device)
        return self.official_scores(image, TextFeatures(eot=words[:1], tokens=words[None], mask=mask))[:, 0]

    def slim(self, image: ImageFeatures, scores: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Official: image tokens [B, 1 + N' + 1, C] = [CLS, aggregated kept patches, extra], kept mask [B, P]."""
        patches = image.patches
        n_keep = self.n_keep
        sorted_scores, order = torch.sort(scores, dim=1, descending=True, stable=True)
        keep, drop = order[:, :n_keep], order[:, n_keep:]
        width = patches.shape[-1]
        kept = torch.gather(patches, 1, keep[..., None].expand(-1, -1, width))
        dropped = torch.gather(patches, 1, drop[..., None].expand(-1, -1, width)).float()
        weights = sorted_scores[:, n_keep:].softmax(dim=1)[..., None]
        extra = (weights * dropped).sum(dim=1, keepdim=True)  # zeros when nothing is dropped
        refined, _ = self.cross_net.aggr_net(kept)
        tokens = torch.cat([image.cls[:, None].float(), refined.float(), extra], dim=1)
        kept_mask = torch.zeros_like(scores.detach()).scatter(1, keep, 1.0)
        return tokens, kept_mask

    def _official_branch(self, image: ImageFeatures, text: TextFeatures):
        """One official branch: scores [B, M], kept masks [B, M, P], selection scores [B, M, P]."""
        selection = self.official_scores(image, text)
        columns, masks = [], []
        for j in range(len(text)):
            tokens, kept = self.slim(image, selection[:, j])
            columns.append(late_interaction_batch(self._words(text, j), tokens))
            masks.append(kept)
        if not columns:
            empty = selection.new_zeros(len(image), 0)
            return empty, selection, selection
        return torch.stack(columns, dim=1), torch.stack(masks, dim=1), selection

    def branch_scores(self, image: ImageFeatures, text: TextFeatures) -> torch.Tensor:
        """[n_images, n_texts]: one official SEPS branch (select with each caption, then late interaction)."""
        return self._official_branch(image, text)[0]

    # ---- paper selection -------------------------------------------------------------------------------

    def prior_scores(self, image: ImageFeatures) -> torch.Tensor:
        """Paper eq. 1: [B, P] ``sigmoid(MLP(v_i))`` (paper scoring only)."""
        if self.scoring != "paper":
            raise ValueError("the learned patch prior exists only with scoring='paper'; official SEPS checkpoints "
                             "have none (they were trained with the official scoring)")
        return torch.sigmoid(self.cross_net.score_net(image.patches).squeeze(-1).float())

    def paper_scores(self, image: ImageFeatures, text: TextFeatures, dense_text: TextFeatures,
                     dense_for: str = "caption") -> tuple[torch.Tensor, torch.Tensor]:
        """Paper eqs. 1-3: the calibrated scores ``s_s`` and ``s_d``, each [B, M, P]."""
        prior = self.prior_scores(image)[:, None]
        s_im = view_scores(image.patches, image.cls, per_image=True)
        s_st = view_scores(image.patches, text.eot)
        s_dt = view_scores(image.patches, dense_text.eot, per_image=dense_for == "image")
        s_s = consensus(prior, s_st, s_im)
        s_d = consensus(prior, s_dt, s_im).expand_as(s_s)
        return s_s, s_d

    def _paper_pairs(self, image: ImageFeatures, text: TextFeatures, dense_text: TextFeatures, dense_for: str,
                     stochastic: bool, with_scores: bool = True) -> PairOutputs:
        s_s, s_d = self.paper_scores(image, text, dense_text, dense_for)
        keep_s = select_patches(s_s, self.sparse_ratio, stochastic)
        keep_d = select_patches(s_d, self.sparse_ratio, stochastic)
        scores = s_s.new_zeros(len(image), len(text))
        if with_scores and len(text):
            aggr = self.cross_net.aggr_net
            tokens = aggregate_kept(aggr, image.patches, keep_s) + aggregate_kept(aggr, image.patches, keep_d)
            scores = torch.stack([late_interaction_batch(self._words(text, j), tokens[:, j])
                                  for j in range(len(text))], dim=1)
        return PairOutputs(scores, keep_s, keep_d, s_s, s_d)

    # ---- both scorings ---------------------------------------------------------------------------------

    @staticmethod
    def _check_dense(image: ImageFeatures, text: TextFeatures, dense_text: TextFeatures | None,
                     dense_for: str) -> TextFeatures:
        if dense_for not in DENSE_PAIRINGS:
            raise ValueError(f"dense_for must be one of {', '.join(DENSE_PAIRINGS)}, not {dense_for!r}")
        if dense_text is None:
            if dense_for == "image":
                raise ValueError("dense_for='image' needs one dense caption per image")
            return text
        want, what = (len(text), "caption") if dense_for == "caption" else (len(image), "image")
        if len(dense_text) != want:
            raise ValueError(f"one dense caption per {what}: got {len(dense_text)} for {want}")
        return dense_text

    def pair_outputs(self, image: ImageFeatures, text: TextFeatures, dense_text: TextFeatures | None = None,
                     dense_for: str = "caption", stochastic: bool | None = None) -> PairOutputs:
        """Scores, keep decisions and selection scores of every (image, caption) pair.

        ``dense_text``: see ``similarity_with_dense``. ``stochastic`` (default:
        the module's training mode) samples the paper variant's Gumbel selection;
        the official selection is always the deterministic top-k.
        """
        dense_text = self._check_dense(image, text, dense_text, dense_for)
        if stochastic is None:
            stochastic = self.training
        if self.scoring == "paper":
            return self._paper_pairs(image, text, dense_text, dense_for, stochastic)
        sparse, keep_s, score_s = self._official_branch(image, text)
        if dense_for == "caption":
            dense, keep_d, score_d = self._official_branch(image, dense_text)
        else:  # image i with its own dense caption, the same for every caption
            parts = [self._official_branch(image[i], dense_text[i]) for i in range(len(image))]
            dense, keep_d, score_d = (torch.cat([part[k] for part in parts]) for k in range(3))
            dense = dense.expand(-1, len(text))
            keep_d, score_d = keep_d.expand(-1, len(text), -1), score_d.expand(-1, len(text), -1)
        return PairOutputs(sparse + dense, keep_s, keep_d, score_s, score_d)

    def similarity(self, image: ImageFeatures, text: TextFeatures) -> torch.Tensor:
        """Without dense captions: the official sparse branch alone (the full official score with the caption
        as its own dense text is twice this); the paper variant's full score with the caption as its dense text."""
        if self.scoring == "paper":
            return self.pair_outputs(image, text).scores
        return self.branch_scores(image, text)

    def similarity_with_dense(self, image: ImageFeatures, text: TextFeatures,
                              dense_text: TextFeatures | None = None, dense_for: str = "caption") -> torch.Tensor:
        """SEPS's full score [n_images, n_texts] with dense captions.

        ``dense_for="caption"``: ``dense_text[j]`` is the dense (e.g.
        MLLM-written) caption that goes with caption ``text[j]``;
        ``dense_for="image"``: ``dense_text[i]`` describes image ``i`` (the
        paper's T_d = F_MLLM(I)). Without ``dense_text`` each caption is its own
        dense text, an approximation of SEPS, not its published setting.
        Official: sparse branch + dense branch; paper: the joint score.
        """
        return self.pair_outputs(image, text, dense_text, dense_for).scores

    # ---- maps ------------------------------------------------------------------------------------

    def kept_masks(self, image: ImageFeatures, text: TextFeatures,
                   dense_text: TextFeatures | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """(sparse, dense) [M, rows, cols]: 1 where each branch keeps the patch (deterministic selection).

        One image; ``dense_text`` holds one dense caption per sentence or one for
        all of them; without it each sentence is its own dense caption.
        """
        out = self._map_pairs(image, text, dense_text)
        rows, cols = image.grid_hw
        return (out.keep_sparse[0].reshape(len(text), rows, cols),
                out.keep_dense[0].reshape(len(text), rows, cols))

    def _map_pairs(self, image: ImageFeatures, text: TextFeatures, dense_text: TextFeatures | None) -> PairOutputs:
        if len(image) != 1:
            raise ValueError(f"maps are drawn for one image at a time, got {len(image)}")
        if dense_text is not None and len(dense_text) == 1 and len(text) != 1:
            dense_text = TextFeatures(eot=dense_text.eot.expand(len(text), -1),
                                      tokens=dense_text.tokens.expand(len(text), -1, -1),
                                      mask=dense_text.mask.expand(len(text), -1))
        dense_text = self._check_dense(image, text, dense_text, "caption")
        if self.scoring == "paper":
            return self._paper_pairs(image, text, dense_text, "caption", stochastic=False, with_scores=False)
        score_s, score_d = self.official_scores(image, text), self.official_scores(image, dense_text)
        keep_s, keep_d = top_k_mask(score_s, self.n_keep), top_k_mask(score_d, self.n_keep)
        return PairOutputs(score_s.new_zeros(1, len(text)), keep_s, keep_d, score_s, score_d)

    @staticmethod
    def word_tokens(text: TextFeatures, index: int) -> torch.Tensor:
        """[K, C] the word tokens of one sentence: the valid tokens without [CLS] and [SEP] (all if none left)."""
        tokens = text.tokens[index][text.mask[index]]
        return tokens[1:-1] if tokens.shape[0] > 2 else tokens

    def word_maps(self, image: ImageFeatures, text: TextFeatures, index: int = 0) -> torch.Tensor:
        """[K, rows, cols]: per word token of sentence ``index``, its leaky-ReLU cosine with each projected patch."""
        if len(image) != 1:
            raise ValueError(f"maps are drawn for one image at a time, got {len(image)}")
        words = self.word_tokens(text, index)
        return token_similarity(words, image.patches[0]).reshape(len(words), *image.grid_hw)

    uses_dense_caption = True

    def dense_caption_maps(self, image: ImageFeatures, text: TextFeatures, dense: TextFeatures,
                           kind: str = GENERIC_MAP) -> torch.Tensor:
        """The Method hook: native kinds read the dense caption; the generic map does not."""
        if kind == GENERIC_MAP:
            return self.sentence_maps(image, text, kind)
        return self.dense_maps(image, text, dense, kind)

    def dense_maps(self, image: ImageFeatures, text: TextFeatures, dense_text: TextFeatures | None = None,
                   kind: str = KEPT_DENSE_MAP) -> torch.Tensor:
        """[M, rows, cols] native maps of one image with dense captions (one per sentence, or one for all).

        ``kept-sparse`` / ``kept-dense``: the branches' kept patches; ``word-max``:
        per sentence, the max over its words of the word-patch leaky-ReLU cosine
        on the unaggregated patches; ``selection-score``: the sparse branch's
        selection score (official score, or the paper's s_s).
        """
        if kind == KEPT_PATCHES_MAP:
            kind = KEPT_SPARSE_MAP
        if kind not in NATIVE_MAPS:
            raise ValueError(f"SEPS has no native map kind {kind!r}; it offers {', '.join(NATIVE_MAPS)}")
        if len(image) != 1:
            raise ValueError(f"maps are drawn for one image at a time, got {len(image)}")
        rows, cols = image.grid_hw
        if len(text) == 0:
            return image.patches.new_zeros(0, rows, cols).float()
        if kind == WORD_MAX_MAP:
            maps = [token_similarity(self.word_tokens(text, j), image.patches[0]).max(dim=0).values
                    for j in range(len(text))]
            return torch.stack(maps).reshape(len(text), rows, cols)
        out = self._map_pairs(image, text, dense_text)
        grid = {KEPT_SPARSE_MAP: out.keep_sparse, KEPT_DENSE_MAP: out.keep_dense,
                SELECTION_SCORE_MAP: out.score_sparse}[kind]
        return grid[0].reshape(len(text), rows, cols)

    def sentence_maps(self, image: ImageFeatures, text: TextFeatures, kind: str = GENERIC_MAP) -> torch.Tensor:
        """The generic map, or a native one (``dense_maps``) with each sentence as its own dense caption."""
        if kind not in (*NATIVE_MAPS, KEPT_PATCHES_MAP):
            return super().sentence_maps(image, text, kind)
        return self.dense_maps(image, text, None, kind)

    # ---- training ----------------------------------------------------------------------------------

    def losses(self, batch: TrainingBatch) -> dict[str, torch.Tensor]:
        """Hinge with the hardest negatives (margin 0.2) on the [B, B] full scores + the keep-ratio loss.

        Sparse captions: ``batch.captions``; dense captions:
        ``batch.dense_captions`` (without them the captions are their own dense
        text, and a warning says so). ``batch.extras["dense_for"]`` may be
        "image" to pair dense caption i with image i (default "caption").
        """
        dense = batch.dense_captions
        if dense is None:
            dense = batch.captions
            if not self._warned_no_dense:
                warnings.warn("SEPS trains on dense captions; the batch has none, so each caption is used as its "
                              "own dense caption", stacklevel=2)
                self._warned_no_dense = True
        parameter = next(self.img_enc.parameters())
        image = self.encode_image(batch.pixels.to(parameter.device, parameter.dtype))
        text = self.encode_captions(list(batch.captions))
        dense_text = self.encode_captions(list(dense))
        out = self.pair_outputs(image, text, dense_text, batch.extras.get("dense_for", "caption"))
        return seps_loss_terms(out.scores, out.keep_sparse, out.keep_dense, self.sparse_ratio)
