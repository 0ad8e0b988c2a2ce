"""Hugging Face ``CLIPModel`` keys <-> OpenAI CLIP keys.

GOAL releases Hugging Face ``CLIPModel`` state dicts. The two layouts hold
the same numbers arranged differently: HF splits attention into q/k/v
projections where OpenAI fuses them into ``in_proj_weight`` (rows q, k, v),
and HF stores the final projections as ``nn.Linear`` weights, the
transpose of OpenAI's ``x @ proj`` matrices.
"""

from __future__ import annotations

import re
from typing import Mapping

import torch

# Per-block renames (HF name -> OpenAI name), attention excluded.
_BLOCK = {
    "self_attn.out_proj.weight": "attn.out_proj.weight",
    "self_attn.out_proj.bias": "attn.out_proj.bias",
    "layer_norm1.weight": "ln_1.weight",
    "layer_norm1.bias": "ln_1.bias",
    "layer_norm2.weight": "ln_2.weight",
    "layer_norm2.bias": "ln_2.bias",
    "mlp.fc1.weight": "mlp.c_fc.weight",
    "mlp.fc1.bias": "mlp.c_fc.bias",
    "mlp.fc2.weight": "mlp.c_proj.weight",
    "mlp.fc2.bias": "mlp.c_proj.bias",
}
_TOWERS = {"vision_model.": "visual.transformer.resblocks.", "text_model.": "transformer.resblocks."}
_SINGLE = {  # HF name -> (OpenAI name, transpose?)
    "vision_model.embeddings.class_embedding": ("visual.class_embedding", False),
    "vision_model.embeddings.patch_embedding.weight": ("visual.conv1.weight", False),
    "vision_model.embeddings.position_embedding.weight": ("visual.positional_embedding", False),
    "vision_model.pre_layrnorm.weight": ("visual.ln_pre.weight", False),  # sic: HF's spelling
    "vision_model.pre_layrnorm.bias": ("visual.ln_pre.bias", False),
    "vision_model.post_layernorm.weight": ("visual.ln_post.weight", False),
    "vision_model.post_layernorm.bias": ("visual.ln_post.bias", False),
    "visual_projection.weight": ("visual.proj", True),
    "text_model.embeddings.token_embedding.weight": ("token_embedding.weight", False),
    "text_model.embeddings.position_embedding.weight": ("positional_embedding", False),
    "text_model.final_layer_norm.weight": ("ln_final.weight", False),
    "text_model.final_layer_norm.bias": ("ln_final.bias", False),
    "text_projection.weight": ("text_projection", True),
    "logit_scale": ("logit_scale", False),
}
_LAYER = re.compile(r"^(vision_model\.|text_model\.)encoder\.layers\.(\d+)\.(.+)$")
_QKV = ("q_proj", "k_proj", "v_proj")

HF_BUFFERS = {"position_ids": "index buffer saved by older transformers"}


def is_hf_clip(keys) -> bool:
    keys = set(keys)
    return "text_model.embeddings.token_embedding.weight" in keys and \
        "vision_model.embeddings.patch_embedding.weight" in keys


def hf_to_openai(tensors: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Convert; keys it does not know are passed through unchanged (so a strict load reports them)."""
    out: dict[str, torch.Tensor] = {}
    attention: dict[tuple[str, str], dict[str, tuple[str, torch.Tensor]]] = {}  # (prefix, weight|bias) -> q/k/v
    for key, value in tensors.items():
        if key in _SINGLE:
            name, transpose = _SINGLE[key]
            out[name] = value.t().contiguous() if transpose else value
            continue
        match = _LAYER.match(key)
        if match is None:
            out[key] = value
            continue
        tower, index, rest = match.groups()
        prefix = f"{_TOWERS[tower]}{index}."
        part = rest.split(".")
        if len(part) == 3 and part[0] == "self_attn" and part[1] in _QKV:
            attention.setdefault((prefix, part[2]), {})[part[1]] = (key, value)
        elif rest in _BLOCK:
            out[prefix + _BLOCK[rest]] = value
        else:
            out[key] = value
    for (prefix, kind), parts in attention.items():
        if all(p in parts for p in _QKV):  # OpenAI fuses rows in the order q, k, v
            out[f"{prefix}attn.in_proj_{kind}"] = torch.cat([parts[p][1] for p in _QKV], dim=0)
        else:  # incomplete: keep the originals so the key report names them
            out.update(dict(parts.values()))
    return out


def openai_to_hf(tensors: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The inverse of ``hf_to_openai`` (used to write GOAL-layout files)."""
    single = {name: (hf, transpose) for hf, (name, transpose) in _SINGLE.items()}
    block = {v: k for k, v in _BLOCK.items()}
    out: dict[str, torch.Tensor] = {}
    for key, value in tensors.items():
        if key in single:
            hf, transpose = single[key]
            out[hf] = value.t().contiguous() if transpose else value
            continue
        for tower, prefix in _TOWERS.items():
            if key.startswith(prefix):
                index, rest = key[len(prefix):].split(".", 1)
                head = f"{tower}encoder.layers.{index}."
                if rest.startswith("attn.in_proj_"):
                    kind = rest.rsplit("_", 1)[1]
                    for name, chunk in zip(_QKV, value.chunk(3, dim=0)):
                        out[f"{head}self_attn.{name}.{kind}"] = chunk.contiguous()
                else:
                    out[head + block[rest]] = value
                break
        else:
            out[key] = value
    return out
