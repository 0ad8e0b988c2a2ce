"""What the three grounding views share on the page: the inputs, settings from widgets, export.

The inputs (picture, caption, models, map kind, dense caption, ground-truth mask) sit in the
Grounding tab's left column; each view adds its own display controls and turns everything into
a ``ViewSettings``, the same object the CLI reads from JSON.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import gradio as gr

from explorer.core import paths
from explorer.core.disk_quota import prune, remove
from explorer.core.errors import ExplorerError
from explorer.serve.budget import HEAVY, Budget
from explorer.serve.messages import explain
from explorer.views.figure_style import ANNOTATIONS, DEFAULT_PRESET, FONTS, HEADERS, PRESETS
from explorer.views.settings import MAX_MODELS, SettingsError, ViewSettings

PREVIEW_SIDE = 256  # pixels per panel on the page; figures use the working resolution
EXPORT_FORMATS = ("png", "pdf", "svg")


@dataclass
class Inputs:
    image: gr.components.Component
    caption: gr.components.Component
    models: gr.components.Component
    kind: gr.components.Component
    dense_caption: gr.components.Component
    truth: gr.components.Component

    def components(self) -> list:
        return [self.image, self.caption, self.models, self.kind, self.dense_caption, self.truth]


def checked_slider(*args, **kwargs) -> gr.Slider:
    """A slider whose typed value (the box beside it) reaches the handler as typed: Gradio's own range check
    answers 0 or 99 with a toast ("Value 0 is less than minimum value 1.") and a traceback in the log; the
    handler checks it and says what is wrong in the note beside the control, as for every other bad value.
    An instance's ``preprocess``, not a subclass: Gradio serves a subclass as a custom component whose
    frontend files do not exist (404), and the page never finishes loading."""
    slider = gr.Slider(*args, **kwargs)
    slider.preprocess = lambda payload: gr.Number.round_to_precision(payload, slider.precision)
    return slider


def as_list(models) -> list[str]:
    if not models:
        return []
    return [models] if isinstance(models, str) else list(models)


def keep_value(update: dict, sent) -> dict:
    """``update`` without its value when the value is what the page sent: a refresh queued behind other events
    (a timer's, the page load's) carries the choice as it was when it was sent, and would undo what the visitor
    picked since. A value that differs (a chosen model left the zoo) is kept."""
    value = update.get("value")
    if value == (as_list(sent) if isinstance(value, list) else sent):
        return {k: v for k, v in update.items() if k != "value"}
    return update


def base_settings(view: str, image, caption, models, kind, dense_caption, truth, budget: Budget | None = None) -> dict:
    """The shared part of a view's settings, checked: a clear message for what is missing, and (``budget``)
    a caption within the page's caps on characters and sentences, counted before any model runs."""
    if budget is not None:
        from explorer.core.sentences import split_sentences

        for text, what in ((caption, "caption"), (dense_caption, "dense caption")):
            if isinstance(text, str):
                budget.check_text(text, what)
                budget.check_sentences(len(split_sentences(text)))
    if not image:
        raise ExplorerError("Pick or upload an image first.")
    models = as_list(models)
    if not models:
        raise ExplorerError("Pick at least one model.")
    if len(models) > MAX_MODELS:
        raise ExplorerError(f"Compare at most {MAX_MODELS} models at once.")
    return {"view": view, "image": str(image), "caption": caption or "", "models": models,
            "kind": kind or "native", "dense_caption": dense_caption or "", "truth": str(truth) if truth else ""}


EXPORT_ROOT: Path | None = None  # where exports go; None: $EXPLORER_HOME/exports, read when used


