"""Models tab: what is in the zoo, whether each loads, and adding a checkpoint."""

from __future__ import annotations

import sys
from pathlib import Path

import gradio as gr

from explorer.core.errors import UnsafeCheckpointError
from explorer.serve.access import PICKLE_ADVICE, Access
from explorer.serve.messages import explain
from explorer.zoo import Zoo
from explorer.zoo.zoo import check

COLUMNS = ["name", "method", "score", "architecture", "context", "weights", "source", "status"]
# Every column readable at 1280 px: the long free-text ones wrap, the status is never pushed off-screen.
COLUMN_WIDTHS = ["12%", "8%", "12%", "10%", "7%", "18%", "18%", "15%"]


def zoo_table(zoo: Zoo, public: bool = False) -> list[list]:
    """A row per model; a public page shows the weights' file names, not where they sit on the server."""
    rows = []
    for entry in zoo.entries():
        m = entry.manifest
        if m is None:
            where = entry.manifest_path.name if public else str(entry.manifest_path)
            rows.append([entry.manifest_path.stem, "?", "?", "?", "", where, "", entry.status])
            continue
        status = entry.status if m.trained else f"{entry.status}, UNTRAINED"
        weights = Path(m.display_weights()).name if public else m.display_weights()
        source = "" if public and m.source.startswith(("added from", "uploaded as")) else m.source
        rows.append([m.name, m.method, score_of(m), m.architecture, m.context_length or "", weights, source, status])
    return rows


def score_of(manifest) -> str:
    """What the model's scores are (its manifest's options can change it: FineLIP's mode, FLAIR's score)."""
    from explorer.models.io.checkpoints import stored_config
    from explorer.models.methods import get_method

    try:
        stored = {} if manifest.is_builtin else stored_config(manifest.weights_path())
        return get_method(manifest.method).score_description({**stored, **manifest.options})
    except Exception:  # noqa: BLE001 - an unknown method is already reported in the status column
        return "?"


def methods_table() -> list[list]:
    """Every method: its name, the maps it draws, and what it is (first docstring line; a plugin's package
    first). A plugin that did not load is a row with its error: the page serves on."""
    from explorer.models.map_kinds import GENERIC_MAP
    from explorer.models.methods import BUILT_IN, METHODS, method_entries

    rows = []
    for entry in method_entries():
        if not entry.loaded:
            rows.append([entry.name, "not loaded", "", f"({entry.source}) {entry.error}"])
            continue
        cls = METHODS[entry.name]
        doc = (cls.__doc__ or sys.modules[cls.__module__].__doc__ or "").strip().splitlines()
        what = (doc[0] if doc else "") if entry.source == BUILT_IN else f"({entry.source}) {doc[0] if doc else ''}"
        rows.append([entry.name, cls.title, ", ".join((GENERIC_MAP, *cls.native_map_kinds)), what])
    return rows


def check_file(access: Access, path: str) -> str:
    """The Check button: the key report of a file under the allowed roots, never unpickled."""
    try:
        weights = access.path(path, "weights file")
        return "```\n" + check(weights, allow_pickle=False).summary() + "\n```"
    except Exception as error:  # noqa: BLE001 - shown to the user, the app keeps serving
        return pickle_explained(error, path)


def pickle_explained(error: Exception, path) -> str:
    """``explain(error)``, with the shell command the owner runs when the file needs unpickling."""
    message = explain(error)
    if isinstance(error, UnsafeCheckpointError):
        message += "\n\n" + PICKLE_ADVICE.format(path=str(path or "PATH").strip())
    return message


def text(value) -> str:
    """A text field's value as a string (a direct API call may send anything)."""
    return value.strip() if isinstance(value, str) else ""


def model_names(zoo: Zoo) -> list[str]:
    return [m.name for m in zoo.manifests()]


def build(zoo: Zoo, access: Access) -> tuple[list, dict]:
    """The tab; returns the events after which the zoo may have changed (the app refreshes every
    model list after them, so an added or removed model shows everywhere without a restart), and the
    listing to run on every page load (the zoo may have changed since the page was built). On a public
    page the zoo is fixed: the table only, no controls that change it."""
    if access.public:
        gr.Markdown("The models of this demo. Weights are local files; nothing is downloaded.")
    else:
        gr.Markdown(f"Every model with a manifest in `{zoo.root}`. Weights are local files; nothing is downloaded.")
    # Both tables fill on page load, not when the page is built: checking the zoo reads every weights file's
    # header, and the method list imports every method module (open_clip, torchvision: seconds).
    table = gr.Dataframe(value=[], headers=COLUMNS, interactive=False, wrap=True, elem_id="zoo-table",
                         column_widths=COLUMN_WIDTHS)
    with gr.Accordion("Methods this explorer knows", open=False):
        methods = gr.Dataframe(value=[], headers=["method", "name", "maps", "what it is"], interactive=False,
                               wrap=True, elem_id="methods-table")
    if access.public:
        return [], dict(fn=lambda: (zoo_table(zoo, public=True), methods_table()), outputs=[table, methods])
    return build_management(zoo, access, table, methods)


