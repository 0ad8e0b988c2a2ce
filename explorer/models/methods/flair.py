"""FLAIR: text-conditioned attention pooling over CLIP patch tokens (CAFT's flat parent).

Pictures: open_clip's ``image_transform`` with its default config (224, bicubic, resize mode
"shortest", OpenAI mean and std), the same pixels as OpenAI's (``Preprocess`` pipeline "openai").

Released FLAIR checkpoints (open_clip based, context 77, exact GELU) hold
the open_clip text keys at the top level, ``visual.*`` without
``visual.proj``, ``image_post.proj`` [vision width, d] and
``text_post.proj`` [text width, d] (plain ``x @ proj`` matrices, i.e.
exactly what CLIP calls ``visual.proj`` and ``text_projection``, so they are
renamed onto those on load and back on save), the attention pooling
``visual_proj.{attn,ln_q,ln_k,ln_v}.*``, ``logit_scale`` and ``logit_bias``.
Training files are wrapped as ``{'epoch', 'name', 'state_dict': ...}`` with
``module.`` (open_clip's trainer); ``released_file_object`` writes that.

The pooling is ``MultiheadAttention(d, 8 heads, add_zero_attn=True)`` on
LayerNorm'd query (the caption's global embedding t), keys and values (the
patch features: the projected patch tokens, or on an attention-pooled base
that pool's values, as the maps read them; the tower's projected tokens
instead gave the demo FLAIR no position: binding_experiment.md, part 12);
the text-conditioned image embedding
``v_tc(I, T) = AttnPool(t, patches, patches)`` is compared with the caption
by cosine. The zero-attention slot (a key and value of zeros after the
projections, so its logit is exactly 0) lets a caption attend to nothing.

Training (``losses``), FLAIR's two sigmoid losses (SigLIP form,
-log sigmoid(y_ij (exp(logit_scale) s_ij + logit_bias)), y = +1 for a pair
of the same image, -1 otherwise), sharing the one learnable scale and bias
a FLAIR checkpoint holds:

- "text-conditioned" (FLAIR's L_tcs): s_ij = cos(v_tc(I_i, T_j), t_j);
- "multi-positive" (FLAIR's L_mps, the global term): s_ij = cos(v_cls(I_i), t_j).

Which texts: ``loss_texts="captions"`` (default) uses each image's long
caption (cut at 77 tokens), so the positives are the diagonal;
``loss_texts="sub-captions"`` uses ``batch.sentences`` (FLAIR trains on K
sub-captions per image, each 1-3 merged sentences; the merging is the data
loader's job), every sub-caption of image i being a positive of image i.
Scale and bias start at SigLIP's values, exp(scale) = 10 and bias = -10.
"""

from __future__ import annotations

import math
from typing import Mapping

import torch
import torch.nn.functional as F
from torch import nn

from explorer.core.errors import ConfigError
from explorer.models.batch import TrainingBatch
from explorer.models.features import ImageFeatures, TextFeatures
from explorer.models.io.checkpoints import KeyReport, RawCheckpoint
from explorer.models.methods import keys_with_prefix, register
from explorer.models.methods.clip import ClipFamily
from explorer.models.nn.attention_pool import ATTENTION_MAP, DEFAULT_POOL_HEADS, AttentionPoolMaps, TextConditionedPool
from explorer.models.nn.distributed import world
from explorer.models.nn.losses import sigmoid_pairs
from explorer.models.nn.positional import SHORT_CONTEXT

POOL_PREFIX = "visual_proj."
RENAMES = {"image_post.proj": "visual.proj", "text_post.proj": "text_projection"}
LOSS_TEXTS = ("captions", "sub-captions")
# What ``similarity`` returns. The first three rank alike; values differ. "cosine" (default) is the bare cosine;
# FLAIR's retrieval evaluation scores exp(logit_scale) x cosine ("scaled"); its ``get_logits`` adds
# logit_bias ("logits"); its sigmoid loss reads sigmoid(logits), a match probability ("probability").
SCORES = {"cosine": "cosine", "scaled": "exp(t) x cosine", "logits": "logits = exp(t) x cosine + b",
          "probability": "sigmoid(exp(t) x cosine + b) (saturates: ties; rank by logits)"}
INIT_LOGIT_SCALE = math.log(10.0)  # SigLIP's initialisation, also FLAIR's
INIT_LOGIT_BIAS = -10.0


