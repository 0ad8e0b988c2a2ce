"""Training logs as JSON Lines: one object per line, appended and flushed as they happen.

Two files in a run folder:
- ``metrics.jsonl``: one row per logged optimizer step, with the fields in
  ``METRIC_FIELDS`` plus ``loss/<term>`` for each of the method's loss terms
  and ``lr/<group>`` for each parameter group (and ``gpu_mem_gb``, the step's peak, on CUDA);
- ``run.jsonl``: one row per event ("start", "resume", "checkpoint",
  "finish"), the first carrying the configuration, seeds, device and where
  the weights came from.

A run that is resumed appends to both, so the files tell the whole history;
``read_jsonl`` reads them back (pandas: ``pd.read_json(path, lines=True)``).
Neither is named ``*.json``: a run folder inside the zoo must not look like
a manifest.
"""

from __future__ import annotations

import json
from pathlib import Path

from explorer.core import jsonl
from explorer.core.jsonl import write_jsonl

METRICS_FILE = "metrics.jsonl"
RUN_LOG_FILE = "run.jsonl"
# Always present in a metrics row (besides loss/<term> and lr/<group>).
METRIC_FIELDS = ("step", "epoch", "loss", "grad_norm", "samples", "samples_per_s", "elapsed_s")


class JsonlLog:
    """Append-only JSON Lines file; every row is flushed at once (a crash loses nothing written)."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)

    def write(self, row: dict) -> None:
        with self.path.open("a", encoding="utf-8") as handle:
            handle.write(json.dumps(_plain(row), allow_nan=True) + "\n")

    def truncate_after_step(self, step: int) -> int:
        """Drop rows whose "step" is past ``step`` (logged after the checkpoint a run resumes from).

        Returns how many rows were dropped, so a resumed run's metrics have no duplicate steps.
        """
        if not self.path.exists():
            return 0
        rows = read_jsonl(self.path)
        kept = [row for row in rows if row.get("step", 0) <= step]
        if len(kept) != len(rows):
            write_jsonl(self.path, kept)
        return len(rows) - len(kept)


def read_jsonl(path: str | Path) -> list[dict]:
    """Every row of a JSON Lines file (a torn last line, from a crash mid-write, is skipped)."""
    return [row for _, row in jsonl.read_jsonl(path, skip_torn_tail=True)]


def _plain(value):
    """JSON-ready copy: tensors and numpy scalars to numbers, paths to strings."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, Path):
        return str(value)
    if hasattr(value, "item") and callable(value.item):
        try:
            return _plain(value.item())
        except (ValueError, RuntimeError):
            return str(value)
    if isinstance(value, (str, int, float, bool)) or value is None:  # NaN/inf are written as NaN/Infinity
        return value
    return str(value)
