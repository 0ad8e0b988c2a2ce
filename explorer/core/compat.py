"""Make open_clip importable where torchvision's C++ ops are missing.

On these CPU machines the only torchvision wheel that matches torch 2.13 is
CUDA-linked, so ``import torchvision`` dies with
``operator torchvision::nms does not exist`` (see shared/ENVIRONMENT.md).
open_clip, timm and transformers' image utilities import torchvision, so we
declare the two op schemas torchvision's Python code asks for. Nothing here
runs the ops; if a caller ever did, torch would raise "no kernel" loudly.

On a normal install (torchvision's ops present) this is a no-op.
"""

from __future__ import annotations

import torch

_SCHEMAS = (
    "nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor",
    "qnms(Tensor dets, Tensor scores, float iou_threshold, float scale) -> Tensor",
)
_library = None  # keeps the registration alive for the life of the process


def _ops_present() -> bool:
    try:
        torch._C._dispatch_find_schema_or_throw("torchvision::nms", "")
        return True
    except RuntimeError:
        return False


def ensure_torchvision_importable() -> None:
    """Declare torchvision's op schemas if (and only if) they are missing."""
    global _library
    if _library is not None or _ops_present():
        return
    try:
        import torchvision  # noqa: F401  (a working install registers the ops itself)
        return
    except RuntimeError:
        pass
    except ImportError:
        return
    _library = torch.library.Library("torchvision", "DEF")
    for schema in _SCHEMAS:
        _library.define(schema)
    import sys

    # The failed import left half-initialised modules behind; drop them.
    for name in [n for n in sys.modules if n == "torchvision" or n.startswith("torchvision.")]:
        del sys.modules[name]
