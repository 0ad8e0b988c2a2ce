"""The contrastive losses the methods share, written from their papers.

- ``info_nce``: CLIP's symmetric cross-entropy over the batch (Radford et al.).
- ``multi_positive_nce``: the same where an image owns several texts (DreamLIP's L_mpc; the demo base's
  object sentences).
- ``sigmoid_loss``: SigLIP's pairwise sigmoid loss (Zhai et al.), used by FLAIR,
  CAFT and MulCLIP: -log sigmoid(z_ij * (t * s_ij + b)) with z = +1 on the
  diagonal and -1 elsewhere, summed over pairs and divided by the batch size.
- ``hinge_hardest``: the VSE++ triplet loss with the hardest negative in both
  directions (Faghri et al.), used by FineLIP and LAPS/SEPS with margin 0.2;
  with ``hardest=False`` summed over all negatives (VSE's "mean violation"
  form, which LAPS trains with for its first epoch).

Each takes the score matrix of one batch. Under DDP (``torchrun``) the batch's negatives must come
from the global batch, so the methods call the ``*_pairs`` forms instead, with their features and
their scoring function ``score(images, texts) -> [n_images, n_texts]`` (images are rows, whatever
the features are: tensors or feature dataclasses). In one process they are exactly the forms above
on ``score(images, texts)``. On many, each rank gathers the other ranks' features with gradients
(``distributed.gather_with_grad``) and computes the loss of its OWN rows against ALL columns: its
images against every text ([B, G]) and, for the two-sided losses (InfoNCE, hinge), every image
against its texts ([G, B]; the sigmoid loss has one term per pair, so its rows hold them all), the
targets offset by rank * B. This is open_clip's ``local_loss=True, gather_with_grad=True``: 2 B G
scores per rank instead of the G^2 of the whole matrix on every rank, which matters for FineLIP's
and SEPS's token-level scores. Scaling (``distributed`` docstring): the mean over
ranks of the returned values is the single-process loss of the global batch, and so DDP's averaged
gradient is its gradient: InfoNCE and the sigmoid loss are means over rows (the rank's own rows);
the hinge is a sum over rows, so a rank returns its rows' sum times the world size.
"""

from __future__ import annotations

from typing import Callable

import torch
import torch.nn.functional as F

from explorer.models.nn.distributed import all_sizes, batch_offset, gather_features, gather_with_grad, world

Score = Callable[[object, object], torch.Tensor]  # (images, texts) -> [n_images, n_texts]


def info_nce(logits: torch.Tensor) -> torch.Tensor:
    """``logits`` [B, B] image x text, matching pairs on the diagonal."""
    target = torch.arange(logits.shape[0], device=logits.device)
    return (F.cross_entropy(logits, target) + F.cross_entropy(logits.T, target)) / 2


def multi_positive_nce(logits: torch.Tensor, owner: torch.Tensor) -> torch.Tensor:
    """``logits`` [N, T] image x text, ``owner`` [T] the image of each text (an image may own several).

    Text -> image: cross-entropy to its owner. Image -> text: the mean over the image's own texts of
    -log softmax (each one a target of its own, as DreamLIP's L_mpc; Zheng et al., ECCV 2024). The mean of
    both directions."""
    positive = owner[None, :] == torch.arange(logits.shape[0], device=owner.device)[:, None]
    log_p = logits.log_softmax(dim=1)
    image_to_text = -(log_p * positive).sum(dim=1) / positive.sum(dim=1).clamp_min(1)
    return (image_to_text.mean() + F.cross_entropy(logits.T, owner)) / 2


def image_to_text_with_negatives(logits: torch.Tensor, negative_logits: torch.Tensor) -> torch.Tensor:
    """NegCLIP's image -> text term (Yuksekgonul et al., ICLR 2023): each image's softmax runs over the batch's
    captions ``logits`` [B, B] (its own on the diagonal) and every caption of the batch rewritten to be false
    ``negative_logits`` [B, M], so a caption one word away from the truth is a negative the image must beat:
    L = -1/B sum_i log( exp(l_ii) / (sum_j exp(l_ij) + sum_m exp(n_im)) )."""
    target = torch.arange(logits.shape[0], device=logits.device)
    return F.cross_entropy(torch.cat([logits, negative_logits], dim=1), target)


def sigmoid_loss(scores: torch.Tensor, logit_scale: torch.Tensor, logit_bias: torch.Tensor,
                 positives: torch.Tensor | None = None, per_row: bool = False) -> torch.Tensor:
    """``scores`` [B, N] similarities; ``positives`` [B, N] bool (default: the diagonal).
    ``per_row``: each row's sum [B] (whose mean is the loss) instead of the loss."""
    if positives is None:
        positives = torch.eye(scores.shape[0], scores.shape[1], dtype=torch.bool, device=scores.device)
    labels = positives.to(scores.dtype) * 2 - 1
    logits = logit_scale.exp() * scores + logit_bias
    rows = -F.logsigmoid(labels * logits).sum(dim=1)
    return rows if per_row else rows.sum() / scores.shape[0]


def hinge_hardest(scores: torch.Tensor, margin: float = 0.2, hardest: bool = True) -> torch.Tensor:
    """``scores`` [B, B] image x text; VSE++'s hinge over the hardest negative of each row and column
    (``hardest``), or summed over every negative (VSE's "mean violation" form, LAPS's warm-up)."""
    positive = scores.diagonal()
    eye = torch.eye(scores.shape[0], dtype=torch.bool, device=scores.device)
    cost_text = (margin + scores - positive[:, None]).clamp(min=0).masked_fill(eye, 0)  # image -> wrong text
    cost_image = (margin + scores - positive[None, :]).clamp(min=0).masked_fill(eye, 0)  # text -> wrong image
    return _hinge_reduce(cost_text, cost_image, hardest)


