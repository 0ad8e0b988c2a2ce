"""The Jobs tab without Gradio: the form's defaults and what a submit sends, the run table, the curves,
the log tail, a run's details, and the words of a delete (the CLI says the same).

    rows = run_rows(jobs.list())                                  # one row per run, newest first (COLUMNS)
    figure = curves_figure(jobs.metrics(run.id))                  # plotly: loss terms, lr, samples/s, GPU memory
    run = submit_form(jobs, Form("mulclip", max_steps=20))        # the default data: the training world
    details_markdown(run), log_text(jobs, run.id)
    delete_question(run, delete_checkpoint=False)                 # what goes and what stays, said first

Everything here reads the run store and the run folders (``explorer.jobs``); nothing trains in the web
process. The default training data is a small synthetic world under ``$EXPLORER_HOME/datasets``
(100 train and 20 test scenes at 64 px, written in about a second on the first submit), sized so that
a tiny model's 20 steps and its final evaluation take about a minute on two CPU cores.
"""

from __future__ import annotations

import json
import math
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from explorer.core import paths
from explorer.evaluation.tasks import sweep_options
from explorer.jobs import JobManager, method_defaults
from explorer.jobs.queue import gpu_pool
from explorer.jobs.records import DONE, FINAL, JobError, Run

COLUMNS = ["id", "name", "method", "status", "progress", "step", "started", "duration", "last loss", "checkpoint"]
DEFAULT_COLUMNS = ["setting", "value", "where it comes from"]
FROM_SCRATCH = ""  # the init picker's value for "no checkpoint"
DEFAULT_METHOD = "mulclip"
DEFAULT_MAX_STEPS = 20
DEFAULT_SIZE = "tiny"  # a quick first run on CPU; the papers' size is "base"
LOG_TAIL = 200
# The default training data (module docstring): seed 0, 64 px like the demo world.
WORLD_NAME, WORLD_TRAIN, WORLD_TEST, WORLD_IMAGE_SIZE = "training-world", 100, 20, 64
TAIL_BYTES = 16384  # enough of metrics.jsonl's end to hold its last row


# ---- the form ----------------------------------------------------------------------------------------


@dataclass
class Form:
    """What the form (or a caller) asks for; the fields equal to the method's defaults are not overrides."""

    method: str = DEFAULT_METHOD
    data: str = ""  # empty: the training world
    init: str = FROM_SCRATCH  # a zoo name, a manifest or a weights file
    max_steps: Any = DEFAULT_MAX_STEPS  # None: the method's epochs
    name: str = ""
    gpus: Any = 0
    size: str = DEFAULT_SIZE
    batch_size: Any = None  # None: the method's
    overrides: str = ""  # key=value lines; they win over the fields


def training_world_root() -> Path:
    return paths.datasets_dir() / WORLD_NAME


def ensure_training_world(root: Path | None = None) -> Path:
    """The default training data, written the first time (``ensure_dataset``: beside its place and
    renamed into it, so a run, or another app, never reads half of it)."""
    from explorer.data.errors import DatasetError
    from explorer.data.store import ensure_dataset

    total = WORLD_TRAIN + WORLD_TEST
    try:
        return ensure_dataset(root or training_world_root(), total, seed=0, image_size=WORLD_IMAGE_SIZE,
                              split_fractions={"train": WORLD_TRAIN / total, "test": WORLD_TEST / total},
                              what="the training world")
    except DatasetError as error:
        raise JobError(str(error)) from error


def resolve_data(text: str | None) -> Path:
    """The folder typed, or the training world (made now) when the box is empty or names it."""
    typed = (text or "").strip()
    if not typed or Path(typed).expanduser() == training_world_root():
        return ensure_training_world()
    return Path(typed).expanduser()


