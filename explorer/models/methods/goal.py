"""GOAL / FAST-GOAL (papers/fast-goal.txt): CLIP fine-tuned with global-local alignment.

Pictures: Hugging Face's ``CLIPImageProcessor`` with the settings of openai/clip-vit-base-patch16,
as GOAL's code loads it (``Preprocess`` pipeline "hf-clip"; its centre crop floors the offset).

Checkpoints. Released GOAL checkpoints are Hugging Face ``CLIPModel`` state
dicts whose text position table was stretched to 248 rows with Long-CLIP's
formula; at inference the score is CLIP's global cosine. The official loader
uses ``strict=False``; ours reports every missing and unexpected key.
``released_state_dict`` writes the same Hugging Face layout back.

Training (``losses``), as the official training script:

    total = global + 0.5 * local + TSL_image + TSL_text

- global: CLIP's symmetric InfoNCE, image class embedding vs long-caption
  EOT embedding, logits ``exp(logit_scale) * cos``;
- local: the same between the FLISM crop (``batch.local_pixels``) and its
  sentence (``batch.local_sentences``), weighted 0.5;
- TSL image: the global image's last-block tokens (before ``ln_post``) at the
  patches inside ``batch.local_boxes`` (``[0, 1]`` coordinates, scaled by the
  input size S; patch columns ``floor(x0 S / p) .. ceil(x1 S / p) - 1``, rows
  likewise) are averaged, then ``ln_post`` and the visual projection give
  ``P_hat``; ``MSE(cos(P_hat, v_local), 1)`` with ``v_local`` the crop's class
  embedding;
- TSL text: the long caption's last-block token states (before ``ln_final``)
  over the local sentence's token span are averaged, then ``ln_final`` and
  the text projection give ``S_hat``; ``MSE(cos(S_hat, t_local), 1)`` with
  ``t_local`` the sentence's own EOT embedding.
Nothing is detached: gradients reach both the pooled side and the local
embeddings (no stop-gradient is described for the official script).

The span of a sentence inside its caption is found token-wise
(``sentence_token_span``): the caption is tokenized in full and the
sentence's BPE tokens are looked up as a contiguous run (first occurrence).
CLIP's BPE splits words at white space and punctuation, so a sentence that
``explorer.core.sentences.split_sentences`` cut out of its caption is always found.
The caption is encoded with the model's context (248): truncation keeps
positions ``0 .. context - 2`` of words and puts EOT in the last slot. A
sentence that runs past that point is pooled over the tokens that were kept;
a sentence that starts past it has no tokens in the encoded caption, and
that image's pair is left out of the text-side TSL (the other terms keep
it). If no pair of the batch has a kept span, the text TSL is 0.

GOAL vs FAST-GOAL. FAST-GOAL's training is GOAL's (the paper, Supplementary
A: "the actual training process follows the same architecture as GOAL");
what changes is how the local pairs are mined: FLISM (detector boxes + four
quadrants + a centre box, ``explorer.grounding.flism``) instead of GOAL's SAM-based
LISM. Both therefore share this one method. One cheap option follows the
paper's Eq. (14) instead of the official code: ``tsl_form="matrix"``
computes the n x n cosine matrix of pooled vs local embeddings and takes
``MSE(matrix, identity)`` (off-diagonal pairs pushed to 0); the default
``"pair"`` is the official per-pair ``MSE(cos, 1)``.

Native maps (beside the generic cosine map):
- ``self-attention``: the last vision block's attention row of the class
  token over the patches, averaged over heads. It is image-level: every
  sentence gets the same map. ``self-attention/head-k`` (k = 0 .. heads-1,
  counted from 0 as in ``self_attention_maps``) is one head's row; these
  kinds depend on the model, so they are in ``map_kinds`` (per instance),
  not in the class-level ``native_map_kinds``.
- ``tsl-box``: per sentence, the patch mask a TSL box would pool. Maps get
  no box, so the box is chosen without FLISM: among the 5 spatial regions
  (quadrants + centre, on the model's input square) the one whose
  box-pooled embedding (patches inside the box -> mean -> ``ln_post`` ->
  projection) has the highest cosine with the sentence; the map is that
  box's binary [rows, cols] patch mask.
Both come from ``GoalImageFeatures``, which ``encode_image`` returns: the
usual features plus the class-token attention row and the 5 region
embeddings (small: heads x P and 5 x d per image).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping, Sequence

import torch
import torch.nn.functional as F

from explorer.core.errors import ConfigError, InputError
from explorer.core.regions import spatial_regions
from explorer.models.batch import TrainingBatch
from explorer.models.features import ImageFeatures, TextFeatures
from explorer.models.io.hf_clip_layout import is_hf_clip, openai_to_hf
from explorer.models.measured import held_out
from explorer.models.methods import register
from explorer.models.methods.base import GENERIC_MAP, cosine_matrix
from explorer.models.methods.clip import ClipFamily, hf_text_positions
from explorer.models.nn.distributed import all_sizes, gather_with_grad, global_mean, world
from explorer.models.nn.losses import info_nce_pairs
from explorer.models.nn.positional import LONG_CONTEXT, SHORT_CONTEXT
from explorer.models.tokenizer import count_tokens, tokenize
from explorer.models.unpadded import unpadded

SELF_ATTENTION = "self-attention"
HEAD_PREFIX = "self-attention/head-"
TSL_BOX = "tsl-box"
LOCAL_WEIGHT = 0.5  # official script: global + 0.5 * local + TSL
TSL_WEIGHT = 1.0
TSL_FORMS = ("pair", "matrix")  # official code / paper Eq. (14)
_EDGE_TOLERANCE = 1e-4  # in patch units: 8.0000004 patches (a float32 box * size) is 8, not 9


# ---- features with what the native maps need ----------------------------------------------------


@dataclass
class GoalImageFeatures(ImageFeatures):
    """``ImageFeatures`` plus the inputs of GOAL's native maps (None when not computed)."""

    cls_attention: torch.Tensor | None = None  # [B, heads, P] last block: class token's attention on patches
    region_embeddings: torch.Tensor | None = None  # [B, 5, d] box-pooled quadrants + centre (projected)


