"""Results tab (owner mode): an evaluation's table, each number a button that opens the units behind it.

Open a results JSON of any evaluation (``eval``, ``eval-grounding`` in any layout, ``eval-negatives``,
``eval-zeroshot``, ``eval-retrieval``) or an evaluation or sweep of the run store. Its table is the papers'
shape (``results table``'s); a click on a number lists its units worst first (or best first, or by the margin
between two models), read from the work files as they are (``views.result_units``). A click on a grounding
unit draws it on the maps board as the Grounding tab draws a caption (the model's map of that kind, its Otsu
mask, the truth outlined, the true and the picked box); other units open as a detail. Two models compare on a
scatter of per-unit scores (a click on a point opens that unit for both), with "A right, B wrong" and "both
wrong" as filters; zero-shot draws its confusion matrix, a click on a cell lists the pictures of one class
taken for the other. A dataset that moved since the evaluation is asked for once (the folder box).

Every path typed (a results file, a dataset folder, the dataset a results file names) must lie under an
allowed root (``Access.path``). A public page does not build this tab.
"""

from __future__ import annotations

from pathlib import Path

import gradio as gr

from explorer.core.cache import GB, BoundedCache
from explorer.core.errors import InputError
from explorer.core.files import file_stamp
from explorer.evaluation.metrics.boxes import is_hit
from explorer.serve.access import Access
from explorer.serve.budget import HEAVY
from explorer.serve.messages import explain
from explorer.ui import maps_board
from explorer.ui import results_html as html
from explorer.ui.view_controls import export_root
from explorer.views.result_cells import GROUNDING, RETRIEVAL, ZEROSHOT
from explorer.views.result_datasets import DatasetMoved, describe, gallery, open_dataset
from explorer.views.settings import ViewSettings

OPENED = BoundedCache("opened results (units as frames)", max_items=4, max_bytes=2 * GB)
ORDERS = [("worst first", "worst"), ("best first", "best"), ("A beats B by most", "wins"), ("B beats A by most", "losses"),
          ("negatives: fooling every model first", "fooling")]
FILTERS = [("all units", "all"), ("A right, B wrong", "a_right_b_wrong"), ("both wrong", "both_wrong")]
DEFAULT_COUNT = 50
MOST_UNITS = 500  # units listed at once
EMPTY_BOARD = "Click a unit of the list (or a point of the scatter) to draw it here."
MOVED_NOTE = ("**The dataset moved.** {error} Type its folder in the box above the table and press Enter: it is "
              "asked once, never guessed.")


def own_board(board: str) -> str:
    """The maps board's HTML under this tab's own id: the Grounding tab's board holds ``maps-board-view``, and an
    id is one element's on a page (axe's duplicate-id, and a locator would find two boards)."""
    return board.replace(f'id="{maps_board.ELEM_ID}-view"', 'id="results-board-view"', 1)


def open_source(access: Access, jobs, source: str):
    """The ``Results`` of a typed results file (under an allowed root) or run / sweep id, read once while the
    files are unchanged."""
    from explorer.views.result_plots import run_documents
    from explorer.views.result_units import open_results

    text = (source or "").strip()
    if not text:
        raise InputError("Type the path of a results JSON, or the id of an evaluation or sweep of the Jobs tab.")
    if text.endswith(".json") or "/" in text:
        path = access.path(text, "results file")
        return OPENED.get(("file", str(path), file_stamp(path)), lambda: open_results(path))
    if jobs is None:
        raise InputError("this page has no run store: type the path of a results JSON")
    documents = run_documents(jobs, text)
    for path, _ in documents:
        access.path(str(path), "results file")
    key = ("run", text, tuple(file_stamp(path) for path, _ in documents))
    return OPENED.get(key, lambda: open_results(documents[0][0], documents))


def checked_folder(access: Access, results, folder: str | None) -> str | None:
    """The typed dataset folder (under an allowed root), or None; the recorded roots must be allowed too."""
    typed = (folder or "").strip()
    if typed:
        return str(access.path(typed, "dataset folder"))
    for part in results.parts.values():
        if part.root and Path(part.root).exists():
            access.path(part.root, "dataset folder")  # the results name it: it must be readable here too
    return None


