"""SEPS's two scorings, chosen with the ``scoring`` option, and the pure selection and aggregation maths.

The default ``"official"`` (``OfficialScoring``) is what released checkpoints
were trained with; ``"paper"`` (``PaperScoring``) follows the paper's text.

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
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from explorer.core.errors import ConfigError, InputError
from explorer.models.features import ImageFeatures, TextFeatures
from explorer.models.nn.late_interaction import late_interaction_score
from explorer.models.nn.refinement import TokenRefiner

SCORINGS = ("official", "paper")
DENSE_PAIRINGS = ("caption", "image")
PRIOR_HIDDEN_DIVISOR = 4  # the prior MLP's hidden width is C // 4 (the paper gives none)
CONSENSUS_BETA = 0.6  # b in s = (1 - b) s_p + b (s_text + s_im) / 2 (paper: 0.6)
GUMBEL_TAU = 1.0  # the paper gives none; DynamicViT's


# ---- selection and re-synthesis: pure functions ------------------------------------------------------


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


def calibrated_scores(prior: torch.Tensor, image: ImageFeatures, text: TextFeatures, dense_text: TextFeatures,
                      dense_for: str = "caption", beta: float = CONSENSUS_BETA) -> tuple[torch.Tensor, torch.Tensor]:
    """Paper eqs. 1-3: the calibrated scores ``s_s`` and ``s_d``, each [B, M, P], from the prior [B, P]."""
    prior = prior[:, None]
    s_im = view_scores(image.patches, image.cls, per_image=True)
    s_st = view_scores(image.patches, text.eot)
    s_dt = view_scores(image.patches, dense_text.eot, per_image=dense_for == "image")
    s_s = consensus(prior, s_st, s_im, beta)
    s_d = consensus(prior, s_dt, s_im, beta).expand_as(s_s)
    return s_s, s_d


# ---- what both scorings compute ----------------------------------------------------------------------


@dataclass
class PairOutputs:
    """Everything SEPS computes for images x captions (each [B, M] or [B, M, P])."""

    scores: torch.Tensor  # the full score (official: sparse + dense branch; paper: joint)
    keep_sparse: torch.Tensor  # keep decisions of the sparse branch (0/1 values)
    keep_dense: torch.Tensor  # ... of the dense branch
    score_sparse: torch.Tensor  # the selection score the sparse branch ranks by
    score_dense: torch.Tensor  # ... the dense branch


def caption_tokens(text: TextFeatures, index: int) -> torch.Tensor:
    """[K, C] the valid tokens of caption ``index`` ([CLS] and [SEP] included)."""
    return text.tokens[index][text.mask[index]]


def checked_dense_text(image: ImageFeatures, text: TextFeatures, dense_text: TextFeatures | None,
                       dense_for: str) -> TextFeatures:
    """The dense captions to use (the captions themselves when there are none), checked against the pairing."""
    if dense_for not in DENSE_PAIRINGS:
        raise InputError(f"dense_for must be one of {', '.join(DENSE_PAIRINGS)}, not {dense_for!r}")
    if dense_text is None:
        if dense_for == "image":
            raise InputError("dense_for='image' needs one dense caption per image")
        return text
    want, what = (len(text), "caption") if dense_for == "caption" else (len(image), "image")
    if len(dense_text) != want:
        raise InputError(f"one dense caption per {what}: got {len(dense_text)} for {want}")
    return dense_text


# ---- the two strategies ------------------------------------------------------------------------------


class OfficialScoring:
    """LAPS/SEPS official code: top-k by cosine scores, aggregation plus an extra token, branches summed."""

    name = "official"

    def __init__(self, n_keep: int, fold_gradient: bool = False):
        self.n_keep = n_keep  # ceil(P * sparse_ratio), as the official TokenSparse
        # The official code computes the selection scores under no_grad, so the fold token's softmax
        # weights pass no gradient back; ``fold_gradient=True`` lets them (the "hardest" recipe).
        self.fold_gradient = fold_gradient

    @staticmethod
    def selection_scores(image: ImageFeatures, text: TextFeatures) -> torch.Tensor:
        """[B, M, P] cos(patch, mean patch) + cos(patch, mean caption token), as the official code."""
        patches = image.patches.float()
        normed = F.normalize(patches, dim=-1)
        image_global = F.normalize(patches.mean(dim=1), dim=-1)
        mask = text.mask[..., None].float()
        word_mean = (text.tokens.float() * mask).sum(dim=1) / mask.sum(dim=1).clamp_min(1)
        text_global = F.normalize(word_mean, dim=-1)
        to_image = (normed * image_global[:, None]).sum(dim=-1)  # [B, P]
        return to_image[:, None] + torch.einsum("bpd,md->bmp", normed, text_global)

    @classmethod
    def caption_scores(cls, image: ImageFeatures, words: torch.Tensor) -> torch.Tensor:
        """[B, P] the official score for one caption's tokens ([K, C], valid tokens only)."""
        mask = torch.ones(1, words.shape[0], dtype=torch.bool, device=words.device)
        return cls.selection_scores(image, TextFeatures(eot=words[:1], tokens=words[None], mask=mask))[:, 0]

    def slim(self, aggr_net: TokenRefiner, image: ImageFeatures,
             scores: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Image tokens [B, 1 + N' + 1, C] = [CLS, aggregated kept patches, extra], kept mask [B, P]."""
        patches = image.patches
        n_keep = self.n_keep
        sorted_scores, order = torch.sort(scores, dim=1, descending=True, stable=True)
        keep, drop = order[:, :n_keep], order[:, n_keep:]
        width = patches.shape[-1]
        kept = torch.gather(patches, 1, keep[..., None].expand(-1, -1, width))
        dropped = torch.gather(patches, 1, drop[..., None].expand(-1, -1, width)).float()
        fold_scores = sorted_scores[:, n_keep:] if self.fold_gradient else sorted_scores[:, n_keep:].detach()
        weights = fold_scores.softmax(dim=1)[..., None]
        extra = (weights * dropped).sum(dim=1, keepdim=True)  # zeros when nothing is dropped
        refined, _ = aggr_net(kept)
        tokens = torch.cat([image.cls[:, None].float(), refined.float(), extra], dim=1)
        kept_mask = torch.zeros_like(scores.detach()).scatter(1, keep, 1.0)
        return tokens, kept_mask

    def branch(self, aggr_net: TokenRefiner, image: ImageFeatures,
               text: TextFeatures) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """One branch: scores [B, M], kept masks [B, M, P], selection scores [B, M, P]."""
        selection = self.selection_scores(image, text)
        columns, masks = [], []
        for j in range(len(text)):
            tokens, kept = self.slim(aggr_net, image, selection[:, j])
            columns.append(late_interaction_score(caption_tokens(text, j), tokens))
            masks.append(kept)
        if not columns:
            empty = selection.new_zeros(len(image), 0)
            return empty, selection, selection
        return torch.stack(columns, dim=1), torch.stack(masks, dim=1), selection

    def pair_outputs(self, cross_net: nn.Module, image: ImageFeatures, text: TextFeatures,
                     dense_text: TextFeatures, dense_for: str, stochastic: bool) -> PairOutputs:
        """The sparse branch plus the dense branch; the selection is the top-k, ``stochastic`` or not."""
        aggr = cross_net.aggr_net
        sparse, keep_s, score_s = self.branch(aggr, image, text)
        if dense_for == "caption":
            dense, keep_d, score_d = self.branch(aggr, image, dense_text)
        else:  # image i with its own dense caption, the same for every caption
            parts = [self.branch(aggr, image[i], dense_text[i]) for i in range(len(image))]
            dense, keep_d, score_d = (torch.cat([part[k] for part in parts]) for k in range(3))
            dense = dense.expand(-1, len(text))
            keep_d, score_d = keep_d.expand(-1, len(text), -1), score_d.expand(-1, len(text), -1)
        return PairOutputs(sparse + dense, keep_s, keep_d, score_s, score_d)

    def selections(self, cross_net: nn.Module, image: ImageFeatures, text: TextFeatures,
                   dense_text: TextFeatures) -> PairOutputs:
        """Both branches' kept patches and selection scores for one image (scores left at 0; for maps)."""
        score_s, score_d = self.selection_scores(image, text), self.selection_scores(image, dense_text)
        keep_s, keep_d = top_k_mask(score_s, self.n_keep), top_k_mask(score_d, self.n_keep)
        return PairOutputs(score_s.new_zeros(1, len(text)), keep_s, keep_d, score_s, score_d)

    def similarity(self, cross_net: nn.Module, image: ImageFeatures, text: TextFeatures,
                   stochastic: bool) -> torch.Tensor:
        """The sparse branch alone (with the caption as its own dense text the full score is twice this)."""
        return self.branch(cross_net.aggr_net, image, text)[0]


class PaperScoring:
    """The paper's Sec. 3.2: learned prior + calibrated views, Gumbel selection, joint re-synthesis."""

    name = "paper"

    def __init__(self, sparse_ratio: float, beta: float = CONSENSUS_BETA, tau: float = GUMBEL_TAU):
        self.sparse_ratio, self.beta, self.tau = sparse_ratio, beta, tau

    @staticmethod
    def prior_scores(score_net: nn.Module, image: ImageFeatures) -> torch.Tensor:
        """Paper eq. 1: [B, P] ``sigmoid(MLP(v_i))``."""
        return torch.sigmoid(score_net(image.patches).squeeze(-1).float())

    def pair_outputs(self, cross_net: nn.Module, image: ImageFeatures, text: TextFeatures,
                     dense_text: TextFeatures, dense_for: str, stochastic: bool,
                     with_scores: bool = True) -> PairOutputs:
        """The joint score: late interaction of each caption with ``W_s V + W_d V``."""
        s_s, s_d = calibrated_scores(self.prior_scores(cross_net.score_net, image), image, text, dense_text,
                                     dense_for, self.beta)
        keep_s = select_patches(s_s, self.sparse_ratio, stochastic, self.tau)
        keep_d = select_patches(s_d, self.sparse_ratio, stochastic, self.tau)
        scores = s_s.new_zeros(len(image), len(text))
        if with_scores and len(text):
            aggr = cross_net.aggr_net
            tokens = aggregate_kept(aggr, image.patches, keep_s) + aggregate_kept(aggr, image.patches, keep_d)
            scores = torch.stack([late_interaction_score(caption_tokens(text, j), tokens[:, j])
                                  for j in range(len(text))], dim=1)
        return PairOutputs(scores, keep_s, keep_d, s_s, s_d)

    def selections(self, cross_net: nn.Module, image: ImageFeatures, text: TextFeatures,
                   dense_text: TextFeatures) -> PairOutputs:
        """Both branches' deterministic kept patches and calibrated scores (scores left at 0; for maps)."""
        return self.pair_outputs(cross_net, image, text, dense_text, "caption", stochastic=False, with_scores=False)

    def similarity(self, cross_net: nn.Module, image: ImageFeatures, text: TextFeatures,
                   stochastic: bool) -> torch.Tensor:
        """The joint score with each caption as its own dense text."""
        return self.pair_outputs(cross_net, image, text, text, "caption", stochastic).scores


def make_scoring(name: str, sparse_ratio: float, n_keep: int, fold_gradient: bool = False
                 ) -> OfficialScoring | PaperScoring:
    """The strategy for the ``scoring`` option (``fold_gradient``: see ``OfficialScoring``)."""
    if name not in SCORINGS:
        raise ConfigError(f"scoring must be one of {', '.join(SCORINGS)}, not {name!r}")
    return OfficialScoring(n_keep, fold_gradient) if name == "official" else PaperScoring(sparse_ratio)
