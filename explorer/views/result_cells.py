"""What a results table's cell stands for: the evaluation families, the unit metrics behind table metrics, and
when a unit counts as right (``result_units`` reads and picks; ``result_readers`` reads each family)."""

from __future__ import annotations

from dataclasses import dataclass, field

from explorer.core.errors import InputError

try:  # JSON parsed by orjson where it is installed (Gradio's own): 30 MB in a fraction of the standard parser's time
    from orjson import loads
except ImportError:  # a build without it: the same documents, parsed slower
    from json import loads
from explorer.evaluation.metrics.boxes import HIT_IOU

GROUNDING, NEGATIVES, ZEROSHOT, RETRIEVAL, BENCHMARK = "grounding", "negatives", "zeroshot", "retrieval", "benchmark"
FORMATS = {"explorer-real-grounding/1": GROUNDING, "explorer-referring/1": GROUNDING,
           "explorer-negatives/1": NEGATIVES, "explorer-zeroshot/1": ZEROSHOT, "explorer-retrieval": RETRIEVAL,
           "explorer-eval": BENCHMARK}
ORDERS = ("worst", "best", "wins", "losses")
FILTERS = ("all", "a_right_b_wrong", "both_wrong")
LOWER_IS_BETTER = frozenset({"rank"})
# The unit metric behind a table metric (grounding's "<kind>/<metric>" by its last part).
GROUNDING_UNIT_METRIC = {"miou": "iou", "oiou": "iou", "box_accuracy": "box_iou", "pointing": "pointing",
                         "auroc": "auroc"}
GROUNDING_METRICS = ("iou", "pointing", "auroc", "box_iou")
RIGHT_AT = {"iou": 0.5, "box_iou": HIT_IOU, "pointing": 0.5, "auroc": 0.5, "margin": 0.0, "rank": 1}
# right only above the line: AUROC 0.5 is chance, a picked box is right at IoU > 0.5 (ReCLIP), a tie with the
# best negative is a miss unless the run counted ties as hits (``Cell.strict``)
STRICT = frozenset({"auroc", "margin", "box_iou"})
PAST_TOP = 6  # zero-shot rank of a true class outside the five classes kept per picture
ID_COLUMNS = ["unit_id", "dataset", "model", "kind", "picture", "text"]


class ResultsError(InputError):
    """A results file this view cannot read, or a cell or model it does not hold."""


@dataclass(frozen=True)
class Cell:
    """What a table cell stands for: its model, column, and the units (dataset, kind) and metric behind it."""

    model: str
    column: str
    dataset: str
    kind: str | None  # None: a number with no units behind it (a mean of means, RSUM, explorer eval)
    metric: str  # the unit metric the units sort by
    value: float | None = None
    right_at: float = 0.5
    strict: bool | None = None  # right only above ``right_at``; None: as ``STRICT`` says for the metric

    @property
    def lower_is_better(self) -> bool:
        return self.metric in LOWER_IS_BETTER


@dataclass
class Part:
    """One dataset of a results file: what the evaluation recorded about it, and where its work file is."""

    label: str
    layout: str
    root: str
    split: str | None = None
    units: str | None = None
    options: dict = field(default_factory=dict)
    extra: dict = field(default_factory=dict)  # the family's own: negatives' splits, zero-shot's class count


def column_name(dataset: str, metric: str) -> str:
    """A table column as one string: "<dataset> <metric>", as ``results table``'s CSV header names it."""
    return f"{dataset} {metric}".strip()


__all__ = ["BENCHMARK", "Cell", "FILTERS", "FORMATS", "GROUNDING", "GROUNDING_METRICS", "GROUNDING_UNIT_METRIC",
           "ID_COLUMNS", "LOWER_IS_BETTER", "NEGATIVES", "ORDERS", "PAST_TOP", "Part", "RETRIEVAL", "RIGHT_AT",
           "ResultsError", "STRICT", "ZEROSHOT", "column_name"]