@register
class FlairMethod(AttentionPoolMaps, ClipFamily):
    """FLAIR: each caption pools the patches it attends to; scores compare that pooling with the caption."""

    name = "flair"
    title = "FLAIR"
    detect_priority = 20
    default_quick_gelu = False  # FLAIR is trained from scratch with open_clip's GELU
    default_context = SHORT_CONTEXT  # open_clip's 77 tokens
    native_map_kinds = (ATTENTION_MAP,)  # per-head kinds are added per instance (``map_kinds``)
    preferred_native_map = ATTENTION_MAP
    new_module_prefixes = ("visual_proj.",)
    export_leaves_out = ("the text-conditioned attention pooling (visual_proj.*) and logit_bias: the export's image "
                         "embedding is the class token, not the caption-pooled one FLAIR scores with")

    def __init__(self, arch, pool_heads: int = DEFAULT_POOL_HEADS, loss_texts: str = "captions",
                 score: str = "cosine"):
        if loss_texts not in LOSS_TEXTS:
            raise ConfigError(f"FLAIR loss_texts must be one of {LOSS_TEXTS}, not {loss_texts!r}")
        if score not in SCORES:
            raise ConfigError(f"FLAIR score must be one of {', '.join(SCORES)}, not {score!r}")
        super().__init__(arch, pool_heads=pool_heads, loss_texts=loss_texts, score=score)
        self.loss_texts, self.score = loss_texts, score
        self.visual_proj = TextConditionedPool(arch.embed_dim, pool_heads)
        with torch.no_grad():
            self.logit_scale.fill_(INIT_LOGIT_SCALE)
        self.logit_bias = nn.Parameter(torch.tensor(INIT_LOGIT_BIAS))

    @classmethod
    def detect(cls, tensors, raw):
        if keys_with_prefix(tensors, POOL_PREFIX) and "image_post.proj" in tensors:
            return "flair"
        return None

    @classmethod
    def extra_config_from(cls, tensors):
        # The tensors cannot tell the head count; listing the options lets a manifest override them.
        return {"pool_heads": DEFAULT_POOL_HEADS, "loss_texts": "captions", "score": "cosine"}

    @classmethod
    def score_description(cls, options=None) -> str:
        return SCORES.get((options or {}).get("score", "cosine"), "cosine")

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
        from explorer.models.architecture import infer_clip_architecture

        return infer_clip_architecture(tensors, quick_gelu=False)

    def released_state_dict(self) -> dict:
        """FLAIR's names: ``image_post.proj`` / ``text_post.proj`` instead of ``visual.proj`` / ``text_projection``."""
        return released_flair_keys(self.state_dict())

    def released_file_object(self):
        """What open_clip's trainer saves: {'epoch', 'name', 'state_dict': {'module.' + key: tensor}}."""
        state = {"module." + key: value for key, value in self.released_state_dict().items()}
        return {"epoch": 1, "name": f"flair-{self.arch.name}", "state_dict": state}

    # ---- scores --------------------------------------------------------------------------------

    def conditioned_image(self, image: ImageFeatures, text: TextFeatures) -> torch.Tensor:
        """[n_images, n_texts, d]: each image pooled by each caption."""
        queries = text.eot[None].expand(len(image), -1, -1)
        pooled, _ = self.visual_proj(queries, image.patches)
        return pooled

    def conditioned_scores(self, image: ImageFeatures, text: TextFeatures) -> torch.Tensor:
        """[n_images, n_texts]: cos(AttnPool(t_j, patches_i), t_j)."""
        pooled = F.normalize(self.conditioned_image(image, text).float(), dim=-1)
        return (pooled * F.normalize(text.eot.float(), dim=-1)[None]).sum(dim=-1)

    def similarity(self, image: ImageFeatures, text: TextFeatures) -> torch.Tensor:
        """The text-conditioned score in the ``score`` mode (``SCORES``); rankings are the same in all."""
        cosine = self.conditioned_scores(image, text)
        if self.score == "cosine":
            return cosine
        scaled = self.logit_scale.float().exp() * cosine  # exp in fp32 even for an fp16 model
        if self.score == "scaled":
            return scaled
        logits = scaled + self.logit_bias.float()
        if self.score == "logits":
            return logits
        # A probability is for reading, not ranking: past logits of about 17 (float32) or 37 (float64)
        # it is exactly 1, and matches tie. Computed in float64 to tie as late as it can.
        return torch.sigmoid(logits.double())

    # ---- training ------------------------------------------------------------------------------

    def losses(self, batch: TrainingBatch) -> dict[str, torch.Tensor]:
        """FLAIR's text-conditioned sigmoid loss plus its global (multi-positive) sigmoid loss."""
        if self.loss_texts == "sub-captions":
            batch.require("sentences", method="FLAIR with loss_texts='sub-captions'")
            texts = [sentence for sentences in batch.sentences for sentence in sentences]
            owner = torch.tensor([i for i, sentences in enumerate(batch.sentences) for _ in sentences])
        else:
            texts, owner = list(batch.captions), torch.arange(len(batch.captions))
        image = self.encode_image(batch.pixels)
        text = self.encode_captions(texts)
        if world()[1] > 1:  # under DDP the texts of every rank are gathered; both scores read only their EOT
            text = TextFeatures(eot=text.eot, tokens=text.eot[:, None], mask=text.mask[:, :1])

        def global_scores(images: ImageFeatures, captions: TextFeatures) -> torch.Tensor:
            return F.normalize(images.cls.float(), dim=-1) @ F.normalize(captions.eot.float(), dim=-1).T

        # positives: image i with its texts (owner); over the global batch under DDP
        multi_positive = sigmoid_pairs(image, text, global_scores, self.logit_scale, self.logit_bias, owner)
        conditioned = sigmoid_pairs(image, text, self.conditioned_scores, self.logit_scale, self.logit_bias, owner)
        return {"text-conditioned": conditioned, "multi-positive": multi_positive}

    # ---- maps ----------------------------------------------------------------------------------

    def pool_queries(self, text: TextFeatures) -> torch.Tensor:
        return text.eot  # each caption's global embedding queries the patches

    def pool_tokens(self, image: ImageFeatures) -> torch.Tensor:
        return image.patches


def released_flair_keys(tensors: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Our keys -> FLAIR's released names (for writing files in FLAIR's layout)."""
    back = {ours: released for released, ours in RENAMES.items()}
    return {back.get(k, k): v for k, v in tensors.items()}
