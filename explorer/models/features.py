"""Typed features that every model returns.

All features are *projected* into the joint embedding space and *not*
normalised: callers normalise where a cosine is what they want, so nothing
that needs the raw scale (e.g. pooling before normalising) loses it.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch


@dataclass
class ImageFeatures:
    cls: torch.Tensor  # [B, d]   global embedding (projected class token or pooled)
    patches: torch.Tensor  # [B, P, d] projected patch tokens, row-major over the grid
    grid_hw: tuple[int, int]  # patch grid (rows, cols); rows * cols == P

    def __len__(self) -> int:
        return self.cls.shape[0]

    def __getitem__(self, index) -> "ImageFeatures":
        index = _as_batch_index(index)
        return replace(self, cls=self.cls[index], patches=self.patches[index])

    def to(self, *args, **kwargs) -> "ImageFeatures":
        return replace(self, cls=self.cls.to(*args, **kwargs), patches=self.patches.to(*args, **kwargs))


@dataclass
class TextFeatures:
    eot: torch.Tensor  # [B, d]   global embedding (projected EOT / pooled token)
    tokens: torch.Tensor  # [B, K, d] projected token states
    mask: torch.Tensor  # [B, K]   True where the token is real (not padding)

    def __len__(self) -> int:
        return self.eot.shape[0]

    def __getitem__(self, index) -> "TextFeatures":
        index = _as_batch_index(index)
        return replace(self, eot=self.eot[index], tokens=self.tokens[index], mask=self.mask[index])

    def to(self, *args, **kwargs) -> "TextFeatures":
        return replace(self, eot=self.eot.to(*args, **kwargs), tokens=self.tokens.to(*args, **kwargs))


def _as_batch_index(index):
    # An int would drop the batch dimension; features always keep it.
    return slice(index, index + 1) if isinstance(index, int) else index
