"""Retrieval tab: a dataset embedded once per model, searched with a text or a picture, Recall@K.

Indexing runs on the app's one ``Indexer`` (a background thread): the Index button returns at once
and a timer shows the progress, so no request waits for an embedding and the other tabs stay
responsive. A search or an evaluation uses only the models that have embedded the whole dataset and
says so for the others. The computing is in ``explorer.views.retrieval_view``; this module wires it.
"""

from __future__ import annotations

import gradio as gr

from explorer.core import paths
from explorer.core.errors import ExplorerError
from explorer.models.methods import discover_methods, imported_method
from explorer.retrieval.indexing import Indexer
from explorer.serve.budget import HEAVY
from explorer.serve.access import Access
from explorer.serve.messages import explain
from explorer.ui.view_controls import (Inputs, as_list, export_dir, keep_value, export_root, export_view, ran_in,
                                      style_controls)
from explorer.views import retrieval_view as view
from explorer.views.settings import MAX_MODELS
from explorer.zoo import Zoo

SPLITS = [view.DEFAULT_SPLIT, "test", "val", "train", "all"]
DIRECTIONS = [("text → image (a caption finds its picture)", "t2i"),
              ("image → text (a picture finds its caption)", "i2t")]
POLL_SECONDS = 1.0
WORST = 20  # rows of the worst-queries table
BAR = 20  # characters of a progress bar
CAPTION_WIDTHS = ["12%", "16%", "14%", "40%", "18%"]  # a picture query's captions, in a quarter of the page


# ---- the model list ---------------------------------------------------------------------------------


def model_choices(zoo: Zoo) -> list[tuple[str, str]]:
    """(label, name), real checkpoints first: each model with its method and context (what decides which
    captions it cuts)."""
    choices = []
    for manifest in zoo.choice_order():
        try:  # the method's name alone on a page built before the method modules are imported
            cls = imported_method(manifest.method)
            title = cls.title if cls else manifest.method
        except ExplorerError:
            title = f"unknown method {manifest.method!r}"
        label = f"{manifest.name} · {title} · {manifest.context_length or '?'} tokens"
        choices.append((label if manifest.trained else f"{label} · UNTRAINED (random weights)", manifest.name))
    return choices


def refresh_models(zoo: Zoo, current):
    """The model list as the zoo is now; the chosen models that are still there stay chosen."""
    discover_methods()
    choices = model_choices(zoo)
    names = {name for _, name in choices}
    return keep_value(gr.update(choices=choices, value=[name for name in as_list(current) if name in names]), current)


# ---- dataset and indexing ---------------------------------------------------------------------------


def open_dataset(access: Access, choice, folder, split):
    """The dataset picked from the list, or the folder typed, if this page may read it: a typed folder
    must lie under an allowed root (a public page takes none), a picked one must be in the list offered."""
    typed = folder.strip() if isinstance(folder, str) else ""
    if typed:
        return view.open_dataset(None, str(access.path(typed, "dataset folder")), split)
    if choice not in (None, "", view.SYNTHETIC) and str(choice) not in {v for _, v in view.dataset_choices()}:
        raise access.refuse(f"{str(choice)[:200]!r} is not one of the datasets this page offers")
    return view.open_dataset(choice, "", split)


def show_dataset(access: Access, choice, folder, split):
    """(what the dataset is, its first pictures for the query gallery)."""
    try:
        dataset = open_dataset(access, choice, folder, split)
    except Exception as error:  # noqa: BLE001 - the page says what is wrong and keeps serving
        return explain(error), []
    lines = view.dataset_lines(dataset)
    return "\n".join([lines[0], *(f"- {line}" for line in lines[1:])]), view.query_pictures(dataset)


def status_markdown(lines) -> str:
    if not lines:
        return "Pick up to 4 models, then **Index**: each embeds the dataset once (kept on disk, reused)."
    shown = []
    for line in lines:
        bar = ""
        if line.active:
            filled = round(BAR * line.fraction)
            bar = f"`{'█' * filled}{'░' * (BAR - filled)}` "
        shown.append(f"- **{line.name}** ({line.state}): {bar}{line.text}")
    return "\n".join(shown)


