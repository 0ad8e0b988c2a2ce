"""SEPS's training objective and its recipe.

Hinge with the hardest negatives (margin 0.2) on the [B, B] matrix of full
scores (official: sparse + dense branch; paper: the joint score), plus
``2.0 * mean_pairs (lambda_1 r_s + lambda_2 r_d - rho)^2`` with r_s, r_d the
keep ratios of the two branches per (image, caption) pair, lambda_1 = lambda_2
= 0.5 (eq. 8; the paper gives no values), so the target is the mean keep ratio
of the two branches. For the official top-k it is the constant 2 (ceil(P rho) /
P - rho)^2 (0 when P rho is whole) and trains nothing.

Recipes (the ``recipe`` option of ``SepsMethod``):
- ``"official"`` (default): what the official code (LAPS, which SEPS builds on) trains with. The
  hinge is summed over ALL negatives (the "mean violation" warm-up) for the first
  ``mean_violation_steps`` optimizer steps (None: the first epoch, LAPS's
  ``vse_mean_warmup_epochs=1``), then takes the hardest negative; the fold token's softmax
  weights carry no gradient (LAPS computes the selection scores under ``no_grad``); gradients are
  clipped at 2.0 (a training setting: ``TrainConfig.clip_grad_norm``, set by the SEPS job config
  and the demo zoo). From scratch, hardest negatives from step 0 sit at the collapse value
  2 B margin (every score equal) and never leave it; the summed form has a gradient from every
  negative and does not collapse.
- ``"hardest"``: the explorer's earlier recipe, hardest negatives from step 0 and gradients through
  the fold weights (kept for comparison).
"""

from __future__ import annotations

import torch

from explorer.core.errors import ConfigError
from explorer.models.nn.losses import hinge_blocks, hinge_hardest

MARGIN = 0.2  # hinge margin (LAPS/SEPS)
RATIO_LOSS_WEIGHT = 2.0
BRANCH_RATIO_WEIGHTS = (0.5, 0.5)  # lambda_1 (sparse), lambda_2 (dense) of eq. 8
RECIPES = ("official", "hardest")


def uses_hardest_negatives(recipe: str, mean_violation_steps: int | None, step: int | None,
                           epoch: int | None) -> bool:
    """Whether the hinge takes the hardest negative at this point of training (else: all negatives, summed).

    ``step`` / ``epoch``: the optimizer step being taken and its epoch, both from 0 (the training loop
    puts them in ``batch.extras``); without them (a call outside the loop) the warm-up is over.
    """
    if recipe not in RECIPES:
        raise ConfigError(f"SEPS recipe must be one of {', '.join(RECIPES)}, not {recipe!r}")
    if recipe == "hardest":
        return True
    if mean_violation_steps is not None:
        return step is None or step >= mean_violation_steps
    return epoch is None or epoch >= 1


def seps_loss_terms(scores: torch.Tensor, keep_sparse: torch.Tensor, keep_dense: torch.Tensor, target: float,
                    margin: float = MARGIN, ratio_weight: float = RATIO_LOSS_WEIGHT,
                    branch_weights: tuple[float, float] = BRANCH_RATIO_WEIGHTS,
                    column_scores: torch.Tensor | None = None, hardest: bool = True) -> dict[str, torch.Tensor]:
    """The weighted SEPS loss terms.

    ``scores`` [B, B] image x caption (positives on the diagonal); ``keep_*``
    [B, B, P] the decisions of each pair's branches. ``hinge``: VSE++'s hardest
    negative hinge summed over the batch (``hardest=False``: every negative, summed);
    ``ratio``: ``ratio_weight * mean over pairs of (l1 r_s + l2 r_d - target)^2``, r = the pair's mean decision.

    Under DDP: ``scores`` [B, G] and ``keep_*`` [B, G, P] are this rank's images against
    every caption of the global batch and ``column_scores`` [G, B] every image against its
    captions (``nn.losses.hinge_blocks``: the hinge share of this rank); the ratio's mean over
    this rank's B x G pairs averages, over ranks, to the mean over all G x G pairs.
    """
    l1, l2 = branch_weights
    ratio = l1 * keep_sparse.float().mean(dim=-1) + l2 * keep_dense.float().mean(dim=-1)
    hinge = (hinge_hardest(scores, margin, hardest) if column_scores is None
             else hinge_blocks(scores, column_scores, margin, hardest))
    return {"hinge": hinge, "ratio": ratio_weight * ((ratio - target) ** 2).mean()}
