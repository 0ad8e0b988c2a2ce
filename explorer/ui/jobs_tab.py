"""Jobs tab: submit a training run, watch every run (a table and the selected run's curves, log and
record, refreshed by a timer), cancel, resume, delete (asked first), and open a finished one in the
Grounding tab.

The web process never trains: each run is its own process (``explorer.jobs``), so the page may be
closed or the app restarted and the runs go on; the timer reads the run store again. The computing is
in ``explorer.views.jobs_view``; this module wires it.
"""

from __future__ import annotations

import gradio as gr

from explorer.core.errors import InputError
from explorer.jobs import JobManager, method_defaults
from explorer.jobs.records import JobError
from explorer.ui import compare_tab, grounding_tab
from explorer.serve.access import PICKLE_ADVICE, Access
from explorer.serve.messages import explain
from explorer.ui.view_controls import Inputs, as_list
from explorer.views import jobs_view as view
from explorer.views.settings import MAX_MODELS
from explorer.zoo import Zoo

POLL_SECONDS = 2.0
JOBS_TAB = "Jobs"  # the tab's label, as the app names it
SIZES = ["tiny", "base"]
# Each column as wide as its longest word (13 px monospace and 5 px padding, app.PAGE_CSS) in two thirds of a
# 1400 px page: "f6dcc1d0", "longclip", "cancelled", "progress", "200/200", "2025-01-01", "duration", "0.1234",
# "checkpoint"; the name takes the rest. Narrower, the page broke words ("statu s", "cance lled").
TABLE_WIDTHS = ["9.5%", "12.5%", "9.5%", "10.5%", "9.5%", "8.5%", "11.5%", "9.5%", "7.5%", "11.5%"]
PICK_A_RUN = "Select a run in the table (or type its id and press Enter)."


# ---- the form ----------------------------------------------------------------------------------------


def on_method(method):
    """(defaults table, batch size, note) of the method picked."""
    try:
        defaults = method_defaults(method)
        return view.defaults_rows(method), defaults.values["batch_size"], view.defaults_note(method)
    except Exception as error:  # noqa: BLE001 - the page says what is wrong and keeps serving
        return [], None, explain(error)


def submit(access: Access, jobs: JobManager, zoo: Zoo, method, data, init, max_steps, name, devices, size,
           batch_size, overrides):
    """The Submit button: (message, the new run's id to select). Nothing is recorded when it is refused."""
    try:
        access.owner_only("training")
        form = view.Form(method=method, data=checked_data(access, data), init=checked_init(access, zoo, init),
                         max_steps=max_steps, name=name or "", gpus=devices, size=size or view.DEFAULT_SIZE,
                         batch_size=batch_size, overrides=checked_overrides(access, overrides))
        run = view.submit_form(jobs, form)
    except Exception as error:  # noqa: BLE001
        return explain(error), gr.update()
    notes = "".join(f"\n- {note}" for note in run.notes)
    return f"Submitted **{run.name}** (`{run.id}`): {run.status}.{notes}", run.id


def checked_data(access: Access, data) -> str:
    """The data folder: empty (the training world), the training world, or a folder under an allowed root."""
    typed = data.strip() if isinstance(data, str) else ""
    if not typed or typed == str(view.training_world_root()):
        return typed
    return str(access.path(typed, "data folder"))


def checked_init(access: Access, zoo: Zoo, init) -> str:
    """Where a run starts: from scratch, a zoo model, or a weights file under an allowed root."""
    typed = init.strip() if isinstance(init, str) else ""
    names = {m.name for m in zoo.manifests()}
    if not typed or typed in names:
        return typed or view.FROM_SCRATCH
    if "/" not in typed and "\\" not in typed and not typed.startswith("~"):
        raise JobError(f"init {typed}: no zoo model has that name; pick one from the list (known: "
                       f"{', '.join(sorted(names)) or 'none'}), or give a weights file under an allowed folder")
    return str(access.path(typed, "init checkpoint"))


def checked_overrides(access: Access, overrides) -> str:
    """The override lines, less the one the page never takes: unpickling an init file."""
    text = overrides if isinstance(overrides, str) else ""
    if "allow_pickle" in view.parse_overrides(text):
        raise access.refuse("allow_pickle cannot be set from the page. " + PICKLE_ADVICE.format(path="PATH")
                            + " Then start the run from that zoo model.")
    return text


