"""Assemble the tabs into one page, and serve it on localhost (or, as a read-only demo, to others)."""

from __future__ import annotations

import asyncio
import logging
import os
import threading

import gradio as gr
from starlette.middleware import Middleware

from explorer.core.runtime import keep_releasing_freed_memory, prepare_process
from explorer.grounding.sentence_maps import MapCache
from explorer.jobs import JobManager
from explorer.retrieval.indexing import Indexer
from explorer.core.images import set_decode_slots
from explorer.ui import (generation_tab, grounding_tab, host_guard, jobs_tab, memory_panel, models_tab, request_rules,
                         retrieval_tab)
from explorer.ui.access import PUBLIC_CACHE_SECONDS, PUBLIC_UPLOAD_BYTES, QUEUE_SIZE, Access
from explorer.ui.budget import HEAVY
from explorer.ui.page_guard import PageGuard
from explorer.ui.startup import start_page
from explorer.ui.view_controls import export_root
from explorer.zoo import Zoo

TITLE = "explorer: what long-text CLIP models see"


def page_options(access: Access | None = None, any_host: bool = False) -> dict:
    """Launch options that shape the page. System fonts: the default theme would fetch Google Fonts.
    Gradio serves files from its own cache and from the exports folder only (under ``$EXPLORER_HOME``);
    a public page also bounds each upload in bytes (the image rules bound its pixels). The owner's page
    answers only loopback names and its own pages (``host_guard``; ``any_host``: any name, ``--trusted``)."""
    theme = gr.themes.Default(font=["ui-sans-serif", "system-ui", "sans-serif"],
                              font_mono=["ui-monospace", "SFMono-Regular", "monospace"])
    public = access is not None and access.public
    guard = host_guard.middleware(public, access.hosts if access else (), any_host)
    options = {"theme": theme, "footer_links": ["api", "settings"], "allowed_paths": [str(export_root())],
               "css": PAGE_CSS, "app_kwargs": {"middleware": guard}}
    if access is not None:
        # Inside the host guard, in front of Gradio's routes: sessions, uploads, request bodies, links.
        guard.append(Middleware(PageGuard, budget=access.budget, public=access.public))
        options["show_error"] = not access.public  # a public page shows our messages, not Gradio's texts
    if public:
        options["max_file_size"] = PUBLIC_UPLOAD_BYTES
    return options


# Gradio breaks words anywhere ("backgroun d") in highlighted text and table cells; break between
# words, and inside one only when it cannot fit on its own line.
PAGE_CSS = """
#token-budget .textfield, #token-budget .token, #token-budget .text { word-break: normal !important;
  overflow-wrap: break-word !important; }
.table-wrap th, .table-wrap td, .table-wrap th *, .table-wrap td * { word-break: normal !important;
  overflow-wrap: break-word !important; hyphens: auto; }
/* A header breaks between its words only ("metho d" read as two); the column widths fit the words. Gradio 6
   draws body cells as div.body-cell, which the rule above misses: they get its word-boundary rule too. */
.table-wrap th, .table-wrap th * { overflow-wrap: normal !important; hyphens: manual !important; }
.table-wrap .body-cell, .table-wrap .body-cell * { word-break: normal !important;
  overflow-wrap: break-word !important; }
/* The run table's ten columns fit two thirds of a 1400 px page at 13 px (jobs_tab.TABLE_WIDTHS). */
#jobs-table th, #jobs-table th *, #jobs-table td, #jobs-table td *, #jobs-table .body-cell,
#jobs-table .body-cell * { font-size: 13px !important; }
#jobs-table .cell-wrap { padding-left: 5px !important; padding-right: 5px !important; }
"""