def parse_overrides(text: str | None) -> dict[str, str]:
    """``key=value`` lines (blank lines and ``#`` comments skipped); the values stay text, for the
    store's conversion to each key's type."""
    found = {}
    for number, line in enumerate((text or "").splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        key, sep, value = line.partition("=")
        if not sep or not key.strip():
            raise JobError(f"override line {number} ({line!r}): write key=value, e.g. lr_new=1e-4")
        found[key.strip()] = value.strip()
    return found


def form_overrides(form: Form) -> dict:
    """The fields that differ from the method's defaults, then the typed lines (which win)."""
    values = method_defaults(form.method).values
    overrides: dict[str, Any] = {}
    if form.size and form.size != values["size"]:
        overrides["size"] = form.size
    if form.batch_size not in (None, "") and whole(form.batch_size, "batch size") != values["batch_size"]:
        overrides["batch_size"] = whole(form.batch_size, "batch size")
    overrides.update(parse_overrides(form.overrides))
    return overrides


def whole(value, what: str) -> int:
    """A form number as an int (Gradio gives floats), refused when it is not whole."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise JobError(f"{what} must be a whole number, not {value!r}") from None
    if not number.is_integer():
        raise JobError(f"{what} must be a whole number, not {value!r}")
    return int(number)


def submit_form(jobs: JobManager, form: Form, start: bool = True) -> Run:
    """Check and submit the form's run (``JobError`` with the reason, nothing recorded, when it cannot run);
    ``start``: start it now when a slot is free (else it waits for whoever moves the queue next)."""
    if not form.method:
        raise JobError("pick a method")
    overrides = form_overrides(form)
    max_steps = None if form.max_steps in (None, "") else whole(form.max_steps, "max steps")
    return jobs.submit(form.method, resolve_data(form.data), init=(form.init or "").strip() or None,
                       max_steps=max_steps, name=(form.name or "").strip() or None, overrides=overrides,
                       start=start, **device_request(form.gpus))


def defaults_rows(method: str) -> list[list]:
    """(setting, value, where it comes from) for every setting, then the numbers the method's code fixes."""
    defaults = method_defaults(method)
    rows = [[key, shown(value), defaults.sources.get(key, "")] for key, value in defaults.values.items()]
    for key, entry in defaults.fixed.items():
        rows.append([f"{key} (fixed in code)", shown(entry.get("value")), str(entry.get("source", ""))])
    return rows


def defaults_note(method: str) -> str:
    defaults = method_defaults(method)
    values = defaults.values
    text = (f"**{method}**: lr {shown(values['lr_backbone'])} (backbone) / {shown(values['lr_new'])} (new modules), "
            f"weight decay {shown(values['weight_decay'])}, {values['warmup_steps']} warm-up steps, global batch "
            f"{values['batch_size']}, {values['epochs']} epoch(s) unless max steps stops it first.")
    return "\n".join([text, *(f"- {note}" for note in defaults.notes)])


CPU_PROCESSES = (2, 4)  # the form's "CPU x N processes" choices (torchrun, Gloo)


def device_choices(jobs: JobManager) -> list[tuple[str, int | str]]:
    """CPU, CPU x N processes, 1..n GPUs of the pool this machine lends to runs (n > 1: torchrun), and
    Slurm (through submitit) when submitit is installed. Values: GPUs (int), "cpu:N", "slurm:GPUS"."""
    from explorer.jobs.slurm import available

    pool = gpu_pool(jobs.store)
    choices: list[tuple[str, int | str]] = [("CPU", 0), *((f"CPU x {n} processes", f"cpu:{n}") for n in CPU_PROCESSES)]
    choices += [(f"{n} GPU{'s' if n > 1 else ''}", n) for n in range(1, len(pool) + 1)]
    if available():
        choices += [("Slurm: CPU", "slurm:0"), ("Slurm: 1 GPU", "slurm:1")]
    return choices


def device_request(value) -> dict:
    """The submit arguments (gpus, processes, backend) of a devices choice (``device_choices``)."""
    if value in (None, ""):
        return {"gpus": None}
    kind, sep, count = str(value).partition(":")
    if sep and kind == "cpu":
        return {"gpus": 0, "processes": whole(count, "processes")}
    if sep and kind == "slurm":
        return {"gpus": whole(count, "devices"), "backend": "slurm", "slurm": {}}
    return {"gpus": whole(value, "devices")}


def init_choices(manifests: Iterable) -> list[tuple[str, str]]:
    """(label, value): from scratch, then every zoo model with a weights file (a built-in has none)."""
    choices = [("from scratch", FROM_SCRATCH)]
    for manifest in manifests:
        if manifest.is_builtin:
            continue
        untrained = "" if manifest.trained else " · UNTRAINED"
        choices.append((f"{manifest.name} · {manifest.method}{untrained}", manifest.name))
    return choices


# ---- the run table -----------------------------------------------------------------------------------


def run_rows(runs: Sequence[Run], now: float | None = None) -> list[list]:
    """One row per run (``COLUMNS``), newest first."""
    now = time.time() if now is None else now
    rows = []
    for run in sorted(runs, key=lambda r: (r.created, r.id), reverse=True):
        last = last_metrics(run.metrics_path) if run.step else None
        loss = last.get("loss") if last else None
        rows.append([run.id, run.name, run.method, run.status, progress_text(run),
                     f"{run.step}/{run.total_steps}" if run.total_steps else str(run.step), when(run.started),
                     duration(run, now), "" if loss is None else f"{loss:.4g}", checkpoint_text(run)])
    return rows


def progress_text(run: Run) -> str:
    fraction = run.fraction
    return "" if fraction is None else f"{100 * fraction:.0f}%"


def checkpoint_text(run: Run) -> str:
    if run.zoo_name:
        return f"zoo: {run.zoo_name}"
    return Path(run.checkpoint).name if run.checkpoint else ""


def when(stamp: float | None) -> str:
    return "" if not stamp else time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(stamp))


