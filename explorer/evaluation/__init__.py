"""Evaluation: the metrics (``metrics/``: maps, boxes, retrieval, classification; pure functions over arrays and
tensors, no model, no UI), the tasks (``tasks/``: each one's options, declared once, and its run), and the
libraries the tasks run (retrieval, real_grounding, negatives, zeroshot). Masks from maps come from
``explorer.grounding.masks`` (Otsu).

The benchmark over a zoo (``explorer eval``) is in the modules, imported by name:

    runner           evaluate_model, evaluate_zoo: retrieval and hard negatives, and the run itself
    grounding_eval   mIoU, pointing and FLISM of a model's maps on the scenes' object sentences
    baselines        the reference rows: centre box, uniform map, chance
    results          the metric keys, and the results JSON (write_results, read_results)
    report           the results as a Markdown table, and the README section that holds it
"""

from __future__ import annotations

from explorer.core.lazy import lazy_exports

# Imported on first use: the recall module computes with torch, and the page is built (it imports
# ``grounding_eval``) before torch is imported.
_MODULES = {".metrics.retrieval": ("DEFAULT_KS", "RetrievalRecall", "recall_at_k"),
            ".metrics.boxes": ("RegionAccuracy", "box_iou", "flism_region_accuracy"),
            ".metrics.classification": ("hard_negative_accuracy",),
            ".metrics.maps": ("mask_iou", "mean_iou", "pointing_game", "pointing_hits")}
_EXPORTS = {name: module.removeprefix(".") for module, names in _MODULES.items() for name in names}
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
__all__ = sorted(_EXPORTS)
