"""Benchmark results: the metric keys every row has, and the results file.

    from explorer.evaluation.results import read_results, write_results
    write_results(results, "results.json")

A results file (``FORMAT`` / ``VERSION``) is what ``explorer.evaluation.runner.evaluate_zoo``
returns, as JSON: "dataset", "settings", "zoo", "models" (one ``evaluate_model`` row each),
"errors" and "baselines". Every row's "metrics" has exactly the keys of ``METRIC_KEYS``; a
value is a share in [0, 1], or None (null) where it is undefined. NaN and infinities are
never written: ``finite_or_none`` turns them into None.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

from explorer.core.files import atomic_write

FORMAT = "explorer-eval"
VERSION = 2  # 2: hard negatives are scored only where the model reads them apart from the caption
ATTRIBUTES = ("colour", "shape", "size", "texture", "position")

RETRIEVAL_KEYS = ("long_t2i_R@1", "long_t2i_R@5", "long_i2t_R@1", "long_i2t_R@5", "short_t2i_R@1")
GROUNDING_KEYS = ("miou_generic", "pointing_generic", "miou_native", "pointing_native",
                  "auroc_generic", "auroc_native", "auroc_generic_others", "auroc_native_others")
METRIC_KEYS = (*RETRIEVAL_KEYS, "hard_negative_acc", *(f"hard_negative_acc/{a}" for a in ATTRIBUTES),
               *(f"hard_negative_unseen/{a}" for a in ATTRIBUTES), *(f"hard_negative_acc77/{a}" for a in ATTRIBUTES),
               *GROUNDING_KEYS, "flism_acc")
BASELINES = ("centre-box", "uniform", "chance")
DEFAULT_LIMIT = 300  # scenes for retrieval and hard negatives (``explorer eval --limit``)


def write_results(results: dict, path) -> Path:
    """Write ``results`` as JSON (NaN and infinities as null), atomically; returns the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(json_safe(results), indent=2, allow_nan=False) + "\n"
    with atomic_write(path) as out:
        out.write(text)
    return path


def read_results(path) -> dict:
    """Results written by ``write_results``."""
    return json.loads(Path(path).read_text(encoding="utf-8"))


def finite_or_none(value) -> float | None:
    """``value`` as a float, or None when it is None, NaN or infinite."""
    if value is None:
        return None
    value = float(value)
    return value if math.isfinite(value) else None


def json_safe(value):
    """A copy that ``json.dumps(..., allow_nan=False)`` takes: numpy scalars as numbers, paths as
    strings, keys as strings, non-finite floats as None."""
    if isinstance(value, dict):
        return {str(k): json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    if isinstance(value, (np.integer,)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        return finite_or_none(value)
    if isinstance(value, (np.bool_,)):
        return bool(value)
    if isinstance(value, Path):
        return str(value)
    return value


def aligned_text(rows: list[list[str]]) -> str:
    """Rows of string cells as left-aligned columns two spaces apart, one line each: a results table for the
    terminal (the ``eval-*`` commands')."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "".join("  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() + "\n" for row in rows)


__all__ = ["ATTRIBUTES", "BASELINES", "FORMAT", "GROUNDING_KEYS", "METRIC_KEYS", "RETRIEVAL_KEYS", "VERSION",
           "aligned_text", "finite_or_none", "json_safe", "read_results", "write_results"]
