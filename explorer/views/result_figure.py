"""``explorer results examples``: a results cell's picked units as a paper figure, with settings that replay it.

    settings = ExamplesSettings(results="refcoco.json", model="demo-caft", kind="generic", metric="iou", worst=8)
    written = write_examples(settings, load, "examples.pdf")     # the figure, examples.pdf.json beside it

A row per unit, in the order picked. Grounding: the picture with the truth outlined (and, where the unit
names a target box, the true box in green and each model's picked box in red), then each model's map with its
Otsu contour as the board draws it (IoU and pointing hit under it), the expression and the unit's figures as
the row's label. Negatives: the region or picture, then the positive and the negative that beat it, with both
scores. Zero-shot: the picture, its class and the class it was taken for. Retrieval: the query, and what
ranked above the right answer. A unit whose picture is gone is listed as missing in the caption, not dropped.
Layout and fonts are the other figures' (``figure_style`` presets; ``figures.save_pages``).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, fields
from pathlib import Path

import numpy as np

from explorer.core.errors import ExplorerError
from explorer.core.files import write_text_atomic
from explorer.core.images import load_image
from explorer.views import result_datasets as rd
from explorer.views.figure_style import DEFAULT_PRESET, PRESETS, resolve_style
from explorer.views.figures import grid_rows, save_pages, split_pages
from explorer.views.panels import Header, Panel, PanelGrid, draw_contour, fit_size, outline
from explorer.views.result_units import GROUNDING, NEGATIVES, RETRIEVAL, ZEROSHOT, Cell, Results, ResultsError
from explorer.views.result_units import open_results, pick_units
from explorer.views.settings import ViewSettings

VIEW = "results-examples"
DEFAULT_N = 8
THUMB = 512  # pixels on a picture's long side before the figure shrinks it


@dataclass
class ExamplesSettings:
    """What ``results examples`` drew: enough to draw it again (``load``; the file beside the figure)."""

    results: str
    model: str
    versus: str | None = None
    column: str | None = None  # the table column (default: the first of ``model`` matching kind and metric)
    kind: str | None = None
    metric: str | None = None
    order: str = "worst"  # worst, best, wins
    n: int = DEFAULT_N
    keep: str = "all"
    data: str | None = None  # the dataset's folder when it moved
    preset: str = DEFAULT_PRESET
    width: float | None = None
    font: str = "sans"
    font_size: float | None = None
    annotate: str = "scores"
    dpi: int = 300
    view: str = VIEW

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2) + "\n"

    @classmethod
    def load(cls, path) -> "ExamplesSettings":
        try:
            data = json.loads(Path(path).read_text(encoding="utf-8"))
        except (OSError, ValueError) as error:
            raise ResultsError(f"cannot read the settings file {path}: {error}") from error
        if not isinstance(data, dict) or data.get("view") != VIEW:
            raise ResultsError(f"{path} holds no results examples settings (view {VIEW!r})")
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ResultsError(f"{path}: unknown settings {', '.join(unknown)}")
        return cls(**data)

    def style(self):
        return resolve_style(self.preset, self.width, self.font, self.font_size, annotate=self.annotate)


def find_cell(results: Results, model: str, column: str | None = None, kind: str | None = None,
              metric: str | None = None) -> Cell:
    """The cell ``column`` of ``model``, else its first cell with units whose kind and unit metric match."""
    if model not in results.models:
        raise ResultsError(f"no model {model!r} in {results.name}; models: {', '.join(results.models)}")
    if column:
        return results.cell(model, column)
    for column_name in results.columns():
        cell = results.cells.get((model, column_name))
        if cell is None or cell.kind is None:
            continue
        if (kind is None or cell.kind == kind) and (metric is None or cell.metric == metric):
            return cell
    kinds = sorted({c.kind for (m, _), c in results.cells.items() if m == model and c.kind is not None})
    metrics = sorted({c.metric for (m, _), c in results.cells.items() if m == model and c.kind is not None})
    raise ResultsError(f"{model} has no cell with kind {kind or 'any'} and metric {metric or 'any'}; kinds: "
                       f"{', '.join(kinds) or 'none'}; metrics: {', '.join(metrics) or 'none'}")


def picked_units(settings: ExamplesSettings, results: Results | None = None):
    """(results, cell, the picked rows described from the dataset) of ``settings``."""
    results = results or open_results(settings.results)
    cell = find_cell(results, settings.model, settings.column, settings.kind, settings.metric)
    picked = pick_units(results, cell, settings.order, settings.n, settings.versus, settings.keep)
    return results, cell, rd.describe(results, picked, settings.data)


# ---- the figure ------------------------------------------------------------------------------------------


def examples_grid(results: Results, cell: Cell, picked, settings: ExamplesSettings, load, cache=None) -> PanelGrid:
    """The picked units as one grid (module docstring); missing pictures listed in the caption."""
    rows, labels, missing = [], [], []
    models = [cell.model] + ([settings.versus] if settings.versus else [])
    headers = None
    for rank, row in enumerate(picked.to_dict(orient="records"), 1):
        if row.get("missing"):
            missing.append(str(row["unit_id"]))
            continue
        label = f"{rank}. {row['text']}\n{figures_line(cell, row, settings.versus)}"
        if results.family == GROUNDING:
            panels, headers = grounding_row(results, row, models, settings, load, cache)
        else:
            panels = other_row(results, row, settings.data)
        rows.append(panels)
        labels.append(label)
    caption = f"{cell.column}: {cell.model}'s units, {settings.order} first by {cell.metric}"
    caption += f" against {settings.versus}" if settings.versus else ""
    if missing:
        caption += f". Missing pictures (not drawn): {', '.join(missing)}"
    if not rows:
        raise ResultsError("every picked unit's picture is missing: " + ", ".join(missing))
    width = max(len(r) for r in rows)
    headers = headers or [Header("")] * width
    return PanelGrid(rows=rows, row_labels=labels, caption=caption, headers=headers)


def figures_line(cell: Cell, row: dict, versus: str | None) -> str:
    """The unit's numbers as a line: the metric (both models'), and the family's own."""
    def value(v):
        return "–" if v is None or (isinstance(v, float) and np.isnan(v)) else f"{v:.3g}"

    parts = [f"{cell.metric} {value(row.get(cell.metric))}"]
    if versus:
        parts.append(f"{versus} {value(row.get('versus_' + cell.metric))}")
    if cell.metric != "pointing" and row.get("pointing") == row.get("pointing") and "pointing" in row:  # NaN: none
        parts.append("hit" if row["pointing"] else "miss")
    if cell.metric != "box_iou" and row.get("box_iou") == row.get("box_iou") and "box_iou" in row:
        parts.append(f"box IoU {value(row['box_iou'])}")
    return " · ".join(parts)


