"""Models tab: what is in the zoo, whether each loads, and adding a checkpoint."""

from __future__ import annotations

import sys

import gradio as gr

from explorer.models.io.loading import check
from explorer.ui.messages import explain
from explorer.zoo import Zoo

COLUMNS = ["name", "method", "score", "architecture", "context", "weights", "source", "status"]


def zoo_table(zoo: Zoo) -> list[list]:
    rows = []
    for entry in zoo.entries():
        m = entry.manifest
        if m is None:
            rows.append([entry.manifest_path.stem, "?", "?", "?", "", str(entry.manifest_path), "", entry.status])
            continue
        status = entry.status if m.trained else f"{entry.status}, UNTRAINED"
        rows.append([m.name, m.method, score_of(m), m.architecture, m.context_length or "", m.display_weights(),
                     m.source, status])
    return rows


def score_of(manifest) -> str:
    """What the model's scores are (its manifest's options can change it: FineLIP's mode, FLAIR's score)."""
    from explorer.models.methods import get_method

    try:
        return get_method(manifest.method).score_description(manifest.options)
    except Exception:  # noqa: BLE001 - an unknown method is already reported in the status column
        return "?"


def methods_table() -> list[list]:
    """Every registered method: its name, the maps it draws, and what it is (first docstring line)."""
    from explorer.models.methods import METHODS, discover_methods
    from explorer.models.methods.base import GENERIC_MAP

    discover_methods()
    rows = []
    for name, cls in sorted(METHODS.items()):
        doc = (cls.__doc__ or sys.modules[cls.__module__].__doc__ or "").strip().splitlines()
        rows.append([name, cls.title, ", ".join((GENERIC_MAP, *cls.native_map_kinds)), doc[0] if doc else ""])
    return rows


def check_file(path: str, allow_pickle: bool) -> str:
    if not path or not path.strip():
        return "Give the path of a weights file on this machine."
    try:
        return "```\n" + check(path.strip(), allow_pickle=allow_pickle).summary() + "\n```"
    except Exception as error:  # noqa: BLE001 - shown to the user, the app keeps serving
        return explain(error)


def build(zoo: Zoo) -> gr.Dataframe:
    gr.Markdown(f"Every model with a manifest in `{zoo.root}`. Weights are local files; nothing is downloaded.")
    table = gr.Dataframe(value=lambda: zoo_table(zoo), headers=COLUMNS, interactive=False, wrap=True,
                         elem_id="zoo-table")
    refresh = gr.Button("Refresh", size="sm")
    with gr.Accordion("Methods this explorer knows", open=False):
        gr.Dataframe(value=methods_table(), headers=["method", "name", "maps", "what it is"], interactive=False,
                     wrap=True, elem_id="methods-table")
    with gr.Accordion("Add or check a checkpoint", open=False):
        path = gr.Textbox(label="Weights file (.pt, .pth, .bin, .safetensors)", placeholder="/data/longclip-B.pt")
        with gr.Row():
            name = gr.Textbox(label="Name in the zoo (optional)")
            source = gr.Textbox(label="Where it came from (optional)")
        trust = gr.Checkbox(label="Trust this file: allow unpickling (needed for SEPS model_best.pth)", value=False)
        with gr.Row():
            check_button = gr.Button("Check")
            add_button = gr.Button("Add to zoo", variant="primary")
        report = gr.Markdown()

    def add(path_value, name_value, source_value, trust_value):
        try:
            manifest = zoo.add(path_value.strip(), name=name_value.strip() or None, source=source_value.strip(),
                               allow_pickle=trust_value)
            return f"Added **{manifest.name}** ({manifest.method}, {manifest.format}).", zoo_table(zoo)
        except Exception as error:  # noqa: BLE001
            return explain(error), zoo_table(zoo)

    refresh.click(lambda: zoo_table(zoo), outputs=table)
    check_button.click(check_file, inputs=[path, trust], outputs=report)
    add_button.click(add, inputs=[path, name, source, trust], outputs=[report, table])
    return table
