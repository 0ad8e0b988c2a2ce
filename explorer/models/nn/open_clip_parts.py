"""open_clip's transformer blocks, which the CLIP towers here are built from (``backbone``, CAFT).

open_clip imports torchvision, whose op schemas must be declared first on CPU-only machines
(``explorer.core.runtime.prepare_libraries``): importing them from here does that.
"""

from __future__ import annotations

from explorer.core.runtime import prepared_import

_transformer = prepared_import("open_clip.transformer")
LayerNorm, QuickGELU = _transformer.LayerNorm, _transformer.QuickGELU
Transformer, VisionTransformer = _transformer.Transformer, _transformer.VisionTransformer

__all__ = ["LayerNorm", "QuickGELU", "Transformer", "VisionTransformer"]
