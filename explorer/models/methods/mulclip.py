"""MulCLIP (papers/mulclip.txt): Long-CLIP plus local calibration, word-patch reconstruction
and subcaption-aggregated patches, all trained with sigmoid contrastive losses.

Pictures: Long-CLIP's pipeline, OpenAI's (``Preprocess`` pipeline "openai"); MulCLIP has no code.

MulCLIP has no public code or checkpoints, so this module's own key layout is
the release: the Long-CLIP backbone keys (``visual.*``, ``transformer.*``,
``positional_embedding`` [248, w], ``text_projection``, ``logit_scale``, ...)
plus ``logit_bias`` and ``calibration.{image,text}.{key.weight, query.weight,
log_tau}``. ``loading.save_method`` writes it as safetensors with the config.

Notation (paper Eqs. 1-2): every token is *projected* into the joint space
(dimension d = ``embed_dim``). ``v_cls`` [d] and ``v_loc`` [P, d] are the
image's class token and patches; ``t_eot`` [d] and ``t_loc`` [K, d] are a
caption's EOT token and its local tokens; a sub-caption (sentence) is encoded
on its own and represented by its EOT token ``t_sub_i``. Formulas:

Global (Eq. 3), batch-level:
    L_global = Lc(v_cls, t_eot^long) + lambda_short * Lc(v_cls, t_eot^short),  lambda_short = 0.5
    t_eot^short = the summary: ``batch.short_captions`` (the first sentence; Sec. 3.1), or the
    first sub-caption when the batch has no summaries.

Local calibration (Eq. 4), one module per modality, applied per sample:
    W  = softmax_over_N( W_q GELU(X W_k)^T / tau )      [N', N], rows sum to 1
    X' = W X                                             [N', d]
    W_k in R^{d x d_k} (``key``, no bias), W_q in R^{N' x d_k} (``query``, no bias),
    GELU exact (erf), tau learnable (stored as ``log_tau`` so it stays positive; tau = 1 at init).
    Image: X = v_loc, N = P, N' = P / 2 (8 for the tiny 4x4 grid, 98 at ViT-B/16).
    Text:  X = t_loc, N = the context's local slots, N' = (context - 1) // 2 (123 at 248).
    W is kept (``calibrate_image``/``calibrate_text`` return it): the native map uses it.

Word-patch reconstruction, WPR (Eqs. 5-8), per sample, no cross-sample negatives:
    A_vt = softmax(v' t'^T / sqrt d),  V' = A_vt t'      (each refined patch rebuilt from words)
    A_tv = softmax(t' v'^T / sqrt d),  T' = A_tv v'      (each refined word rebuilt from patches)
    L_recon^image = 1/rP sum_i Lc^sample(v'_i, V'_i),  L_recon^text = 1/rK sum_i Lc^sample(t'_i, T'_i)
    L_word = L_recon^image + L_recon^text, averaged over the samples of the batch.
    Lc^sample: the sigmoid loss over the [N', N'] cosine matrix cos(v'_i, V'_j) of one sample:
    the pair (v'_i, V'_i) is the positive, every other token's reconstruction V'_j (j != i) of the
    same sample a negative ("contrastive losses for each token within the same sample").

Subcaption-aggregated patches, SAP (Eqs. 9-10):
    alpha_i = softmax(t_sub_i v'^T / sqrt d)  [1, N'],   vbar_i = alpha_i v'  [d]
    Lc(vbar_i, t_sub_i) as a batch-level sigmoid loss in FLAIR's text-conditioned form: sentence i
    pools the refined patches of *every* image b of the batch (vbar_i^b), the score is
    cos(vbar_i^b, t_sub_i), positive when b is the image sentence i describes (so every
    sub-caption of an image is a positive for that image), negative for the other images.
    L_sub = mean over images of 1/M sum_{i of that image} (sum over images b of the pair terms).
    This is ``sub_loss="paper"``. Its negatives are other IMAGES only: the sentences of one image are
    never told apart, and on the synthetic world (measured: docs/demo-zoo-choices.md) every sentence of an image then
    pools the same background-carried scene vector. The paper does not say where the negatives of
    Eq. 10 come from, so ``sub_loss="sentences"`` adds the text side that FLAIR-style and CLIP losses
    have: vbar_i on its OWN image against every sentence of the batch, positive only for t_sub_i, so the
    other sentences of the same image are negatives too; L_sub is then the mean of the image side
    (above) and this sentence side (mean over sentences of each row's sigmoid terms).

Under DDP (torchrun) every batch-level term takes its negatives from the global batch: the global
terms and L_sub gather the other ranks' features with gradients (``nn.distributed``, ``nn.losses``);
L_word is per sample and stays on its rank.

Total (Eq. 11): L = L_global + lambda_W L_word + lambda_S L_sub, lambda_W = lambda_S = 1 (Sec. 4.1).
``losses`` returns the four weighted terms ``global_long``, ``global_short``, ``word``, ``sub``.

Every Lc is SigLIP's sigmoid loss (Zhai et al. 2023; ``losses.sigmoid_loss``) on cosines:
    -log sigmoid(z_ij (t s_ij + b)), z = +1 for positives and -1 otherwise, summed over pairs and
    divided by the number of rows.

Inference: the paper reports retrieval and zero-shot classification without saying that any
local score is used at test time, so ``similarity`` is the cosine of the global embeddings
(v_cls, t_eot), the inherited default. The calibration modules are needed only for training
and for the native map.

Native map ``subcaption-alpha`` (Figure 2): for sentence i, alpha_i over the N' calibrated patches
carried back to the patch grid through the patch calibration weights: m_i = alpha_i W [1, P]
(a distribution over the P patches, since alpha_i and every row of W are), reshaped
[rows, cols]. ``calibration_maps`` draws the rows of W themselves ("which patches feed calibrated
token j").

Choices where the paper is silent:
- d_k = d // 2 (the paper says only d_k < d).
- tau starts at 1; W_k and W_q start with PyTorch's default Linear initialisation.
- Text local tokens t_loc are the word tokens strictly between SOT and EOT. Padding gets zero
  weight (masked before the softmax). SOT is left out because under the causal mask it attends
  only to itself, so its state is the same for every caption and says nothing about it; EOT is the
  global token. A caption with no word token falls back to its SOT token, so the softmax is defined.
- Text N' is fixed by W_q's shape (a learnable N' x d_k matrix), so N is the context's local slots
  (context - 1), not each caption's length; every refined text token is a convex combination of
  that caption's valid words, so no refined token is padding.
- v' and t' are the unnormalised projected tokens in Eqs. 5 and 9 (the 1/sqrt d scaling is that of
  raw dot products); the contrastive terms use cosines, as SigLIP does.
- One learnable (t, b) pair for every Lc term ("a sigmoid-based contrastive loss ... for all
  L_contrast terms"): t is the backbone's ``logit_scale`` (log t, so the key stays Long-CLIP's),
  b is ``logit_bias``; SigLIP's initialisation t = 10, b = -10. A warm start from Long-CLIP
  (``training.warm_start.init_from``) keeps this pair rather than CLIP's softmax temperature 100,
  because the init has no bias.
- At most 15 sub-captions per caption, the first 15 (the paper's default cap, Appendix VI);
  blank sentences are dropped. The batch must carry ``sentences`` (the data loader splits the
  captions; this layer does not import the text module above it).
- Learning-rate groups: ``new_module_prefixes`` = the calibration modules and ``logit_bias``
  (every key a Long-CLIP file lacks), the paper's 2e-4; the rest is the backbone, 1e-5.
"""