# ---- geometry: boxes -> patches (Algorithm 1 of the paper's supplement) -------------------------


def box_patch_mask(boxes: torch.Tensor, patch_size: int, grid_hw: tuple[int, int]) -> torch.Tensor:
    """[N, rows, cols] bool: the patches a TSL box pools.

    ``boxes`` [N, 4] are (x0, y0, x1, y1) in pixels of the model's input. Patch columns
    ``floor(x0 / p) <= j < ceil(x1 / p)`` and rows ``floor(y0 / p) <= i < ceil(y1 / p)`` are
    selected, i.e. every patch the box overlaps. Indices are clamped to the grid, and a box
    thinner than a patch boundary still selects one patch (the one it starts in).
    """
    rows, cols = grid_hw
    scaled = boxes.detach().to("cpu", torch.float64).reshape(-1, 4) / patch_size
    x0 = torch.floor(scaled[:, 0] + _EDGE_TOLERANCE).long().clamp(0, cols - 1)
    y0 = torch.floor(scaled[:, 1] + _EDGE_TOLERANCE).long().clamp(0, rows - 1)
    x1 = torch.maximum(torch.ceil(scaled[:, 2] - _EDGE_TOLERANCE).long(), x0 + 1).clamp(max=cols)
    y1 = torch.maximum(torch.ceil(scaled[:, 3] - _EDGE_TOLERANCE).long(), y0 + 1).clamp(max=rows)
    row = torch.arange(rows)[None, :, None]
    col = torch.arange(cols)[None, None, :]
    return ((row >= y0[:, None, None]) & (row < y1[:, None, None])
            & (col >= x0[:, None, None]) & (col < x1[:, None, None]))


