"""The Results view's charts, and its results from the run store.

- ``scatter``: two models' per-unit scores of a cell, one point a unit (A across, B up); each point carries
  its unit id (``customdata``), so a click on it opens that unit for both models.
- ``confusion``: zero-shot's confusion matrix of one model (true class down, predicted across, counts of
  pictures; the top-1 classes only); a cell carries "<true>|<predicted>", so a click lists the pictures of
  the one class taken for the other.
- ``run_documents``: the results files of an evaluation run, or of every evaluation of a sweep.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import plotly.graph_objects as go

from explorer.views.result_units import Cell, Results, ResultsError, is_right, pick_units, read_document

SVG_POINTS = 5_000  # drawn as SVG up to this many points, WebGL past it
MAX_POINTS = 20_000  # the scatter's points: a larger cell is drawn as its first units by id (said in the title)
RIGHT_COLOURS = {(True, True): "#1a9850", (True, False): "#4575b4", (False, True): "#fdae61", (False, False): "#d73027"}
RIGHT_NAMES = {(True, True): "both right", (True, False): "A right, B wrong", (False, True): "A wrong, B right",
               (False, False): "both wrong"}


def _empty(text: str) -> go.Figure:
    figure = go.Figure()
    figure.add_annotation(text=text, showarrow=False, x=0.5, y=0.5, xref="paper", yref="paper")
    figure.update_layout(height=160, xaxis=dict(visible=False), yaxis=dict(visible=False),
                         margin=dict(l=10, r=10, t=10, b=10))
    return figure


def scatter(results: Results, cell: Cell, versus: str | None) -> go.Figure:
    """Per-unit scores of ``cell.model`` (x) against ``versus`` (y), coloured by which of them is right."""
    if not versus or versus == cell.model:
        return _empty("Pick a second model (versus) to compare the two unit by unit.")
    both = pick_units(results, cell, order="worst", versus=versus)
    if both.empty:
        return _empty(f"{cell.model} and {versus} share no scored units in this cell.")
    note = ""
    if len(both) > MAX_POINTS:
        both = both.sort_values("unit_id").iloc[:MAX_POINTS]
        note = f" (first {MAX_POINTS:,} units by id)"
    a, b = both[cell.metric].to_numpy(dtype=float), both[f"versus_{cell.metric}"].to_numpy(dtype=float)
    right_a, right_b = is_right(cell, a), is_right(cell, b)
    trace = go.Scatter if len(both) <= SVG_POINTS else go.Scattergl  # SVG points up to a few thousand: each a target
    figure = go.Figure()
    for key, colour in RIGHT_COLOURS.items():
        keep = (right_a == key[0]) & (right_b == key[1])
        if not keep.any():
            continue
        figure.add_trace(trace(
            x=a[keep], y=b[keep], mode="markers", name=f"{RIGHT_NAMES[key]} ({int(keep.sum())})",
            marker=dict(color=colour, size=7, opacity=0.75), customdata=both["unit_id"].to_numpy()[keep],
            text=[str(t)[:80] for t in both["text"].to_numpy()[keep]],
            hovertemplate="%{text}<br>A %{x:.3f} · B %{y:.3f}<extra>%{customdata}</extra>"))
    low, high = float(np.nanmin([a.min(), b.min()])), float(np.nanmax([a.max(), b.max()]))
    figure.add_shape(type="line", x0=low, y0=low, x1=high, y1=high, line=dict(color="#888", dash="dot"))
    figure.update_layout(title=f"{cell.metric} per unit: {cell.model} (A) against {versus} (B){note}",
                         xaxis_title=f"{cell.model} {cell.metric}", yaxis_title=f"{versus} {cell.metric}",
                         height=420, margin=dict(l=50, r=20, t=50, b=50), legend=dict(orientation="h", y=-0.18),
                         clickmode="event")
    return figure


def confusion(results: Results, cell: Cell, classnames=None) -> go.Figure:
    """Zero-shot: true class (rows) against the top-1 class (columns) of ``cell.model``, counts of pictures."""
    rows = results.rows_of(cell.dataset, cell.model, cell.kind)
    if rows.empty or "predicted" not in rows:
        return _empty("no per-picture records for this model (no work file beside the results)")
    labels, predicted = rows["label"].to_numpy(dtype=int), rows["predicted"].to_numpy(dtype=int)
    n = int(max(labels.max(), predicted.max())) + 1
    counts = np.zeros((n, n), dtype=int)
    np.add.at(counts, (labels, predicted), 1)
    names = [classnames[i] if classnames is not None and i < len(classnames) else str(i) for i in range(n)]
    keys = np.array([[f"{i}|{j}" for j in range(n)] for i in range(n)])
    figure = go.Figure(go.Heatmap(z=counts, x=names, y=names, customdata=keys, colorscale="Blues",
                                  hovertemplate="%{y} taken for %{x}: %{z}<extra></extra>"))
    figure.update_layout(title=f"{cell.model}: true class (down) against its top-1 class (across); click a cell",
                         height=min(900, 160 + 18 * n), margin=dict(l=80, r=20, t=50, b=80),
                         yaxis=dict(autorange="reversed"), clickmode="event")
    return figure


def run_documents(jobs, run_id: str) -> list[tuple[Path, dict]]:
    """(results file, document) of an evaluation run, or of each finished evaluation of a sweep."""
    from explorer.jobs.eval_child import RESULTS_FILE
    from explorer.jobs.records import SWEEP
    from explorer.jobs.sweeps import children

    run = jobs.get(run_id)
    runs = children(jobs.store, run.id) if run.kind == SWEEP else [run]
    found = []
    for child in runs:
        path = Path(child.out_dir or "") / RESULTS_FILE
        if path.is_file():
            found.append((path, read_document(path)))
    if not found:
        raise ResultsError(f"run {run.id} has no results file yet (still running, or every evaluation failed: "
                           f"explorer jobs show {run.id})")
    return found


def document_summary(documents) -> str:
    """One line: how many files, of which format."""
    formats = sorted({json.dumps(doc.get("format")) for _, doc in documents})
    return f"{len(documents)} results file(s), format {', '.join(formats)}"


__all__ = ["confusion", "run_documents", "scatter"]
