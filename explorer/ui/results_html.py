"""The Results tab's HTML: the table whose cells are buttons, the units list, and a unit's detail.

The DOM is a contract for tests and people's scripts: each table cell is a button with
``data-result-cell="<model>|<column>"``; each unit row carries ``data-unit-id`` and shows its metric as text
(``data-metric``); a grounding unit opens on the maps board (``maps_board``: ``data-map-panel`` panels), any
other unit as a detail (``data-unit-detail``). Everything a results file or dataset holds is escaped.
"""

from __future__ import annotations

import base64
import io
import math
from html import escape
from pathlib import Path

import numpy as np
from PIL import Image

from explorer.core.cache import MB, BoundedCache
from explorer.core.files import file_stamp
from explorer.core.images import load_image
from explorer.evaluation.metrics.boxes import is_hit
from explorer.views.result_cells import GROUNDING, NEGATIVES, RETRIEVAL, ZEROSHOT, Cell

THUMB = 72  # CSS px of a unit's thumbnail
DETAIL = 320  # px of a detail's picture
THUMBS = BoundedCache("results thumbnails", max_items=2000, max_bytes=32 * MB)
EMPTY_TABLE = '<div class="rv-empty">Open a results file: its table appears here, each number a button.</div>'
EMPTY_UNITS = '<div class="rv-empty">Click a number of the table: the units behind it are listed here.</div>'

CSS = """
.rv-empty { font-size: 14px; color: var(--body-text-color-subdued); padding: 12px 0; }
.rv-scroll { overflow-x: auto; max-width: 100%; }
.rv-table { border-collapse: collapse; font-size: 14px; }
.rv-table th, .rv-table td { padding: 3px 6px; border-bottom: 1px solid var(--border-color-primary); text-align: right;
  white-space: nowrap; }
.rv-table th { font-weight: 600; font-size: 13px; }
.rv-table th.rv-model, .rv-table td.rv-model { text-align: left; }
.rv-cell { font: inherit; font-size: 14px; padding: 2px 6px; border: 1px solid transparent; border-radius: 4px;
  background: none; color: var(--body-text-color); cursor: pointer; min-width: 3.2em; text-align: right; }
.rv-cell:hover, .rv-cell:focus { border-color: var(--color-accent); }
.rv-cell[aria-pressed="true"] { background: var(--color-accent-soft); border-color: var(--color-accent); font-weight: 700; }
.rv-cell[disabled] { cursor: default; color: var(--body-text-color-subdued); }
.rv-best { font-weight: 700; }
.rv-units { border-collapse: collapse; font-size: 14px; width: 100%; }
.rv-list { max-height: 640px; overflow-y: auto; }
.rv-units th { text-align: left; font-size: 13px; border-bottom: 2px solid var(--border-color-primary); padding: 3px 6px; }
.rv-units td { padding: 3px 6px; border-bottom: 1px solid var(--border-color-primary); vertical-align: middle; }
.rv-units tr[data-unit-id] { cursor: pointer; }
.rv-units tr[data-unit-id]:hover, .rv-units tr[data-unit-id]:focus { background: var(--background-fill-secondary); }
.rv-units tr[aria-selected="true"] { outline: 2px solid var(--color-accent); }
.rv-units img { width: 56px; height: 56px; object-fit: contain; display: block; }
.rv-missing { color: #b42318; font-weight: 600; }
.rv-right { color: #067647; font-weight: 600; }
.rv-wrong { color: #b42318; font-weight: 600; }
.rv-line { font-size: 14px; margin: 4px 0; }
"""

# A click (or Enter) on a table cell: Gradio's select event with "<model>|<column>", checked on the server.
JS_TABLE = """
const pick = (event) => {
  const cell = event.target.closest('[data-result-cell]');
  if (!cell || cell.disabled) return;
  if (event.type === 'keydown' && event.key !== 'Enter' && event.key !== ' ') return;
  event.preventDefault();
  element.querySelectorAll('[data-result-cell][aria-pressed="true"]').forEach((b) => b.setAttribute('aria-pressed', 'false'));
  cell.setAttribute('aria-pressed', 'true');
  trigger('select', {index: 0, value: cell.dataset.resultCell});
};
element.addEventListener('click', pick);
element.addEventListener('keydown', pick);
"""