def index_status(access: Access, load, indexer: Indexer, choice, folder, split, names) -> str:
    """Where each chosen model stands on the dataset (loads the models: the cache is keyed by their weights)."""
    try:
        dataset = open_dataset(access, choice, folder, split)
        return status_markdown(view.index_lines(load, as_list(names), dataset, indexer))
    except Exception as error:  # noqa: BLE001
        return explain(error)


def start_indexing(access: Access, load, indexer: Indexer, choice, folder, split, names):
    """The Index button: (submitted tasks, status, timer). Returns at once; the timer shows progress."""
    try:
        dataset = open_dataset(access, choice, folder, split)
        tasks = view.submit_indexing(load, as_list(names), dataset, indexer)
        lines = view.index_lines(load, as_list(names), dataset, indexer)
    except Exception as error:  # noqa: BLE001
        return [], explain(error), gr.Timer(active=False)
    return tasks, status_markdown(lines), gr.Timer(active=any(line.active for line in lines))


def poll(indexer: Indexer, tasks):
    """The timer: (status, timer) from the submitted tasks alone (no model is loaded); it stops itself
    when every task has finished."""
    lines = [view.task_line(name, task) for name, key in tasks or [] if (task := indexer.task(key)) is not None]
    active = any(line.active for line in lines)
    return status_markdown(lines), gr.Timer(active=active)


def stop_indexing(access: Access, indexer: Indexer, tasks) -> str:
    """Stop the tasks this page submitted. A task is shared by everyone who indexes the same model and dataset,
    so a public page does not stop them: one visitor would stop another's."""
    if access.public:
        return "On this public demo indexing runs to the end (it is shared with other visitors); it is kept on disk."
    for _, key in tasks or []:
        task = indexer.task(key)
        if task is not None and task.active:
            indexer.stop(task)
    return "Stopping after the current batch; what was embedded is kept (Index resumes from there)."


# ---- searching --------------------------------------------------------------------------------------


def column_updates(found) -> list:
    """For each of the MAX_MODELS result columns: (column, header, gallery, caption table) updates."""
    updates = []
    for i in range(MAX_MODELS):
        if i >= len(found):
            updates += [gr.update(visible=False), "", gr.update(value=[]), gr.update(value=[])]
            continue
        one = found[i]
        pictures = one.result is None or one.result.direction == "t2i"
        header = view.header_line(one) if one.result is not None else f"**{one.name}**: {explain(one.error)}"
        shown = one.result is not None  # no empty 420 px box under a model that has no result
        updates += [gr.update(visible=True), header,
                    gr.update(value=view.gallery_items(one), visible=shown and pictures),
                    gr.update(value=view.caption_rows(one), visible=shown and not pictures)]
    return updates


def query_words(query) -> str:
    """How the status line names the query: "the text", "picture #3", "your picture"."""
    if isinstance(query, str):
        return "the text"
    return f"picture #{query}" if isinstance(query, int) else "your picture"


def run_search(access: Access, load, indexer: Indexer, choice, folder, split, names, query, k) -> list:
    """[status, then ``column_updates``] for one query (text, picture number or PIL picture)."""
    try:
        dataset = open_dataset(access, choice, folder, split)
        found = view.search(load, as_list(names), dataset, query, k, indexer)
    except Exception as error:  # noqa: BLE001
        return [explain(error), *[gr.update() for _ in range(4 * MAX_MODELS)]]
    status = (f"Top {int(k)} for {query_words(query)} on {dataset.layout} ({dataset.split}), "
              f"{len(dataset.images)} pictures.")
    # Why a model has no result is said here, under the search buttons, not only in its column far below.
    status += "".join(f"\n- {view.header_line(one)}" for one in found if one.result is None)
    return [status, *column_updates(found)]