def duration(run: Run, now: float | None = None) -> str:
    """Started to finished (to now while it runs)."""
    if not run.started:
        return ""
    end = run.finished or (time.time() if now is None else now)
    seconds = max(0, int(round(end - run.started)))
    hours, rest = divmod(seconds, 3600)
    minutes, seconds = divmod(rest, 60)
    return f"{hours}h {minutes:02d}m" if hours else f"{minutes}m {seconds:02d}s" if minutes else f"{seconds}s"


def last_metrics(path: str | Path) -> dict | None:
    """The last complete row of a metrics.jsonl, read from its end (a long run's file is not read whole
    every two seconds)."""
    try:
        with open(path, "rb") as handle:
            handle.seek(0, os.SEEK_END)
            handle.seek(max(0, handle.tell() - TAIL_BYTES))
            chunk = handle.read()
    except OSError:
        return None
    for line in reversed(chunk.splitlines()):
        try:
            row = json.loads(line)
        except ValueError:  # a torn last line, or the cut first one
            continue
        if isinstance(row, dict):
            return row
    return None


def zoo_stamp(runs: Iterable[Run]) -> str:
    """Changes when a run joins (or leaves) the zoo: the page refreshes its model lists then."""
    return ",".join(sorted(run.zoo_name for run in runs if run.status == DONE and run.zoo_name))


def detail_signature(jobs: JobManager, run_id: str | None) -> tuple:
    """What a selected run's details, log and curves depend on: unchanged, they are not sent again."""
    if not run_id:
        return ()
    try:
        run = jobs.get(run_id)
    except JobError as error:
        return ("error", str(error))
    return (run.id, run.status, run.step, run.finished, run.error, file_size(run.log_path),
            file_size(run.metrics_path))


def file_size(path: str) -> int | None:
    try:
        return os.path.getsize(path)
    except OSError:
        return None


# ---- curves ------------------------------------------------------------------------------------------


def curve_panels(rows: Sequence[Mapping]) -> list[tuple[str, list[str]]]:
    """(panel title, metric keys) for the metrics present: loss terms, lr per group, samples/s, GPU memory."""
    keys = []
    for row in rows:
        keys += [key for key in row if key not in keys]
    panels = [("loss", [k for k in keys if k == "loss" or k.startswith("loss/")]),
              ("learning rate", [k for k in keys if k.startswith("lr/")]),
              ("samples/s", [k for k in keys if k == "samples_per_s"]),
              ("GPU memory (GB)", [k for k in keys if k == "gpu_mem_gb"])]
    return [(title, names) for title, names in panels if names]


