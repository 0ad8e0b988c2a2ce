"""The comparison board's charts: Recall@K curves per dataset, and one bar chart per metric across models.

    frame = results_table.results_frame(jobs.store.results([sweep_id]))
    recall_curves(frame, datasets=["urban1k"])      # plotly Figure: a panel per dataset, a line per model
    metric_bars(frame, metrics=["t2i_R@1", "rsum"])  # plotly Figure: a panel per metric, bars per dataset

Both read the long frame of ``results_table`` (values already in print units) and take the same
filters as the pivot, so the page's table and charts always show the same numbers.
"""

from __future__ import annotations

import re
from typing import Sequence

import pandas as pd
import plotly.graph_objects as go
from plotly.colors import qualitative
from plotly.subplots import make_subplots

from explorer.views.results_table import choices, filtered

RECALL = re.compile(r"^(t2i|i2t)_R@(\d+)$")
DASH = {"t2i": "solid", "i2t": "dash"}
COLUMNS = 3  # panels per row
PANEL_HEIGHT = 300


def _colours(models: Sequence[str]) -> dict[str, str]:
    palette = qualitative.Plotly
    return {model: palette[i % len(palette)] for i, model in enumerate(models)}


def _grid(titles: Sequence[str]):
    rows = max(1, -(-len(titles) // COLUMNS))
    figure = make_subplots(rows=rows, cols=min(COLUMNS, max(1, len(titles))), subplot_titles=list(titles))
    figure.update_layout(height=PANEL_HEIGHT * rows + 80, margin=dict(l=40, r=20, t=60, b=40),
                         legend=dict(orientation="h", y=-0.12))
    return figure


def _empty(text: str) -> go.Figure:
    figure = go.Figure()
    figure.add_annotation(text=text, showarrow=False, x=0.5, y=0.5, xref="paper", yref="paper")
    figure.update_layout(height=200, xaxis=dict(visible=False), yaxis=dict(visible=False))
    return figure


def recall_curves(frame: pd.DataFrame, datasets: Sequence[str] | None = None,
                  models: Sequence[str] | None = None) -> go.Figure:
    """Recall@K (%) against K, a panel per dataset; a colour per model, solid text->image, dashed image->text."""
    keep = filtered(frame, datasets)
    keep = keep[keep["metric"].str.match(RECALL.pattern)] if not keep.empty else keep
    if models:
        keep = keep[keep["model"].isin(list(models))]
    if keep.empty:
        return _empty("no Recall@K to draw (no retrieval results for this choice)")
    sets = choices(keep)[0]
    colours = _colours(list(dict.fromkeys(keep["model"])))
    figure = _grid(sets)
    for n, dataset in enumerate(sets):
        part = keep[keep["dataset"] == dataset]
        for (model, direction), group in part.groupby(
                [part["model"], part["metric"].str.slice(0, 3)], sort=False):
            ks = group["metric"].map(lambda m: int(RECALL.match(m).group(2)))
            order = ks.argsort().to_numpy()
            figure.add_trace(go.Scatter(
                x=ks.to_numpy()[order], y=group["value"].to_numpy()[order], mode="lines+markers",
                name=f"{model} {direction}", legendgroup=model, showlegend=n == 0,
                line=dict(color=colours[model], dash=DASH.get(direction, "solid"))),
                row=n // COLUMNS + 1, col=n % COLUMNS + 1)
    figure.update_xaxes(type="log", title_text="K")
    figure.update_yaxes(title_text="R@K (%)", rangemode="tozero")
    figure.update_layout(title="Recall@K per dataset (solid: text to image, dashed: image to text)")
    return figure


def metric_bars(frame: pd.DataFrame, metrics: Sequence[str] | None = None,
                datasets: Sequence[str] | None = None) -> go.Figure:
    """A panel per metric: bars of each model, grouped by dataset."""
    keep = filtered(frame, datasets, metrics)
    if keep.empty:
        return _empty("no results for this choice of datasets and metrics")
    names = [m for m in (metrics or choices(keep)[1]) if m in set(keep["metric"])]
    colours = _colours(list(dict.fromkeys(keep["model"])))
    figure = _grid(names)
    for n, metric in enumerate(names):
        part = keep[keep["metric"] == metric]
        for model, group in part.groupby("model", sort=False):
            figure.add_trace(go.Bar(x=group["dataset"], y=group["value"], name=model, legendgroup=model,
                                    showlegend=n == 0, marker_color=colours[model]),
                             row=n // COLUMNS + 1, col=n % COLUMNS + 1)
    figure.update_layout(barmode="group", title="Each metric across models (R@K in %)")
    return figure


# ---- the board: what the Compare view shows for a choice of runs and filters --------------------------


def comparable_runs(runs) -> list[tuple[str, str]]:
    """(label, id) of every sweep and every evaluation outside a sweep, newest first: what can be compared."""
    from explorer.jobs.records import EVAL, SWEEP

    picked = [run for run in runs if run.kind == SWEEP or (run.kind == EVAL and not run.parent)]
    return [(f"{run.name} · {run.status} · {run.id}", run.id) for run in reversed(picked)]


def pivot_rows(table: pd.DataFrame, decimals: int = 1) -> tuple[list[str], list[list]]:
    """(headers, rows) of the pivot for a page's table: "dataset metric" columns, values as printed."""
    if table.empty:
        return ["model"], []
    headers = ["model", *(f"{d} {m}" for d, m in table.columns)]
    rows = [[model, *("" if pd.isna(v) else f"{v:.{decimals}f}" for v in row)] for model, row in table.iterrows()]
    return headers, rows


def board(frame: pd.DataFrame, datasets: Sequence[str] | None = None, metrics: Sequence[str] | None = None):
    """(pivot, Recall@K figure, bars figure) of the frame under the filters (metrics: the pivot's default
    columns when none are chosen)."""
    from explorer.views.results_table import default_metrics, pivot

    chosen = list(metrics or []) or default_metrics(filtered(frame, datasets))
    return (pivot(frame, chosen, datasets or None), recall_curves(frame, datasets),
            metric_bars(frame, chosen, datasets))


__all__ = ["board", "comparable_runs", "metric_bars", "pivot_rows", "recall_curves"]
