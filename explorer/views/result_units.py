"""The units behind an evaluation's table: each cell of a results file opened as the records it averages.

    results = open_results("refcoco.json")                    # eval-grounding, -negatives, -zeroshot, -retrieval, eval
    results.table                                               # models x (dataset, metric), as `results table` prints it
    cell = results.cell("demo-caft", "refcoco testA generic/miou")
    picked = pick_units(results, cell, order="worst", n=10)    # the 10 lowest IoUs, ties by unit id

Every evaluation keeps one record per unit: ``eval-grounding`` in its results JSON ("units", with each
model's and kind's IoU, pointing hit, AUROC and box pick), ``eval-negatives`` and ``eval-zeroshot`` in their
work files (``<out>.work.jsonl``: each item's scores, each picture's five best classes), ``eval-retrieval`` in
its per-query records (the rank of the right answer, the candidates above it). They are read once into one
long pandas frame (a row per unit, model and kind; the metric columns as numbers) with the row positions of
each (dataset, model, kind) kept, so a cell's units are one index lookup and one sort, whatever the size.
``explorer eval`` (the synthetic benchmark) keeps only its means: its table opens, its cells list nothing.

A cell's units are sorted by the unit metric behind the cell's number (mIoU and oIoU: the unit's IoU; box
accuracy: the IoU of its picked box; pointing: the hit; negatives' accuracy: the positive's margin over the
best negative; zero-shot: the rank of the true class, 6 past the five kept; retrieval: the right answer's
rank), worst first, best first, or by the margin between two models; ties go by unit id. A unit is "right"
as the cell counts it (IoU at least 0.5, picked-box IoU above 0.5, a pointing hit, a positive margin or a tie
where the run counted ties as hits, the true class or answer within the cell's K).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from explorer.views import result_readers
from explorer.views import results_table as rt
from explorer.views.result_cells import (BENCHMARK, FILTERS, FORMATS, GROUNDING, ID_COLUMNS, NEGATIVES, ORDERS, RETRIEVAL,
                                         STRICT, ZEROSHOT, Cell, Part, ResultsError, column_name, loads)

@dataclass
class Results:
    path: Path | None
    family: str
    table: pd.DataFrame  # models x (dataset, metric) in print units (``results_table.pivot``)
    cells: dict  # (model, column) -> Cell
    units: pd.DataFrame  # ID_COLUMNS + metric columns (+ the family's own)
    parts: dict  # label -> Part
    notes: list[str] = field(default_factory=list)
    groups: dict = field(default_factory=dict)  # (dataset, model, kind) -> row positions in ``units``

    def __post_init__(self):
        if not self.groups and not self.units.empty:
            self.groups = self.units.groupby(["dataset", "model", "kind"], sort=False, observed=True).indices

    @property
    def models(self) -> list[str]:
        return list(self.table.index) if not self.table.empty else []

    def columns(self) -> list[str]:
        return [column_name(d, m) for d, m in self.table.columns]

    def cell(self, model: str, column: str) -> Cell:
        found = self.cells.get((model, column))
        if found is None:
            raise ResultsError(f"no cell {model!r} x {column!r} in {self.name}; models: {', '.join(self.models)}; "
                               f"columns: {', '.join(self.columns())}")
        return found

    @property
    def name(self) -> str:
        return self.path.name if self.path else "these results"

    def rows_of(self, dataset: str, model: str, kind: str | None) -> pd.DataFrame:
        """The units of one (dataset, model, kind), as a frame (empty when none)."""
        index = self.groups.get((dataset, model, kind))
        return self.units.iloc[index] if index is not None else self.units.iloc[:0]


# ---- reading ---------------------------------------------------------------------------------------------



def read_document(path: Path) -> dict:
    """A results file's JSON (``result_cells.loads``: orjson where installed)."""
    try:
        document = loads(Path(path).read_bytes())
    except OSError as error:
        raise ResultsError(f"cannot read the results file {path}: {error.strerror or error}") from error
    except ValueError as error:
        raise ResultsError(f"{Path(path).name} is not JSON ({error})") from error
    if not isinstance(document, dict) or document.get("format") not in FORMATS:
        found = document.get("format") if isinstance(document, dict) else type(document).__name__
        raise ResultsError(f"{Path(path).name} is not the results of an explorer evaluation (format {found!r}; "
                           f"known: {', '.join(FORMATS)})")
    return document