# ---- text: where a sentence sits inside its caption ---------------------------------------------


@dataclass(frozen=True)
class TokenSpan:
    """A sentence's tokens inside its caption's ids (SOT at position 0)."""

    start: int  # position of the sentence's first token
    full_stop: int  # one past its last token, were the caption not truncated
    context_length: int

    @property
    def stop(self) -> int:
        """One past the last of its tokens that the encoded caption still holds (>= start)."""
        return max(self.start, min(self.full_stop, self.context_length - 1))  # the last slot is EOT

    @property
    def n_tokens(self) -> int:
        return self.full_stop - self.start

    @property
    def n_kept(self) -> int:
        return self.stop - self.start

    @property
    def n_cut(self) -> int:
        return self.n_tokens - self.n_kept

    @property
    def wholly_cut(self) -> bool:
        return self.n_kept == 0


def _words(text: str) -> list[int]:
    """The text's BPE ids without SOT and EOT (nothing truncated)."""
    return tokenize([text], count_tokens(text)).ids[0, 1:-1].tolist()


def sentence_token_span(caption: str, sentence: str, context_length: int) -> TokenSpan:
    """Find ``sentence``'s tokens in ``caption``'s token sequence (first occurrence).

    Raises ``ValueError`` if the sentence is empty or its tokens do not occur contiguously
    in the caption (it is not a sentence of that caption).
    """
    words = _words(sentence)
    if not words:
        raise InputError(f"cannot locate an empty sentence ({sentence!r}) in its caption")
    caption_ids = [None, *_words(caption)]  # position 0 is SOT
    n = len(words)
    for start in range(1, len(caption_ids) - n + 1):
        if caption_ids[start:start + n] == words:
            return TokenSpan(start=start, full_stop=start + n, context_length=context_length)
    raise InputError(f"the sentence {sentence!r} is not part of its caption {caption[:80]!r}...: "
                     "its tokens do not occur there")


def span_weights(spans: Sequence[TokenSpan], length: int) -> torch.Tensor:
    """[B, length] averaging weights over each span's kept tokens (a row of zeros if none is kept)."""
    weights = torch.zeros(len(spans), length)
    for row, span in enumerate(spans):
        if span.n_kept:
            weights[row, span.start:span.stop] = 1.0 / span.n_kept
    return weights


# ---- the method ---------------------------------------------------------------------------------


