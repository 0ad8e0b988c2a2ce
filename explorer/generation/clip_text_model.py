"""A ``TextTower`` as a transformers ``CLIPTextModel`` (CLIP's tokenizer files: ``models.io.clip_tokenizer_files``).

SDXL's pipeline and every tool around it (diffusers, ComfyUI) take a ``CLIPTextModel`` in the
``text_encoder`` slot. The tower's tensors are moved into that module's layout (q/k/v split,
Hugging Face names) and loaded strictly; ``assign=True`` makes the module share the tower's
storage, so building it costs no copy of the weights.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

from explorer.core.runtime import prepared_import
from explorer.models.io.hf_clip_layout import openai_to_hf
from explorer.models.text_tower import TextTower
from explorer.models.tokenizer import EOT_ID, SOT_ID

CLASSIC_PREFIX = "text_model."

if TYPE_CHECKING:
    from transformers import CLIPTextConfig, CLIPTextModel, CLIPTextModelWithProjection


def text_config(tower: TextTower) -> CLIPTextConfig:
    return prepared_import("transformers").CLIPTextConfig(
        vocab_size=tower.vocab_size, hidden_size=tower.width, intermediate_size=tower.mlp_width,
        projection_dim=tower.projection_dim, num_hidden_layers=tower.layers, num_attention_heads=tower.heads,
        max_position_embeddings=tower.context_length, hidden_act=tower.activation, layer_norm_eps=1e-5,
        # Long-CLIP's tokenizer pads with id 0; the pooled token is the first EOT.
        bos_token_id=SOT_ID, eos_token_id=EOT_ID, pad_token_id=0)


def hf_text_tensors(tower: TextTower, with_projection: bool = False) -> dict[str, torch.Tensor]:
    """The tower's tensors under ``CLIPTextModel`` names (plus ``text_projection.weight`` if asked)."""
    tensors = openai_to_hf(tower.tensors)
    if not with_projection:
        tensors.pop("text_projection.weight", None)
    return tensors


def to_clip_text_model(tower: TextTower) -> CLIPTextModel:
    """The tower as a ``CLIPTextModel`` (eval mode), sharing the tower's storage."""
    with torch.device("meta"):
        model = prepared_import("transformers").CLIPTextModel(text_config(tower))
    load_into(model, hf_text_tensors(tower))
    return model.eval()


def load_into(model: torch.nn.Module, tensors: dict[str, torch.Tensor]) -> None:
    """Strict, storage-sharing load into a module built on the meta device.

    Every parameter and persistent buffer comes from ``tensors`` (a missing or extra key is an
    error); the one non-persistent buffer of transformers' CLIP text embeddings, ``position_ids``,
    is rebuilt. Anything still on the meta device afterwards is an error, not a silent zero.
    """
    tensors = fit_prefix(tensors, model)
    result = model.load_state_dict(tensors, strict=False, assign=True)
    if result.missing_keys or result.unexpected_keys:
        raise ValueError(f"text tower does not fit {type(model).__name__}: missing {result.missing_keys}, "
                         f"unexpected {result.unexpected_keys}")
    reference = next(iter(tensors.values()))
    for module in model.modules():
        if hasattr(module, "position_ids") and hasattr(module, "position_embedding"):
            rows = module.position_embedding.weight.shape[0]
            module.register_buffer("position_ids", torch.arange(rows, device=reference.device)[None],
                                   persistent=False)
    left = [name for name, value in [*model.named_parameters(), *model.named_buffers()] if value.is_meta]
    if left:
        raise RuntimeError(f"{type(model).__name__}: {left} were not filled (a transformers version this "
                           f"code does not know?)")


def fit_prefix(tensors: dict[str, torch.Tensor], model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """Classic checkpoints (SDXL's folders, older transformers) name the text tower ``text_model.*``;
    transformers 5's ``CLIPTextModel`` has no such wrapper. Match whichever the module uses."""
    wants_prefix = any(key.startswith(CLASSIC_PREFIX) for key in model.state_dict())
    out = {}
    for key, value in tensors.items():
        bare = key[len(CLASSIC_PREFIX):] if key.startswith(CLASSIC_PREFIX) else key
        classic = key.startswith(CLASSIC_PREFIX) or not key.startswith("text_projection")
        out[CLASSIC_PREFIX + bare if wants_prefix and classic else bare] = value
    return out


def position_key(encoder: torch.nn.Module) -> str:
    """The name of a transformers CLIP text model's position table in its state dict."""
    keys = [key for key in encoder.state_dict() if key.endswith("embeddings.position_embedding.weight")]
    if len(keys) != 1:
        raise ValueError(f"{type(encoder).__name__} has no single position table: {keys}")
    return keys[0]


def stretched_copy(encoder: CLIPTextModelWithProjection, table: torch.Tensor) -> CLIPTextModelWithProjection:
    """``encoder`` with its position table replaced by ``table``; every other tensor is shared, not copied."""
    transformers = prepared_import("transformers")
    config = transformers.CLIPTextConfig.from_dict({**encoder.config.to_dict(),
                                                    "max_position_embeddings": table.shape[0]})
    with torch.device("meta"):
        stretched = transformers.CLIPTextModelWithProjection(config)
    tensors = dict(encoder.state_dict())
    key = position_key(encoder)
    tensors[key] = table.to(tensors[key].dtype)
    tensors.pop("text_model.embeddings.position_ids", None)  # older transformers saved it
    load_into(stretched, tensors)
    return stretched.eval().requires_grad_(False)