def search_text(access: Access, load, indexer, choice, folder, split, names, text, k) -> list:
    return run_search(access, load, indexer, choice, folder, split, names, text or "", k)


def search_number(access: Access, load, indexer, choice, folder, split, names, number, k) -> list:
    if number is None:
        return [explain(ExplorerError("Give the number of a dataset picture (or click one).")),
                *[gr.update() for _ in range(4 * MAX_MODELS)]]
    return run_search(access, load, indexer, choice, folder, split, names, int(number), k)


def search_file(access: Access, load, indexer, choice, folder, split, names, path, k) -> list:
    """An uploaded picture: read by the safe reader first, so a corrupt file says so and nothing runs."""
    try:
        picture = view.read_upload(path)
    except Exception as error:  # noqa: BLE001
        return [explain(error), *[gr.update() for _ in range(4 * MAX_MODELS)]]
    return run_search(access, load, indexer, choice, folder, split, names, picture, k)


def use_caption(access: Access, choice, folder, split, number):
    """(text query, status): the caption of picture #number, to search with it as text."""
    try:
        return view.caption_of(open_dataset(access, choice, folder, split), number), ""
    except Exception as error:  # noqa: BLE001
        return gr.update(), explain(error)


# ---- the search as a figure -----------------------------------------------------------------------------

FIGURE_QUERIES = ("text", "picture #")  # which query the figure shows: the text (t2i) or the picture (i2t)


def export_search_figure(access: Access, load, indexer: Indexer, choice, folder, split, names, which, text, number,
                         k, *style, zoo_root=None):
    """The query as a paper figure (``explorer figure retrieval``): each model's top k in a row, the right
    answer framed; the text finds pictures, a dataset picture finds captions. Every value is checked here."""
    from explorer.views.retrieval_figure import compute_retrieval
    from explorer.views.settings import MAX_K, ViewSettings

    try:
        dataset = open_dataset(access, choice, folder, split)
        if which not in FIGURE_QUERIES:
            raise ExplorerError(f"the figure's query is one of {', '.join(FIGURE_QUERIES)}")
        if which == "text":
            query, direction = (text if isinstance(text, str) else ""), "t2i"
        elif isinstance(number, (int, float)) and not isinstance(number, bool) and float(number).is_integer():
            query, direction = str(int(number)), "i2t"
        else:
            raise ExplorerError("give the number of a dataset picture")
        if isinstance(k, bool) or not isinstance(k, (int, float)) or not 1 <= k <= 50:
            raise ExplorerError("k is a number from 1 to 50")
        chosen = ViewSettings(view="retrieval", data=str(dataset.root), split=dataset.split, queries=[query],
                              k=min(int(k), MAX_K), direction=direction, models=as_list(names))
        figure = compute_retrieval(load, chosen, stores=lambda model, data: view.ready_store(model, data, indexer),
                                   dataset=dataset)
    except Exception as error:  # noqa: BLE001 - the page says what is wrong and keeps serving
        return None, explain(error)
    return export_view(figure, ran_in(load, chosen), *style, zoo_root=zoo_root, budget=access.budget,
                       public=access.public)


# ---- Recall@K and the worst queries ------------------------------------------------------------------


def evaluate(access: Access, load, indexer: Indexer, choice, folder, split, names):
    """The Evaluate button, a model at a time: (note, table, evaluation, CSV, JSON, worst-model list).
    The results are written under the exports folder after each model, for the download buttons."""
    hidden = gr.DownloadButton(visible=False)
    try:
        dataset = open_dataset(access, choice, folder, split)
        steps = view.evaluate_models(load, as_list(names), dataset, indexer)
        exports = None  # one export folder per click, rewritten (atomically) after each model
        for number, (_, evaluation) in enumerate(steps, 1):
            note = "\n".join(f"- {line}" for line in view.evaluation_lines(evaluation))
            models = list(evaluation.entries)
            downloads = [hidden, hidden]
            if models:
                exports = exports or export_dir(access.budget)
                files = view.export_results(evaluation, exports)
                downloads = [gr.DownloadButton(value=str(f), visible=True) for f in files]
            yield (f"{number} of {len(as_list(names))} model(s) done on {dataset.summary()}.\n{note}",
                   view.recall_table(evaluation), evaluation,
                   *downloads, gr.update(choices=models, value=models[0] if models else None))
    except Exception as error:  # noqa: BLE001
        yield explain(error), gr.update(), None, hidden, hidden, gr.update()


