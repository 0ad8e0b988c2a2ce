"""The method registry: one module (or package) per method, each registered by name.

Adding a method is one new module here (a class with the ``Method`` surface, decorated with
``@register``) plus a manifest in checkpoints/: modules are discovered, not listed. The registry
itself imports no torch: the page asks it (``imported_method``) before the method modules load.
"""

from __future__ import annotations

import importlib
import pkgutil
from typing import TYPE_CHECKING, Mapping

from explorer.core.errors import CheckpointError
from explorer.models.map_kinds import GENERIC_MAP

if TYPE_CHECKING:
    import torch

    from explorer.models.io.checkpoints import RawCheckpoint
    from explorer.models.methods.base import Method

METHODS: dict[str, type[Method]] = {}


def register(cls: type[Method]) -> type[Method]:
    if cls.name in METHODS:
        raise ValueError(f"method {cls.name!r} is registered twice")
    METHODS[cls.name] = cls
    return cls


def get_method(name: str) -> type[Method]:
    discover_methods()
    if name not in METHODS:
        raise CheckpointError(f"Unknown method {name!r}; known: {', '.join(sorted(METHODS))}.")
    return METHODS[name]


def detect_format(raw: RawCheckpoint) -> tuple[type[Method], str]:
    """Which method's released layout the file is in, most specific layout first."""
    discover_methods()
    for cls in sorted(METHODS.values(), key=lambda c: -c.detect_priority):
        fmt = cls.detect(raw.tensors, raw)
        if fmt is not None:
            return cls, fmt
    sample = ", ".join(sorted(raw.tensors)[:8])
    raise CheckpointError(
        f"{raw.path}: unknown checkpoint layout. It matches none of "
        f"{', '.join(sorted(METHODS))}. First keys: {sample}.")


NOT_METHODS = {"base"}  # modules here that hold the shared surface, not a method
_discovered = False


def discover_methods() -> dict[str, type[Method]]:
    """Import every method module in this package (running its ``@register``); the registry."""
    global _discovered
    for module in pkgutil.iter_modules(__path__):
        if module.name not in NOT_METHODS and not module.name.startswith("_"):
            importlib.import_module(f"{__name__}.{module.name}")
    _discovered = True
    return METHODS


def imported_method(name: str) -> type[Method] | None:
    """``get_method(name)`` once the method modules are imported; None before, importing nothing.

    The method modules bring open_clip and torchvision (seconds): a page is built before them and lists
    models from their manifests alone, then fills in what each method offers when it loads."""
    return get_method(name) if _discovered else None


def keys_with_prefix(tensors: Mapping[str, torch.Tensor], prefix: str) -> bool:
    return any(key.startswith(prefix) for key in tensors)


__all__ = ["GENERIC_MAP", "METHODS", "detect_format", "discover_methods", "get_method", "imported_method",
           "register"]
