"""DreamLIP (Zheng et al., "DreamLIP: Language-Image Pre-training with Long Captions", ECCV 2024).

A long caption is many short facts. DreamLIP samples K sub-captions (sentences) of an image's long
caption and trains a CLIP on them with two terms; the formulas below are written from the paper
(Sec. 3) as this example reads it, with v_i the image's global embedding, t_ik its k-th sampled
sub-caption, p_im its m-th projected patch token, s(a, b) the cosine and tau CLIP's temperature:

Multi-positive contrastive loss, every sampled sub-caption of an image is one of its positives:

    L_i2t = -1/N sum_i 1/K_i sum_k log( exp(s(v_i, t_ik)/tau) / sum_j sum_k' exp(s(v_i, t_jk')/tau) )
    L_t2i = -1/T sum_i sum_k       log( exp(s(t_ik, v_i)/tau) / sum_j exp(s(t_ik, v_j)/tau) )
    L_mpc = (L_i2t + L_t2i) / 2                      (T: the sub-captions in the batch)

Sub-caption-specific grouping loss: each sub-caption groups the patches it is about, and the group
must match that sub-caption better than the image's other sub-captions:

    a_km = s(t_ik, p_im);   a~_km = (a_km - min_m a_km) / (max_m a_km - min_m a_km)     min-max over patches
    w_km = a~_km if a~_km >= 1/M else 0;   w^_km = w_km / sum_m w_km                   sparse, sums to 1
    g_ik = sum_m w^_km p_im                                                            the grouped embedding
    L_grp = -1/T sum_i sum_k 1/2 [ log softmax_k'(s(g_ik, t_ik')/tau)_k + log softmax_k'(s(t_ik, g_ik')/tau)_k ]

    L = L_mpc + lambda * L_grp,   lambda = GROUPING_WEIGHT

The score is CLIP's (cosine of the global embeddings); the method's own map ("grouping") is w^ of
each sentence over the patch grid: the patches its sub-caption groups. Everything else (the CLIP
towers, released CLIP / Long-CLIP layouts as inits, the explainers) comes from ``ClipFamily``.
Under DDP both terms are computed on each rank's own batch (not gathered).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from explorer.core.sentences import split_sentences
from explorer.models.batch import TrainingBatch
from explorer.models.features import ImageFeatures, TextFeatures
from explorer.models.measured import MeasuredGrounding
from explorer.models.methods.base import GENERIC_MAP, cosine_matrix
from explorer.models.methods.clip import ClipFamily
from explorer.models.nn.losses import info_nce, multi_positive_nce
from explorer.models.nn.positional import SHORT_CONTEXT

GROUPING_MAP = "grouping"
SUB_CAPTIONS = 4  # K: sub-captions sampled per image each step (fewer when the caption has fewer)
GROUPING_WEIGHT = 1.0  # lambda: this example weighs the two terms equally
EPS = 1e-6


def grouping_weights(texts: torch.Tensor, patches: torch.Tensor) -> torch.Tensor:
    """w^ [..., K, M]: each sub-caption's sparse, normalised weights over the M patches.

    ``texts`` [..., K, d] sub-caption embeddings, ``patches`` [..., M, d] projected patch tokens."""
    scores = F.normalize(texts.float(), dim=-1) @ F.normalize(patches.float(), dim=-1).transpose(-1, -2)
    low, high = scores.amin(dim=-1, keepdim=True), scores.amax(dim=-1, keepdim=True)
    scaled = (scores - low) / (high - low).clamp_min(EPS)
    sparse = torch.where(scaled >= 1.0 / patches.shape[-2], scaled, torch.zeros_like(scaled))
    return sparse / sparse.sum(dim=-1, keepdim=True).clamp_min(EPS)


def sample_sub_captions(batch: TrainingBatch, k: int) -> tuple[list[str], list[int]]:
    """Up to ``k`` distinct sentences of each image's caption (``batch.sentences``, else the caption split
    into sentences), drawn at random (torch's generator): the sub-captions in batch order, and the image
    each belongs to."""
    texts, owner = [], []
    for i, caption in enumerate(batch.captions):
        sentences = batch.sentences[i] if batch.sentences is not None else split_sentences(caption)
        pool = list(dict.fromkeys(s for s in sentences if s.strip())) or [caption]
        for j in torch.randperm(len(pool))[:k].tolist():
            texts.append(pool[j])
            owner.append(i)
    return texts, owner


class DreamLipMethod(ClipFamily):
    """DreamLIP (ECCV 2024): sampled sub-captions as multiple positives, and per-sub-caption patch grouping."""

    name = "dreamlip"
    title = "DreamLIP"
    default_context = SHORT_CONTEXT  # the paper keeps CLIP's 77 tokens: each sub-caption is short
    native_map_kinds = (GROUPING_MAP,)
    preferred_native_map = GROUPING_MAP
    # Each map kind's (mIoU, pointing) in percent on the held-out world (seed 1; the demo zoo's evaluation). Its
    # own grouping map stays what "native" draws (its mechanism); the page's kind note shows these beside it.
    measured_grounding = MeasuredGrounding(
        figures={"generic": (30.1, 62.9), "grouping": (30.1, 62.3), "gradcam": (43.6, 80.8), "legrad": (6.6, 24.9),
                 "clearclip": (27.9, 79.9), "naclip": (28.1, 65.9)},
        model="demo-dreamlip", command="explorer eval --zoo ZOO --model demo-dreamlip --model demo-clip-base",
        results="zoo_research/results/dreamlip-eval.json")
    # `explorer zoo build-demo --only dreamlip`: fine-tuned from the demo's base CLIP like the built-ins
    demo_recipe = {"steps": 200}
    job_defaults = {
        "train": {"batch_size": 64, "lr_backbone": 1e-5, "lr_new": 1e-5},
        "sources": {
            "batch_size": "explorer-dreamlip default for fine-tuning (the paper pre-trains from scratch with "
                          "far larger batches)",
            "lr_backbone": "explorer-dreamlip default for fine-tuning a CLIP",
            "lr_new": "no new modules: the same rate",
        },
        "fixed": {
            "sub_captions": {"value": SUB_CAPTIONS, "source": "explorer-dreamlip: K sub-captions per image",
                             "code": "explorer_dreamlip.method.SUB_CAPTIONS"},
            "lambda_grouping": {"value": GROUPING_WEIGHT, "source": "explorer-dreamlip: the two terms weigh the "
                                                                    "same", "code": "explorer_dreamlip.method.GROUPING_WEIGHT"},
        },
        "notes": ["Trains on each sample's sentences (samples.jsonl 'sentences', else its caption split into "
                  "sentences)."],
    }

    def sentence_maps(self, image: ImageFeatures, text: TextFeatures, kind: str = GENERIC_MAP) -> torch.Tensor:
        """"grouping": w^ of each sentence over the patches of the first image, [M, rows, cols]."""
        if kind != GROUPING_MAP:
            return super().sentence_maps(image, text, kind)
        rows, cols = image.grid_hw
        return grouping_weights(text.eot, image.patches[0]).reshape(len(text), rows, cols)

    def losses(self, batch: TrainingBatch) -> dict[str, torch.Tensor]:
        texts, owner = sample_sub_captions(batch, SUB_CAPTIONS)
        image = self.encode_image(batch.pixels)
        text = self.encode_captions(texts).eot
        owner = torch.tensor(owner, device=text.device)
        scale = self.logit_scale.exp()
        return {"multi-positive": self.multi_positive(image.cls, text, owner, scale),
                "grouping": GROUPING_WEIGHT * self.grouping(image.patches, text, owner, scale)}

    @staticmethod
    def multi_positive(images: torch.Tensor, texts: torch.Tensor, owner: torch.Tensor, scale) -> torch.Tensor:
        """L_mpc: images [N, d], texts [T, d], owner [T] (the image of each sub-caption)."""
        return multi_positive_nce(scale * cosine_matrix(images, texts), owner)  # logits [N, T]

    @staticmethod
    def grouping(patches: torch.Tensor, texts: torch.Tensor, owner: torch.Tensor, scale) -> torch.Tensor:
        """L_grp: patches [N, M, d], texts [T, d]; each image's sub-captions against its own groups."""
        terms = []
        for i in range(len(patches)):
            mine = texts[owner == i]  # [K_i, d]
            groups = grouping_weights(mine, patches[i]) @ patches[i].float()  # g_ik [K_i, d]
            terms.append(info_nce(scale * cosine_matrix(groups, mine)) * len(mine))  # [K_i, K_i] logits
        return sum(terms) / len(texts)  # the mean over every sub-caption