def show_worst(evaluation, model, direction):
    """(rows, the queries behind them, note) of the model's worst queries."""
    if evaluation is None or not model:
        return [], [], "Evaluate first: the worst queries come from the evaluation."
    try:
        queries = view.model_worst_queries(evaluation, model, direction or "t2i", WORST)
    except Exception as error:  # noqa: BLE001
        return [], [], explain(error)
    return (view.worst_rows(queries), queries,
            f"{model}'s {len(queries)} worst {direction} queries, largest rank first. Select a row to open its "
            f"picture and caption in the Grounding tab, to see why.")


def open_in_grounding(queries, row):
    """(picture, caption, models, tabs, note): a worst query sent to the Grounding tab."""
    try:
        query = queries[int(row)]
        picture, caption = view.grounding_inputs(query, export_root() / "retrieval-picks",
                                                 paths.example_truth_dir())
    except Exception as error:  # noqa: BLE001
        return gr.update(), gr.update(), gr.update(), gr.update(), explain(error)
    return (picture, caption, [query.model], gr.Tabs(selected="grounding"),
            f"Opened {query.picture_id} in the Grounding tab with {query.model}.")


# ---- the tab ----------------------------------------------------------------------------------------


def build(zoo: Zoo, indexer: Indexer, access: Access, grounding: Inputs | None = None, tabs: gr.Tabs | None = None):
    """The tab; returns its model list (the app refreshes it with the zoo) and what to run on page load.
    On a public page datasets come from the list only: the folder field is not shown, and its handlers
    refuse a typed folder anyway."""
    load = zoo.load
    gr.Markdown("Embed a dataset once per model (kept on disk), search it with a caption or a picture, and measure "
                "Recall@K. The default dataset is the demo models' synthetic world.")
    with gr.Row():
        with gr.Column(scale=1):
            dataset = gr.Dropdown(view.dataset_choices(), value=view.SYNTHETIC, label="Dataset",
                                  elem_id="retrieval-dataset")
            folder = gr.Textbox(label="…or a dataset folder on this machine (DOCCI, Urban1k, DCI, ShareGPT4V, Karpathy "
                                      "JSON, pictures with .txt captions...) under an allowed folder",
                                elem_id="retrieval-folder", placeholder="/data/urban1k", visible=not access.public)
            split = gr.Dropdown(SPLITS, value=view.DEFAULT_SPLIT, allow_custom_value=True,
                                label="Split (default: the layout's own)", elem_id="retrieval-split")
            dataset_note = gr.Markdown(elem_id="retrieval-dataset-note")
            models = gr.Dropdown(model_choices(zoo), value=zoo.default_names(2), multiselect=True,
                                 max_choices=MAX_MODELS, label=f"Models (up to {MAX_MODELS}, side by side)",
                                 elem_id="retrieval-models")
            with gr.Row():
                index_button = gr.Button("Index", variant="primary", elem_id="retrieval-index")
                stop_button = gr.Button("Stop indexing", elem_id="retrieval-stop", visible=not access.public)
            # Under its button: the timer rewrites the index status every second, which would hide it there.
            stop_note = gr.Markdown(elem_id="retrieval-stop-note")
            index_note = gr.Markdown(status_markdown([]), elem_id="retrieval-index-status")
        with gr.Column(scale=2):
            text = gr.Textbox(label="Text query", lines=3, elem_id="retrieval-text",
                              placeholder="a caption: one of the dataset's has a known right answer")
            with gr.Row():
                text_button = gr.Button("Search with the text", variant="primary", elem_id="retrieval-search-text")
                k = gr.Slider(1, 50, value=10, step=1, label="k (results per model)", elem_id="retrieval-k")
            with gr.Row():
                # Tall enough for the whole drop box ("Drop File Here - or - Click to Upload"); at 90 px it was cut.
                upload = gr.File(label="…or a picture file (PNG, JPEG, WebP...)", type="filepath", file_count="single",
                                 elem_id="retrieval-query-image", height=150, file_types=access.picture_types)
                number = gr.Number(label="…or dataset picture #", precision=0, minimum=0, value=0,
                                   elem_id="retrieval-picture-number")
            with gr.Row():
                file_button = gr.Button("Search with the file", elem_id="retrieval-search-file")
                number_button = gr.Button("Search with picture #", elem_id="retrieval-search-picture")
                caption_button = gr.Button("Its caption as the text query", elem_id="retrieval-use-caption")
            # The search's message sits under the buttons that caused it and above the pictures, in view.
            status = gr.Markdown(elem_id="retrieval-status")
            query_gallery = gr.Gallery(label="Dataset pictures: click one to search with it", columns=6, height=260,
                                       allow_preview=False, elem_id="retrieval-query-gallery")
    columns = []
    with gr.Row(equal_height=False):
        for i in range(MAX_MODELS):
            with gr.Column(visible=False, min_width=220) as column:
                header = gr.Markdown(elem_id=f"retrieval-header-{i}")
                gallery = gr.Gallery(columns=3, height=420, object_fit="contain", show_label=False,
                                     elem_id=f"retrieval-gallery-{i}")
                captions = gr.Dataframe(headers=view.CAPTION_COLUMNS, interactive=False, wrap=True, visible=False,
                                        max_height=420, column_widths=CAPTION_WIDTHS, elem_id=f"retrieval-captions-{i}")
            columns += [column, header, gallery, captions]
    with gr.Accordion("The search as a paper figure (each model's top k in a row, the right answer framed)",
                      open=False):
        with gr.Row():
            figure_query = gr.Radio(list(FIGURE_QUERIES), value="text", label="Query (the text finds pictures; a "
                                    "picture # finds captions)", elem_id="retrieval-figure-query")
            style = style_controls("retrieval")
            figure_button = gr.Button("Export figure", elem_id="retrieval-export")
        figure_files = gr.File(label="Figure and settings", file_count="multiple", interactive=False,
                               elem_id="retrieval-export-files")
        figure_note = gr.Markdown(elem_id="retrieval-export-note")
    with gr.Accordion("Recall@K over the whole dataset", open=True):
        with gr.Row():
            evaluate_button = gr.Button("Evaluate", variant="primary", elem_id="retrieval-evaluate")
            csv_button = gr.DownloadButton("Download CSV", visible=False, elem_id="retrieval-csv")
            json_button = gr.DownloadButton("Download JSON", visible=False, elem_id="retrieval-json")
        recall = gr.Dataframe(headers=view.recall_columns(), interactive=False, wrap=True, elem_id="retrieval-recall",
                              label="R@K in %, median ranks (1 = top), RSUM; captions cut at the model's context")
        recall_note = gr.Markdown(elem_id="retrieval-recall-note")
    with gr.Accordion("Worst queries: where the right answer ranked lowest", open=False):
        with gr.Row():
            worst_model = gr.Dropdown([], label="Model", elem_id="retrieval-worst-model")
            direction = gr.Radio(DIRECTIONS, value="t2i", label="Direction", elem_id="retrieval-worst-direction")
        worst = gr.Dataframe(headers=view.WORST_COLUMNS, interactive=False, wrap=True, max_height=400,
                             column_widths=["8%", "56%", "18%", "18%"], elem_id="retrieval-worst")
        worst_note = gr.Markdown(elem_id="retrieval-worst-note")
    tasks, evaluation, queries = gr.State([]), gr.State(None), gr.State([])
    timer = gr.Timer(POLL_SECONDS, active=False)

    where = [dataset, folder, split]
    # The folder is read when typed out (Enter, or leaving the box), not at every keystroke.
    dataset_events = [dataset.change, split.change, folder.submit, folder.blur]
    for event in dataset_events:
        event(lambda *values: show_dataset(access, *values), inputs=where, outputs=[dataset_note, query_gallery],
              trigger_mode="always_last", **HEAVY)
    for event in [*dataset_events, models.change]:
        event(lambda *values: index_status(access, load, indexer, *values), inputs=[*where, models], outputs=index_note,
              trigger_mode="always_last")
    index_button.click(lambda *values: start_indexing(access, load, indexer, *values), inputs=[*where, models],
                       outputs=[tasks, index_note, timer], api_name="retrieval_index", **HEAVY)
    timer.tick(lambda current: poll(indexer, current), inputs=tasks, outputs=[index_note, timer],
               show_progress="hidden")
    stop_button.click(lambda current: stop_indexing(access, indexer, current), inputs=tasks, outputs=stop_note)

    results = [status, *columns]
    by_text, by_number, by_file = ([*where, models, query, k] for query in (text, number, upload))
    text_button.click(lambda *values: search_text(access, load, indexer, *values), inputs=by_text,
                      outputs=results, api_name="retrieval_search_text", **HEAVY)
    text.submit(lambda *values: search_text(access, load, indexer, *values), inputs=by_text, outputs=results, **HEAVY)
    number_button.click(lambda *values: search_number(access, load, indexer, *values), inputs=by_number,
                        outputs=results, api_name="retrieval_search_picture", **HEAVY)
    file_button.click(lambda *values: search_file(access, load, indexer, *values), inputs=by_file,
                      outputs=results, api_name="retrieval_search_file", **HEAVY)
    caption_button.click(lambda *values: use_caption(access, *values), inputs=[*where, number], outputs=[text, status],
                         api_name="retrieval_use_caption")
    figure_button.click(lambda *values: export_search_figure(access, load, indexer, *values, zoo_root=zoo.root),
                        inputs=[*where, models, figure_query, text, number, k, *style],
                        outputs=[figure_files, figure_note], api_name="retrieval_export_figure",
                        **HEAVY)

    def pick(evt: gr.SelectData):
        return evt.index

    query_gallery.select(pick, outputs=number).then(
        lambda *values: search_number(access, load, indexer, *values), inputs=by_number, outputs=results, **HEAVY)

    def run_evaluation(*values):  # a generator function, so that Gradio streams each model's row
        yield from evaluate(access, load, indexer, *values)

    evaluate_button.click(run_evaluation, inputs=[*where, models],
                          outputs=[recall_note, recall, evaluation, csv_button, json_button, worst_model],
                          api_name="retrieval_evaluate", **HEAVY).then(
        show_worst, inputs=[evaluation, worst_model, direction], outputs=[worst, queries, worst_note])
    for control in (worst_model, direction):
        control.input(show_worst, inputs=[evaluation, worst_model, direction], outputs=[worst, queries, worst_note])

    if grounding is not None and tabs is not None:
        def pick_row(current, evt: gr.SelectData):
            return open_in_grounding(current, evt.index[0])

        worst.select(pick_row, inputs=queries,
                     outputs=[grounding.image, grounding.caption, grounding.models, tabs, worst_note])
    # On page load: datasets added under $EXPLORER_HOME/datasets since the app started show in the picker.
    on_load = [dict(fn=lambda: gr.update(choices=view.dataset_choices()), outputs=dataset),
               dict(fn=lambda *values: show_dataset(access, *values), inputs=where,
                    outputs=[dataset_note, query_gallery]),
               dict(fn=lambda *values: index_status(access, load, indexer, *values), inputs=[*where, models],
                    outputs=index_note)]
    return models, on_load
