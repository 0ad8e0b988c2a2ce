"""The registry itself: method name -> class, and where each came from (built in, or which plugin). Held apart
from the package's discovery (``__init__``) and the plugin loader (``plugins``), which both write to it."""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING

from explorer.core.errors import CheckpointError

if TYPE_CHECKING:
    from explorer.models.methods.base import Method

PACKAGE = "explorer.models.methods"  # a class defined in a module under it is built in
METHODS: dict[str, type[Method]] = {}
BUILT_IN = "built-in"
SOURCES: dict[str, str] = {}  # method name -> where it comes from: BUILT_IN, or "package version"


class MethodNameTaken(CheckpointError):
    """A second class claims a registered method's name; the message names both sources."""


def register(cls: type[Method], source: str | None = None) -> type[Method]:
    """Add ``cls`` under ``cls.name`` (``source``: where it comes from; default: built-in, or the plugin
    being loaded). A taken name is refused with both sources."""
    source = source or loading_source() or (BUILT_IN if cls.__module__.startswith(f"{PACKAGE}.")
                                            else f"module {cls.__module__}")
    if cls.name in METHODS and METHODS[cls.name] is not cls:
        raise MethodNameTaken(f"method name {cls.name!r} of {source} ({cls.__module__}.{cls.__qualname__}) is "
                              f"taken by {SOURCES.get(cls.name, BUILT_IN)} ({METHODS[cls.name].__module__}."
                              f"{METHODS[cls.name].__qualname__}); the first keeps it")
    METHODS[cls.name] = cls
    SOURCES[cls.name] = source
    return cls



_loading: list[str] = []  # the source of the plugin being imported (``register`` reads it)


def loading_source() -> str | None:
    return _loading[-1] if _loading else None


@contextlib.contextmanager
def loading(source: str):
    """``register`` names ``source`` for the classes registered while the plugin is imported."""
    _loading.append(source)
    try:
        yield
    finally:
        _loading.pop()


__all__ = ["BUILT_IN", "METHODS", "MethodNameTaken", "SOURCES", "loading", "loading_source", "register"]
