"""The shape of a CLIP ViT model, read from its tensors.

Nothing is assumed: widths come from projection and LayerNorm shapes, layer
counts from block keys, the patch size from the patch-embedding kernel, the
grid from the position table, and heads = width / 64 (true of every
released CLIP tower). The one thing tensors cannot tell is the activation:
OpenAI-descended checkpoints use QuickGELU, open_clip's own use GELU, so the
format decides it (and a manifest can override it).
"""

from __future__ import annotations

import math
import re
from dataclasses import asdict, dataclass, fields
from typing import TYPE_CHECKING, Mapping

from explorer.core.errors import CheckpointError, ConfigError

if TYPE_CHECKING:  # named in annotations only: the zoo reads architectures before torch is imported
    import torch

HEAD_WIDTH = 64

_KNOWN_NAMES = {  # (vision width, vision layers, patch) -> conventional name
    (768, 12, 32): "ViT-B/32",
    (768, 12, 16): "ViT-B/16",
    (1024, 24, 14): "ViT-L/14",
    (1280, 32, 14): "ViT-H/14",
}


POOLS = ("tok", "avg", "attn")


@dataclass(frozen=True)
class ClipArchitecture:
    embed_dim: int
    image_size: int
    patch_size: int
    vision_width: int
    vision_layers: int
    vision_heads: int
    vision_mlp_ratio: float
    context_length: int
    vocab_size: int
    text_width: int
    text_layers: int
    text_heads: int
    text_mlp_ratio: float
    quick_gelu: bool = True
    # The global image embedding: "tok" the class token (OpenAI CLIP, every released file), "avg" the
    # mean of the patch tokens after ln_post (open_clip's pool_type="avg"). No tensor differs, so a
    # file cannot tell; our own files record it. "attn": attention over the projected patches with one
    # learned query and position-aware keys (``nn.image_pool``; the demo zoo's base, docs/demo-zoo.md), whose
    # tensors (``image_pool.*``) only our own files hold, with ``pool_heads`` heads.
    pool: str = "tok"
    pool_heads: int = 16

    def __post_init__(self):
        if self.pool not in POOLS:
            raise ConfigError(f"pool must be one of {', '.join(POOLS)}, not {self.pool!r}")
        if self.pool == "attn" and (self.pool_heads < 1 or self.embed_dim % self.pool_heads):
            raise ConfigError(f"pool_heads {self.pool_heads} does not divide the embedding width {self.embed_dim}")

    @property
    def grid(self) -> int:
        return self.image_size // self.patch_size

    @property
    def name(self) -> str:
        base = _KNOWN_NAMES.get((self.vision_width, self.vision_layers, self.patch_size))
        if base is None:
            base = f"ViT-w{self.vision_width}-l{self.vision_layers}/{self.patch_size}"
        if self.image_size != 224:
            base += f"@{self.image_size}"
        if self.pool != "tok":
            base += f"-{self.pool}pool"
        return base

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping) -> "ClipArchitecture":
        names = {f.name for f in fields(cls)}
        unknown = set(data) - names
        if unknown:
            raise ConfigError(f"unknown architecture fields: {sorted(unknown)}")
        return cls(**data)


def heads_for(width: int) -> int:
    return max(1, width // HEAD_WIDTH)


def count_blocks(state_dict: Mapping[str, torch.Tensor], prefix: str) -> int:
    """Number of distinct ``{prefix}{i}.`` blocks among the keys."""
    pattern = re.compile(re.escape(prefix) + r"(\d+)\.")
    indices = {int(m.group(1)) for key in state_dict if (m := pattern.match(key))}
    return len(indices)


def infer_clip_architecture(state_dict: Mapping[str, torch.Tensor], quick_gelu: bool = True) -> ClipArchitecture:
    """Read a CLIP ViT architecture from a state dict in the OpenAI/open_clip layout."""
    required = ("visual.conv1.weight", "visual.positional_embedding", "visual.proj",
                "token_embedding.weight", "positional_embedding", "ln_final.weight")
    missing = [k for k in required if k not in state_dict]
    if missing:
        raise KeyError(f"cannot infer a CLIP architecture: missing {missing}")
    conv = state_dict["visual.conv1.weight"]
    vision_width, patch_size = conv.shape[0], conv.shape[-1]
    n_positions = state_dict["visual.positional_embedding"].shape[0]
    grid = math.isqrt(n_positions - 1)
    if grid * grid != n_positions - 1:
        raise CheckpointError(f"visual.positional_embedding has {n_positions} rows: not 1 + a square grid")
    text_width = state_dict["ln_final.weight"].shape[0]
    vision_layers = count_blocks(state_dict, "visual.transformer.resblocks.")
    text_layers = count_blocks(state_dict, "transformer.resblocks.")
    return ClipArchitecture(
        embed_dim=state_dict["visual.proj"].shape[1],
        image_size=grid * patch_size,
        patch_size=patch_size,
        vision_width=vision_width,
        vision_layers=vision_layers,
        vision_heads=heads_for(vision_width),
        vision_mlp_ratio=_mlp_ratio(state_dict, "visual.transformer.resblocks.0.", vision_width),
        context_length=state_dict["positional_embedding"].shape[0],
        vocab_size=state_dict["token_embedding.weight"].shape[0],
        text_width=text_width,
        text_layers=text_layers,
        text_heads=heads_for(text_width),
        text_mlp_ratio=_mlp_ratio(state_dict, "transformer.resblocks.0.", text_width),
        quick_gelu=quick_gelu,
        # Only our own files hold an attention pool; its head count is in their manifest, not in a tensor.
        pool="attn" if "image_pool.query" in state_dict else "tok",
    )


def _mlp_ratio(state_dict, block_prefix: str, width: int) -> float:
    weight = state_dict.get(block_prefix + "mlp.c_fc.weight")
    return 4.0 if weight is None else weight.shape[0] / width