def loading_first(zoo, draw, status_at: int, n_outputs: int):
    """A Draw button's handler (a generator): the chosen models not yet in memory load one at a time, the
    status line (output ``status_at`` of ``n_outputs``) naming each, then ``draw(zoo.load, *values)`` runs.

    A ViT-L loads in seconds: the page says which model it waits for rather than only spinning, and the
    other tabs answer meanwhile (a load holds one of the queue's workers). Only a request ``draw`` would
    accept is preloaded (at most ``MAX_MODELS`` names); a load that fails stops here and ``draw`` says why."""

    def handler(*values):
        models = values[2]
        names = as_list(models) if isinstance(models, (str, list, tuple)) else []
        pending = [] if len(names) > MAX_MODELS else [
            name for name in names if isinstance(name, str) and not zoo.is_loaded(name)]
        for number, name in enumerate(pending, start=1):
            update = [gr.update()] * n_outputs
            update[status_at] = f"Loading **{name}** ({number} of {len(pending)} to load)…"
            yield tuple(update)
            try:
                zoo.load(name)
            except Exception:  # noqa: BLE001 - draw loads it again and says what is wrong
                break
        yield draw(zoo.load, *values)

    return handler


def export_root() -> Path:
    """The folder the page may download figures from."""
    return EXPORT_ROOT if EXPORT_ROOT is not None else paths.exports_dir()


def export_dir(budget: Budget | None = None) -> Path:
    """A new folder per export, so two exports never overwrite each other; the exports folder is then
    pruned to ``budget`` (a public page keeps ``export_bytes`` for ``export_seconds``, oldest removed first)."""
    root = paths.ensure(export_root())
    folder = Path(tempfile.mkdtemp(prefix=time.strftime("%Y%m%d-%H%M%S-"), dir=root))
    if budget is not None and (budget.export_bytes is not None or budget.export_seconds is not None):
        prune(root, budget.export_bytes, budget.export_seconds, keep=(folder,))
    return folder


@contextmanager
def export_folder(budget: Budget | None = None) -> Iterator[Path]:
    """``export_dir`` for one export, removed again when the export fails or writes nothing into it; the
    folder's contents count against the budget from the next export on."""
    folder = export_dir(budget)
    try:
        yield folder
    except BaseException:
        remove(folder)
        raise
    if folder.is_dir() and not any(folder.iterdir()):
        remove(folder)
    elif budget is not None and budget.export_bytes is not None:
        prune(folder.parent, budget.export_bytes, keep=(folder,))


def figure_choices(fmt, preset, font, width, header="sentence", annotate="scores") -> tuple[str, dict]:
    """(format, settings) from the export row, checked: a visitor may send anything. An empty or zero width
    is the preset's."""
    if fmt not in EXPORT_FORMATS:
        raise SettingsError(f"a figure is one of {', '.join(EXPORT_FORMATS)}, not {str(fmt)[:40]!r}")
    for name, value, allowed in (("preset", preset, PRESETS), ("font", font, FONTS), ("header", header, HEADERS),
                                 ("annotation", annotate, ANNOTATIONS)):
        if not isinstance(value, str) or value not in allowed:
            raise SettingsError(f"the {name} is one of {', '.join(allowed)}")
    if width in (None, 0, ""):
        width = None
    elif isinstance(width, bool) or not isinstance(width, (int, float)):
        raise SettingsError("the width is a number of inches")
    return fmt, {"preset": preset, "font": font, "width": None if width is None else float(width), "header": header,
                 "annotate": annotate}