def _last_block_attention(block, x: torch.Tensor) -> torch.Tensor:
    """softmax(q k^T / sqrt(head width)) of one open_clip block on its batch-first input x."""
    h = block.ln_1(x)
    width, heads = h.shape[-1], block.attn.num_heads
    bias = None if block.attn.in_proj_bias is None else block.attn.in_proj_bias[: 2 * width]
    q, k = F.linear(h, block.attn.in_proj_weight[: 2 * width], bias).float().chunk(2, dim=-1)
    n, length = h.shape[:2]
    q = q.reshape(n, length, heads, width // heads).transpose(1, 2)
    k = k.reshape(n, length, heads, width // heads).transpose(1, 2)
    return (q @ k.transpose(-2, -1) / math.sqrt(width // heads)).softmax(dim=-1)


@register
class GoalMethod(ClipFamily):
    name = "goal"
    title = "GOAL"
    detect_priority = 10
    default_context = LONG_CONTEXT
    needs_local_pairs = True  # its local loss trains on one FLISM (region, sentence) pair per image
    native_map_kinds = (SELF_ATTENTION, TSL_BOX)  # plus "self-attention/head-k" per head (see map_kinds)
    preprocess_pipeline = "hf-clip"  # GOAL's code: AutoProcessor (CLIPImageProcessor) of openai/clip-vit-base-patch16
    # Its self-attention is one map for every sentence, not a sentence map: it opens on ClearCLIP, its best
    # measured kind (Grad-CAM is its worst: 3.5 mIoU, 4.4 pointing).
    measured_grounding = held_out("demo-goal", {
        "generic": (4.9, 14.5), "gradcam": (3.5, 4.4), "legrad": (3.1, 3.1), "clearclip": (10.7, 30.2),
        "naclip": (11.6, 22.6)})

    def __init__(self, arch, tsl_form: str = "pair"):
        if tsl_form not in TSL_FORMS:
            raise ConfigError(f"GOAL tsl_form must be one of {TSL_FORMS}, not {tsl_form!r}")
        super().__init__(arch, tsl_form=tsl_form)
        self.tsl_form = tsl_form

    @classmethod
    def detect(cls, tensors, raw):
        if is_hf_clip(tensors) and hf_text_positions(tensors) > SHORT_CONTEXT:
            return "goal-hf"
        return None

    @classmethod
    def extra_config_from(cls, tensors: Mapping[str, torch.Tensor]) -> dict:
        return {"tsl_form": "pair"}  # a manifest may choose "matrix" (paper Eq. 14)

    def released_state_dict(self) -> dict:
        """The Hugging Face ``CLIPModel`` layout GOAL releases (q/k/v split, projections transposed)."""
        return openai_to_hf(self.state_dict())

    @property
    def head_map_kinds(self) -> tuple[str, ...]:
        return tuple(f"{HEAD_PREFIX}{k}" for k in range(self.visual.transformer.resblocks[-1].attn.num_heads))

    # ---- image tower, keeping what TSL and the maps need ---------------------------------------

    def _vision_hidden(self, pixels: torch.Tensor, with_attention: bool = False):
        """Last-block tokens before ``ln_post`` [B, 1 + P, width], and the last block's attention if asked."""
        visual = self.visual
        x = visual._embeds(pixels.to(self.dtype))
        if not with_attention:
            return visual.transformer(x), None
        transformer = visual.transformer
        batch_first = getattr(transformer, "batch_first", True)
        x = x if batch_first else x.transpose(0, 1)
        for block in transformer.resblocks[:-1]:
            x = block(x)
        last = transformer.resblocks[-1]
        attention = _last_block_attention(last, x if batch_first else x.transpose(0, 1))
        x = last(x)
        return (x if batch_first else x.transpose(0, 1)), attention

    def _project_pooled(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.project_image(self.visual.ln_post(hidden))

    def box_masks(self, boxes: torch.Tensor) -> torch.Tensor:
        """[B, rows, cols] bool: the patches each box ([B, 4], [0, 1] of the input image) pools."""
        size = self.arch.image_size
        return box_patch_mask(boxes.detach().double() * size, self.arch.patch_size, self.grid_hw)

    def spatial_region_masks(self) -> torch.Tensor:
        """[5, rows, cols] bool: the quadrants (TL, TR, BL, BR) and the centre box on the input square."""
        size = self.arch.image_size
        boxes = torch.tensor([region.box for region in spatial_regions(size, size)], dtype=torch.float64)
        return box_patch_mask(boxes, self.arch.patch_size, self.grid_hw)

    def _box_pool(self, hidden: torch.Tensor, boxes: torch.Tensor) -> torch.Tensor:
        """One box per image: mean of its patches (before ``ln_post``) -> ``ln_post`` -> projection, [B, d]."""
        weights = self.box_masks(boxes).flatten(1).to(hidden.device, hidden.dtype)
        weights = weights / weights.sum(dim=1, keepdim=True)
        return self.in_embedding_space(self._project_pooled(torch.einsum("bp,bpw->bw", weights, hidden[:, 1:])))

    def _region_pool(self, hidden: torch.Tensor) -> torch.Tensor:
        """The 5 spatial regions of every image, pooled as TSL pools a box: [B, 5, d]."""
        weights = self.spatial_region_masks().flatten(1).to(hidden.device, hidden.dtype)
        weights = weights / weights.sum(dim=1, keepdim=True)
        return self.in_embedding_space(self._project_pooled(torch.einsum("rp,bpw->brw", weights, hidden[:, 1:])))

    def box_pooled_embedding(self, pixels: torch.Tensor, boxes: torch.Tensor) -> torch.Tensor:
        """[B, d]: TSL's pooled embedding of each image's box (boxes [B, 4] in [0, 1] coordinates)."""
        hidden, _ = self._vision_hidden(pixels)
        return self._box_pool(hidden, boxes.to(hidden.device))

    def encode_image(self, pixels: torch.Tensor) -> GoalImageFeatures:
        hidden, attention = self._vision_hidden(pixels, with_attention=True)
        projected = self.project_image(self.visual.ln_post(hidden))
        return GoalImageFeatures(cls=self.pool_image(projected), patches=self.patch_features(projected),
                                 grid_hw=self.grid_hw,
                                 cls_attention=attention[:, :, 0, 1:], region_embeddings=self._region_pool(hidden))

    def self_attention_maps(self, image_pixels: torch.Tensor) -> torch.Tensor:
        """[heads, rows, cols]: the last block's class-token attention over the patches of one image."""
        pixels = image_pixels if image_pixels.dim() == 4 else image_pixels[None]
        if pixels.shape[0] != 1:
            raise InputError(f"self-attention maps are drawn for one image at a time, got {pixels.shape[0]}")
        rows, cols = self.grid_hw
        attention = self.image_attention(pixels)[0, :, 0, 1:]
        return attention.reshape(attention.shape[0], rows, cols)

    # ---- text tower, keeping the states before ln_final ----------------------------------------

    def _text_hidden(self, ids: torch.Tensor) -> torch.Tensor:
        """Last-block token states before ``ln_final`` [B, K, width]."""
        length = ids.shape[1]
        x = self.token_embedding(ids).to(self.dtype) + self.positional_embedding[:length].to(self.dtype)
        return self.transformer(x, attn_mask=self.attn_mask[:length, :length].to(x.dtype))

    def sentence_spans(self, captions: Sequence[str], sentences: Sequence[str]) -> list[TokenSpan]:
        """Each sentence's token span inside its caption, at this model's context."""
        return [sentence_token_span(c, s, self.context_length) for c, s in zip(captions, sentences)]

    # ---- maps ----------------------------------------------------------------------------------

    def sentence_maps(self, image: ImageFeatures, text: TextFeatures, kind: str = GENERIC_MAP) -> torch.Tensor:
        if kind == GENERIC_MAP or kind not in (*self.native_map_kinds, *self.head_map_kinds):
            return super().sentence_maps(image, text, kind)  # the generic map, or the "no such kind" error
        if len(image) != 1:
            raise InputError(f"maps are drawn for one image at a time, got {len(image)}")
        rows, cols = image.grid_hw
        if kind == TSL_BOX:
            regions = _needs(image, "region_embeddings")[0]  # [5, d]
            best = cosine_matrix(text.eot, regions).argmax(dim=1)  # [M]
            return self.spatial_region_masks()[best.cpu()].to(regions.device, regions.dtype)
        attention = _needs(image, "cls_attention")[0]  # [heads, P]
        row = attention.mean(dim=0) if kind == SELF_ATTENTION else attention[int(kind[len(HEAD_PREFIX):])]
        return row.reshape(1, rows, cols).expand(len(text), rows, cols).clone()  # image-level: same for all

    # ---- training ------------------------------------------------------------------------------

    def _tsl(self, pooled: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        if world()[1] > 1:
            return self._tsl_global(pooled, target)
        if self.tsl_form == "matrix":  # paper Eq. (14): n x n cosines vs the identity
            scores = F.normalize(pooled, dim=-1) @ F.normalize(target, dim=-1).T
            return F.mse_loss(scores, torch.eye(len(pooled), device=scores.device, dtype=scores.dtype))
        cosine = F.cosine_similarity(pooled, target, dim=-1)
        return F.mse_loss(cosine, torch.ones_like(cosine))

    def _tsl_global(self, pooled: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        """``_tsl`` over every rank's samples under DDP (their counts may differ: a sentence not found in
        its caption is left out), scaled as ``nn.distributed`` says; the matrix form takes this rank's
        rows against every rank's targets."""
        if self.tsl_form != "matrix":
            return global_mean((F.cosine_similarity(pooled, target, dim=-1) - 1) ** 2)
        start = sum(all_sizes(len(pooled))[:world()[0]])  # this rank's first row in the global matrix
        scores = F.normalize(pooled, dim=-1) @ F.normalize(gather_with_grad(target, uneven=True), dim=-1).T
        rows = torch.arange(len(pooled), device=scores.device) + start
        eye = rows[:, None] == torch.arange(scores.shape[1], device=scores.device)[None, :]
        return global_mean(((scores - eye.to(scores.dtype)) ** 2).flatten())

    def losses(self, batch: TrainingBatch) -> dict[str, torch.Tensor]:
        """global + 0.5 * local + TSL image + TSL text (module docstring)."""
        batch.require("local_pixels", "local_sentences", "local_boxes", method=self.title)
        n, device = len(batch), self.positional_embedding.device
        # images: the global ones and their FLISM crops in one pass
        pixels = torch.cat([batch.pixels, batch.local_pixels]).to(device, self.dtype)
        hidden, _ = self._vision_hidden(pixels)
        cls = self.pool_image(self._project_pooled(hidden))
        image_global, image_local = cls[:n], cls[n:]
        pooled_image = self._box_pool(hidden[:n], batch.local_boxes)
        # texts: the long captions and the local sentences in one pass
        ids = torch.cat([self.tokenize(batch.captions).ids, self.tokenize(batch.local_sentences).ids])
        ids = unpadded(ids).to(device)  # the longest caption's length, not the context (causal tower)
        states = self._text_hidden(ids)
        eot = self.project_text(self.ln_final(states[torch.arange(2 * n, device=device), ids.argmax(dim=-1)]))
        text_global, text_local = eot[:n], eot[n:]
        spans = self.sentence_spans(batch.captions, batch.local_sentences)
        weights = span_weights(spans, ids.shape[1]).to(device, states.dtype)
        kept = weights.sum(dim=1) > 0
        pooled_text = self.project_text(self.ln_final(torch.einsum("bk,bkw->bw", weights[kept], states[:n][kept])))

        scale = self.logit_scale.exp()

        def logits(images, texts):
            return scale * cosine_logits(images, texts)

        terms = {  # the InfoNCE terms over the global batch under DDP; the TSL terms are per sample
            "global": info_nce_pairs(image_global, text_global, logits),
            "local": LOCAL_WEIGHT * info_nce_pairs(image_local, text_local, logits),
            "tsl_image": TSL_WEIGHT * self._tsl(pooled_image, image_local),
        }
        if world()[1] > 1:  # every rank takes part, with or without a kept sentence
            terms["tsl_text"] = TSL_WEIGHT * self._tsl(pooled_text, text_local[kept])
            return terms
        terms["tsl_text"] = (TSL_WEIGHT * self._tsl(pooled_text, text_local[kept]) if bool(kept.any())
                             else states.new_zeros(()))
        return terms


def cosine_logits(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return F.normalize(a, dim=-1) @ F.normalize(b, dim=-1).T


def _needs(image: ImageFeatures, field: str) -> torch.Tensor:
    value = getattr(image, field, None)
    if value is None:
        raise InputError(f"GOAL's native maps need the features GoalMethod.encode_image returns ({field} is "
                         "missing); these came from elsewhere")
    return value
