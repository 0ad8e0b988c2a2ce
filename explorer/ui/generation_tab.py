"""Generation tab: a long caption drawn by SDXL with a long text tower swapped in, beside stock SDXL.

Without SDXL weights (a fresh machine) the tab says in one line how to point to them and still
shows what each text encoder reads: the token budget per sentence for stock (77) and swapped (248).
With them, Generate queues the work on one background worker (the page stays responsive and
other tabs answer), a timer shows progress per denoising step, and Cancel stops between steps.
The computing is in ``explorer.generation`` and ``explorer.views.generation_view``; this wires it.
"""

from __future__ import annotations

import gradio as gr

from explorer.core.background import BackgroundWorker
from explorer.core.errors import ExplorerError
from explorer.generation.generate import Generator
from explorer.generation.settings import LAYERS, GenerationSettings
from explorer.models.methods import imported_method
from explorer.serve.budget import TEXT
from explorer.serve.access import PUBLIC_GENERATIONS, PUBLIC_SEEDS, Access
from explorer.serve.messages import explain
from explorer.ui.view_controls import as_list, export_dir, keep_value
from explorer.views import generation_view as view
from explorer.zoo import Zoo

POLL_SECONDS = 1.0
MAX_SWAPPED = 2  # stock + two long-text models: three columns
SIZES = [512, 768, 1024]
NO_SCORE = "(none)"


def on_prompt(prompt):
    """(budget line, budget rows): what stock SDXL and the swap read of this prompt, sentence by sentence."""
    try:
        return view.budget_line(prompt), view.budget_rows(prompt)
    except Exception as error:  # noqa: BLE001 - the page says what is wrong and keeps serving
        return explain(error), []


def sdxl_paths(access: Access, sdxl, sdxl_config) -> tuple[str, str]:
    """(SDXL, configs) the page may read: the owner's (set at start) or, in owner mode, paths typed under
    an allowed root. A public page has no field for them; a value sent anyway is refused."""
    typed = [value.strip() if isinstance(value, str) else "" for value in (sdxl, sdxl_config)]
    owners = [str(access.sdxl or ""), str(access.sdxl_config or "")]
    if typed == owners or (access.public and not any(typed)):
        return owners[0], owners[1]
    return tuple(str(access.path(value, what)) if value else "" for value, what in
                 zip(typed, ("SDXL folder or file", "SDXL configs folder")))


def public_limits(worker, seeds) -> None:
    """A public page shares one SDXL among every visitor: a few seeds per request, a few requests at once."""
    if len(view.parse_seeds(seeds)) > PUBLIC_SEEDS:
        raise ExplorerError(f"this public demo draws at most {PUBLIC_SEEDS} seeds per request")
    if sum(task.active for task in worker.tasks()) >= PUBLIC_GENERATIONS:
        raise ExplorerError("the demo's SDXL is busy with other visitors' pictures: try again in a minute")


def sdxl_status(access: Access, sdxl, sdxl_config) -> str:
    """The one line under the SDXL fields, read only where the page may read."""
    try:
        return view.sdxl_line(*sdxl_paths(access, sdxl, sdxl_config))
    except Exception as error:  # noqa: BLE001
        return explain(error)


def generate_button(access: Access, sdxl, sdxl_config) -> tuple:
    """(Generate button, the reason beside it): the button is on only while SDXL base is found where this
    page may read it; the reason shows while it is off. ``generate`` refuses on its own all the same (anyone
    can call the endpoint)."""
    try:
        reason = view.generate_reason(*sdxl_paths(access, sdxl, sdxl_config))
    except Exception as error:  # noqa: BLE001 - a path this page may not read: said, the button stays off
        reason = explain(error)
    return gr.update(interactive=not reason), gr.update(value=reason, visible=bool(reason))


def _number(value, kind, what: str):
    """A number field's value as ``kind``; an ``ExplorerError`` naming the field when it is not one."""
    try:
        return kind(value)
    except (TypeError, ValueError):
        raise ExplorerError(f"{what} takes a number, not {str(value)[:40]!r}") from None


def generate(access: Access, worker, generator, sdxl, sdxl_config, prompt, negative, models, stock, seeds, steps, size,
             guidance, layer, allow_cut, score_with, precision, cpu_offload, attention_slicing, vae_tiling):
    """The Generate button: (task key, status, timer). Returns at once; the timer shows progress."""
    try:
        sdxl, sdxl_config = sdxl_paths(access, sdxl, sdxl_config)
        if access.public:
            public_limits(worker, seeds)
        models = as_list(models)
        if len(models) > MAX_SWAPPED:
            raise ExplorerError(f"choose at most {MAX_SWAPPED} long-text models (with stock SDXL: three columns)")
        settings = GenerationSettings(
            prompt=prompt or "", negative=negative or "", models=models, stock=bool(stock),
            seeds=view.parse_seeds(seeds), steps=_number(steps, int, "steps"), size=_number(size, int, "size"),
            guidance=_number(guidance, float, "guidance"),
            layer=layer, allow_cut=bool(allow_cut), sdxl=sdxl, sdxl_config=sdxl_config,
            precision=precision, cpu_offload=bool(cpu_offload), attention_slicing=bool(attention_slicing),
            vae_tiling=bool(vae_tiling))
        scorer = None if score_with in (None, "", NO_SCORE) else score_with
        task = view.submit_generation(worker, generator, settings, scorer, lambda: export_dir(access.budget))
    except Exception as error:  # noqa: BLE001
        return None, explain(error), gr.Timer(active=False)
    return task.key, status_line(task), gr.Timer(active=True)