def open_table(access: Access, jobs, source, folder):
    """(state, table, note, folder box, versus choices, units, scatter, matrix, board) for a newly opened source."""
    try:
        results = open_source(access, jobs, source)
    except Exception as error:  # noqa: BLE001 - the page says what is wrong and keeps serving
        return (None, html.EMPTY_TABLE, explain(error), gr.update(), gr.update(choices=[], value=None),
                html.EMPTY_UNITS, None, gr.update(visible=False), own_board(maps_board.empty_board(EMPTY_BOARD)))
    lines = [f"**{results.name}**: {results.family}, {len(results.models)} models, {len(results.units):,} unit "
             "records. Click a number to list its units.", *results.notes]
    state = {"source": source.strip(), "folder": (folder or "").strip() or None, "cell": None, "pair": None}
    return (state, html.table_html(results), "\n\n".join(lines), gr.update(),
            gr.update(choices=[""] + results.models, value=""), html.EMPTY_UNITS, None, gr.update(visible=False),
            own_board(maps_board.empty_board(EMPTY_BOARD)))


def choose_cell(state, event: gr.SelectData = None):
    """A click on a table cell: its "<model>|<column>" (checked when listed)."""
    value = getattr(event, "value", None)
    if state is None or not isinstance(value, str) or "|" not in value:
        return state
    model, column = value.split("|", 1)
    return {**state, "cell": [model, column], "pair": None}


def list_units(access: Access, jobs, state, order, versus, keep, count):
    """(state, units list, scatter, matrix, note, folder box) for the chosen cell and controls."""
    from explorer.views import result_plots
    from explorer.views.result_units import pick_units

    if not state or not state.get("cell"):
        return state, html.EMPTY_UNITS, None, gr.update(visible=False), gr.update(), gr.update()
    try:
        results = open_source(access, jobs, state["source"])
        cell = results.cell(*state["cell"])
        versus = versus or None
        n = max(1, min(MOST_UNITS, int(count or DEFAULT_COUNT)))
        if order == "fooling":
            picked, fooled = fooling_first(results, cell, versus, keep, n)
        else:
            picked, fooled = pick_units(results, cell, order, None if state.get("pair") else n, versus,
                                        keep if versus else "all"), None
        state = {**state, "pair_new": False}
        if state.get("pair"):
            true, taken = (int(v) for v in state["pair"].split("|"))
            picked = picked[(picked["label"] == true) & (picked["predicted"] == taken)].iloc[:n]
        note, folder_box = f"{len(picked)} units of {cell.model} · {cell.column}, {order}", gr.update()
        if fooled is not None:
            note += f" ({fooled} of the split's items fool every model of these results: listed first)"
        try:
            picked = describe(results, picked, checked_folder(access, results, state.get("folder")))
        except DatasetMoved as error:
            note, folder_box = MOVED_NOTE.format(error=error), gr.update(visible=True)
        scatter = result_plots.scatter(results, cell, versus) if versus else None
        matrix = gr.update(visible=False)
        if results.family == ZEROSHOT:
            matrix = gr.update(value=result_plots.confusion(results, cell, _classnames(access, results, state)),
                               visible=True)
    except Exception as error:  # noqa: BLE001
        return state, html.units_html(None, None, None, note=explain(error)), None, gr.update(visible=False), \
            explain(error), gr.update()
    return (state, html.units_html(results, cell, picked, versus, note), scatter, matrix, note, folder_box)


def fooling_first(results, cell, versus, keep, n):
    """Negatives: the cell's items fooling every model first (the least fooled of them by its best margin), then
    the rest worst first; (the first ``n``, how many fool every model)."""
    import pandas as pd

    from explorer.views.result_cells import NEGATIVES
    from explorer.views.result_units import fooled_by_every_model, pick_units

    if results.family != NEGATIVES:
        raise InputError("'fooling every model first' is an order of hard-negative results")
    worst = pick_units(results, cell, "worst", None, versus, keep if versus else "all")
    fooled = fooled_by_every_model(results, cell.dataset, cell.kind)["unit_id"].tolist()
    rank = {unit: i for i, unit in enumerate(fooled)}
    first = worst[worst["unit_id"].isin(rank)].copy()
    first = first.iloc[sorted(range(len(first)), key=lambda i: rank[first["unit_id"].iloc[i]])]
    rest = worst[~worst["unit_id"].isin(rank)]
    return pd.concat([first, rest], ignore_index=True).iloc[:n], len(fooled)