def open_results(path, documents: list[tuple[Path, dict]] | None = None) -> Results:
    """A results file (or ``documents``: several of one family, as a sweep's children write them) as units."""
    path = Path(path) if path is not None else None
    documents = documents if documents is not None else [(path, read_document(path))]
    families = {FORMATS.get(doc.get("format")) for _, doc in documents}
    if len(families) != 1 or None in families:
        raise ResultsError("these results mix evaluations of different kinds; open them one kind at a time")
    family = families.pop()
    long_rows, frames, parts, notes, cells = [], [], {}, [], {}
    for source, document in documents:
        read = result_readers.READERS[family](source, document)
        long_rows += read.rows
        frames.append(read.units)
        notes += [n for n in read.notes if n not in notes]
        for part in read.parts:
            parts.setdefault(part.label, part)
        cells.update(read.cells)
    units = pd.concat(frames, ignore_index=True) if len(frames) > 1 else frames[0] if frames else \
        pd.DataFrame(columns=ID_COLUMNS)
    if len(documents) > 1:  # a sweep's children may score the same units (baselines): the last one counts
        units = units.drop_duplicates(["unit_id", "dataset", "model", "kind"], keep="last").reset_index(drop=True)
    frame = rt.results_frame(long_rows)
    table = rt.pivot(frame, rt.choices(frame)[1]) if not frame.empty else pd.DataFrame()
    for (model, column), cell in list(cells.items()):
        cells[(model, column)] = _with_value(cell, table)
    return Results(path=path, family=family, table=table, cells=cells, units=units, parts=parts, notes=notes)


def _with_value(cell: Cell, table: pd.DataFrame) -> Cell:
    metric = cell.column[len(cell.dataset):].strip()
    try:
        value = table.loc[cell.model, (cell.dataset, metric)]
    except KeyError:
        value = None
    value = None if value is None or pd.isna(value) else float(value)
    return Cell(cell.model, cell.column, cell.dataset, cell.kind, cell.metric, value, cell.right_at, cell.strict)


# ---- picking -------------------------------------------------------------------------------------------


A_MINUS_B = "a_minus_b"  # the column of A's metric less B's (negatives' own "margin" is the positive's lead)


def pick_units(results: Results, cell: Cell, order: str = "worst", n: int | None = None, versus: str | None = None,
               keep: str = "all") -> pd.DataFrame:
    """The cell's units in ``order`` (worst, best; with ``versus``: wins = A's metric minus B's largest first,
    losses = smallest first), the first ``n`` (all when None), ``keep`` one of ``FILTERS`` with ``versus``.

    Columns: ID_COLUMNS, ``cell.metric`` (the model's), with ``versus`` also ``versus_<metric>`` and
    ``a_minus_b`` (A better by, in the metric's direction), and the family's own columns. Units without a value
    of the metric (a box unit's mask IoU) are left out. Ties go by unit id."""
    if order not in ORDERS:
        raise ResultsError(f"order must be one of {', '.join(ORDERS)}, not {order!r}")
    if keep not in FILTERS:
        raise ResultsError(f"the filter must be one of {', '.join(FILTERS)}, not {keep!r}")
    if cell.kind is None:
        raise ResultsError(f"{cell.column} has no units behind it (a number of numbers, or explorer eval's means): "
                           "pick a cell of a measured metric")
    if n is not None and n < 1:
        raise ResultsError(f"the number of units must be at least 1, not {n}")
    rows = results.rows_of(cell.dataset, cell.model, cell.kind)
    rows = rows[rows[cell.metric].notna()] if cell.metric in rows else rows.iloc[:0]
    sign = -1.0 if cell.lower_is_better else 1.0
    if versus is None:
        if order in ("wins", "losses") or keep != "all":
            raise ResultsError(f"{order if keep == 'all' else keep} compares two models: give the second (versus)")
        key = sign * rows[cell.metric].to_numpy(dtype=float)
        key = key if order == "worst" else -key
        return _sorted(rows, key, n)
    if versus not in results.models:
        raise ResultsError(f"no model {versus!r} in {results.name}; models: {', '.join(results.models)}")
    other = results.rows_of(cell.dataset, versus, cell.kind)
    if other.empty:
        raise ResultsError(f"{versus} has no {cell.kind} units in {cell.dataset}: compare two models on a kind both "
                           "were scored with")
    other = other[["unit_id", cell.metric]]
    other = other[other[cell.metric].notna()].rename(columns={cell.metric: f"versus_{cell.metric}"})
    both = rows.merge(other, on="unit_id", how="inner")
    mine, theirs = both[cell.metric].to_numpy(dtype=float), both[f"versus_{cell.metric}"].to_numpy(dtype=float)
    both[A_MINUS_B] = sign * (mine - theirs)
    if keep != "all":
        right_a, right_b = is_right(cell, mine), is_right(cell, theirs)
        both = both[(right_a & ~right_b) if keep == "a_right_b_wrong" else (~right_a & ~right_b)]
    margin = both[A_MINUS_B].to_numpy(dtype=float)
    key = {"worst": sign * both[cell.metric].to_numpy(dtype=float), "best": -sign * both[cell.metric].to_numpy(dtype=float),
           "wins": -margin, "losses": margin}[order]
    return _sorted(both, key, n)


