"""What the process needs before the heavy libraries load, in one place.

``prepare_process`` runs first thing at the app's and the CLI's start-up: no outbound
connection (Gradio analytics and Hugging Face telemetry off, the hub offline: explorer never
fetches weights), and CPU threads that sleep rather than spin while they wait (``THREAD_ENVIRONMENT``).
It imports nothing heavy: the page is built before torch is imported.
``prepare_libraries`` makes torchvision importable; every module that imports open_clip, timm,
transformers, diffusers or torchvision runs it first (or imports through ``prepared_import``),
because they cannot be imported without it on CPU-only machines (see ``compat``).
Both are idempotent and respect values the user has set.
"""

from __future__ import annotations

import ctypes
import importlib
import importlib.util
import os
import sys
import threading
import time
import types
from pathlib import Path

OFFLINE_ENVIRONMENT = {
    "GRADIO_ANALYTICS_ENABLED": "False",
    "HF_HUB_DISABLE_TELEMETRY": "1",
    "HF_HUB_OFFLINE": "1",
}


# OpenMP (torch's CPU threads, MKL's, oneDNN's) lets an idle worker thread spin at each barrier before it sleeps.
# On a machine whose cores other work also wants (a shared VM, a page beside a training run) the spinning
# thread holds a core the thread it waits for needs: a ViT-B/16 text forward of one sentence took 0.67 CPU s
# and 3-4 s on a loaded 2-core machine, against 0.085 CPU s and 0.24-0.32 s with passive waits (threads
# sleep at once). An idle machine loses a thread's wake-up per parallel region (microseconds). Read by the
# OpenMP runtime when torch loads, so set before it; a value the user set wins.
THREAD_ENVIRONMENT = {"OMP_WAIT_POLICY": "PASSIVE"}


_PREPARING = threading.Lock()  # the app's warm-up thread and a request may both be first


def prepare_libraries() -> None:
    with _PREPARING:
        from explorer.core import compat  # imports torch

        compat.ensure_torchvision_importable()


# One library import at a time: the app's warm-up thread and a request's thread importing open_clip by two
# doors at once (the package, and ``open_clip.tokenizer`` directly) each held a module lock the other needed, and
# Python broke the tie with ``_DeadlockError`` in the request. Held around third-party imports only, which never
# import explorer, so it cannot wait on a lock of ours.
_IMPORTING = threading.RLock()


# Packages whose ``__init__`` imports far more than the submodules explorer uses. open_clip's imports every model
# family it has (CoCa, Hugging Face text towers through transformers, timm towers: 2.3 s); torchvision's every
# dataset and model, and its ``ops``' import ``torch._dynamo`` (2.5 s), for the one module open_clip's blocks
# need (``torchvision.ops.misc``) and the transforms the pictures go through. Every process that builds a model
# paid both (each job run, each CLI command, each evaluation child).
LAZY_PACKAGES = ("open_clip", "torchvision", "torchvision.ops")


def prepared_import(name: str):
    """``importlib.import_module(name)`` once torchvision is importable: for open_clip, timm, transformers,
    diffusers and torchmetrics' image metrics, which import torchvision. One such import at a time.
    A submodule of a ``LAZY_PACKAGES`` package (``open_clip.transformer``, ``torchvision.transforms``) comes
    without the packages' ``__init__`` until something asks a package itself for a name (``_LazyPackage``)."""
    prepare_libraries()
    with _IMPORTING:
        if any(name.startswith(package + ".") for package in LAZY_PACKAGES):
            for package in LAZY_PACKAGES:
                if package not in sys.modules:
                    _install_lazy_package(package)
        return importlib.import_module(name)


class _LazyPackage(types.ModuleType):
    """A package whose ``__init__`` runs on the first name asked of it, not at import (``LAZY_PACKAGES``).

    Its submodules import as usual; ``open_clip.create_model`` (or ``from open_clip import ...``,
    ``torchvision.__version__``) runs the real ``__init__`` then, in this module, so the package is whole for
    whoever wants it. One trap it leaves: a submodule named as a function its ``__init__`` exports
    (``torchvision.ops.roi_align``), imported as a module before the ``__init__`` ran, is what the package's
    name gives until then; ask the package first (``from torchvision.ops import roi_align``)."""

    def __getattr__(self, name: str):
        if name.startswith("__") and name not in ("__all__", "__version__"):  # a probe (copy, inspect): no init
            raise AttributeError(name)
        with _IMPORTING:  # one thread runs the __init__; another asking meanwhile waits for it
            found = self.__dict__
            if type(self) is _LazyPackage and not found.get("_explorer_running_init"):
                found["_explorer_running_init"] = True  # the __init__'s own lookups see a module mid-import
                try:
                    spec = self.__spec__
                    # the installed package's own __init__, run as ``import`` runs it
                    exec(compile(Path(spec.origin).read_bytes(), spec.origin, "exec"), found)  # noqa: S102
                    self.__class__ = types.ModuleType  # whole: no more lookups through here
                finally:
                    del found["_explorer_running_init"]
        if name in self.__dict__:
            return self.__dict__[name]
        raise AttributeError(f"module {self.__name__!r} has no attribute {name!r}")


def _install_lazy_package(name: str) -> None:
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        return  # not installed: the import that follows says so
    package = _LazyPackage(name)
    package.__spec__, package.__file__, package.__package__ = spec, spec.origin, name
    package.__path__ = list(spec.submodule_search_locations)
    package.__loader__ = spec.loader
    sys.modules[name] = package
    parent, _, child = name.rpartition(".")
    if parent:  # bound on its parent as an import binds a submodule (else the parent's lookup would run its init)
        setattr(sys.modules[parent], child, package)


def prepare_process() -> None:
    for name, value in {**OFFLINE_ENVIRONMENT, **THREAD_ENVIRONMENT}.items():
        os.environ.setdefault(name, value)


def resident_gb(pid: int | str = "self") -> float | None:
    """Resident memory of a process (this one by default) in GB, from Linux's /proc; None elsewhere."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024 / 1024
    except OSError:
        return None
    return None


def release_freed_memory() -> bool:
    """Give the heap pages that freed objects left behind back to the system (glibc ``malloc_trim``).

    A server that makes and drops large arrays from many threads keeps freed memory in per-thread
    arenas, so its resident size creeps up although nothing more is held. False where there is no
    glibc (the call is then a no-op)."""
    try:
        libc = ctypes.CDLL("libc.so.6")
        return bool(libc.malloc_trim(0))
    except (OSError, AttributeError):
        return False


def keep_releasing_freed_memory(every_s: float = 10.0) -> threading.Thread:
    """A daemon thread that calls ``release_freed_memory`` every ``every_s`` seconds (the app starts it)."""
    def loop():
        while True:
            time.sleep(every_s)
            release_freed_memory()

    thread = threading.Thread(target=loop, name="explorer-release-memory", daemon=True)
    thread.start()
    return thread


def keep_start_up_out_of_collections() -> None:
    """Collect once, then take every object alive (the libraries imported, the page built) out of the garbage
    collector's reach (``gc.freeze``). A server holding torch, Gradio and transformers has well over a million
    of them, and every full collection walked them all while holding the interpreter, so every session's
    request waited for it; objects made after this are collected as before. Called once start-up is done."""
    import gc

    gc.collect()
    gc.freeze()