def build_app(zoo: Zoo | None = None, indexer: Indexer | None = None, jobs: JobManager | None = None,
              access: Access | None = None) -> gr.Blocks:
    """The page. ``access``: its rules (default: owner mode, typed paths under the zoo folder and
    ``$EXPLORER_HOME``); a public page has no Jobs tab and no controls that change the zoo."""
    zoo = zoo or Zoo()
    access = access or Access.for_app(zoo.root)
    cache = MapCache()
    indexer = indexer or Indexer()  # one embedding worker for every session: embeddings share the cores
    # One manager for every session; finished runs join this zoo. Its first list() reconciles the runs
    # whose process died while no app was watching. A public page has no runs: the store is never opened.
    if not access.public:
        jobs = jobs or JobManager(zoo_root=zoo.root)
    # A public page's uploads leave Gradio's cache after an hour (checked hourly): visitors cannot fill the disk.
    cache_policy = {"delete_cache": PUBLIC_CACHE_SECONDS} if access.public else {}
    with gr.Blocks(title=TITLE, analytics_enabled=False, **cache_policy) as app:
        gr.Markdown(f"# {TITLE}")
        if access.public:
            gr.Markdown(access.describe(), elem_id="public-banner")
        with gr.Tabs(elem_id="main-tabs") as tabs:  # ids: other tabs switch to one (``gr.Tabs(selected=id)``)
            with gr.Tab("Grounding", id="grounding"):
                grounding, grounding_loads = grounding_tab.build(zoo, cache, access)
            with gr.Tab("Retrieval", id="retrieval"):
                retrieval_models, retrieval_load = retrieval_tab.build(zoo, indexer, access, grounding, tabs)
            with gr.Tab("Generation", id="generation"):
                generation_models, generation_load = generation_tab.build(zoo, access)
            jobs_init, jobs_changes, jobs_load = None, [], []
            if not access.public:
                with gr.Tab("Jobs", id="jobs"):
                    jobs_init, jobs_changes, jobs_load = jobs_tab.build(jobs, zoo, access, grounding, tabs)
            with gr.Tab("Models", id="models"):
                zoo_changes, zoo_listing = models_tab.build(zoo, access)
                if not access.public:  # what the server holds is the owner's business
                    memory_panel.build()
        # The zoo is live: every model list follows it, after a change in the Models tab or the Jobs tab (a
        # run finished, was deleted, or opens in Grounding) and on every page load (another session, or the
        # CLI, may have changed it).
        retrieval_refresh = dict(fn=lambda current: retrieval_tab.refresh_models(zoo, current),
                                 inputs=retrieval_models, outputs=retrieval_models)
        jobs_refresh = [] if jobs_init is None else [dict(fn=lambda current: jobs_tab.refresh_inits(zoo, current),
                                                          inputs=jobs_init, outputs=jobs_init)]
        refreshes = [dict(fn=lambda current: grounding_tab.refresh_models(zoo, current), inputs=grounding.models,
                          outputs=grounding.models),
                     retrieval_refresh,
                     dict(fn=lambda current: generation_tab.refresh_models(zoo, current), inputs=generation_models,
                          outputs=generation_models),
                     *jobs_refresh]
        for refresh in refreshes:
            for event in [*zoo_changes, *jobs_changes]:
                event.then(**refresh)
        # On every page load: the lists as the zoo is now, and what the page was built without (the method
        # modules, the tokenizer, the zoo's checks: seconds the first time, so the page serves before them).
        page_loads = [*grounding_loads, retrieval_refresh, generation_load, *jobs_refresh, zoo_listing,
                      *retrieval_load, *jobs_load]
        for handler in page_loads:
            app.load(**handler)
    return app


# Gradio's queue rebuilds a pandas summary of its last 10,000 events after every event by default (its
# monitoring page's statistics): 25-36 ms of the server's time per slider change. Every 100th event is enough.
ANALYTICS_EVERY = 100


def serve(app: gr.Blocks, access: Access) -> gr.Blocks:
    """The app's queue: two requests at a time; on a public page no request skips it (the REST routes
    are closed), it holds at most ``QUEUE_SIZE`` and each visitor session at most ``access.session_cap``."""
    if access.public:
        app.queue(default_concurrency_limit=2, max_size=QUEUE_SIZE, api_open=False)
        cap_sessions(app, access.session_cap, access.budget.heavy_per_session)
    else:
        app.queue(default_concurrency_limit=2)
    request_rules.install(app, access.budget, access.public)  # texts in the budget, heavy events grouped, no fetches
    set_decode_slots(access.budget.decodes_at_once)
    if "GRADIO_ANALYTICS_CACHE_FREQUENCY" not in os.environ:  # the owner's own setting wins
        app._queue.ANAYLTICS_CACHE_FREQUENCY = ANALYTICS_EVERY  # (sic: Gradio's spelling)
    return app