from __future__ import annotations

import math
from typing import Mapping

import torch
import torch.nn.functional as F
from torch import nn

from explorer.core.errors import ConfigError, InputError
from explorer.models.batch import TrainingBatch
from explorer.models.features import ImageFeatures, TextFeatures
from explorer.models.methods import register
from explorer.models.methods.base import GENERIC_MAP
from explorer.models.methods.clip import ClipFamily
from explorer.models.nn.distributed import all_sizes, batch_offset, gather_with_grad, global_mean, world
from explorer.models.nn.losses import sigmoid_loss, sigmoid_pairs

SUBCAPTION_ALPHA = "subcaption-alpha"
CALIBRATION_PREFIX = "calibration."
IMAGE_PREFIX = CALIBRATION_PREFIX + "image."
TEXT_PREFIX = CALIBRATION_PREFIX + "text."

KEEP_RATIO = 0.5  # N'/N (Sec. 3.2)
LAMBDA_SHORT = 0.5  # Eq. 3 and Sec. 4.1
LAMBDA_WORD = 1.0  # Eq. 11 and Sec. 4.1
LAMBDA_SUB = 1.0
MAX_SENTENCES = 15  # sub-captions per caption (Appendix VI)
SIGLIP_SCALE_INIT = 10.0  # Zhai et al. 2023: t = 10, b = -10
SIGLIP_BIAS_INIT = -10.0
SUB_LOSSES = ("paper", "sentences")  # L_sub's negatives: other images only, or other sentences too


