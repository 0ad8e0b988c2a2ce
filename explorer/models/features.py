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


def concat_features(parts: list):
    """One features object from batches of the same kind, along the batch dimension.

    Generic over the dataclass fields, so a method's own features (CAFT's fine tokens, GOAL's
    attention rows) survive batching: tensors and tuples of tensors are concatenated, anything
    else (the grid size) is taken from the first part.
    """
    from dataclasses import fields

    if not parts:
        raise ValueError("nothing to concatenate")
    first = parts[0]
    values = {}
    for f in fields(first):
        items = [getattr(p, f.name) for p in parts]
        if torch.is_tensor(items[0]):
            values[f.name] = torch.cat(items, dim=0)
        elif isinstance(items[0], tuple) and items[0] and torch.is_tensor(items[0][0]):
            values[f.name] = tuple(torch.cat(group, dim=0) for group in zip(*items))
    return replace(first, **values)