def _classnames(access, results, state):
    try:
        return open_dataset(results, next(iter(results.parts)), checked_folder(access, results, state.get("folder"))
                            ).classnames
    except Exception:  # noqa: BLE001 - a moved dataset: the matrix names classes by number
        return None


def choose_unit(access: Access, jobs, load, cache, state, versus, event: gr.SelectData = None):
    """A click on a unit row, a scatter point or a confusion cell: (state, board, note, folder box)."""
    value = getattr(event, "value", None)
    if not state or not state.get("cell") or not isinstance(value, str):
        return state, gr.update(), gr.update(), gr.update()
    if value.startswith("matrix:"):
        return {**state, "pair": value[len("matrix:"):][:40], "pair_new": True}, gr.update(), gr.update(), gr.update()
    try:
        results = open_source(access, jobs, state["source"])
        cell = results.cell(*state["cell"])
        models = [cell.model] + ([versus] if versus and versus != cell.model else [])
        rows = [results.rows_of(cell.dataset, model, cell.kind) for model in models]
        rows = [frame[frame["unit_id"] == value] for frame in rows]
        rows = [frame for frame in rows if not frame.empty]
        if not rows:
            return state, gr.update(), f"no unit {value[:80]!r} in this cell", gr.update()
        folder = checked_folder(access, results, state.get("folder"))
        board = draw(results, cell, rows, models, load, cache, folder)
    except DatasetMoved as error:
        return state, gr.update(), MOVED_NOTE.format(error=error), gr.update(visible=True)
    except Exception as error:  # noqa: BLE001
        return state, gr.update(), explain(error), gr.update()
    return {**state, "unit": value, "pair_new": False}, board, f"Unit {value} of {cell.column}", gr.update()


def draw(results, cell, rows, models, load, cache, folder) -> str:
    """The board of a grounding unit (the models' maps, masks, truth, boxes), or another unit's detail."""
    import pandas as pd

    described = describe(results, pd.concat(rows, ignore_index=True), folder).to_dict(orient="records")
    if results.family != GROUNDING:
        above = gallery(open_dataset(results, cell.dataset, folder), described[0]) \
            if results.family == RETRIEVAL else None
        return html.detail_html(results, cell, described, above)
    from explorer.views.result_drawing import draw_unit

    if described[0].get("missing"):
        return html.detail_html(results, cell, described[:1])
    drawing = draw_unit(results, described[0], models, load, folder, cache)
    lines = [f'<div class="rv-line">{html.escape(note)}</div>' for note in drawing.notes]
    if drawing.boxes is not None:
        picks = " · ".join(f"{html.escape(name)}: picked box IoU {iou:.2f} "
                           f"({'right' if is_hit(iou) else 'wrong'})" for name, iou in drawing.picks.items())
        lines.append(f'<div class="rv-line" data-box-picks><img alt="the true box (green) and the picked boxes (red)" '
                     f'src="{html.data_uri(drawing.boxes)}" style="max-width:240px;display:block">'
                     f'true box green, picked red · {picks}</div>')
    return own_board(maps_board.board_html(drawing.view, ViewSettings())) + "".join(lines)


def export_units(access: Access, jobs, load, cache, state, order, versus, keep, count):
    """The listed units as the CLI writes them: a figure (PDF), its settings (replayed by ``explorer results
    examples --replay``) and the list JSON, in the page's export folder."""
    import json
    import time

    from explorer.core.files import write_text_atomic
    from explorer.views import result_figure as rf
    from explorer.views.result_units import units_document

    if not state or not state.get("cell"):
        return None, "Click a number of the table first."
    try:
        results = open_source(access, jobs, state["source"])
        cell = results.cell(*state["cell"])
        n = max(1, min(24, int(count or rf.DEFAULT_N)))
        settings = rf.ExamplesSettings(results=str(results.path), model=cell.model, versus=versus or None,
                                       column=cell.column, order=order if versus or order in ("worst", "best")
                                       else "worst", n=n, keep=keep if versus else "all",
                                       data=checked_folder(access, results, state.get("folder")))
        folder = export_root() / "results" / time.strftime("%Y%m%d-%H%M%S")
        written = rf.write_examples(settings, load, folder / "examples.pdf", results, cache)
        _, _, picked = rf.picked_units(settings, results)
        listing = folder / "examples-units.json"
        write_text_atomic(listing, json.dumps(units_document(results, cell, picked, settings.versus), indent=2))
    except DatasetMoved as error:
        return None, MOVED_NOTE.format(error=error)
    except Exception as error:  # noqa: BLE001
        return None, explain(error)
    return [str(p) for p in [*written, listing]], f"Wrote {len(written) + 1} files to {folder.name}."


