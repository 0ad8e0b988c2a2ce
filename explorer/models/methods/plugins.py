"""Methods from other packages: the entry-point group ``explorer.methods``.

A package registers a method in its pyproject::

    [project.entry-points."explorer.methods"]
    mymethod = "mypkg.mymethod:MyMethod"

The entry point's name is the method's name (``MyMethod.name`` must say the same). ``load_plugins``
imports each once per process, after the built-ins; one that fails to import, is not a ``Method``, or
claims a taken name is recorded with its error (``entries``) and never raised, so a broken plugin
takes down neither the app nor the command line. Reading the names (``entry_point_names``) imports
nothing: the page lists plugin methods before torch is loaded.
"""

from __future__ import annotations

import traceback
from dataclasses import dataclass
from importlib import metadata

from explorer.core.errors import ConfigError
from explorer.models.methods.registry import BUILT_IN, METHODS, SOURCES, loading, register

GROUP = "explorer.methods"
_failed: dict[str, "MethodEntry"] = {}  # entry-point name -> the plugin that did not load
_loaded = False


@dataclass(frozen=True)
class MethodEntry:
    """One line of ``explorer methods``."""

    name: str
    title: str
    source: str  # "built-in", or "package version"
    loaded: bool
    error: str | None = None
    target: str = ""  # "module:Class"

    def as_dict(self) -> dict:
        return {"name": self.name, "title": self.title, "source": self.source, "loaded": self.loaded,
                "error": self.error, "class": self.target}


def entry_points() -> list[metadata.EntryPoint]:
    return sorted(metadata.entry_points(group=GROUP), key=lambda ep: ep.name)


def entry_point_names() -> list[str]:
    """The plugin methods' names from the installed packages' metadata (nothing is imported)."""
    return [ep.name for ep in entry_points()]


def source_of(ep: metadata.EntryPoint) -> str:
    dist = getattr(ep, "dist", None)
    return f"{dist.name} {dist.version}" if dist is not None else f"entry point {ep.value}"


def load_plugins() -> None:
    """Import and register every plugin method once (built-ins are registered before)."""
    global _loaded
    if _loaded:
        return
    _loaded = True
    for ep in entry_points():
        source = source_of(ep)
        try:
            with loading(source):
                _register(ep, source)
        except BaseException as error:  # noqa: BLE001 - any plugin failure (SystemExit included) is recorded
            if isinstance(error, KeyboardInterrupt):
                raise
            _failed[ep.name] = MethodEntry(ep.name, "", source, False, _one_line(error), ep.value)


def _register(ep: metadata.EntryPoint, source: str) -> None:
    from explorer.models.methods.base import Method

    cls = ep.load()
    if not (isinstance(cls, type) and issubclass(cls, Method)):
        raise TypeError(f"{ep.value} is not a Method subclass (explorer.models.methods.base.Method)")
    if getattr(cls, "name", None) != ep.name:
        raise ConfigError(f"entry point {ep.name!r} names {ep.value}, whose name is {getattr(cls, 'name', None)!r}; "
                          "the two must be the same")
    if METHODS.get(ep.name) is cls and SOURCES.get(ep.name) == source:  # it registered itself (@register)
        return
    register(cls, source)


def _one_line(error: BaseException) -> str:
    last = traceback.extract_tb(error.__traceback__)[-1:] if error.__traceback__ else []
    where = f" (at {last[0].filename}:{last[0].lineno})" if last else ""
    text = " ".join(str(error).split()) or type(error).__name__
    return f"{type(error).__name__}: {text}{where}"


def entries(methods: dict, sources: dict) -> list[MethodEntry]:
    """Every registered method (loaded) and every plugin that failed, by name."""
    rows = [MethodEntry(name, cls.title, sources.get(name, "built-in"), True, None,
                        f"{cls.__module__}:{cls.__qualname__}") for name, cls in methods.items()]
    rows += [entry for name, entry in _failed.items()
             if not (name in methods and sources.get(name) == entry.source)]
    return sorted(rows, key=lambda e: (e.name, not e.loaded))


def failed() -> list[MethodEntry]:
    return sorted(_failed.values(), key=lambda e: e.name)


def reset_for_tests() -> None:
    """Forget what was loaded, so the next ``load_plugins`` reads the entry points again (tests that
    install a plugin mid-process); registered plugin classes are dropped, built-ins kept."""
    global _loaded
    for name in [n for n, s in SOURCES.items() if s != BUILT_IN]:
        METHODS.pop(name, None)
        SOURCES.pop(name, None)
    _failed.clear()
    _loaded = False