def curves_figure(rows: Sequence[Mapping], title: str = ""):
    """A plotly figure, one panel per kind of metric, x = optimizer step; each trace named by its key."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    panels = curve_panels(rows)
    if not panels:
        figure = go.Figure()
        figure.add_annotation(text="no metrics yet: the first step is logged when it ends", showarrow=False,
                              x=0.5, y=0.5, xref="paper", yref="paper")
        figure.update_layout(height=240, title=title or None, xaxis_visible=False, yaxis_visible=False)
        return figure
    figure = make_subplots(rows=len(panels), cols=1, shared_xaxes=True, vertical_spacing=0.08,
                           subplot_titles=[name for name, _ in panels])
    for number, (_, keys) in enumerate(panels, 1):
        for key in keys:
            points = [(row["step"], finite(row[key])) for row in rows if key in row and "step" in row]
            figure.add_trace(go.Scatter(x=[x for x, _ in points], y=[y for _, y in points], name=key,
                                        mode="lines+markers" if len(points) < 30 else "lines",
                                        legendgroup=str(number)), row=number, col=1)
    figure.update_xaxes(title_text="step", row=len(panels), col=1)
    figure.update_layout(height=200 * len(panels) + 80, title=title or None, margin=dict(l=50, r=20, t=60, b=40),
                         legend=dict(orientation="h", y=-0.08))
    return figure


def finite(value) -> float | None:
    """A number plotly can draw (inf and NaN: a gap)."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


# ---- one run -----------------------------------------------------------------------------------------


def log_text(jobs: JobManager, run_id: str, tail: int = LOG_TAIL) -> str:
    return jobs.logs(run_id, tail=tail) or "(the log is empty so far)"


def details_markdown(run: Run, queue_position: int | None = None) -> str:
    """The record as Markdown: what, where, its process, its end, its settings and its evaluation."""
    lines = [f"### {run.name} · `{run.id}` · **{run.status}**", "",
             f"- **method** {run.method} · **data** `{run.data}`",
             f"- **starts from** `{run.init}`" if run.init else "- **starts from** scratch",
             f"- **devices**: {run.describe_devices()}"
             + (f" · **queue position** {queue_position}" if queue_position else ""),
             f"- **progress**: step {run.step}" + (f" of {run.total_steps} ({progress_text(run)})"
                                                   if run.total_steps else ""),
             f"- **created** {when(run.created)} · **started** {when(run.started) or '-'} · **finished** "
             f"{when(run.finished) or '-'} · **duration** {duration(run) or '-'}",
             f"- **process**: pid {run.pid or '-'}, group {run.pgid or '-'} on {run.host or '?'} · attempts "
             f"{run.attempts} · **exit code** {run.describe_exit() if run.exit_code is not None else '-'}"]
    if run.checkpoint:
        lines.append(f"- **checkpoint** `{run.checkpoint}`")
    if run.zoo_name:
        lines.append(f"- **in the zoo as** `{run.zoo_name}` (`{run.zoo_manifest}`)")
    lines.append(f"- **folder** `{run.out_dir}`")
    lines += [f"- note: {note}" for note in run.notes]
    if run.error:
        lines += ["", "**Error**", "```text", run.error, "```"]
    lines += ["", "#### Evaluation", evaluation_markdown(run.evaluation, run.status)]
    lines += ["", "#### Command", "```text", " ".join(run.command) or "-", "```"]
    lines += ["", "#### Settings", "| setting | value | from |", "|---|---|---|"]
    lines += [f"| {key} | {shown(value)} | {run.config_sources.get(key, '')} |" for key, value in run.config.items()]
    return "\n".join(lines)


def evaluation_rows(evaluation: Mapping | None) -> list[tuple[str, str]]:
    """(measure, value) of a final evaluation's metrics and counts."""
    if not evaluation or "metrics" not in evaluation:
        return []
    rows = [(key, "-" if value is None else f"{value:.4g}" if isinstance(value, float) else str(value))
            for key, value in evaluation["metrics"].items()]
    rows += [(f"count: {key}", str(value)) for key, value in (evaluation.get("counts") or {}).items()]
    return rows


def evaluation_markdown(evaluation: Mapping | None, status: str = DONE) -> str:
    if not evaluation:
        return "not yet: it is recorded when the run has trained" if status not in FINAL else "none recorded"
    if "skipped" in evaluation:
        return f"skipped: {evaluation['skipped']}"
    if "error" in evaluation and "metrics" not in evaluation:
        return f"failed: {evaluation['error']}"
    head = (f"{evaluation.get('kind', '?')} data, split {evaluation.get('split', '?')} "
            f"({evaluation.get('measures', '')})")
    rows = evaluation_rows(evaluation)
    table = ["| measure | value |", "|---|---|", *(f"| {key} | {value} |" for key, value in rows)]
    return "\n".join([head, "", *table])


def shown(value) -> str:
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, (list, tuple)):
        return ", ".join(shown(v) for v in value)
    return "-" if value is None else str(value)