def default_calibration(dim: int, n_in: int) -> dict:
    """Sizes of a calibration module for ``n_in`` input tokens of width ``dim``."""
    return {"dim": dim, "hidden": max(1, dim // 2), "n_out": max(1, int(n_in * KEEP_RATIO))}


class TokenCalibration(nn.Module):
    """Eq. 4: ``X' = softmax(W_q GELU(X W_k)^T / tau) X``, N tokens -> N' tokens."""

    def __init__(self, dim: int, hidden: int, n_out: int):
        super().__init__()
        self.key = nn.Linear(dim, hidden, bias=False)  # X W_k (weight stores W_k^T)
        self.query = nn.Linear(hidden, n_out, bias=False)  # weight is W_q [N', d_k]
        self.log_tau = nn.Parameter(torch.zeros(()))

    @property
    def n_out(self) -> int:
        return self.query.out_features

    def weights(self, tokens: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        """W [B, N', N]: rows sum to 1 over the valid input tokens; masked-out tokens get exactly 0."""
        logits = self.query(F.gelu(self.key(tokens))).transpose(1, 2).float() / self.log_tau.float().exp()
        if mask is not None:
            logits = logits.masked_fill(~mask[:, None, :], float("-inf"))
        return logits.softmax(dim=-1).to(tokens.dtype)

    def forward(self, tokens: torch.Tensor, mask: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """tokens [B, N, d] -> (X' [B, N', d], W [B, N', N])."""
        weights = self.weights(tokens, mask)
        return weights @ tokens, weights

    @staticmethod
    def sizes_from(tensors: Mapping[str, torch.Tensor], prefix: str) -> dict:
        hidden, dim = tensors[prefix + "key.weight"].shape
        return {"dim": dim, "hidden": hidden, "n_out": tensors[prefix + "query.weight"].shape[0]}


class Calibration(nn.Module):
    """The two independent calibration modules (Sec. 3.2: one for patches, one for words)."""

    def __init__(self, image: Mapping, text: Mapping):
        super().__init__()
        self.image = TokenCalibration(**image)
        self.text = TokenCalibration(**text)


def word_mask(text: TextFeatures) -> torch.Tensor:
    """[B, K] True at the word tokens (strictly between SOT and EOT); SOT alone for a caption with no word."""
    words = text.word_mask()
    empty = ~words.any(dim=1)
    words[:, 0] |= empty
    return words


def attention_pool(queries: torch.Tensor, keys: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """softmax(q k^T / sqrt d) k (Eqs. 5-6 and 9): returns (pooled [.., Q, d], weights [.., Q, N])."""
    weights = (queries.float() @ keys.float().transpose(-2, -1) / math.sqrt(queries.shape[-1])).softmax(dim=-1)
    weights = weights.to(keys.dtype)
    return weights @ keys, weights


def cosines(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Cosine of every row of ``a`` with every row of ``b`` (batched over leading dims)."""
    return F.normalize(a.float(), dim=-1) @ F.normalize(b.float(), dim=-1).transpose(-2, -1)


@register
class MulClipMethod(ClipFamily):
    name = "mulclip"
    title = "MulCLIP"
    detect_priority = 20
    native_map_kinds = (SUBCAPTION_ALPHA,)
    preferred_native_map = SUBCAPTION_ALPHA
    new_module_prefixes = (CALIBRATION_PREFIX, "logit_bias")
    export_leaves_out = ("the calibration heads (calibration.*) and logit_bias, which its losses and native maps use; "
                         "its score, the global cosine, is kept")
    token_modules = (("image_calibration", TokenCalibration, IMAGE_PREFIX),
                     ("text_calibration", TokenCalibration, TEXT_PREFIX))

    def __init__(self, arch, image_calibration: Mapping | None = None, text_calibration: Mapping | None = None,
                 sub_loss: str = "paper"):
        if sub_loss not in SUB_LOSSES:
            raise ConfigError(f"MulCLIP sub_loss must be one of {', '.join(SUB_LOSSES)}, not {sub_loss!r}")
        d = arch.embed_dim
        image_calibration = dict(image_calibration or default_calibration(d, arch.grid ** 2))
        text_calibration = dict(text_calibration or default_calibration(d, arch.context_length - 1))
        super().__init__(arch, image_calibration=image_calibration, text_calibration=text_calibration,
                         sub_loss=sub_loss)
        self.sub_loss_form = sub_loss
        self.calibration = Calibration(image_calibration, text_calibration)
        self.logit_bias = nn.Parameter(torch.tensor(SIGLIP_BIAS_INIT))
        with torch.no_grad():
            self.logit_scale.fill_(math.log(SIGLIP_SCALE_INIT))

    # ---- checkpoints ---------------------------------------------------------------------------

    # ---- calibrated tokens ---------------------------------------------------------------------

    def calibrate_image(self, image: ImageFeatures) -> tuple[torch.Tensor, torch.Tensor]:
        """v' [B, N', d] and the patch calibration weights W [B, N', P] (Eq. 4)."""
        return self.calibration.image(image.patches)

    def calibrate_text(self, text: TextFeatures) -> tuple[torch.Tensor, torch.Tensor]:
        """t' [B, N'_t, d] and W_t [B, N'_t, K]: zero at SOT, EOT and padding (Eq. 4)."""
        return self.calibration.text(text.tokens, word_mask(text))

    def subcaption_alpha(self, image: ImageFeatures, text: TextFeatures) -> tuple[torch.Tensor, torch.Tensor]:
        """alpha [M, N'] of each sentence over the first image's calibrated patches (Eq. 9), and W [N', P]."""
        refined, weights = self.calibrate_image(image[0])
        _, alpha = attention_pool(text.eot, refined[0])
        return alpha, weights[0]

    # ---- maps ----------------------------------------------------------------------------------

    def sentence_maps(self, image: ImageFeatures, text: TextFeatures, kind: str = GENERIC_MAP) -> torch.Tensor:
        if kind != SUBCAPTION_ALPHA:
            return super().sentence_maps(image, text, kind)
        if len(image) != 1:
            raise InputError(f"maps are drawn for one image at a time, got {len(image)}")
        alpha, weights = self.subcaption_alpha(image, text)
        rows, cols = image.grid_hw
        return (alpha.float() @ weights.float()).reshape(len(text), rows, cols)

    def calibration_maps(self, image: ImageFeatures) -> torch.Tensor:
        """[N', rows, cols]: which patches feed each calibrated patch token (rows of W), first image."""
        _, weights = self.calibrate_image(image[0])
        rows, cols = image.grid_hw
        return weights[0].float().reshape(-1, rows, cols)

    # ---- losses --------------------------------------------------------------------------------

    def contrast(self, scores: torch.Tensor, positives: torch.Tensor | None = None) -> torch.Tensor:
        """SigLIP's sigmoid loss with this model's learnable t (``logit_scale``) and b (``logit_bias``)."""
        return sigmoid_loss(scores, self.logit_scale.float(), self.logit_bias.float(), positives)

    def global_loss(self, image_cls: torch.Tensor, long_eot: torch.Tensor,
                    short_eot: torch.Tensor) -> dict[str, torch.Tensor]:
        """Eq. 3, weighted: batch-level sigmoid loss of v_cls vs the long caption and vs the summary."""
        scale, bias = self.logit_scale.float(), self.logit_bias.float()  # over the global batch under DDP
        return {"global_long": sigmoid_pairs(image_cls, long_eot, cosines, scale, bias),
                "global_short": LAMBDA_SHORT * sigmoid_pairs(image_cls, short_eot, cosines, scale, bias)}

    def word_loss(self, patches: torch.Tensor, words: torch.Tensor) -> torch.Tensor:
        """Eqs. 5-8, unweighted: v' [B, N'_v, d] and t' [B, N'_t, d] -> L_word averaged over samples."""
        rebuilt_patches, _ = attention_pool(patches, words)  # V' = A_vt t'
        rebuilt_words, _ = attention_pool(words, patches)  # T' = A_tv v'
        image_terms = [self.contrast(s) for s in cosines(patches, rebuilt_patches)]  # each / N'_v
        text_terms = [self.contrast(s) for s in cosines(words, rebuilt_words)]  # each / N'_t
        return (torch.stack(image_terms) + torch.stack(text_terms)).mean()

    def sub_loss(self, patches: torch.Tensor, sentences: torch.Tensor, owner: torch.Tensor) -> torch.Tensor:
        """Eqs. 9-10, unweighted: v' [B, N', d], t_sub [S, d], owner [S] (the image each sentence describes).

        Under DDP a sentence pools the refined patches of every image of the global batch (gathered), and
        the mean over images is over every rank's images with a sentence (``distributed.global_mean``).
        """
        image_side = self.sub_loss_images(patches, sentences, owner)
        if self.sub_loss_form == "paper":
            return image_side
        return (image_side + self.sub_loss_sentences(patches, sentences, owner)) / 2

    def sub_loss_sentences(self, patches: torch.Tensor, sentences: torch.Tensor, owner: torch.Tensor) -> torch.Tensor:
        """The sentence side of ``sub_loss="sentences"``: vbar_i pooled on its own image vs every sentence of
        the (global) batch, positive only for t_sub_i; the mean over sentences of each row's terms."""
        own, _ = attention_pool(sentences[:, None], patches[owner])  # [S, 1, d]: vbar_i on image owner(i)
        sizes = all_sizes(sentences.shape[0])  # every rank's sentence count ([S] in one process)
        every = gather_with_grad(sentences, uneven=sizes)  # [S_global, d]; ``sentences`` itself in one process
        offset = sum(sizes[:world()[0]])  # this rank's first row among them
        scores = cosines(own[:, 0], every)  # [S, S_global]
        rows = torch.arange(sentences.shape[0], device=scores.device) + offset
        positives = rows[:, None] == torch.arange(every.shape[0], device=scores.device)[None]
        terms = sigmoid_loss(scores, self.logit_scale.float(), self.logit_bias.float(), positives, per_row=True)
        return global_mean(terms)

    def sub_loss_images(self, patches: torch.Tensor, sentences: torch.Tensor, owner: torch.Tensor) -> torch.Tensor:
        """Eq. 10's image side (the paper-literal L_sub): each sentence pools every image of the batch."""
        if world()[1] > 1:
            return self.sub_loss_global(patches, sentences, owner)
        n_images = patches.shape[0]
        queries = sentences[None].expand(n_images, -1, -1)  # [B, S, d]
        pooled, _ = attention_pool(queries, patches)  # vbar [B, S, d]: sentence s pooling image b
        scores = (F.normalize(pooled.float(), dim=-1) * F.normalize(sentences.float(), dim=-1)[None]).sum(-1).T
        positives = owner[:, None] == torch.arange(n_images, device=owner.device)[None]  # [S, B]
        per_image = [self.contrast(scores[owner == b], positives[owner == b])
                     for b in range(n_images) if bool((owner == b).any())]
        return torch.stack(per_image).mean()

    def sub_loss_global(self, patches: torch.Tensor, sentences: torch.Tensor, owner: torch.Tensor) -> torch.Tensor:
        """``sub_loss`` under DDP: this rank's sentences against every rank's images."""
        n_local, every = patches.shape[0], gather_with_grad(patches)  # [G, N', d]
        pooled, _ = attention_pool(sentences[None].expand(every.shape[0], -1, -1), every)  # [G, S, d]
        scores = (F.normalize(pooled.float(), dim=-1) * F.normalize(sentences.float(), dim=-1)[None]).sum(-1).T
        positives = (owner + batch_offset(n_local))[:, None] == torch.arange(every.shape[0], device=owner.device)
        per_image = [self.contrast(scores[owner == b], positives[owner == b])
                     for b in range(n_local) if bool((owner == b).any())]
        return global_mean(torch.stack(per_image) if per_image else scores.new_zeros(0))

    def losses(self, batch: TrainingBatch) -> dict[str, torch.Tensor]:
        batch.require("sentences", method=self.title)
        sentences = [[s for s in parts if s.strip()][:MAX_SENTENCES] for parts in batch.sentences]
        if len(sentences) != len(batch):
            raise InputError(f"MulCLIP: {len(sentences)} sentence lists for {len(batch)} images")
        summaries = batch.short_captions
        if summaries is None:
            summaries = [parts[0] if parts else caption for parts, caption in zip(sentences, batch.captions)]
        flat = [s for parts in sentences for s in parts]
        owner = torch.tensor([b for b, parts in enumerate(sentences) for _ in parts], dtype=torch.long,
                             device=batch.pixels.device)

        image = self.encode_image(batch.pixels)
        long = self.encode_captions(batch.captions)
        short_and_sub = self.encode_captions(list(summaries) + flat).eot
        short_eot, sub_eot = short_and_sub[: len(batch)], short_and_sub[len(batch):]

        terms = self.global_loss(image.cls, long.eot, short_eot)
        patches, _ = self.calibrate_image(image)
        words, _ = self.calibrate_text(long)
        terms["word"] = LAMBDA_WORD * self.word_loss(patches, words)
        if flat or world()[1] > 1:  # under DDP every rank joins the gather, with or without a sentence
            terms["sub"] = LAMBDA_SUB * self.sub_loss(patches, sub_eot, owner.to(sub_eot.device))
        else:  # no sentence in the whole batch: the term is zero, but keeps its name for logging
            terms["sub"] = patches.sum() * 0.0
        return terms
