"""Late-interaction score of FineLIP's CLIM and LAPS/SEPS.

On L2-normalised tokens, ``S = leaky_relu(T V^T, 0.1)``; the score is the
mean over text tokens of their best image token plus the mean over image
tokens of their best text token (a sum of the two directions, as the
official code does; no temperature).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

NEGATIVE_SLOPE = 0.1


def token_similarity(text_tokens: torch.Tensor, image_tokens: torch.Tensor) -> torch.Tensor:
    """[K, P] leaky-ReLU cosine between one caption's tokens and one image's tokens.

    ``image_tokens`` may also be a batch of images ([B, P, d]): then [B, K, P].
    """
    text = F.normalize(text_tokens.float(), dim=-1)
    image = F.normalize(image_tokens.float(), dim=-1)
    # A batch is one einsum over all images (as SEPS always computed it, so its scores keep their bits).
    sim = text @ image.T if image.ndim == 2 else torch.einsum("kd,bnd->bkn", text, image)
    return F.leaky_relu(sim, NEGATIVE_SLOPE)


def late_interaction_score(text_tokens: torch.Tensor, image_tokens: torch.Tensor) -> torch.Tensor:
    """Score of one caption ([K, d], valid tokens only) against one image ([P, d]): a scalar.

    Against a batch of images ([B, P, d]) it is the [B] scores, one per image.
    """
    sim = token_similarity(text_tokens, image_tokens)
    return sim.max(dim=-1).values.mean(dim=-1) + sim.max(dim=-2).values.mean(dim=-1)