def cap_sessions(app: gr.Blocks, cap: int, heavy_cap: int | None = None) -> None:
    """Refuse a request (HTTP 503, said in one line) that names no session, or whose session already has
    ``cap`` requests queued or running, or ``heavy_cap`` of the heavy ones (``budget.HEAVY``: a visitor who
    sends ten big pictures at once waits for two, and the others' Draws are not queued behind all ten).
    Gradio's queue keeps each event in ``event_ids_to_events`` from join to end; its ``push`` is the one door
    every queued request goes through. Count and push happen under one lock, so a burst cannot slip past."""
    queue = app._queue
    push = queue.push
    door = asyncio.Lock()
    heavy = HEAVY["concurrency_id"]

    async def capped_push(body, request, username):
        session = body.session_hash
        async with door:
            if not session:
                message = "a request must name its session on this page"
            else:
                held = [event for event in list(queue.event_ids_to_events.values()) if event.session_hash == session]
                fn = app.fns.get(body.fn_index) if isinstance(body.fn_index, int) else None
                held_heavy = sum(event.concurrency_id == heavy for event in held)
                if len(held) >= cap:
                    message = (f"this page already has {len(held)} requests waiting or running (at most {cap}): "
                               "wait for them")
                elif (heavy_cap is not None and fn is not None and fn.concurrency_id == heavy
                      and held_heavy >= heavy_cap):
                    message = (f"this page already has {held_heavy} pictures, maps or searches waiting or running "
                               f"(at most {heavy_cap}): wait for them")
                else:
                    answer = await push(body=body, request=request, username=username)
                    if fn is not None and fn.concurrency_id in queue.event_queue_per_concurrency_id:
                        take_turns(queue, queue.event_queue_per_concurrency_id[fn.concurrency_id].queue)
                    return answer
        log.warning("refused: %s", message)
        return False, message, "queue_full"

    queue.push = capped_push


def take_turns(queue, waiting: list) -> None:
    """Reorder a concurrency group's waiting events so that sessions take turns: each session's k-th request
    (its running ones counted) waits behind every other session's earlier ones, arrival order otherwise.
    Gradio's queue is first come, first served: a visitor who queues many requests through many sessions
    would otherwise hold every other visitor behind all of them."""
    group = {id(event) for event in waiting}
    turns: dict[str, int] = {}
    for event in list(queue.event_ids_to_events.values()):  # running in this group: they count as taken turns
        if id(event) not in group and waiting and event.concurrency_id == waiting[0].concurrency_id:
            turns[event.session_hash] = turns.get(event.session_hash, 0) + 1
    ranked = []
    for position, event in enumerate(waiting):
        ranked.append((turns.get(event.session_hash, 0), position, event))
        turns[event.session_hash] = turns.get(event.session_hash, 0) + 1
    waiting[:] = [event for _, _, event in sorted(ranked, key=lambda item: item[:2])]


log = logging.getLogger("explorer.access")


def launch(host: str | None = None, port: int = 7860, share: bool = False, auth: tuple[str, str] | None = None,
           zoo_root: str | None = None, block: bool = True, device: str = "auto", access: Access | None = None,
           announce=None):
    """Serve the app. Binds ``host``, else ``$GRADIO_SERVER_NAME``, else localhost, as Gradio would
    (``host_guard.resolve_bind``), and says so to Gradio; sharing and auth are explicit. Others reach it
    (``share``, or an address not loopback): public unless ``access`` says otherwise (``--trusted``).
    ``announce(url)`` is called once the page serves."""
    prepare_process()  # no telemetry, offline: also when called from Python rather than the CLI
    keep_releasing_freed_memory()
    zoo = Zoo(zoo_root, device=device)
    bind = host_guard.resolve_bind(host)
    others = share or not host_guard.is_loopback(bind)
    access = access or Access.for_app(zoo.root, public=others)
    app = serve(build_app(zoo, access=access), access)
    # No SSR: its Node front would listen on an address of its own choosing.
    start_page(app, server_name=bind, server_port=port, share=share, auth=auth, prevent_thread_lock=True,
               ssr_mode=False, **page_options(access, any_host=others))
    if announce is not None:
        announce(app.share_url or app.local_url)
    warm_up()
    if block:
        app.block_thread()
    return app


def warm_up() -> threading.Thread:
    """Import, in the background once the page serves, what the first page load and the first Draw need
    (the method modules with open_clip and torchvision, the tokenizer's tables, scikit-image's Otsu): the
    page was built without them. A request that needs one meanwhile waits for its import, nothing more."""

    def work():
        from explorer.grounding.masks import otsu_mask
        from explorer.models.methods import discover_methods
        from explorer.models.tokenizer import CLIP_TOKENS

        discover_methods()
        CLIP_TOKENS.count("warm up")
        otsu_mask([[0.0, 1.0]])

    thread = threading.Thread(target=work, name="explorer-warm-up", daemon=True)
    thread.start()
    return thread
