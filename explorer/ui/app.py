"""Assemble the tabs into one page, and serve it on localhost."""

from __future__ import annotations

import gradio as gr

from explorer.core.runtime import keep_releasing_freed_memory, prepare_process
from explorer.grounding.sentence_maps import MapCache
from explorer.jobs import JobManager
from explorer.retrieval.indexing import Indexer
from explorer.ui import generation_tab, grounding_tab, jobs_tab, memory_panel, models_tab, retrieval_tab
from explorer.ui.view_controls import export_root
from explorer.zoo import Zoo

TITLE = "explorer: what long-text CLIP models see"


def page_options() -> dict:
    """Launch options that shape the page. System fonts: the default theme would fetch Google Fonts."""
    theme = gr.themes.Default(font=["ui-sans-serif", "system-ui", "sans-serif"],
                              font_mono=["ui-monospace", "SFMono-Regular", "monospace"])
    # Exported figures are written outside the working directory; the page may download them.
    return {"theme": theme, "footer_links": ["api", "settings"], "allowed_paths": [str(export_root())], "css": PAGE_CSS}


# Gradio breaks words anywhere ("backgroun d") in highlighted text and table cells; break between
# words, and inside one only when it cannot fit on its own line.
PAGE_CSS = """
#token-budget .textfield, #token-budget .token, #token-budget .text { word-break: normal !important;
  overflow-wrap: break-word !important; }
.table-wrap th, .table-wrap td, .table-wrap th *, .table-wrap td * { word-break: normal !important;
  overflow-wrap: break-word !important; hyphens: auto; }
"""


def build_app(zoo: Zoo | None = None, indexer: Indexer | None = None, jobs: JobManager | None = None) -> gr.Blocks:
    zoo = zoo or Zoo()
    cache = MapCache()
    indexer = indexer or Indexer()  # one embedding worker for every session: embeddings share the cores
    # One manager for every session; finished runs join this zoo. Its first list() reconciles the runs
    # whose process died while no app was watching.
    jobs = jobs or JobManager(zoo_root=zoo.root)
    with gr.Blocks(title=TITLE, analytics_enabled=False) as app:
        gr.Markdown(f"# {TITLE}")
        with gr.Tabs(elem_id="main-tabs") as tabs:  # ids: other tabs switch to one (``gr.Tabs(selected=id)``)
            with gr.Tab("Grounding", id="grounding"):
                grounding = grounding_tab.build(zoo, cache)
            with gr.Tab("Retrieval", id="retrieval"):
                retrieval_models, retrieval_load = retrieval_tab.build(zoo, indexer, grounding, tabs)
            with gr.Tab("Generation", id="generation"):
                generation_models = generation_tab.build(zoo)
            with gr.Tab("Jobs", id="jobs"):
                jobs_init, jobs_changes, jobs_load = jobs_tab.build(jobs, zoo, grounding, tabs)
            with gr.Tab("Models", id="models"):
                zoo_changes, zoo_listing = models_tab.build(zoo)
                memory_panel.build()
        # The zoo is live: every model list follows it, after a change in the Models tab or the Jobs tab (a
        # run finished, was deleted, or opens in Grounding) and on every page load (another session, or the
        # CLI, may have changed it).
        refreshes = [dict(fn=lambda current: grounding_tab.refresh_models(zoo, current), inputs=grounding.models,
                          outputs=grounding.models),
                     dict(fn=lambda current: retrieval_tab.refresh_models(zoo, current), inputs=retrieval_models,
                          outputs=retrieval_models),
                     dict(fn=lambda current: jobs_tab.refresh_inits(zoo, current), inputs=jobs_init, outputs=jobs_init),
                     dict(fn=lambda current: generation_tab.refresh_models(zoo, current), inputs=generation_models,
                          outputs=generation_models)]
        for refresh in refreshes:
            for event in [*zoo_changes, *jobs_changes]:
                event.then(**refresh)
            app.load(**refresh)
        app.load(**zoo_listing)
        for handler in [*retrieval_load, *jobs_load]:
            app.load(**handler)
    return app


def launch(host: str = "127.0.0.1", port: int = 7860, share: bool = False, auth: tuple[str, str] | None = None,
           zoo_root: str | None = None, block: bool = True, device: str = "auto"):
    """Serve the app. Binds localhost unless ``host`` says otherwise; sharing and auth are explicit."""
    prepare_process()  # no telemetry, offline: also when called from Python rather than the CLI
    keep_releasing_freed_memory()
    app = build_app(Zoo(zoo_root, device=device))
    app.queue(default_concurrency_limit=2)
    app.launch(server_name=host, server_port=port, share=share, auth=auth, prevent_thread_lock=not block,
               show_error=True, **page_options())
    return app