# A click on a unit row, on a point of the two-model scatter (its unit id) or on a cell of the confusion matrix
# ("matrix:<true>|<predicted>"): the select event of the units list. Plotly's own click events are hooked once
# per drawn graph (a new graph is a new element: checked twice a second).
JS_UNITS = """
const pick = (event) => {
  const row = event.target.closest('[data-unit-id]');
  if (!row) return;
  if (event.type === 'keydown' && event.key !== 'Enter' && event.key !== ' ') return;
  event.preventDefault();
  element.querySelectorAll('[data-unit-id][aria-selected="true"]').forEach((r) => r.setAttribute('aria-selected', 'false'));
  row.setAttribute('aria-selected', 'true');
  trigger('select', {index: 0, value: row.dataset.unitId});
};
element.addEventListener('click', pick);
element.addEventListener('keydown', pick);
const hook = (selector, prefix) => {
  const graph = document.querySelector(selector + ' .js-plotly-plot');
  if (!graph || graph.dataset.resultsHooked === 'true' || typeof graph.on !== 'function') return;
  graph.dataset.resultsHooked = 'true';
  graph.on('plotly_click', (data) => {
    const point = data && data.points && data.points[0];
    if (point && point.customdata !== undefined) trigger('select', {index: 1, value: prefix + String(point.customdata)});
  });
};
setInterval(() => { hook('#results-scatter', ''); hook('#results-matrix', 'matrix:'); }, 500);
"""


def table_html(results, chosen: tuple[str, str] | None = None) -> str:
    """The results' table (models down, (dataset, metric) across, print units), each number a button; the best
    of a column in bold, as ``results table`` marks it."""
    from explorer.views.results_table import best_rows

    table = results.table
    if table.empty:
        return '<div class="rv-empty">These results hold no numbers.</div>'
    best = best_rows(table)
    datasets = list(dict.fromkeys(d for d, _ in table.columns))
    head = ['<tr><th class="rv-model" rowspan="2">model</th>']
    head += [f'<th colspan="{sum(1 for c in table.columns if c[0] == d)}">{escape(str(d))}</th>' for d in datasets]
    head.append("</tr><tr>")
    head += [f"<th>{escape(str(m))}</th>" for _, m in table.columns]
    head.append("</tr>")
    body = []
    for model, row in table.iterrows():
        cells = [f'<td class="rv-model">{escape(str(model))}</td>']
        for (dataset, metric), value in row.items():
            column = f"{dataset} {metric}".strip()
            cell = results.cells.get((model, column))
            text = "--" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{value:.1f}"
            key = f"{model}|{column}"
            pressed = "true" if chosen == (model, column) else "false"
            bold = " rv-best" if model in best.get((dataset, metric), ()) else ""
            usable = cell is not None and cell.kind is not None and text != "--"
            title = f"{model} · {column}: open its units" if usable else f"{column}: no units behind this number"
            cells.append(f'<td><button class="rv-cell{bold}" data-result-cell="{escape(key)}" aria-pressed="{pressed}" '
                         f'title="{escape(title)}"{"" if usable else " disabled"}>{text}</button></td>')
        body.append("<tr>" + "".join(cells) + "</tr>")
    return (f'<div class="rv-scroll"><table class="rv-table" data-results-family="{escape(results.family)}">'
            f'<thead>{"".join(head)}</thead><tbody>{"".join(body)}</tbody></table></div>')


def number(value, digits: int = 3) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    return f"{value:.{digits}f}" if isinstance(value, float) and not float(value).is_integer() else f"{value:g}"


def metric_text(cell: Cell, row: dict, versus: str | None) -> str:
    """The unit's figure for the cell as a reader reads it: "iou 0.123", with B's and the margin when compared."""
    text = f"{cell.metric} {number(row.get(cell.metric))}"
    if versus and f"versus_{cell.metric}" in row:
        text += f" · {versus} {number(row.get('versus_' + cell.metric))} · A−B {number(row.get('a_minus_b'))}"
    return text