def status_line(task) -> str:
    if task.state == "running" and task.total:
        return f"Generating: step {task.done}/{task.total} ({task.phase})."
    if task.state == "running":
        return "Generating: loading SDXL and encoding the prompt…"
    if task.state == "queued":
        return "Queued: another generation is running."
    if task.state == "failed":
        return f"**Cannot do that:** {task.error}"
    if task.state == "stopped":
        return f"Cancelled after step {task.done}."
    seconds = (task.finished or 0) - (task.started or 0)
    return f"Done in {seconds:.1f} s."


def poll(worker, key):
    """The timer: (status, grid, reads, match headers+rows, files, timer); it stops itself at the end."""
    task = worker.task(key) if key else None
    if task is None:
        return "", None, "", gr.update(), None, gr.Timer(active=False)
    if task.active:
        return status_line(task), gr.update(), gr.update(), gr.update(), gr.update(), gr.Timer(active=True)
    saved = task.result if task.state == "done" else None
    if saved is None:
        return status_line(task), gr.update(), gr.update(), gr.update(), gr.update(), gr.Timer(active=False)
    table = gr.update(value=None, visible=False)  # no scorer: no table, not an empty "1 2 3" one
    if saved.match is not None:
        headers, rows = view.match_table(saved.match, saved.seeds[0])
        table = gr.update(value={"headers": headers, "data": rows}, visible=True,
                          column_widths=view.match_widths(len(headers) - len(view.MATCH_HEADERS_FIXED) - 1))
    files = [str(saved.grid_path), str(saved.settings_path)]
    return status_line(task), saved.grid, view.reads_markdown(saved), table, files, gr.Timer(active=False)


def cancel(worker, key) -> str:
    task = worker.task(key) if key else None
    if task is None or not task.active:
        return "Nothing is running."
    worker.stop(task)
    return "Cancelling: the run stops after the current denoising step."


def refresh_models(zoo: Zoo, current):
    choices = view.long_text_models(zoo.manifests())
    names = {name for _, name in choices}
    kept = [name for name in as_list(current) if name in names]
    return keep_value(gr.update(choices=choices, value=kept or [name for _, name in choices[:1]]), current)


