"""The method registry: one module (or package) per method, each registered by name.

Adding a method is one new module here (a class with the ``Method`` surface, decorated with
``@register``) plus a manifest in checkpoints/: modules are discovered, not listed. A method may
also live in any installed package that names its class under the entry-point group
``explorer.methods`` (``plugins``): ``discover_methods`` loads those after the built-ins, and a
plugin that fails to load is recorded (``method_entries``), never raised. The registry itself
imports no torch: the page asks it (``imported_method``) before the method modules load.
"""

from __future__ import annotations

import importlib
import pkgutil
from typing import TYPE_CHECKING, Mapping

from explorer.core.errors import CheckpointError
from explorer.models.map_kinds import GENERIC_MAP
from explorer.models.methods.registry import BUILT_IN, METHODS, SOURCES, MethodNameTaken, register

if TYPE_CHECKING:
    import torch

    from explorer.models.io.checkpoints import RawCheckpoint
    from explorer.models.methods.base import Method

def get_method(name: str) -> type[Method]:
    discover_methods()
    if name not in METHODS:
        from explorer.models.methods import plugins

        failed = next((entry for entry in plugins.failed() if entry.name == name), None)
        if failed is not None:
            raise CheckpointError(f"Method {name!r} ({failed.source}) did not load: {failed.error}")
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


NOT_METHODS = {"base", "plugins", "registry"}  # modules here that hold the shared surface, the registry or the
# plugin loader, not a method
_discovered = False


def discover_methods() -> dict[str, type[Method]]:
    """Import every method module in this package (running its ``@register``), then the installed plugins
    (``plugins.load_plugins``: built-ins first, so a plugin never takes a built-in's name); the registry."""
    global _discovered
    for module in pkgutil.iter_modules(__path__):
        if module.name not in NOT_METHODS and not module.name.startswith("_"):
            importlib.import_module(f"{__name__}.{module.name}")
    from explorer.models.methods import plugins

    plugins.load_plugins()
    _discovered = True
    return METHODS


def discovered() -> bool:
    """Whether ``discover_methods`` has run (the method modules, torch with them, are imported)."""
    return _discovered


def imported_method(name: str) -> type[Method] | None:
    """``get_method(name)`` once the method modules are imported; None before, importing nothing.

    The method modules bring open_clip and torchvision (seconds): a page is built before them and lists
    models from their manifests alone, then fills in what each method offers when it loads."""
    return get_method(name) if _discovered else None


def keys_with_prefix(tensors: Mapping[str, torch.Tensor], prefix: str) -> bool:
    return any(key.startswith(prefix) for key in tensors)


def method_entries() -> list:
    """Every method and every plugin that failed, for ``explorer methods`` (``plugins.MethodEntry``)."""
    from explorer.models.methods import plugins

    discover_methods()
    return plugins.entries(METHODS, SOURCES)


__all__ = ["BUILT_IN", "GENERIC_MAP", "METHODS", "MethodNameTaken", "SOURCES", "detect_format", "discover_methods",
           "discovered", "get_method", "imported_method", "method_entries", "register"]