def _hinge_reduce(cost_text: torch.Tensor, cost_image: torch.Tensor, hardest: bool) -> torch.Tensor:
    if not hardest:
        return cost_text.sum() + cost_image.sum()
    return cost_text.max(dim=1).values.sum() + cost_image.max(dim=0).values.sum()


# ---- the same losses over the global batch (DDP); exactly the forms above in one process -------------------


def diagonal_positives(n_rows: int, n_columns: int, device=None) -> torch.Tensor:
    """[n_rows, n_columns] bool: local row i's positive is global column rank * n_rows + i (in one
    process: the diagonal, ``torch.eye``)."""
    rows = torch.arange(n_rows, device=device) + batch_offset(n_rows)
    return rows[:, None] == torch.arange(n_columns, device=device)[None, :]


def info_nce_pairs(images, texts, score: Score) -> torch.Tensor:
    """``info_nce`` over the global batch; ``score`` gives the logits (temperature included).

    ``images`` and ``texts`` are what ``score`` takes: tensors whose first axis is the batch ([B, D] global
    embeddings, or [B, P, D] / [B, K, D] tokens), or features dataclasses (``ImageFeatures``, ``TextFeatures``:
    every tensor field is gathered along its first axis, the others kept). A token-level score (FILIP's
    late interaction, say) takes the whole features: ``info_nce_pairs(image, same_token_length(text),
    late_interaction)``, where ``same_token_length`` (``nn.distributed``) pads the token axis to the longest
    over ranks first (each rank's captions are encoded at their own longest length, and a gather needs one
    shape); in one process both are the plain call. ``score(rows, columns)`` is then called with this rank's
    images and every rank's texts, and every rank's images and this rank's texts."""
    if world()[1] == 1:
        return info_nce(score(images, texts))
    return info_nce_blocks(score(images, gather_features(texts)), score(gather_features(images), texts))


def info_nce_blocks(rows: torch.Tensor, columns: torch.Tensor) -> torch.Tensor:
    """This rank's share of InfoNCE: ``rows`` [B, G] its images x every text, ``columns`` [G, B] every
    image x its texts; the mean cross-entropy of its own image rows and text rows."""
    target = torch.arange(rows.shape[0], device=rows.device) + batch_offset(rows.shape[0])
    return (F.cross_entropy(rows, target) + F.cross_entropy(columns.T, target)) / 2


def sigmoid_pairs(images, texts, score: Score, logit_scale: torch.Tensor, logit_bias: torch.Tensor,
                  owner: torch.Tensor | None = None) -> torch.Tensor:
    """``sigmoid_loss`` over the global batch. ``owner`` [n_texts]: the (local) image each text belongs to,
    when texts are not one per image (FLAIR's sub-captions; their count may differ per rank).

    Each pair is one term, so a rank needs only its image rows against every text: their sum
    divided by its B rows is its share (the mean over ranks is the sum over G rows / G).
    """
    n = len(images)
    if world()[1] == 1:
        scores = score(images, texts)
        positives = None if owner is None else (torch.arange(n)[:, None] == owner.cpu()[None, :]).to(scores.device)
        return sigmoid_loss(scores, logit_scale, logit_bias, positives)
    device = logit_scale.device
    if owner is None:
        all_texts = gather_features(texts)
        positives = diagonal_positives(n, len(all_texts), device)
    else:
        counts = all_sizes(len(texts))  # texts per rank
        all_texts = gather_features(texts, uneven=counts)
        owners = gather_with_grad(owner.to(device) + batch_offset(n), uneven=counts)
        positives = (torch.arange(n, device=device) + batch_offset(n))[:, None] == owners[None, :]
    scores = score(images, all_texts)
    return sigmoid_loss(scores, logit_scale, logit_bias, positives.to(scores.device))


def hinge_pairs(images, texts, score: Score, margin: float = 0.2, hardest: bool = True) -> torch.Tensor:
    """``hinge_hardest`` over the global batch: the hardest negative among all G texts / images."""
    if world()[1] == 1:
        return hinge_hardest(score(images, texts), margin, hardest)
    return hinge_blocks(score(images, gather_features(texts)), score(gather_features(images), texts), margin,
                        hardest)


def hinge_blocks(rows: torch.Tensor, columns: torch.Tensor, margin: float = 0.2, hardest: bool = True
                 ) -> torch.Tensor:
    """This rank's share of ``hinge_hardest``: ``rows`` [B, G] its images x every text, ``columns`` [G, B]
    every image x its texts; the sum over its own rows and columns, times the world size."""
    n, device = rows.shape[0], rows.device
    local = torch.arange(n, device=device)
    own = local + batch_offset(n)  # the global index of each local pair
    is_positive = diagonal_positives(n, rows.shape[1], device)  # [B, G]
    cost_text = (margin + rows - rows[local, own][:, None]).clamp(min=0).masked_fill(is_positive, 0)
    cost_image = (margin + columns - columns[own, local][None, :]).clamp(min=0).masked_fill(is_positive.T, 0)
    return _hinge_reduce(cost_text, cost_image, hardest) * world()[1]
