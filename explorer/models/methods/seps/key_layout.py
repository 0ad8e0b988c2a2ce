"""The released SEPS checkpoint layout, and its ViT key names <-> the installed transformers' names.

Released checkpoints (``model_best.pth``) are ``{'model': state_dict, 'opt':
argparse.Namespace, 'epoch', 'best_rsum', 'Eiters'}``; the Namespace means the
file can only be read after the user opts in to unpickling. The state dict:

- ``img_enc.visual_encoder.*``: a Hugging Face ``ViTModel`` (with pooler) under
  transformers 4.x key names (``encoder.layer.N.attention.attention.query.*``);
- ``img_enc.vision_proj.*``: Linear(vision width, C), absent when C equals the
  vision width (an ``nn.Identity`` then);
- ``txt_enc.bert.*``: a Hugging Face ``BertModel`` (with pooler), 4.x names;
  ``embeddings.position_ids`` may be present (a buffer: ignored, with reason);
- ``txt_enc.fc.*``: Linear(text width, C), absent when C equals the text width;
- ``cross_net.aggr_net.*``: the LAPS/SEPS aggregation (``TokenRefiner``'s
  layout), whose width, hidden size and N' are read from the tensors.

The installed transformers may name ViT keys differently from the released 4.x
names (5.x: ``layers.N.attention.q_proj``, ``layers.N.mlp.fc1``, ...); which
names it uses is read off a ViTModel built here, and the released names are
mapped onto them on load (and back by ``released_state_dict`` for writing
released files). LAPS checkpoints share this layout and load as SEPS.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Mapping

import torch

from explorer.core.errors import CheckpointError
from explorer.models.methods.seps.hf import load_transformers

VIT_PREFIX = "img_enc.visual_encoder."
VISION_PROJ_PREFIX = "img_enc.vision_proj."
BERT_PREFIX = "txt_enc.bert."
TEXT_FC_PREFIX = "txt_enc.fc."
AGGR_PREFIX = "cross_net.aggr_net."
SCORE_NET_PREFIX = "cross_net.score_net."  # the paper variant's prior MLP (not in official files)
POOLER_PREFIXES = (VIT_PREFIX + "pooler.", BERT_PREFIX + "pooler.")

IGNORED_KEYS = {
    "embeddings.position_ids": "BERT buffer (0..max_positions-1), rebuilt by the model",
    "embeddings.token_type_ids": "BERT buffer (zeros), rebuilt by the model",
}


@dataclass(frozen=True)
class VitNaming:
    """Where one transformers version keeps a ViT layer's weights."""

    label: str
    layer: str  # prefix of layer N, with {} for N
    parts: tuple[tuple[str, str], ...]  # (role, module path inside the layer)

    def key(self, index: int, role: str, leaf: str) -> str:
        return self.layer.format(index) + dict(self.parts)[role] + "." + leaf

    def parse(self, key: str) -> tuple[int, str, str] | None:
        """(layer index, role, leaf) of a layer key in this naming, or None."""
        head, _, tail = self.layer.partition("{}")
        match = re.fullmatch(re.escape(head) + r"(\d+)" + re.escape(tail) + r"(.+)\.([^.]+)", key)
        if match is None:
            return None
        by_path = {path: role for role, path in self.parts}
        role = by_path.get(match.group(2))
        return None if role is None else (int(match.group(1)), role, match.group(3))


RELEASED_VIT_NAMING = VitNaming("transformers 4.x", "encoder.layer.{}.", (
    ("q", "attention.attention.query"), ("k", "attention.attention.key"), ("v", "attention.attention.value"),
    ("o", "attention.output.dense"), ("fc1", "intermediate.dense"), ("fc2", "output.dense"),
    ("ln1", "layernorm_before"), ("ln2", "layernorm_after"),
))
V5_VIT_NAMING = VitNaming("transformers 5.x", "layers.{}.", (
    ("q", "attention.q_proj"), ("k", "attention.k_proj"), ("v", "attention.v_proj"),
    ("o", "attention.o_proj"), ("fc1", "mlp.fc1"), ("fc2", "mlp.fc2"),
    ("ln1", "layernorm_before"), ("ln2", "layernorm_after"),
))
KNOWN_VIT_NAMINGS = (RELEASED_VIT_NAMING, V5_VIT_NAMING)


@lru_cache(maxsize=1)
def installed_vit_naming() -> VitNaming:
    """The naming the installed transformers' ViTModel uses, read off a tiny one built on meta."""
    tf = load_transformers()
    config = tf.ViTConfig(hidden_size=8, num_hidden_layers=1, num_attention_heads=1, intermediate_size=8,
                          image_size=4, patch_size=2)
    with torch.device("meta"):
        keys = set(tf.ViTModel(config).state_dict())
    for naming in KNOWN_VIT_NAMINGS:
        if all(naming.key(0, role, "weight") in keys for role, _ in naming.parts):
            return naming
    sample = ", ".join(sorted(keys)[:12])
    raise CheckpointError(f"The installed transformers {tf.__version__} names ViTModel weights in a way this "
                          f"explorer does not know ({sample}); SEPS checkpoints cannot be mapped onto it.")


def rename_vit_keys(tensors: Mapping[str, torch.Tensor], source: VitNaming, target: VitNaming,
                    prefix: str = VIT_PREFIX) -> dict[str, torch.Tensor]:
    """Rename the ViT layer keys under ``prefix`` from one naming to another (others unchanged)."""
    if source == target:
        return dict(tensors)
    out = {}
    for key, value in tensors.items():
        if key.startswith(prefix):
            parsed = source.parse(key[len(prefix):])
            if parsed is not None:
                key = prefix + target.key(*parsed)
        out[key] = value
    return out


def released_state_dict(state_dict: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Our module's state dict -> the released SEPS layout (transformers 4.x ViT names)."""
    return rename_vit_keys(state_dict, installed_vit_naming(), RELEASED_VIT_NAMING)


def from_released_layout(tensors: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Released SEPS keys -> the installed transformers' ViT names (a no-op where they agree)."""
    return rename_vit_keys(tensors, RELEASED_VIT_NAMING, installed_vit_naming())
