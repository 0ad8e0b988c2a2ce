"""The Jobs tab's evaluation part: submit a sweep (models x datasets), and the Compare board of any
sweeps' results: a pivot table, Recall@K curves per dataset, a bar chart per metric, filtered by dataset
and metric, exported as CSV, LaTeX or Markdown.

Owner mode only (built inside the Jobs tab). Typed model files and dataset folders go through
``access.path``; pickled checkpoints are never allowed from the page. The computing is in
``explorer.views`` (``compare_view``, ``results_table``) and ``explorer.jobs``; this module wires it.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import gradio as gr
import pandas as pd

from explorer.core.errors import InputError
from explorer.jobs import JobManager
from explorer.evaluation.tasks import BOTH, sweep_help, takers, task_names
from explorer.jobs.sweeps import children
from explorer.serve.access import Access
from explorer.serve.messages import explain
from explorer.views import compare_view, results_table
from explorer.views import jobs_view as view
from explorer.zoo import Zoo

TASKS = [*task_names(), BOTH]  # every registered evaluation task (retrieval, grounding, refcoco...)
FORM_OPTIONS = view.FORM_OPTIONS  # the form's fields: every sweep task's declared options, but unpickling
EXPORT_SUFFIX = {"csv": ".csv", "latex": ".tex", "markdown": ".md"}


# ---- submitting a sweep -------------------------------------------------------------------------------


def lines(text) -> list[str]:
    return [line.strip() for line in (text if isinstance(text, str) else "").splitlines() if line.strip()]


def checked_models(access: Access, zoo: Zoo, picked, typed) -> list[str]:
    """Zoo names from the list (unknown ones refused), then typed weights files or manifests under an allowed root."""
    names = {m.name for m in zoo.manifests()}
    picked = [str(p) for p in (picked or []) if str(p).strip()] if isinstance(picked, list) else []
    unknown = [p for p in picked if p not in names]
    if unknown:
        raise access.refuse(f"no zoo model named {', '.join(unknown)}")
    return picked + [str(access.path(line, "model file")) for line in lines(typed)]


def submit_sweep(access: Access, jobs: JobManager, zoo: Zoo, picked, typed, datasets, task, devices, *values):
    """The Submit sweep button: a message (nothing is recorded when refused). ``values``: the fields of
    ``FORM_OPTIONS``, in order."""
    try:
        access.owner_only("evaluation sweeps")
        models = checked_models(access, zoo, picked, typed)
        folders = [str(access.path(line, "dataset folder")) for line in lines(datasets)]
        if task not in TASKS:
            raise InputError(f"the task is one of {', '.join(TASKS)}")
        options = view.form_options(access, values)
        sweep = jobs.submit_eval(models, folders, task=task, options=options, **view.device_request(devices))
    except Exception as error:  # noqa: BLE001 - the page says what is wrong and keeps serving
        return explain(error)
    return (f"Submitted sweep **{sweep.name}** (`{sweep.id}`): {len(children(jobs.store, sweep.id))} "
            f"evaluation(s), {sweep.status}. Pick it under Compare when they are done.")


def option_field(option):
    """A form field for a declared option, shown while the task picked reads it."""
    label, visible = sweep_help(option.name), "retrieval" in takers(option.name)
    elem_id = "sweep-" + option.name.replace("_", "-")
    if option.kind == "flag":
        return gr.Checkbox(bool(option.default), label=label, visible=visible, elem_id=elem_id)
    if option.choices:
        return gr.Dropdown(list(option.choices), value=None, label=label, visible=visible, elem_id=elem_id)
    if option.kind in ("int", "float"):
        return gr.Number(None, precision=0 if option.kind == "int" else None, minimum=option.minimum, label=label,
                         visible=visible, elem_id=elem_id)
    spaced = " (several: spaces between)" if option.kind in ("names", "ints") else ""
    return gr.Textbox(label=label + spaced, visible=visible, elem_id=elem_id)


def shown_fields(task: str) -> list:
    """Each field shown while ``task`` (or both of ``both``) reads its option."""
    asked = ["retrieval", "grounding"] if task == BOTH else [task]
    return [gr.update(visible=any(t in takers(option.name) for t in asked)) for option in FORM_OPTIONS]


# ---- the board ----------------------------------------------------------------------------------------


def run_choices(jobs: JobManager, current):
    try:
        choices = compare_view.comparable_runs(jobs.list())
    except Exception:  # noqa: BLE001 - the store is unreadable: nothing to pick
        choices = []
    ids = {value for _, value in choices}
    keep = [c for c in (current or []) if c in ids] if isinstance(current, list) else []
    return gr.update(choices=choices, value=keep)


def frame_of(jobs: JobManager, run_ids):
    ids = [jobs.get(str(run_id)).id for run_id in (run_ids or [])] if isinstance(run_ids, list) else []
    return results_table.results_frame(jobs.store.results(ids)) if ids else results_table.results_frame([])


def show_board(jobs: JobManager, run_ids, datasets, metrics):
    """[note, pivot, curves, bars, dataset filter, metric filter] for the chosen runs and filters."""
    datasets = [str(d) for d in datasets] if isinstance(datasets, list) else []
    metrics = [str(m) for m in metrics] if isinstance(metrics, list) else []
    try:
        frame = frame_of(jobs, run_ids)
        table, curves, bars = compare_view.board(frame, datasets, metrics)
    except Exception as error:  # noqa: BLE001
        empty = compare_view.recall_curves(results_table.results_frame([]))
        return [explain(error), pd.DataFrame(columns=["model"]), empty, empty, gr.skip(), gr.skip()]
    all_sets, all_metrics = results_table.choices(frame)
    headers, rows = compare_view.pivot_rows(table)
    note = (f"{len(frame)} result(s): {len(set(frame['model'])) if len(frame) else 0} model(s) x "
            f"{len(all_sets)} dataset(s). R@K in %; the best of each column in bold in the exports.")
    return [note, pd.DataFrame(rows, columns=headers), curves, bars,
            gr.update(choices=all_sets, value=[d for d in datasets if d in all_sets]),
            gr.update(choices=all_metrics, value=[m for m in metrics if m in all_metrics])]


def export_board(jobs: JobManager, run_ids, datasets, metrics, fmt):
    """(note, file) of the pivot as ``fmt``: written to a fresh temporary file the page offers for download."""
    try:
        if fmt not in results_table.FORMATS:
            raise InputError(f"the format is one of {', '.join(results_table.FORMATS)}")
        frame = frame_of(jobs, run_ids)
        datasets = [str(d) for d in datasets] if isinstance(datasets, list) else []
        metrics = [str(m) for m in metrics] if isinstance(metrics, list) else []
        table = compare_view.board(frame, datasets, metrics)[0]
        text = results_table.export(table, fmt)
    except Exception as error:  # noqa: BLE001
        return explain(error), None
    path = Path(tempfile.mkdtemp(prefix="explorer-results-")) / f"results{EXPORT_SUFFIX[fmt]}"
    path.write_text(text, encoding="utf-8")
    return f"Exported {len(table)} model(s) x {len(table.columns)} column(s) as {fmt}.", str(path)


# ---- the section ----------------------------------------------------------------------------------------


def build(jobs: JobManager, zoo: Zoo, access: Access):
    """The sweep form and the Compare board (inside the Jobs tab); returns what to run on page load."""
    access.owner_only("evaluation sweeps")
    with gr.Accordion("Evaluation sweep: many models x many datasets", open=False):
        with gr.Row():
            picked = gr.Dropdown([m.name for m in zoo.manifests()], multiselect=True, label="Models (zoo)",
                                 elem_id="sweep-models")
            typed = gr.Textbox(label="More models: weights files or manifests, one a line", lines=2,
                               elem_id="sweep-model-files")
            datasets = gr.Textbox(label="Datasets: folders, one a line (any layout of the task)", lines=2,
                                  elem_id="sweep-datasets")
        with gr.Row():
            task = gr.Radio(TASKS, value="retrieval", label="Task", elem_id="sweep-task")
            devices = gr.Dropdown(view.device_choices(jobs), value=0, label="Devices (each evaluation)",
                                  elem_id="sweep-devices")
        with gr.Group(elem_id="sweep-options"):  # the task's declared options (explorer.evaluation.tasks)
            fields = [option_field(option) for option in FORM_OPTIONS]
        submit = gr.Button("Submit sweep", variant="primary", elem_id="sweep-submit")
        submit_note = gr.Markdown(elem_id="sweep-note")
    with gr.Accordion("Compare: results of sweeps", open=False):
        with gr.Row():
            runs = gr.Dropdown([], multiselect=True, label="Sweeps and evaluations", scale=3, elem_id="compare-runs")
            refresh = gr.Button("Refresh list", scale=1, elem_id="compare-refresh")
        with gr.Row():
            set_filter = gr.Dropdown([], multiselect=True, label="Datasets (none: all)", elem_id="compare-datasets")
            metric_filter = gr.Dropdown([], multiselect=True, label="Metrics, in order (none: R@1/5/10 both ways)",
                                        elem_id="compare-metrics")
        note = gr.Markdown(elem_id="compare-note")
        pivot = gr.Dataframe(headers=["model"], interactive=False, wrap=True, elem_id="compare-pivot",
                             label="Models x (dataset, metric)")
        curves = gr.Plot(label="Recall@K per dataset", elem_id="compare-curves")
        bars = gr.Plot(label="Each metric across models", elem_id="compare-bars")
        with gr.Row():
            fmt = gr.Radio(list(results_table.FORMATS), value="latex", label="Export as", elem_id="compare-format")
            export = gr.Button("Export table", elem_id="compare-export")
        export_note = gr.Markdown(elem_id="compare-export-note")
        exported = gr.File(label="Table", interactive=False, elem_id="compare-file")
    task.change(shown_fields, inputs=task, outputs=fields, api_name=False)
    submit.click(lambda *values: submit_sweep(access, jobs, zoo, *values), api_name="jobs_submit_eval",
                 inputs=[picked, typed, datasets, task, devices, *fields], outputs=submit_note)
    refresh.click(lambda current: run_choices(jobs, current), inputs=runs, outputs=runs, api_name="compare_runs")
    shown = [note, pivot, curves, bars, set_filter, metric_filter]
    for control in (runs, set_filter, metric_filter):
        control.input(lambda *values: show_board(jobs, *values), inputs=[runs, set_filter, metric_filter],
                      outputs=shown, api_name=False)
    export.click(lambda *values: export_board(jobs, *values), inputs=[runs, set_filter, metric_filter, fmt],
                 outputs=[export_note, exported], api_name="compare_export")
    return [dict(fn=lambda current: run_choices(jobs, current), inputs=runs, outputs=runs)]


__all__ = ["build", "export_board", "show_board", "submit_sweep"]