def units_html(results, cell: Cell, picked, versus: str | None = None, note: str = "") -> str:
    """The picked units as rows (a thumbnail where the picture is known, the text, the metric, the family's
    figures); a unit whose picture is gone says so."""
    if picked is None or picked.empty:
        return f'<div class="rv-empty">{escape(note or "No units in this cell for this choice.")}</div>'
    extra = {GROUNDING: ["pointing", "box pick"], NEGATIVES: ["negative that beat it", "scores"],
             ZEROSHOT: ["true class rank"], RETRIEVAL: ["right answer's rank"]}.get(results.family, [])
    head = "".join(f"<th>{escape(h)}</th>" for h in ["#", "picture", "unit", "text", cell.metric, *extra])
    rows = []
    for rank, row in enumerate(picked.to_dict(orient="records"), 1):
        thumb = _thumb_cell(row)
        cells = [str(rank), thumb, escape(str(row["unit_id"])), escape(str(row.get("text") or "")),
                 f'<span data-metric="{escape(cell.metric)}">{escape(metric_text(cell, row, versus))}</span>',
                 *_family_cells(results.family, row)]
        rows.append(f'<tr data-unit-id="{escape(str(row["unit_id"]))}" role="button" tabindex="0">'
                    + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
    line = f'<div class="rv-line" data-units-note>{escape(note)}</div>' if note else ""
    return (f'{line}<div class="rv-scroll rv-list"><table class="rv-units" data-cell="{escape(cell.model)}|{escape(cell.column)}">'
            f"<thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table></div>")


def _family_cells(family: str, row: dict) -> list[str]:
    if family == GROUNDING:
        hit = row.get("pointing")
        pointing = "–" if hit is None or hit != hit else ('<span class="rv-right">hit</span>' if hit else
                                                         '<span class="rv-wrong">miss</span>')
        box = row.get("box_iou")
        pick = "–" if box is None or box != box else (
            f'<span class="rv-right">right</span> ({box:.2f})' if is_hit(box) else f'<span class="rv-wrong">wrong</span> ({box:.2f})')
        return [pointing, pick]
    if family == NEGATIVES:
        return [escape(str(row.get("negative_text") or f"negative {row.get('negative')}")),
                f"positive {number(row.get('positive_score'))} · negative {number(row.get('negative_score'))}"]
    if family in (ZEROSHOT, RETRIEVAL):
        return [number(row.get("rank"))]
    return []


def _thumb_cell(row: dict) -> str:
    if row.get("missing"):
        return '<span class="rv-missing" data-missing>picture missing</span>'
    path = row.get("path")
    if not path:
        return ""
    uri = thumbnail(path, THUMB * 2, row.get("box"))
    return f'<img alt="" src="{uri}">' if uri else '<span class="rv-missing" data-missing>unreadable</span>'


def thumbnail(path, side: int, box=None) -> str | None:
    """A JPEG data URI of the picture (its box's crop), at most ``side`` px; kept while the file is unchanged."""
    key = (str(path), side, tuple(box) if box else None, file_stamp(Path(path)) if Path(path).exists() else None)

    def make():
        try:
            picture = load_image(path, max_side=1 << 14 if box else side * 4).image.convert("RGB")
        except Exception:  # noqa: BLE001 - an unreadable picture shows as such, the list goes on
            return None
        if box:
            x, y, w, h = box
            picture = picture.crop((int(x), int(y), int(math.ceil(x + w)), int(math.ceil(y + h))))
        picture.thumbnail((side, side))
        return data_uri(picture)

    return THUMBS.get(key, make)


def data_uri(picture: Image.Image | np.ndarray, fmt: str = "JPEG") -> str:
    if isinstance(picture, np.ndarray):
        picture = Image.fromarray(picture)
    buffer = io.BytesIO()
    picture.convert("RGB").save(buffer, format=fmt, quality=88)
    kind = "jpeg" if fmt == "JPEG" else fmt.lower()
    return f"data:image/{kind};base64," + base64.b64encode(buffer.getvalue()).decode("ascii")


def detail_html(results, cell: Cell, rows: list[dict], gallery=None) -> str:
    """A unit that is not drawn on the board (negatives, zero-shot, retrieval): its picture and the texts
    and scores that matter, for each model compared (``rows``: one per model)."""
    first = rows[0]
    parts = [f'<div class="rv-detail" data-unit-detail="{escape(str(first["unit_id"]))}">']
    if first.get("missing"):
        parts.append('<div class="rv-line rv-missing" data-missing>The picture is missing: '
                     f'{escape(str(first.get("path") or first.get("picture")))}</div>')
    elif first.get("path"):
        uri = thumbnail(first["path"], DETAIL, first.get("box"))
        if uri:
            parts.append(f'<img alt="the unit\'s picture" src="{uri}" style="max-width:{DETAIL}px">')
    for row in rows:
        parts.append(f'<div class="rv-line"><b>{escape(str(row["model"]))}</b>: {escape(_detail_line(results.family, row))}</div>')
    for text, score, right in gallery or []:
        mark = ' class="rv-right"' if right else ""
        if results.family == RETRIEVAL and first["kind"] == "t2i":
            uri = thumbnail(text, 120)
            parts.append(f'<figure style="display:inline-block;margin:4px"><img alt="" src="{uri or ""}">'
                         f'<figcaption{mark}>{score:.3f}{" right" if right else ""}</figcaption></figure>')
        else:
            parts.append(f'<div class="rv-line"><span{mark}>{score:.3f}</span> {escape(str(text))}</div>')
    parts.append("</div>")
    return "".join(parts)


def _detail_line(family: str, row: dict) -> str:
    if family == NEGATIVES:
        verdict = "right" if row.get("margin", 0) > 0 else "fooled"
        return (f"{verdict}: positive \u201c{row.get('text', '')}\u201d {number(row.get('positive_score'))}; "
                f"negative \u201c{row.get('negative_text', '')}\u201d {number(row.get('negative_score'))}")
    if family == ZEROSHOT:
        return f"{row.get('text', '')} (true class at rank {number(row.get('rank'))}; 6 = past the top 5)"
    if family == RETRIEVAL:
        return f"the right answer ranked {number(row.get('rank'))}: {row.get('text', '')}"
    return str(row.get("text", ""))


__all__ = ["CSS", "EMPTY_TABLE", "EMPTY_UNITS", "JS_TABLE", "JS_UNITS", "data_uri", "detail_html", "metric_text",
           "table_html", "thumbnail", "units_html"]
