"""A package whose public names are imported on first use (building the CLI parser imports no torch).

    _EXPORTS = {"JobManager": "manager", "Run": "records"}     # name -> the submodule that defines it
    __getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
    __all__ = sorted(_EXPORTS)
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping


def lazy_exports(package: str, exports: Mapping[str, str]) -> tuple[Callable, Callable]:
    """The module ``__getattr__`` and ``__dir__`` of ``package``: a name of ``exports`` is imported from its
    submodule when first asked for, then kept in the package like any other attribute."""

    def __getattr__(name: str):
        if name in exports:
            value = getattr(importlib.import_module(f".{exports[name]}", package), name)
            setattr(sys.modules[package], name, value)
            return value
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    def __dir__():
        return sorted([*vars(sys.modules[package]), *exports])

    return __getattr__, __dir__


__all__ = ["lazy_exports"]