def _sorted(rows: pd.DataFrame, key: np.ndarray, n: int | None) -> pd.DataFrame:
    """``rows`` by ``key`` ascending, ties by unit id (lexsort: its last key is the first one sorted by)."""
    order = np.lexsort((rows["unit_id"].to_numpy(dtype=str), key))
    if n is not None:
        order = order[:n]
    return rows.iloc[order].reset_index(drop=True)


def is_right(cell: Cell, values) -> np.ndarray:
    """Whether each value counts as right in the cell (module docstring)."""
    values = np.asarray(values, dtype=float)
    if cell.lower_is_better:
        return values <= cell.right_at
    strict = cell.metric in STRICT if cell.strict is None else cell.strict
    return values > cell.right_at if strict else values >= cell.right_at


def fooled_by_every_model(results: Results, dataset: str, kind: str) -> pd.DataFrame:
    """Negatives: the items of a split that every model of the results gets wrong, the most fooling first (the
    smallest best margin over the models), with ``fooled`` = how many models they fool."""
    rows = results.units[(results.units["dataset"] == dataset) & (results.units["kind"] == kind)]
    if rows.empty or "margin" not in rows:
        return rows
    grouped = rows.groupby("unit_id", sort=False).agg(fooled=("margin", lambda m: int((m <= 0).sum())),
                                                       best=("margin", "max"), models=("model", "nunique"))
    every = grouped[(grouped["fooled"] == grouped["models"]) & (grouped["models"] == len(results.models))]
    every = every.reset_index()
    return every.iloc[np.lexsort((every["unit_id"].to_numpy(dtype=str), every["best"].to_numpy()))].reset_index(drop=True)


def units_document(results: Results, cell: Cell, picked: pd.DataFrame, versus: str | None = None) -> dict:
    """The ``--list`` JSON: {"results", "model", "versus", "metric", "units": [{"unit_id", "picture", "text",
    "<metric>", ...}]}: every column of the picked rows, numbers as numbers, NaN as null."""
    skip = {"model"}
    units = []
    for record in picked.to_dict(orient="records"):
        units.append({key: plain(value) for key, value in record.items() if key not in skip})
    return {"results": str(results.path) if results.path else None, "model": cell.model, "versus": versus,
            "metric": cell.metric, "column": cell.column, "dataset": cell.dataset, "kind": cell.kind,
            "units": units}


def plain(value):
    """A frame value as JSON takes it (numpy numbers as Python's, NaN as None, arrays as lists)."""
    if isinstance(value, (np.integer,)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        return float(value) if math.isfinite(value) else None
    if isinstance(value, (np.bool_,)):
        return bool(value)
    if isinstance(value, np.ndarray):
        return [plain(v) for v in value.tolist()]
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    return value


def scatter_frame(results: Results, cell: Cell, versus: str) -> pd.DataFrame:
    """unit_id, text, A's and B's value of the cell's metric, for every unit both scored (the scatter's points)."""
    return pick_units(results, cell, order="worst", versus=versus)


__all__ = ["BENCHMARK", "Cell", "FILTERS", "GROUNDING", "NEGATIVES", "ORDERS", "Part", "RETRIEVAL", "Results",
           "ResultsError", "ZEROSHOT", "column_name", "fooled_by_every_model", "is_right", "open_results",
           "pick_units", "plain", "read_document", "scatter_frame", "units_document"]