def build_management(zoo: Zoo, access: Access, table, methods) -> tuple[list, dict]:
    """Re-check, add (a path under the allowed roots, or a .safetensors upload) and remove: owner mode only."""
    refresh = gr.Button("Re-check every model", size="sm", elem_id="zoo-refresh")
    with gr.Accordion("Add or check a checkpoint", open=False):
        with gr.Tab("A file on this machine"):
            path = gr.Textbox(label="Weights file (.pt, .pth, .bin, .safetensors) under an allowed folder",
                              placeholder="/data/longclip-B.pt", elem_id="zoo-add-path")
            gr.Markdown("A file that needs unpickling (SEPS's `model_best.pth`) is never read here: the machine's "
                        "owner adds it from a shell with `explorer models add PATH --allow-pickle`.")
            with gr.Row():
                check_button = gr.Button("Check")
                add_button = gr.Button("Add to zoo", variant="primary", elem_id="zoo-add")
        with gr.Tab("Upload"):
            upload = gr.File(label="Weights (.safetensors only: an upload is never unpickled)", type="filepath",
                             file_count="single", file_types=[".safetensors"], elem_id="zoo-upload", height=90)
            upload_button = gr.Button("Upload and add", variant="primary", elem_id="zoo-upload-add")
        with gr.Row():
            name = gr.Textbox(label="Name in the zoo (optional)", elem_id="zoo-add-name")
            source = gr.Textbox(label="Where it came from (optional)")
        report = gr.Markdown(elem_id="zoo-report")
    with gr.Accordion("Remove a model (its manifest; the weights file stays)", open=False):
        with gr.Row():
            doomed = gr.Dropdown([], label="Model", elem_id="zoo-remove-name")  # filled on page load
            remove_button = gr.Button("Remove from zoo", variant="stop", elem_id="zoo-remove")
        removed = gr.Markdown(elem_id="zoo-remove-note")

    def listing():
        return zoo_table(zoo), gr.update(choices=model_names(zoo), value=None)

    def add(path_value, name_value, source_value):
        try:
            access.owner_only("adding a model")
            weights = access.path(path_value, "weights file")
            manifest = zoo.add(weights, name=text(name_value) or None, source=text(source_value))
            return f"Added **{manifest.name}** ({manifest.method}, {manifest.format}).", *listing()
        except Exception as error:  # noqa: BLE001
            return pickle_explained(error, path_value), *listing()

    def add_upload(file_path, name_value, source_value):
        if not file_path:
            return "Choose a .safetensors file to upload first.", *listing()
        try:
            access.owner_only("uploading a model")
            manifest = zoo.add_upload(file_path, Path(file_path).name, name=text(name_value) or None,
                                      source=text(source_value))
            return f"Added **{manifest.name}** ({manifest.method}, {manifest.format}) from the upload.", *listing()
        except Exception as error:  # noqa: BLE001
            return explain(error), *listing()

    def remove(name_value):
        if not name_value:
            return "Pick the model to remove.", *listing()
        try:
            access.owner_only("removing a model")
            path = zoo.remove(name_value)
            return f"Removed **{name_value}** (deleted its manifest `{path}`; its weights file was kept).", *listing()
        except Exception as error:  # noqa: BLE001
            return explain(error), *listing()

    def recheck():
        try:
            access.owner_only("re-checking the zoo")
        except Exception as error:  # noqa: BLE001
            return explain(error), *listing()
        zoo.recheck()
        return "", *listing()

    check_button.click(lambda value: check_file(access, value), inputs=path, outputs=report, api_name="zoo_check")
    changes = [refresh.click(recheck, outputs=[report, table, doomed], api_name="zoo_recheck"),
               add_button.click(add, inputs=[path, name, source], outputs=[report, table, doomed], api_name="zoo_add"),
               upload_button.click(add_upload, inputs=[upload, name, source], outputs=[report, table, doomed],
                                   api_name="zoo_upload"),
               remove_button.click(remove, inputs=doomed, outputs=[removed, table, doomed], api_name="zoo_remove")]
    return changes, dict(fn=lambda: (*listing(), methods_table()), outputs=[table, doomed, methods])