def export_view(view, settings: ViewSettings | None, fmt: str, preset: str = DEFAULT_PRESET, font: str = "sans",
                width: float | None = None, header: str = "sentence", annotate: str = "scores",
                zoo_root: str | Path | None = None, budget: Budget | None = None,
                public: bool = False) -> tuple[list[str] | None, str]:
    """Write the figure, its settings JSON and copies of its inputs; (files for download, message). The
    exports folder is kept to ``budget``; a public page's message names the files, not the server's folders.
    A venue's page height may put sentences on more pages (a column): the message says which went where."""
    from explorer.views.figure_pages import write_figure_pages
    from explorer.views.pipeline import bundle_inputs

    if view is None or settings is None:
        return None, "**Cannot do that:** draw the view first, then export it."
    try:
        fmt, style = figure_choices(fmt, preset, font, width, header, annotate)
        with export_folder(budget) as folder:
            settings = bundle_inputs(view, ViewSettings(**{**vars(settings), **style}), folder)
            written = write_figure_pages(view, settings, folder / f"{settings.view}.{fmt}")
    except Exception as error:  # noqa: BLE001 - the page says what went wrong and keeps serving
        return None, explain(error)
    figure, settings_file = written.figure, written.settings_file
    files = [str(path) for path in written.files] + [str(settings_file)]
    names = ", ".join(f"**{path.name}**" for path in written.files)
    pages = "".join(f" {line[0].upper()}{line[1:]}." for line in written.lines)
    if public:
        return files, (
            f"Wrote {names} ({settings.figure_width:g} in wide, {settings.font}) and "
            f"**{settings_file.name}**: download them below.{pages} "
            f"The same figure from a shell: `explorer figure replay {settings_file.name}` in the folder you save "
            "them to, with the same models.")
    zoo = f" --checkpoints {Path(zoo_root).resolve()}" if zoo_root else ""
    return files, (
        f"Wrote {names} ({settings.figure_width:g} in wide, {settings.font}) with its settings and inputs "
        f"in `{folder}`.{pages} The same figure from the shell: `explorer{zoo} figure replay {settings_file}`")


@dataclass
class ExportRow:
    """The export row's controls, so a tab can add another figure beside its own (same style choices)."""

    style: tuple  # style_controls' widgets, in export_view's order
    files: gr.components.Component
    note: gr.components.Component

    def style_inputs(self) -> list:
        return list(self.style)


def style_controls(prefix: str) -> tuple:
    """(format, preset, font, width, header, annotation) widgets of a figure export (inside a row)."""
    fmt = gr.Radio(list(EXPORT_FORMATS), value="png", label="Figure format", elem_id=f"{prefix}-export-format")
    preset = gr.Radio(list(PRESETS), value=DEFAULT_PRESET, label="Size (column 3.3 in, page 6.9 in, slide)",
                      elem_id=f"{prefix}-export-preset")
    font = gr.Radio(list(FONTS), value="sans", label="Font (cm: as LaTeX)", elem_id=f"{prefix}-export-font")
    width = gr.Number(value=None, step=0.5, label="Width (inches; 0: the size's)", elem_id=f"{prefix}-export-width")
    header = gr.Radio(list(HEADERS), value="sentence", label="Column headers (number: S1.. and a legend)",
                      elem_id=f"{prefix}-export-header")
    annotate = gr.Radio(list(ANNOTATIONS), value="scores", label="Under each map (scores: IoU and hit)",
                        elem_id=f"{prefix}-export-annotate")
    return fmt, preset, font, width, header, annotate


def export_row(prefix: str, view_state, settings_state, zoo, access=None) -> ExportRow:
    """Format, preset, font, width, headers, notes, button and the files, wired to the view's stored result:
    the same under every view."""
    with gr.Row():
        style = style_controls(prefix)
        button = gr.Button("Export figure", elem_id=f"{prefix}-export")
    files = gr.File(label="Figure and settings", file_count="multiple", interactive=False,
                    elem_id=f"{prefix}-export-files")
    note = gr.Markdown(elem_id=f"{prefix}-export-note")
    row = ExportRow(style, files, note)
    budget, public = (access.budget, access.public) if access is not None else (None, False)
    button.click(lambda view, settings, *style: export_view(view, ran_in(zoo.load, settings), *style,
                                                            zoo_root=zoo.root, budget=budget, public=public),
                 inputs=[view_state, settings_state, *row.style_inputs()], outputs=[files, note],
                 api_name=f"export_{prefix}", **HEAVY)
    return row


def ran_in(load, settings: ViewSettings | None) -> ViewSettings | None:
    """``settings`` saying the precision its models computed in (a replay computes in the same), not "auto"."""
    if isinstance(settings, ViewSettings) and settings.models and settings.precision == "auto":
        try:
            settings.precision = load(settings.models[0]).precision  # loaded already: the view was drawn with it
        except Exception:  # noqa: BLE001 - a model gone since the Draw: export_view says what it can
            pass
    return settings
