"""The results table of evaluation runs, as a pivot (models x (dataset, metric)) and as a paper's table.

    frame = results_frame(jobs.store.results([sweep_id]))     # long: model, dataset, task, metric, value
    table = pivot(frame, metrics=["t2i_R@1", "i2t_R@1"])       # rows: models; columns: (dataset, metric)
    export(table, "latex")                                     # booktabs, the best of each column in bold

pandas does the pivoting, the number formatting and the CSV and LaTeX writing (``Styler.to_latex`` with
booktabs rules and ``highlight_max``/``highlight_min`` for the bold); Markdown is written here because
pandas needs the optional ``tabulate`` package for it.

Units as papers print them: Recall@K and grounding's mIoU, oIoU, box accuracy, pointing and AUROC in percent
(the store keeps fractions, as ``evaluate_retrieval`` and ``evaluate_grounding`` give them), RSUM (already a sum of
percentages) and ranks as they are. "Best" is the largest value of a column, the smallest for a rank
(``lower_is_better``).
"""

from __future__ import annotations

from typing import Iterable, Sequence

import pandas as pd

from explorer.core.errors import InputError

FORMATS = ("csv", "latex", "markdown")
DEFAULT_METRICS = ("t2i_R@1", "t2i_R@5", "t2i_R@10", "i2t_R@1", "i2t_R@5", "i2t_R@10")
DECIMALS = 1
LONG_COLUMNS = ["model", "dataset", "task", "metric", "value"]


def results_frame(rows: Iterable[dict]) -> pd.DataFrame:
    """The store's result rows as a long frame (one row per model x dataset x metric), values in print units;
    a metric measured twice for the same model and dataset keeps its last value."""
    frame = pd.DataFrame(list(rows), columns=[*LONG_COLUMNS, "run_id", "sweep"])
    if frame.empty:
        return frame[LONG_COLUMNS]
    frame["value"] = [display_value(m, v) for m, v in zip(frame["metric"], frame["value"])]
    return frame.drop_duplicates(["model", "dataset", "metric"], keep="last")[LONG_COLUMNS].reset_index(drop=True)


GROUNDING_FRACTIONS = ("/miou", "/pointing", "/auroc")  # a grounding child's "<kind>/<metric>" shares
REFERRING_METRICS = ("miou", "oiou", "box_accuracy")  # a refcoco child's headline shares (CAFT T2, SEPS T4)


def display_value(metric: str, value: float) -> float:
    percent = ("R@" in metric or metric.endswith(GROUNDING_FRACTIONS)
               or metric.rsplit("/", 1)[-1] in REFERRING_METRICS
               or metric.startswith("accuracy/") or metric in ("top1", "top5"))  # negatives' and zero-shot's shares
    return 100.0 * float(value) if percent else float(value)


def lower_is_better(metric: str) -> bool:
    return "rank" in metric.lower()


def choices(frame: pd.DataFrame) -> tuple[list[str], list[str]]:
    """(datasets, metrics) in the order they first appear: what a filter offers."""
    if frame.empty:
        return [], []
    return list(dict.fromkeys(frame["dataset"])), list(dict.fromkeys(frame["metric"]))


def filtered(frame: pd.DataFrame, datasets: Sequence[str] | None = None,
             metrics: Sequence[str] | None = None) -> pd.DataFrame:
    """The rows of these datasets and metrics (all when None or empty), metrics in the order asked."""
    keep = frame
    if datasets:
        keep = keep[keep["dataset"].isin(list(datasets))]
    if metrics:
        keep = keep[keep["metric"].isin(list(metrics))]
    return keep


def default_metrics(frame: pd.DataFrame) -> list[str]:
    """A paper's usual columns when present (R@1/5/10 both ways; referring: mIoU, oIoU, box accuracy), else every
    metric."""
    present = choices(frame)[1]
    wanted = [m for m in DEFAULT_METRICS if m in present] or [m for m in REFERRING_METRICS if m in present]
    return wanted or present