def build(zoo: Zoo, access: Access, worker: BackgroundWorker | None = None, generator: Generator | None = None):
    """The tab; returns its model list. On a public page SDXL is the owner's (``--sdxl``): no field for it."""
    worker = worker or BackgroundWorker("explorer-generation")
    generator = generator or Generator(load_model=zoo.load)
    choices = view.long_text_models(zoo.manifests(), imported_method)  # the page's load refreshes it
    default_sdxl, default_config = access.sdxl, access.sdxl_config
    gr.Markdown("Draw a long caption with SDXL base twice: stock (its CLIP-L and bigG read 77 tokens) and with a "
                "long-text model's text tower in `text_encoder` and bigG stretched to 248 positions. Same seed, "
                "scheduler, steps, size and guidance in every column; only the text conditioning differs.")
    with gr.Row(visible=not access.public):
        sdxl = gr.Textbox("" if access.public else str(default_sdxl or ""), scale=3, elem_id="generation-sdxl",
                          label="SDXL base (diffusers folder or .safetensors file, under an allowed folder)")
        sdxl_config = gr.Textbox("" if access.public else str(default_config or ""), scale=1,
                                 label="configs folder (single file only)", elem_id="generation-sdxl-config")
    status_line = view.sdxl_line(default_sdxl, default_config or "")
    if access.public:  # the owner's folders are not the visitors' business
        status_line = "SDXL base is set up by this demo's owner." if default_sdxl and status_line.startswith(
            "SDXL base at") else "This demo has no SDXL: the Generation tab shows the token budgets only."
    sdxl_note = gr.Markdown(status_line, elem_id="generation-sdxl-status")
    prompt = gr.Textbox(view.EXAMPLE_PROMPT, lines=5, label="Long caption", elem_id="generation-prompt")
    # The budget is counted on page load (the tokenizer's first use imports open_clip: seconds).
    budget_note = gr.Markdown("Counting tokens…", elem_id="generation-budget-note")
    budget = gr.Dataframe([], headers=view.BUDGET_HEADERS, interactive=False,
                          wrap=True, column_widths=view.BUDGET_WIDTHS, label="What each text encoder reads",
                          elem_id="generation-budget")
    negative = gr.Textbox("", label="Negative prompt (empty: zeros, as SDXL base does)", elem_id="generation-negative")
    with gr.Row():
        models = gr.Dropdown(choices, value=[name for _, name in choices[:1]], multiselect=True,
                             max_choices=MAX_SWAPPED, label="Long-text models (one column each)",
                             elem_id="generation-models")
        stock = gr.Checkbox(True, label="stock SDXL column", elem_id="generation-stock")
        score_with = gr.Dropdown([NO_SCORE, *choices], value=choices[0][1] if choices else NO_SCORE,
                                 label="Score pictures with", elem_id="generation-score-with")
    with gr.Row():
        seeds = gr.Textbox("0, 1", label="Seeds (one row each)", elem_id="generation-seeds")
        steps = gr.Number(30, precision=0, minimum=1, maximum=200, label="Steps", elem_id="generation-steps")
        size = gr.Dropdown(SIZES, value=1024, allow_custom_value=True, label="Size (px)", elem_id="generation-size")
        guidance = gr.Number(5.0, minimum=0, label="Guidance", elem_id="generation-guidance")
    layer = gr.Radio([(f"{name}: {text}", name) for name, text in LAYERS.items()], value="last",
                     label="Long tower's layer (bigG reads the same one)", elem_id="generation-layer")
    allow_cut = gr.Checkbox(False, label="cut at 248 and go on (a prompt past 248 tokens is refused otherwise)",
                            elem_id="generation-allow-cut")
    with gr.Accordion("GPU options", open=False):
        with gr.Row():
            precision = gr.Radio(["fp16", "fp32"], value="fp16", label="Precision (CPU always fp32)")
            cpu_offload = gr.Checkbox(False, label="model CPU offload")
            attention_slicing = gr.Checkbox(False, label="attention slicing")
            vae_tiling = gr.Checkbox(False, label="VAE tiling")
    ready = view.generate_reason(default_sdxl, default_config or "")
    if access.public and ready:
        ready = "This demo has no SDXL: Generate is off; the budgets above show what each encoder would read."
    with gr.Row(equal_height=True):
        go = gr.Button("Generate", variant="primary", elem_id="generation-go", interactive=not ready)
        stop = gr.Button("Cancel", elem_id="generation-cancel")
        go_reason = gr.Markdown(ready, visible=bool(ready), elem_id="generation-go-reason")
    status = gr.Markdown("", elem_id="generation-status")
    grid = gr.Image(label="Rows: seeds · columns: stock, then each model", type="pil", elem_id="generation-grid",
                    interactive=False, alt_text="Generated pictures: a row per seed, the stock model then each model")
    reads = gr.Markdown("", elem_id="generation-reads")
    # Shown once a generation has scores: an empty table would read as a result ("1 2 3").
    match = gr.Dataframe(label="How well each picture matches each sentence (higher is better; scores of one model "
                               "compare across pictures, not across models)", interactive=False, wrap=True,
                         visible=False, elem_id="generation-match")
    files = gr.File(label="Grid (PNG) and settings (JSON: draws it again with explorer generate --settings)",
                    file_count="multiple", interactive=False, elem_id="generation-files")
    key = gr.State(None)
    timer = gr.Timer(POLL_SECONDS, active=False)

    prompt.change(on_prompt, inputs=prompt, outputs=[budget_note, budget], show_progress="hidden", **TEXT)
    for box, api in ((sdxl, "sdxl_status"), (sdxl_config, "sdxl_config_status")):
        box.change(lambda *values: sdxl_status(access, *values), inputs=[sdxl, sdxl_config], outputs=sdxl_note,
                   show_progress="hidden", api_name=api)
        box.change(lambda *values: generate_button(access, *values), inputs=[sdxl, sdxl_config],
                   outputs=[go, go_reason], show_progress="hidden", api_visibility="undocumented")
    inputs = [sdxl, sdxl_config, prompt, negative, models, stock, seeds, steps, size, guidance, layer, allow_cut,
              score_with, precision, cpu_offload, attention_slicing, vae_tiling]
    go.click(lambda *values: generate(access, worker, generator, *values), inputs=inputs, outputs=[key, status, timer],
             api_name="generate", concurrency_limit=None)
    timer.tick(lambda current: poll(worker, current), inputs=key, outputs=[status, grid, reads, match, files, timer],
               show_progress="hidden", concurrency_limit=None)
    stop.click(lambda current: cancel(worker, current), inputs=key, outputs=status, concurrency_limit=None)
    # On every page load: the model list as the zoo is now, and the prompt's budget.
    load = dict(fn=lambda current, text: (refresh_models(zoo, current), *on_prompt(text)), inputs=[models, prompt],
                outputs=[models, budget_note, budget])
    return models, load