def refresh_inits(zoo: Zoo, current):
    """The init list as the zoo is now (a finished run joins it); the choice stays if still there."""
    choices = view.init_choices(zoo.manifests())
    names = {value for _, value in choices}
    return gr.update(choices=choices, value=current if current in names else view.FROM_SCRATCH)


# ---- watching ----------------------------------------------------------------------------------------


def snapshot(jobs: JobManager, selected, seen, force: bool = True) -> list:
    """[table, details, log, curves, seen, zoo stamp]: every run (reconciled first), and the selected
    one. On a timer tick (``force`` False) what has not changed is not sent again (``gr.skip``)."""
    seen, selected = dict(seen or {}), (selected or "").strip()
    try:
        runs = jobs.list()
    except Exception as error:  # noqa: BLE001 - e.g. the store's disk went away: say so, keep serving
        return [gr.skip(), explain(error), gr.skip(), gr.skip(), seen, gr.skip()]
    rows = view.run_rows(runs)
    table = rows if force or rows != seen.get("rows") else gr.skip()
    seen["rows"] = rows
    signature = [selected, *view.detail_signature(jobs, selected)]
    if not force and signature == seen.get("detail"):
        return [table, gr.skip(), gr.skip(), gr.skip(), seen, view.zoo_stamp(runs)]
    seen["detail"] = signature
    return [table, *run_view(jobs, selected), seen, view.zoo_stamp(runs)]


def run_view(jobs: JobManager, selected) -> list:
    """(details, log, curves) of the selected run."""
    run_id = (selected or "").strip()
    if not run_id:
        return [PICK_A_RUN, "", view.curves_figure([])]
    try:
        run = jobs.get(run_id)
        return [view.details_markdown(run, jobs.queue_position(run.id)), view.log_text(jobs, run.id),
                view.curves_figure(jobs.metrics(run.id), f"{run.name} ({run.method}), {run.status}")]
    except Exception as error:  # noqa: BLE001
        return [explain(error), "", view.curves_figure([])]


def pick_row(evt: gr.SelectData):
    """A table cell selected: its run's id (the first column of its row)."""
    row = evt.row_value or []
    return str(row[0]) if row and row[0] else gr.update()


# ---- acting on a run ---------------------------------------------------------------------------------


def cancel(jobs: JobManager, selected) -> str:
    """SIGTERM now; a thread of the app sends SIGKILL if the run outlives its grace (the request returns)."""
    try:
        run = jobs.cancel(required(selected), wait=False)
    except Exception as error:  # noqa: BLE001
        return explain(error)
    if run.status == "cancelled":
        return f"Cancelled **{run.name}** (`{run.id}`) before it started."
    return (f"Stopping **{run.name}** (`{run.id}`): it saves a checkpoint at the end of its current step and exits "
            f"(killed after {jobs.grace_s:g} s otherwise). Resume continues from that checkpoint.")


def resume(jobs: JobManager, selected) -> str:
    try:
        run = jobs.resume(required(selected))
    except Exception as error:  # noqa: BLE001
        return explain(error)
    return f"Resumed **{run.name}** (`{run.id}`): {run.status}; {run.notes[-1] if run.notes else ''}"


def ask_delete(jobs: JobManager, selected, delete_checkpoint):
    """The Delete button only asks: (question, confirm row, what the answer will delete)."""
    try:
        run = jobs.get(required(selected))
        question = view.delete_question(run, bool(delete_checkpoint))
    except Exception as error:  # noqa: BLE001
        return explain(error), gr.update(visible=False), None
    return f"**{question}**", gr.update(visible=True), {"id": run.id, "delete_checkpoint": bool(delete_checkpoint)}


def confirm_delete(jobs: JobManager, pending):
    """Delete exactly what was asked (not what the checkbox says now): (message, confirm row, pending, selected)."""
    hidden = gr.update(visible=False)
    if not pending:
        return "Nothing to delete: press Delete first.", hidden, None, gr.update()
    try:
        run = jobs.get(pending["id"])
        report = jobs.delete(run.id, keep_checkpoint=not pending["delete_checkpoint"])
    except Exception as error:  # noqa: BLE001
        return explain(error), hidden, None, gr.update()
    return view.delete_report(report, run).replace("\n", "\n\n"), hidden, None, ""


def keep(pending):
    run_id = (pending or {}).get("id", "")
    return f"Kept run `{run_id}`: nothing was deleted.", gr.update(visible=False), None


