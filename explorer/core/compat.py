"""Make open_clip importable where torchvision's C++ ops are missing.

On these CPU machines the only torchvision wheel that matches torch 2.13 is
CUDA-linked, so ``import torchvision`` dies with
``operator torchvision::nms does not exist`` (see shared/ENVIRONMENT.md).
open_clip, timm and transformers' image utilities import torchvision, so we
declare the two op schemas torchvision's Python code asks for. Nothing here
runs the ops; if a caller ever did, torch would raise "no kernel" loudly.

Two ways in, both no-ops on a normal install (torchvision's ops present):

- ``ensure_torchvision_importable()``: declare the schemas now if they are missing.
  explorer calls it before it imports open_clip, transformers, timm or diffusers
  (``explorer.core.runtime.prepare_libraries``), and so do the export functions.
- ``guard_torchvision_import()``, which ``import explorer`` runs: the first
  ``import torchvision`` of the process, wherever it comes from (your own
  ``import open_clip`` or ``from transformers import CLIPModel`` after
  ``import explorer``), calls ``ensure_torchvision_importable`` first. It imports
  nothing until then, so ``import explorer`` stays free of torch.
"""

from __future__ import annotations

import importlib.abc
import sys

_SCHEMAS = (
    "nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor",
    "qnms(Tensor dets, Tensor scores, float iou_threshold, float scale) -> Tensor",
)
_library = None  # keeps the registration alive for the life of the process


def _ops_present() -> bool:
    import torch

    try:
        torch._C._dispatch_find_schema_or_throw("torchvision::nms", "")
        return True
    except RuntimeError:
        return False


def _torchvision_spec():
    """Where torchvision is installed, found on the path without importing it (and without the import hooks:
    the guard below would be asked again)."""
    import importlib.machinery

    return importlib.machinery.PathFinder.find_spec("torchvision")


def _load_compiled_ops(spec) -> bool:
    """Load torchvision's compiled ops (its ``_C`` extension, found as its ``extension`` module finds it, in the
    package ``spec`` locates) without running torchvision's ``__init__``, which imports every model family and
    ``torch._dynamo`` (3 s of a process's start here). False where there is none or it does not load (a
    CUDA-linked build beside a CPU torch); a later ``import torchvision`` loading the same file again is a no-op."""
    import importlib.machinery

    import torch

    loader = (importlib.machinery.ExtensionFileLoader, importlib.machinery.EXTENSION_SUFFIXES)
    for folder in spec.submodule_search_locations or []:
        extension = importlib.machinery.FileFinder(folder, loader).find_spec("torchvision._C")
        if extension is not None and extension.origin:
            try:
                torch.ops.load_library(extension.origin)
                return True
            except (OSError, ImportError):
                return False
    return False


def ensure_torchvision_importable() -> None:
    """Declare torchvision's op schemas if (and only if) they are missing once its compiled ops had their
    chance to load. Imports torch, never torchvision."""
    global _library
    if _library is not None or _ops_present():
        return
    spec = _torchvision_spec()
    if spec is None:
        return  # not installed: nothing to make importable
    if _load_compiled_ops(spec) and _ops_present():
        return  # a working install: its ops registered themselves
    import torch

    _library = torch.library.Library("torchvision", "DEF")
    for schema in _SCHEMAS:
        _library.define(schema)


class TorchvisionGuard(importlib.abc.MetaPathFinder):
    """A finder that finds nothing: on the first ``import torchvision`` it makes torchvision importable
    (``ensure_torchvision_importable``), then lets the ordinary finders import it."""

    def __init__(self):
        self.done = False

    def find_spec(self, fullname, path=None, target=None):
        if fullname != "torchvision" or self.done or "torchvision" in sys.modules:
            return None
        self.done = True  # first, so the lookup inside ensure_torchvision_importable passes through
        try:
            ensure_torchvision_importable()
        except ImportError:  # no torch: torchvision's own import will say so
            pass
        return None


def guard_torchvision_import() -> TorchvisionGuard:
    """Put a ``TorchvisionGuard`` first on ``sys.meta_path`` (once per process); the guard."""
    for finder in sys.meta_path:
        if isinstance(finder, TorchvisionGuard):
            return finder
    guard = TorchvisionGuard()
    sys.meta_path.insert(0, guard)
    return guard