def grounding_row(results: Results, row: dict, models: list[str], settings: ExamplesSettings, load, cache=None):
    """(panels, headers): the picture with truth and boxes, then each model's map with its contour."""
    from explorer.views.maps_view import render_sentence_rows
    from explorer.views.result_drawing import draw_unit

    drawing = draw_unit(results, row, models, load, settings.data, cache)
    view = drawing.view
    truth = view.truth.masks[0]
    base = drawing.boxes if drawing.boxes is not None else view.picture
    picture = draw_contour(np.asarray(base.convert("RGB")).copy(), outline(truth))
    maps = render_sentence_rows(view, ViewSettings(picture=False, annotate=settings.annotate), None, [0])
    # Headers name each column's model and kind only: a header's mIoU would be the last row's, not the column's.
    headers = [Header("truth" + (" · boxes" if drawing.boxes is not None else ""))]
    headers += [Header(f"{model.name}\n{model.kind}") for model in view.models]
    return [Panel(picture, "truth")] + maps.rows[0], headers


def other_row(results: Results, row: dict, folder) -> list[Panel]:
    """Negatives, zero-shot and retrieval: the picture (a region's crop), then the texts that matter."""
    picture = _picture(row.get("path"), row.get("box"))
    if results.family == NEGATIVES:
        return [Panel(picture, "picture"),
                Panel(None, "positive", body=f"{row['text']}\n({row['positive_score']:.3f})", frame="#1a9850"),
                Panel(None, "negative", body=f"{row.get('negative_text', '')}\n({row['negative_score']:.3f})",
                      frame="#d73027")]
    if results.family == ZEROSHOT:
        return [Panel(picture, "picture"), Panel(None, "class", body=row["text"])]
    if results.family == RETRIEVAL:
        dataset = rd.open_dataset(results, row["dataset"], folder)
        above = rd.gallery(dataset, row)[:4]
        cells = [Panel(picture, "query" if row["kind"] == "i2t" else "right answer")]
        for candidate, score, right in above:
            if row["kind"] == "t2i":
                cells.append(Panel(_picture(candidate), f"{score:.3f}", frame="#1a9850" if right else ""))
            else:
                cells.append(Panel(None, f"{score:.3f}", body=candidate, frame="#1a9850" if right else ""))
        return cells
    raise ResultsError(f"{results.family} results have no units to draw")


def _picture(path, box=None) -> np.ndarray | None:
    if not path or not Path(path).is_file():
        return None
    picture = load_image(path, max_side=1 << 14 if box else THUMB).image.convert("RGB")
    if box:
        x, y, w, h = box
        picture = picture.crop((int(x), int(y), int(np.ceil(x + w)), int(np.ceil(y + h))))
    return np.asarray(picture.resize(fit_size(picture.size, THUMB)))


def write_examples(settings: ExamplesSettings, load, out, results: Results | None = None, cache=None) -> list[Path]:
    """Draw the picked units to ``out`` (PDF pages, or PNG/SVG files) and the settings beside it
    (``<out>.json``); returns the files written, the settings last."""
    results, cell, picked = picked_units(settings, results)
    if picked.empty:
        raise ResultsError(f"no units to draw for {cell.column} ({cell.model}, {settings.order})")
    grid = examples_grid(results, cell, picked, settings, load, cache)
    style = settings.style()
    pages = split_pages(len(grid.rows), lambda rows: grid_rows(grid, rows), style)
    written = save_pages([grid_rows(grid, page) for page in pages], out, dpi=settings.dpi, style=style)
    beside = Path(str(out) + ".json")
    write_text_atomic(beside, settings.to_json())
    return [*written, beside]


def check_preset(preset: str) -> None:
    if preset not in PRESETS:
        raise ExplorerError(f"the preset must be one of {', '.join(PRESETS)}, not {preset!r}")


__all__ = ["DEFAULT_N", "ExamplesSettings", "examples_grid", "find_cell", "picked_units", "write_examples"]
