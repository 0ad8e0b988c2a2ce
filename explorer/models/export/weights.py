"""The backbone's tensors as both folders save them: the OpenAI / open_clip layout, float32, in a safetensors
file written atomically (``transformers_folder`` and ``open_clip_folder`` each write one)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from explorer.core.files import atomic_path

if TYPE_CHECKING:  # importing this module imports no torch (the CLI's parser reads the package)
    import torch

    from explorer.models.methods.base import Method


def backbone_tensors(method: Method) -> dict[str, torch.Tensor]:
    """The method's CLIP backbone in the OpenAI / open_clip layout, float32 on the CPU, ready to save."""
    import torch

    return {key: value.detach().to("cpu", torch.float32).contiguous()
            for key, value in method.backbone_state_dict(pool=False).items()}


def save_weights(tensors: dict[str, torch.Tensor], path: Path) -> Path:
    """A safetensors file written atomically (no torn file if the write is killed), readable by all as the
    folder's other files are: safetensors creates its file private (0600), and an export is for sharing."""
    from safetensors.torch import save_file

    with atomic_path(path) as temporary:
        save_file(tensors, str(temporary), metadata={"format": "pt"})
        os.chmod(temporary, 0o644)
    return path


__all__ = ["backbone_tensors", "save_weights"]