def pivot(frame: pd.DataFrame, metrics: Sequence[str] | None = None,
          datasets: Sequence[str] | None = None) -> pd.DataFrame:
    """Models as rows (in the order first measured), (dataset, metric) as columns in the order chosen."""
    keep = filtered(frame, datasets, metrics)
    if keep.empty:
        return pd.DataFrame()
    models = list(dict.fromkeys(keep["model"]))
    sets = [d for d in (datasets or choices(keep)[0]) if d in set(keep["dataset"])]
    names = [m for m in (metrics or choices(keep)[1]) if m in set(keep["metric"])]
    table = keep.pivot_table(index="model", columns=["dataset", "metric"], values="value", aggfunc="last")
    columns = [(d, m) for d in sets for m in names if (d, m) in table.columns]
    table = table.reindex(index=models, columns=pd.MultiIndex.from_tuples(columns, names=["dataset", "metric"]))
    table.index.name = "model"
    return table


def best_rows(table: pd.DataFrame) -> dict[tuple, set]:
    """Per column, the models holding its best value (ties all count)."""
    best = {}
    for column in table.columns:
        values = table[column].dropna()
        if values.empty:
            continue
        target = values.min() if lower_is_better(column[-1]) else values.max()
        best[column] = set(values.index[values.round(DECIMALS) == round(target, DECIMALS)])
    return best


# ---- export -------------------------------------------------------------------------------------------


def export(table: pd.DataFrame, fmt: str, decimals: int = DECIMALS, caption: str | None = None) -> str:
    """The pivot as ``csv``, ``latex`` (booktabs, best in bold) or ``markdown`` (best in bold) text."""
    if fmt not in FORMATS:
        raise InputError(f"format must be one of {', '.join(FORMATS)}, not {fmt!r}")
    if table.empty:
        raise InputError("there are no results to export (nothing measured, or everything filtered out): "
                         "widen the filters, or wait for the runs to finish")
    return {"csv": to_csv, "latex": to_latex, "markdown": to_markdown}[fmt](table, decimals, caption)


def to_csv(table: pd.DataFrame, decimals: int = DECIMALS, caption: str | None = None) -> str:
    """One header row ("dataset metric"), one row per model; a spreadsheet reads it as it is."""
    flat = table.copy()
    flat.columns = [f"{d} {m}" for d, m in table.columns]
    return flat.to_csv(float_format=f"%.{decimals}f", lineterminator="\n")


def to_latex(table: pd.DataFrame, decimals: int = DECIMALS, caption: str | None = None) -> str:
    """A booktabs tabular: datasets as multicolumn headers, metrics below, the best of each column in bold."""
    bold = "textbf:--rwrap;"
    higher = [c for c in table.columns if not lower_is_better(c[-1])]
    lower = [c for c in table.columns if lower_is_better(c[-1])]
    style = table.round(decimals).style.format(precision=decimals, na_rep="--")
    style = style.format_index(escape="latex", axis=0).format_index(escape="latex", axis=1)
    style = style.hide(axis="index", names=True)  # no header row of its own for the word "model"
    if higher:
        style = style.highlight_max(subset=higher, props=bold)
    if lower:
        style = style.highlight_min(subset=lower, props=bold)
    return style.to_latex(hrules=True, multicol_align="c", column_format="l" + "r" * len(table.columns),
                          caption=caption)


def to_markdown(table: pd.DataFrame, decimals: int = DECIMALS, caption: str | None = None) -> str:
    best = best_rows(table)
    header = ["model", *(f"{d} {m}" for d, m in table.columns)]
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join([" --- "] + [" ---: "] * len(table.columns)) + "|"]
    for model, row in table.iterrows():
        cells = []
        for column, value in row.items():
            text = "--" if pd.isna(value) else f"{value:.{decimals}f}"
            cells.append(f"**{text}**" if model in best.get(column, ()) else text)
        lines.append("| " + " | ".join([str(model), *cells]) + " |")
    return (f"{caption}\n\n" if caption else "") + "\n".join(lines) + "\n"


__all__ = ["DEFAULT_METRICS", "FORMATS", "best_rows", "choices", "default_metrics", "display_value", "export",
           "filtered", "lower_is_better", "pivot", "results_frame", "to_csv", "to_latex", "to_markdown"]
