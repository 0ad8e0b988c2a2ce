"""A twin of a tiny class-token model: the same tower under an attention pool whose values negate the patches
(value projection I, output projection -I, no biases), so anything read from the pool's values is the negative
of what the class-token model reads from its raw patches."""

from __future__ import annotations

from dataclasses import replace

import torch


def negating_pool_twin(model, heads: int = 2):
    twin = type(model)(replace(model.arch, pool="attn", pool_heads=heads)).eval()
    twin.load_state_dict(model.state_dict(), strict=False)  # the same tower; the pool is new
    width = model.arch.embed_dim
    with torch.no_grad():
        attn = twin.image_pool.attn
        attn.in_proj_weight[2 * width:] = torch.eye(width)
        attn.in_proj_bias.zero_()
        attn.out_proj.weight.copy_(-torch.eye(width))
        attn.out_proj.bias.zero_()
    return twin