def build(zoo, access: Access, jobs=None, cache=None) -> None:
    """The tab (owner mode only: the app builds it only for the owner's page)."""
    access.owner_only("the Results tab")
    load = zoo.load
    state = gr.State(None)
    with gr.Column(elem_id="results-view"):
        gr.Markdown("Open an evaluation's results: each number of its table lists the units behind it, worst "
                    "first; a click on a unit draws it. The CLI twin: `explorer results examples`.")
        with gr.Row():
            source = gr.Textbox(label="Results JSON (eval, eval-grounding, eval-negatives, eval-zeroshot, "
                                      "eval-retrieval), or an evaluation / sweep id", elem_id="results-source", scale=5)
            open_button = gr.Button("Open", variant="primary", elem_id="results-open", scale=1)
        folder = gr.Textbox(label="The dataset's folder (it moved since the evaluation)", visible=False,
                            elem_id="results-folder")
        note = gr.Markdown(elem_id="results-note")
        table = gr.HTML(html.EMPTY_TABLE, elem_id="results-table", css_template=html.CSS, js_on_load=html.JS_TABLE,
                        apply_default_css=False)
        with gr.Row():
            order = gr.Dropdown(ORDERS, value="worst", label="Order", elem_id="results-order")
            versus = gr.Dropdown([""], value="", label="Versus (model B)", elem_id="results-versus")
            keep = gr.Dropdown(FILTERS, value="all", label="Show (with B)", elem_id="results-filter")
            count = gr.Number(DEFAULT_COUNT, precision=0, minimum=1, maximum=MOST_UNITS, label="Units",
                              elem_id="results-count")
        with gr.Row(equal_height=False):  # the list beside the unit it opens: a click shows without scrolling
            with gr.Column(scale=1):
                units = gr.HTML(html.EMPTY_UNITS, elem_id="results-units", css_template=html.CSS,
                                js_on_load=html.JS_UNITS, apply_default_css=False)
                scatter = gr.Plot(elem_id="results-scatter", show_label=False)
                matrix = gr.Plot(elem_id="results-matrix", show_label=False, visible=False)
            with gr.Column(scale=1):
                unit_note = gr.Markdown(elem_id="results-unit-note")
                board = gr.HTML(own_board(maps_board.empty_board(EMPTY_BOARD)), elem_id="results-board",
                                css_template=maps_board.CSS + html.CSS, apply_default_css=False)
        with gr.Row():
            export = gr.Button("Export these units: figure, settings, list", elem_id="results-export")
            files = gr.File(label="Exported", file_count="multiple", elem_id="results-files")
    controls = [order, versus, keep, count]
    listing = dict(fn=lambda *v: list_units(access, jobs, *v), inputs=[state, *controls],
                   outputs=[state, units, scatter, matrix, unit_note, folder])
    opened = dict(fn=lambda *v: open_table(access, jobs, *v), inputs=[source, folder],
                  outputs=[state, table, note, folder, versus, units, scatter, matrix, board])
    open_button.click(**opened)
    source.submit(**opened)
    folder.submit(lambda s, f: None if s is None else {**s, "folder": (f or "").strip() or None},
                  inputs=[state, folder], outputs=state).then(**listing)
    table.select(choose_cell, inputs=state, outputs=state).then(**listing)
    for control in controls:
        control.change(**listing)
    # A unit opens on the board; a confusion-matrix cell ("matrix:<true>|<predicted>") lists its pictures instead.
    def on_unit(current, second, event: gr.SelectData):  # Gradio passes the event by this annotation
        return choose_unit(access, jobs, load, cache, current, second, event)

    units.select(on_unit, inputs=[state, versus], outputs=[state, board, unit_note, folder], **HEAVY).then(
        lambda s, *v: list_units(access, jobs, s, *v) if s and s.get("pair_new") else (s, *[gr.update()] * 5),
        inputs=[state, *controls], outputs=[state, units, scatter, matrix, unit_note, folder])
    export.click(lambda *v: export_units(access, jobs, load, cache, *v), inputs=[state, *controls],
                 outputs=[files, unit_note], **HEAVY)


__all__ = ["build", "choose_cell", "choose_unit", "list_units", "open_source", "open_table"]
