"""The Grounding tab's dataset picker: open a picture of a real grounding dataset (DCI, PNG, Flickr30k
Entities, IIW-400) with its units as the caption and its truth registered, by number or from a model's
worst units in an ``explorer eval-grounding`` results JSON.

Every handler checks what it is given (``explorer.serve.access``): a typed folder or results file must lie
under an allowed root (a public page takes none); a picked dataset must be one the page offers; a
results file names its dataset's folder, which is checked the same way before it is read.
"""

from __future__ import annotations

from pathlib import Path

import gradio as gr

from explorer.core import paths
from explorer.serve.budget import HEAVY
from explorer.serve.access import Access
from explorer.serve.messages import explain
from explorer.ui.view_controls import Inputs, export_root
from explorer.views import grounding_dataset_view as view

WORST_COLUMNS = ["#", "picture", "kind", "auroc", "pointing", "text"]


def dataset_folder(access: Access, choice, folder) -> Path:
    """The typed folder (under an allowed root) or the picked one (among those offered)."""
    typed = folder.strip() if isinstance(folder, str) else ""
    if typed:
        return access.path(typed, "dataset folder")
    offered = view.offered_folder(str(choice)) if choice else None
    if offered is None:
        raise access.refuse(f"{str(choice)[:200]!r} is not one of the grounding datasets this page offers")
    return offered


def open_picture(access: Access, choice, folder, split, units, number):
    """(picture file, caption, truth preview, note) for the tab's inputs."""
    try:
        dataset = view.open_set(dataset_folder(access, choice, folder), _text(split), _text(units))
        picture, caption, preview, lines = view.open_picture(dataset, number, export_root() / "grounding-picks",
                                                             paths.example_truth_dir())
    except Exception as error:  # noqa: BLE001 - the page says what is wrong and keeps serving
        return gr.update(), gr.update(), None, explain(error)
    note = "\n".join([lines[0], *lines[1:12], *(["…"] if len(lines) > 12 else [])])
    return picture, caption, preview, note + "\n\nDraw the maps: each unit is scored against its truth."


def show_worst(access: Access, results_file, model, kind):
    """(rows, dataset folder, split, units, note) of a model's worst units in a results JSON."""
    try:
        path = access.path(_text(results_file), "results file")
        dataset, rows = view.worst_units(path, _text(model), _text(kind) or None)
        access.path(dataset["root"], "dataset folder")  # the results name their dataset: it must be readable too
    except Exception as error:  # noqa: BLE001
        return [], gr.update(), gr.update(), gr.update(), explain(error)
    shown = [[r[0], r[1], r[2], _round(r[3]), r[4], r[5]] for r in rows]
    return (shown, dataset["root"], dataset.get("split") or "", dataset.get("units") or "",
            f"{len(rows)} worst units of {_text(model)}: select a row to open its picture.")


def pick_row(rows, evt: gr.SelectData):
    """The picture number of the selected worst unit."""
    try:
        return int(rows.iloc[evt.index[0], 0]) if hasattr(rows, "iloc") else int(rows[evt.index[0]][0])
    except Exception:  # noqa: BLE001 - a stale selection changes nothing
        return gr.update()


def _text(value) -> str:
    return value.strip() if isinstance(value, str) else ""


def _round(value):
    return None if value is None else round(float(value), 3)


def build(access: Access, inputs: Inputs) -> None:
    """The picker, in an accordion of the tab's left column; it fills ``inputs.image`` and ``inputs.caption``."""
    with gr.Accordion("Open a picture of a grounding dataset (DCI, PNG, Flickr30k Entities, IIW)", open=False):
        choice = gr.Dropdown(view.dataset_choices(), label="Dataset", elem_id="grounding-set")
        folder = gr.Textbox(label="…or a dataset folder on this machine", elem_id="grounding-set-folder",
                            visible=not access.public)
        with gr.Row():
            split = gr.Textbox(label="Split (empty: the layout's)", elem_id="grounding-set-split")
            units = gr.Dropdown(["", "sentence", "phrase"], value="", label="Units", elem_id="grounding-set-units")
            number = gr.Number(value=0, precision=0, label="Picture number", elem_id="grounding-set-number")
        open_button = gr.Button("Open picture", elem_id="grounding-set-open")
        preview = gr.Image(label="Truth", interactive=False, height=200, elem_id="grounding-set-truth",
                           alt_text="The dataset picture with its truth outlined")
        note = gr.Markdown(elem_id="grounding-set-note")
        with gr.Group(visible=not access.public):
            results = gr.Textbox(label="Results JSON of explorer eval-grounding", elem_id="grounding-set-results")
            with gr.Row():
                model = gr.Textbox(label="Model", elem_id="grounding-set-model")
                kind = gr.Textbox(label="Kind (empty: all)", elem_id="grounding-set-kind")
            worst_button = gr.Button("Worst units for this model", elem_id="grounding-set-worst")
            worst = gr.Dataframe(headers=WORST_COLUMNS, interactive=False, elem_id="grounding-set-worst-table")
    open_button.click(lambda *v: open_picture(access, *v), inputs=[choice, folder, split, units, number],
                      outputs=[inputs.image, inputs.caption, preview, note], **HEAVY)
    worst_button.click(lambda *v: show_worst(access, *v), inputs=[results, model, kind],
                       outputs=[worst, folder, split, units, note])
    worst.select(pick_row, inputs=worst, outputs=number).then(
        lambda *v: open_picture(access, *v), inputs=[choice, folder, split, units, number],
        outputs=[inputs.image, inputs.caption, preview, note], **HEAVY)
