"""The contrastive losses the methods share, written from their papers.

- ``info_nce``: CLIP's symmetric cross-entropy over the batch (Radford et al.).
- ``sigmoid_loss``: SigLIP's pairwise sigmoid loss (Zhai et al.), used by FLAIR,
  CAFT and MulCLIP: -log sigmoid(z_ij * (t * s_ij + b)) with z = +1 on the
  diagonal and -1 elsewhere, summed over pairs and divided by the batch size.
- ``hinge_hardest``: the VSE++ triplet loss with the hardest negative in both
  directions (Faghri et al.), used by FineLIP and LAPS/SEPS with margin 0.2.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def info_nce(logits: torch.Tensor) -> torch.Tensor:
    """``logits`` [B, B] image x text, matching pairs on the diagonal."""
    target = torch.arange(logits.shape[0], device=logits.device)
    return (F.cross_entropy(logits, target) + F.cross_entropy(logits.T, target)) / 2


def sigmoid_loss(scores: torch.Tensor, logit_scale: torch.Tensor, logit_bias: torch.Tensor,
                 positives: torch.Tensor | None = None) -> torch.Tensor:
    """``scores`` [B, N] similarities; ``positives`` [B, N] bool (default: the diagonal)."""
    if positives is None:
        positives = torch.eye(scores.shape[0], scores.shape[1], dtype=torch.bool, device=scores.device)
    labels = positives.to(scores.dtype) * 2 - 1
    logits = logit_scale.exp() * scores + logit_bias
    return -F.logsigmoid(labels * logits).sum() / scores.shape[0]


def hinge_hardest(scores: torch.Tensor, margin: float = 0.2) -> torch.Tensor:
    """``scores`` [B, B] image x text; the hardest negative of each row and column."""
    positive = scores.diagonal()
    eye = torch.eye(scores.shape[0], dtype=torch.bool, device=scores.device)
    cost_text = (margin + scores - positive[:, None]).clamp(min=0).masked_fill(eye, 0)  # image -> wrong text
    cost_image = (margin + scores - positive[None, :]).clamp(min=0).masked_fill(eye, 0)  # text -> wrong image
    return cost_text.max(dim=1).values.sum() + cost_image.max(dim=0).values.sum()
