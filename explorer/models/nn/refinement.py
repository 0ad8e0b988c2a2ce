"""Token refinement: N input tokens -> N' refined tokens by learned soft assignment.

FineLIP's token refinement (its official code; the paper calls it ATRM) and
LAPS/SEPS's aggregation share this module and its key layout
(``weight.{0,1,3}.*`` and ``scale``):

    W = softmax_over_N( scale * MLP(X)^T ),  MLP = LayerNorm -> Linear(d, h) -> GELU -> Linear(h, N')
    output = W X                                                  (N' x d)

Each row of W says which input tokens feed one refined token, which is what
the "which patches feed refined token j" view draws.
"""

from __future__ import annotations

import torch
from torch import nn


class TokenRefiner(nn.Module):
    def __init__(self, dim: int, hidden: int, n_out: int):
        super().__init__()
        self.weight = nn.Sequential(nn.LayerNorm(dim), nn.Linear(dim, hidden), nn.GELU(), nn.Linear(hidden, n_out))
        self.scale = nn.Parameter(torch.ones(1, 1, 1))

    @property
    def n_out(self) -> int:
        return self.weight[3].out_features

    def assignment(self, tokens: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        """W: [B, N', N], rows summing to 1 over the (valid) input tokens."""
        logits = self.weight(tokens).transpose(1, 2) * self.scale
        if mask is not None:
            logits = logits.masked_fill(~mask[:, None, :], float("-inf"))
        return logits.softmax(dim=-1)

    def forward(self, tokens: torch.Tensor, mask: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        weights = self.assignment(tokens, mask)
        return weights @ tokens, weights

    @staticmethod
    def sizes_from(tensors, prefix: str) -> dict:
        """dim, hidden and n_out of a refiner stored under ``prefix`` (e.g. 'cross_net.aggr_net.')."""
        hidden, dim = tensors[prefix + "weight.1.weight"].shape
        return {"dim": dim, "hidden": hidden, "n_out": tensors[prefix + "weight.3.weight"].shape[0]}