# ---- delete and open ---------------------------------------------------------------------------------


def has_checkpoint(run: Run) -> bool:
    """Whether the run folder holds weights (what ``JobManager.delete(keep_checkpoint=True)`` keeps)."""
    return (Path(run.out_dir) / "model.safetensors").is_file()


def delete_question(run: Run, delete_checkpoint: bool) -> str:
    """What a delete would do, said before it is done (plain text: the page and the CLI ask with it)."""
    if run.active:
        raise JobError(f"run {run.id} is {run.status}; cancel it before deleting it")
    zoo = f" and its zoo entry {run.zoo_name!r}" if run.zoo_name else ""
    if not has_checkpoint(run):
        return (f"Delete run {run.id} ({run.name}, {run.status})? It has no checkpoint: its record and its whole "
                f"folder {run.out_dir} go{zoo}.")
    if delete_checkpoint:
        return (f"Delete run {run.id} ({run.name}) AND ITS CHECKPOINT? Its record and its folder {run.out_dir} "
                f"(weights included) go{zoo}" + (", so the model leaves every model list." if run.zoo_name else "."))
    kept = f" and in the zoo as {run.zoo_name!r}" if run.zoo_name else ""
    return (f"Delete run {run.id} ({run.name})? Its record, its log and its resumable state go; its checkpoint "
            f"stays in {run.out_dir}{kept}.")


def delete_report(report: Mapping, run: Run) -> str:
    """What ``JobManager.delete`` did, in words."""
    removed, kept = list(report.get("removed") or []), list(report.get("kept") or [])
    text = f"Deleted run {run.id} ({run.name})."
    if run.zoo_manifest and run.zoo_manifest in removed:
        text += f" Its zoo entry {run.zoo_name!r} was removed."
    elif run.zoo_manifest and run.zoo_manifest in kept:
        text += f" Its checkpoint was kept: still in the zoo as {run.zoo_name!r}."
    elif kept:
        text += " Its checkpoint was kept."
    return text + "".join([*(f"\n- removed {p}" for p in removed), *(f"\n- kept {p}" for p in kept)])


def grounding_model(run: Run) -> str:
    """The zoo name a finished run opens with in the Grounding tab."""
    if run.status != DONE or not run.zoo_name:
        raise JobError(f"run {run.id} is {run.status}: only a finished run is in the zoo (it joins when done)")
    if not run.zoo_manifest or not Path(run.zoo_manifest).is_file():
        raise JobError(f"run {run.id}'s zoo entry {run.zoo_manifest} is gone (deleted from the zoo)")
    return run.zoo_name


# ---- the sweep form's task options (declared by explorer.evaluation.tasks) --------------------------------

# every sweep task's declared options, but unpickling (never allowed from the page)
FORM_OPTIONS = tuple(option for option in sweep_options() if option.name != "allow_pickle")


def form_options(access, values) -> dict:
    """The sweep form's fields (``FORM_OPTIONS``, in order) as the sweep's options: empty ones and switches at
    their default left out, files through ``access.path``; the sweep checks the rest by the declarations."""
    options = {}
    for option, value in zip(FORM_OPTIONS, values):
        if isinstance(value, str):
            value = value.strip()
        if value is None or value == "" or (option.kind == "flag" and value == bool(option.default)):
            continue
        if option.kind == "path":
            value = str(access.path(value, option.name))
        elif option.kind == "int":
            value = whole(value, option.name)
        options[option.name] = value
    return options


__all__ = ["COLUMNS", "CPU_PROCESSES", "DEFAULT_COLUMNS", "FORM_OPTIONS", "form_options", "DEFAULT_MAX_STEPS", "DEFAULT_METHOD", "DEFAULT_SIZE",
           "FROM_SCRATCH", "Form", "LOG_TAIL", "curve_panels", "curves_figure", "defaults_note", "defaults_rows",
           "delete_question", "delete_report", "details_markdown", "detail_signature", "device_choices",
           "device_request", "duration",
           "ensure_training_world", "evaluation_markdown", "evaluation_rows", "form_overrides", "grounding_model",
           "has_checkpoint", "init_choices", "last_metrics", "log_text", "parse_overrides", "resolve_data",
           "run_rows", "shown", "submit_form", "training_world_root", "zoo_stamp"]