def open_in_grounding(jobs: JobManager, zoo: Zoo, selected, current):
    """(Grounding models, tabs, message): the finished run's model joins the Grounding tab's list (first),
    and the page switches there."""
    try:
        name = view.grounding_model(jobs.get(required(selected)))
    except Exception as error:  # noqa: BLE001
        return gr.update(), gr.update(), explain(error)
    models = [name, *[m for m in as_list(current) if m != name]][:MAX_MODELS]
    # The choices are read again here: the run joined the zoo after the page was built.
    return (gr.update(choices=grounding_tab.model_choices(zoo), value=models), gr.Tabs(selected="grounding"),
            f"Opened **{name}** in the Grounding tab.")


def required(selected) -> str:
    run_id = (selected or "").strip()
    if not run_id:
        raise InputError(PICK_A_RUN)
    return run_id


def ticks_while_shown(event: gr.SelectData) -> gr.Timer:
    """The refresh timer on while the Jobs tab is the one shown, off once another tab is picked. A tab
    rendered once stays rendered, so its timer ticked on behind every other tab: a server event every
    ``POLL_SECONDS`` per open page, and a quarter of a core in Chromium redrawing the page's status for it
    (measured on the 2-core machine, 0.76 CPU s every 3 s at rest after a visit to the Jobs tab)."""
    return gr.Timer(active=event.value == JOBS_TAB)


# ---- the tab -----------------------------------------------------------------------------------------


