"""Typed features that every model returns.

All features are *projected* into the joint embedding space and *not*
normalised: callers normalise where a cosine is what they want, so nothing
that needs the raw scale (e.g. pooling before normalising) loses it.
"""

from __future__ import annotations

import importlib
import json
from dataclasses import dataclass, fields, replace

import torch

from explorer.core.errors import InputError


@dataclass
class ImageFeatures:
    """What an image tower returns for B pictures, projected into the joint space and not normalised.

    Attributes:
        cls: (B, D) float32, the global image embedding: the projected class token, or the pooled patch
            tokens for a model that pools them (``pool="avg"`` or ``"attn"``, the demo zoo's base).
        patches: (B, P, D) float32, the projected patch tokens, row-major over the grid (P = rows x cols).
        grid_hw: (rows, cols) of the patch grid.

    A method may return a subclass with fields of its own (CAFT's fine tokens, GOAL's attention rows);
    indexing (``features[i]``, which keeps the batch dimension) and ``.to(...)`` carry them along.
    """

    cls: torch.Tensor  # [B, d]   global embedding (projected class token or pooled)
    patches: torch.Tensor  # [B, P, d] projected patch tokens, row-major over the grid
    grid_hw: tuple[int, int]  # patch grid (rows, cols); rows * cols == P

    def __len__(self) -> int:
        return self.cls.shape[0]

    def __getitem__(self, index) -> "ImageFeatures":
        return _select(self, index)

    def to(self, *args, **kwargs) -> "ImageFeatures":
        return _move(self, *args, **kwargs)


@dataclass
class TextFeatures:
    """What a text tower returns for B texts, projected into the joint space and not normalised.

    Attributes:
        eot: (B, D) float32, the global text embedding: the projected state of each text's end token
            (EOT) for a CLIP text tower (SEPS: BERT's [CLS] state; CAFT: its whole-caption embedding).
        tokens: (B, K, D) float32, the projected state of every token, the start token (SOT) first. K is
            cut to the batch's longest text (its end token's position + 1), not the context length: the
            tower's attention is causal, so the padding after the last end token changes nothing.
        mask: (B, K) bool, True from the start token through the end token, both included, and False on
            the padding after it (a CLIP text tower's; a method with another text side says what its own
            holds). ``word_mask()`` leaves out the start and end tokens; ``eot_positions()``
            gives each text's end token. (Padding is id 0, which is also a real BPE token, "!": read the
            mask, not the ids.)
    """

    eot: torch.Tensor  # [B, d]   global embedding (projected EOT / pooled token)
    tokens: torch.Tensor  # [B, K, d] projected token states
    mask: torch.Tensor  # [B, K]   True where the token is real (not padding)

    def __len__(self) -> int:
        return self.eot.shape[0]

    def __getitem__(self, index) -> "TextFeatures":
        return _select(self, index)

    def to(self, *args, **kwargs) -> "TextFeatures":
        return _move(self, *args, **kwargs)

    def eot_positions(self) -> torch.Tensor:
        """(B,) int64 index of each caption's EOT: its last real token (padding only ever follows EOT)."""
        positions = torch.arange(self.mask.shape[1], device=self.mask.device)
        return torch.where(self.mask, positions, -1).max(dim=1).values

    def word_mask(self) -> torch.Tensor:
        """(B, K) bool, True at the word tokens: after SOT, before EOT."""
        positions = torch.arange(self.mask.shape[1], device=self.mask.device)
        return (positions[None, :] > 0) & (positions[None, :] < self.eot_positions()[:, None])


# Generic over the dataclass fields, so a method's own features (CAFT's fine tokens, GOAL's attention
# rows) index, move and concatenate like the base ones without writing it again.


def _map_tensors(features, fn):
    """``features`` with ``fn`` applied to every tensor field and every tuple-of-tensors field."""
    values = {}
    for f in fields(features):
        value = getattr(features, f.name)
        if torch.is_tensor(value):
            values[f.name] = fn(value)
        elif isinstance(value, tuple) and value and all(torch.is_tensor(t) for t in value):
            values[f.name] = tuple(fn(t) for t in value)
    return replace(features, **values)


def _select(features, index):
    # An int would drop the batch dimension; features always keep it.
    index = slice(index, index + 1) if isinstance(index, int) else index
    return _map_tensors(features, lambda t: t[index])


def _move(features, *args, **kwargs):
    # Only floating tensors follow a dtype or device change; masks stay as they are.
    return _map_tensors(features, lambda t: t.to(*args, **kwargs) if t.is_floating_point() else t)


def copy_features(features):
    """A copy of every tensor field (masks too): made outside inference mode, the copy can enter a graph."""
    return _map_tensors(features, lambda t: t.detach().clone())


def concat_features(parts: list):
    """One features object from batches of the same kind, along the batch dimension.

    Tensors and tuples of tensors are concatenated, anything else (the grid size) is taken from
    the first part.
    """
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


# ---- to and from plain tensors (safetensors files: the embedding cache) ----------------------------

FEATURE_MODULES = "explorer.models."  # a stored class name is only ever resolved inside this package


def features_to_tensors(features) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    """The tensors of a features object by field name (a tuple field as ``name.0``, ``name.1``, ...) and
    everything else as text (the class, the grid, which fields are None), as safetensors stores them."""
    cls = type(features)
    tensors: dict[str, torch.Tensor] = {}
    layout: dict[str, object] = {}
    for f in fields(features):
        value = getattr(features, f.name)
        if torch.is_tensor(value):
            tensors[f.name] = value.detach().cpu().contiguous()
            layout[f.name] = "tensor"
        elif isinstance(value, tuple) and value and all(torch.is_tensor(t) for t in value):
            tensors.update({f"{f.name}.{i}": t.detach().cpu().contiguous() for i, t in enumerate(value)})
            layout[f.name] = ["tensors", len(value)]
        else:  # None, (), the grid size: plain values
            layout[f.name] = ["value", list(value) if isinstance(value, tuple) else value]
    metadata = {"class": f"{cls.__module__}:{cls.__qualname__}", "fields": json.dumps(layout)}
    return tensors, metadata


def features_from_tensors(tensors: dict[str, torch.Tensor], metadata: dict[str, str]):
    """The features object ``features_to_tensors`` took apart; its class must live in ``explorer.models``."""
    cls = _feature_class(metadata.get("class", ""))
    layout = json.loads(metadata["fields"])
    values = {}
    for name, kind in layout.items():
        if kind == "tensor":
            values[name] = tensors[name]
        elif kind[0] == "tensors":
            values[name] = tuple(tensors[f"{name}.{i}"] for i in range(kind[1]))
        else:
            values[name] = tuple(kind[1]) if isinstance(kind[1], list) else kind[1]
    return cls(**values)


def _feature_class(name: str):
    module, _, qualname = name.partition(":")
    if not module.startswith(FEATURE_MODULES):
        raise InputError(f"stored features name the class {name!r}, which is not explorer's: delete the stored "
                         "embeddings and index again")
    cls = getattr(importlib.import_module(module), qualname, None)
    if not (isinstance(cls, type) and issubclass(cls, (ImageFeatures, TextFeatures))):
        raise InputError(f"stored features name {name!r}, which is not a features class: delete the stored "
                         "embeddings and index again")
    return cls