def build(jobs: JobManager, zoo: Zoo, access: Access, grounding: Inputs | None = None, tabs: gr.Tabs | None = None):
    """The tab; returns (its init list, the events after which the zoo may have changed, what to run on page
    load). The app refreshes the init list with the zoo, and every model list after those events. Owner
    mode only: a public page has no Jobs tab (the app does not build it)."""
    access.owner_only("the Jobs tab")
    gr.Markdown("Train any method in the background: each run is a process of its own, recorded on disk, so it "
                "goes on when this page or the app closes. A finished run is evaluated on held-out data and joins "
                "the zoo. The CLI twin: `explorer jobs submit | list | show | logs | cancel | resume | delete`.")
    method_note, method_batch = view.defaults_note(view.DEFAULT_METHOD), method_defaults(view.DEFAULT_METHOD)
    with gr.Row(equal_height=False):
        with gr.Column(scale=1):
            method = gr.Dropdown(jobs.methods(), value=view.DEFAULT_METHOD, label="Method", elem_id="jobs-method")
            data = gr.Textbox(str(view.training_world_root()), label="Data folder (default: a small synthetic world, "
                              "written on the first submit; or any retrieval layout)", elem_id="jobs-data")
            init = gr.Dropdown(view.init_choices(zoo.manifests()), value=view.FROM_SCRATCH, label="Start from",
                               elem_id="jobs-init")
            with gr.Row():
                max_steps = gr.Number(view.DEFAULT_MAX_STEPS, precision=0, minimum=1, elem_id="jobs-max-steps",
                                      label="Max steps (empty: the method's epochs)")
                batch_size = gr.Number(method_batch.values["batch_size"], precision=0, minimum=1,
                                       label="Batch size (global; the paper's)", elem_id="jobs-batch-size")
            with gr.Row():
                size = gr.Radio(SIZES, value=view.DEFAULT_SIZE, label="Size (from scratch)", elem_id="jobs-size")
                devices = gr.Dropdown(view.device_choices(jobs), value=0, label="Devices", elem_id="jobs-devices")
            name = gr.Textbox(label="Name (optional; its zoo name when done)", elem_id="jobs-name")
            overrides = gr.Textbox(label="Settings to override: key=value, one a line (they win over the fields)",
                                   lines=3, placeholder="lr_new=1e-4\nwarmup_steps=5", elem_id="jobs-overrides")
            submit_button = gr.Button("Submit", variant="primary", elem_id="jobs-submit")
            submit_note = gr.Markdown(elem_id="jobs-submit-note")
            with gr.Accordion("The method's settings and where each comes from", open=False):
                defaults_note = gr.Markdown(method_note, elem_id="jobs-defaults-note")
                defaults = gr.Dataframe(view.defaults_rows(view.DEFAULT_METHOD), headers=view.DEFAULT_COLUMNS,
                                        interactive=False, wrap=True, max_height=360, elem_id="jobs-defaults")
        with gr.Column(scale=2):
            table = gr.Dataframe(headers=view.COLUMNS, interactive=False, wrap=True, max_height=320,
                                 column_widths=TABLE_WIDTHS, elem_id="jobs-table",
                                 label="Runs, newest first (refreshed every 2 s): select one")
            with gr.Row():
                selected = gr.Textbox(label="Run", placeholder="an id", scale=1, elem_id="jobs-selected")
                cancel_button = gr.Button("Cancel", elem_id="jobs-cancel")
                resume_button = gr.Button("Resume", elem_id="jobs-resume")
                open_button = gr.Button("Open in Grounding", elem_id="jobs-open-grounding")
            with gr.Row():
                delete_checkpoint = gr.Checkbox(label="also delete its checkpoint (and its zoo entry)", value=False,
                                                elem_id="jobs-delete-checkpoint")
                delete_button = gr.Button("Delete…", variant="stop", elem_id="jobs-delete")
            with gr.Row(visible=False) as confirm_row:
                confirm_button = gr.Button("Yes, delete", variant="stop", elem_id="jobs-delete-confirm")
                keep_button = gr.Button("No, keep it", elem_id="jobs-delete-keep")
            action_note = gr.Markdown(elem_id="jobs-action-note")
            curves = gr.Plot(label="Curves (x: optimizer step)", elem_id="jobs-curves")
            with gr.Accordion("Log (last 200 lines)", open=True):
                log = gr.Textbox(show_label=False, lines=12, max_lines=12, autoscroll=True, elem_id="jobs-log")
            with gr.Accordion("Record", open=True):
                details = gr.Markdown(PICK_A_RUN, elem_id="jobs-details")
    compare_load = compare_tab.build(jobs, zoo, access)  # evaluation sweeps and the Compare board
    seen, stamp, pending = gr.State({}), gr.State(""), gr.State(None)
    timer = gr.Timer(POLL_SECONDS)

    watched = [table, details, log, curves, seen, stamp]

    def show(current, known):  # after a click: everything, now
        return snapshot(jobs, current, known, force=True)

    def tick(current, known):
        return snapshot(jobs, current, known, force=False)

    method.change(on_method, inputs=method, outputs=[defaults, batch_size, defaults_note])
    submit_button.click(lambda *values: submit(access, jobs, zoo, *values), api_name="jobs_submit",
                        inputs=[method, data, init, max_steps, name, devices, size, batch_size, overrides],
                        outputs=[submit_note, selected]).then(show, inputs=[selected, seen], outputs=watched)
    timer.tick(tick, inputs=[selected, seen], outputs=watched, show_progress="hidden",
               api_visibility="undocumented")
    if tabs is not None:  # the run store is read while the table can be seen (the first tick on coming back)
        tabs.select(ticks_while_shown, outputs=timer, show_progress="hidden", api_visibility="undocumented")
    table.select(pick_row, outputs=selected).then(show, inputs=[selected, seen], outputs=watched)
    selected.submit(show, inputs=[selected, seen], outputs=watched, api_name="jobs_show")
    for button, action, api in ((cancel_button, cancel, "jobs_cancel"), (resume_button, resume, "jobs_resume")):
        button.click(lambda current, act=action: act(jobs, current), inputs=selected, outputs=action_note,
                     api_name=api).then(show, inputs=[selected, seen], outputs=watched)
    delete_button.click(lambda *values: ask_delete(jobs, *values), inputs=[selected, delete_checkpoint],
                        outputs=[action_note, confirm_row, pending], api_name="jobs_delete")
    deleted = confirm_button.click(lambda value: confirm_delete(jobs, value), inputs=pending,
                                   outputs=[action_note, confirm_row, pending, selected],
                                   api_name="jobs_delete_confirm")
    deleted.then(show, inputs=[selected, seen], outputs=watched)
    keep_button.click(keep, inputs=pending, outputs=[action_note, confirm_row, pending])
    # A run joined or left the zoo (the stamp changed): the init list follows, and the app chains the
    # refresh of every other model list after this event.
    changes = [stamp.change(lambda current: refresh_inits(zoo, current), inputs=init, outputs=init), deleted]
    if grounding is not None and tabs is not None:
        changes.append(open_button.click(lambda *values: open_in_grounding(jobs, zoo, *values),
                                         inputs=[selected, grounding.models],
                                         outputs=[grounding.models, tabs, action_note],
                                         api_name="jobs_open_in_grounding"))
    on_load = [dict(fn=lambda current, known: snapshot(jobs, current, known), inputs=[selected, seen],
                    outputs=watched),
               dict(fn=lambda current: gr.update(choices=view.device_choices(jobs), value=current), inputs=devices,
                    outputs=devices), *compare_load]
    return init, changes, on_load
