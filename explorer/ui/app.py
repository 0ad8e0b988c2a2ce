"""Assemble the tabs into one page, and serve it on localhost (or, as a read-only demo, to others)."""

from __future__ import annotations

import threading

import gradio as gr
from starlette.middleware import Middleware

from explorer.core.runtime import keep_releasing_freed_memory, keep_start_up_out_of_collections, prepare_process
from explorer.grounding.sentence_maps import MapCache
from explorer.jobs import JobManager
from explorer.models.precision import AUTO
from explorer.retrieval.indexing import Indexer
from explorer.serve import host_guard
from explorer.ui import (generation_tab, grounding_tab, jobs_tab, memory_panel, models_tab, page_load, results_tab,
                         retrieval_tab)
from explorer.serve.access import PUBLIC_CACHE_SECONDS, PUBLIC_UPLOAD_BYTES, Access
from explorer.serve.gradio_cache import CachePruner
from explorer.serve.page_guard import PageGuard
from explorer.serve.queue_guard import ANALYTICS_EVERY, install as serve  # noqa: F401 - the app's queue
from explorer.serve.startup import start_page
from explorer.serve.temp_folder import own_temp_folder, remove_own_temp_folder
from explorer.serve.upload_ledger import UploadLedger
from explorer.ui.theme import page_theme
from explorer.ui.view_controls import export_root
from explorer.zoo import Zoo

TITLE = "explorer: what long-text CLIP models see"


def page_options(access: Access | None = None, any_host: bool = False, uploads: UploadLedger | None = None) -> dict:
    """Launch options that shape the page. System fonts: the default theme would fetch Google Fonts.
    Gradio serves files from its own cache and from the exports folder only (under ``$EXPLORER_HOME``);
    a public page also bounds each upload in bytes (the image rules bound its pixels). The owner's page
    answers only loopback names and its own pages (``host_guard``; ``any_host``: any name, ``--trusted``).
    ``uploads``: the upload ledger the page's guard keeps (shared with the cache's pruning)."""
    theme = page_theme()  # every text at least 4.5:1 (explorer.ui.theme)
    public = access is not None and access.public
    guard = host_guard.middleware(public, access.hosts if access else (), any_host)
    # No run history: Gradio 6 keeps every event's inputs and outputs (the maps board's HTML too) in the
    # visitor's localStorage by default, parsing and rewriting the whole history on every status message (a Draw
    # cost Chromium 2.2-2.7 CPU s once a session had grown, 1.0-1.3 s without it), and serves a history page and
    # a route to save runs to a Hugging Face bucket: a page to review and a way out to the network it needs not.
    options = {"theme": theme, "footer_links": ["api", "settings"], "allowed_paths": [str(export_root())],
               "css": PAGE_CSS, "head": PAGE_HEAD, "app_kwargs": {"middleware": guard}, "run_history": False}
    if access is not None:
        # Inside the host guard, in front of Gradio's routes: sessions, uploads, request bodies, links.
        guard.append(Middleware(PageGuard, budget=access.budget, public=access.public, uploads=uploads))
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
/* A gallery label is the picture's caption start ("#0 · A large red cube..."): two lines of it over the
   thumbnail, not the one line Gradio cuts at "#0 · An ...". */
#retrieval-query-gallery .caption-label, [id^="retrieval-gallery-"] .caption-label { white-space: normal !important;
  max-width: 94% !important; font-size: 12px; line-height: 1.25; display: -webkit-box; -webkit-line-clamp: 2;
  -webkit-box-orient: vertical; overflow: hidden; padding-bottom: 0 !important; max-height: 3.1em; }
/* A folded accordion's header overflowed its block by 2-3 px (494 px in 491 at 1400 px): a stray sideways
   scroll bar under "Token budget", "Dense caption", "Ground truth"... Nothing in them scrolls sideways. */
.gr-accordion { overflow-x: hidden !important; }
/* A one-line note (Markdown, no container) while its handler runs holds Gradio's progress timer, taller than the
   line: the note became a scrolling region no key can reach (axe: scrollable-region-focusable, serious). */
.block.hide-container { overflow: visible !important; }
/* A phone (390 px): Gradio's paddings leave the page's content 287 px; give the board and tables the width. */
@media (max-width: 640px) {
  .gradio-container { padding-left: 4px !important; padding-right: 4px !important; }
  .gradio-container .tabitem, .gradio-container .tab-wrapper + div { padding-left: 0 !important;
    padding-right: 0 !important; }
}
"""


# Gradio's empty output boxes (a file, image or plot not filled yet) carry an aria-label on a plain div, which
# ARIA does not allow (axe: aria-prohibited-attr, serious): named as the picture-like placeholder they are.
PAGE_HEAD = """<script>
(() => {
  const name = () => document.querySelectorAll('.empty[aria-label]:not([role])')
    .forEach(box => box.setAttribute('role', 'img'));
  new MutationObserver(name).observe(document.documentElement, {childList: true, subtree: true});
})();
</script>"""


def build_app(zoo: Zoo | None = None, indexer: Indexer | None = None, jobs: JobManager | None = None,
              access: Access | None = None) -> gr.Blocks:
    """The page. ``access``: its rules (default: owner mode, typed paths under the zoo folder and
    ``$EXPLORER_HOME``); a public page has no Jobs tab and no controls that change the zoo."""
    zoo = zoo or Zoo(precision=AUTO)  # the page's one default, as ``launch`` and the command line
    access = access or Access.for_app(zoo.root)
    cache = MapCache()
    indexer = indexer or Indexer()  # one embedding worker for every session: embeddings share the cores
    # One manager for every session; finished runs join this zoo. Its first list() reconciles the runs
    # whose process died while no app was watching. A public page has no runs: the store is never opened.
    if not access.public:
        jobs = jobs or JobManager(zoo_root=zoo.root)
    # A public page's files leave Gradio's cache after an hour (checked every 10 minutes; bytes: gradio_cache).
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
                with gr.Tab(jobs_tab.JOBS_TAB, id="jobs"):
                    jobs_init, jobs_changes, jobs_load = jobs_tab.build(jobs, zoo, access, grounding, tabs)
                with gr.Tab("Results", id="results"):  # an evaluation's numbers opened as their units
                    results_tab.build(zoo, access, jobs, cache)
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
        # What the first view shows (the caption's budget, the chosen models' labels) comes in events of its own,
        # each as soon as it is ready; every other tab's lists in one event a tab (``page_load``: each event costs
        # the browser; a tab's handlers run in turn, the tabs side by side, so the Models table does not wait for
        # the Retrieval tab's dataset).
        tabs_lists = [[retrieval_refresh, *retrieval_load], [generation_load], [*jobs_refresh, *jobs_load],
                      [zoo_listing]]
        for handler in [*grounding_loads, *(page_load.one_event(lists) for lists in tabs_lists if lists)]:
            app.load(**handler)
    return app


def launch(host: str | None = None, port: int = 7860, share: bool = False, auth: tuple[str, str] | None = None,
           zoo_root: str | None = None, block: bool = True, device: str = "auto", access: Access | None = None,
           announce=None, forwarded_allow_ips: str | None = None, precision: str = AUTO, zoo: Zoo | None = None):
    """Serve the app. Binds ``host``, else ``$GRADIO_SERVER_NAME``, else localhost, as Gradio would
    (``host_guard.resolve_bind``), and says so to Gradio; sharing and auth are explicit. Others reach it
    (``share``, or an address not loopback): public unless ``access`` says otherwise (``--trusted``).
    ``forwarded_allow_ips``: the proxies whose ``X-Forwarded-For`` names the client (``clients.trusted_proxies``).
    ``precision``: what the models compute in ("auto": bf16 where the hardware has it; the page says which).
    ``announce(url)`` is called once the page serves. ``zoo`` and ``access``: the components the command line
    built (its ``zoo_root``, ``device`` and ``precision`` are then the zoo's), so nothing is built twice."""
    prepare_process()  # no telemetry, offline: also when called from Python rather than the CLI
    own_temp_folder()  # before the app is built: its files in a folder no other server on the machine deletes
    keep_releasing_freed_memory()
    zoo = zoo or Zoo(zoo_root, device=device, precision=precision)
    bind = host_guard.resolve_bind(host)
    others = share or not host_guard.is_loopback(bind)
    access = access or Access.for_app(zoo.root, public=others)
    app = serve(build_app(zoo, access=access), access)
    uploads = UploadLedger(access.budget)
    # No SSR: its Node front would listen on an address of its own choosing.
    start_page(app, server_name=bind, server_port=port, share=share, auth=auth, prevent_thread_lock=True,
               ssr_mode=False, forwarded_allow_ips=forwarded_allow_ips,
               **page_options(access, any_host=others, uploads=uploads))
    cache = CachePruner(app, access.budget, uploads.held_folders)  # Gradio's temp folder, in the budget
    if access.budget.cache_bytes is not None or access.budget.cache_seconds is not None:
        cache.start()
    if announce is not None:
        announce(app.share_url or app.local_url)
    warm_up()
    if block:
        stop_on_signals(cache.clear)
        try:
            app.block_thread()
        finally:
            cache.clear()  # what the app wrote in Gradio's temp folder goes with it
            remove_own_temp_folder()  # and the folder of its own, nobody else's
    return app


def stop_on_signals(cleanup) -> None:
    """SIGTERM (a service manager's stop) ends the page as Ctrl-C does, and both run ``cleanup`` first, while
    Gradio still lists its files (its own shutdown deletes them and forgets their folders); without this the
    process dies on SIGTERM with its files left in Gradio's temp folder."""
    import signal

    def interrupt(signum, frame):
        cleanup()
        raise KeyboardInterrupt

    if threading.current_thread() is threading.main_thread():
        for number in (signal.SIGTERM, signal.SIGINT):
            signal.signal(number, interrupt)


def warm_up() -> threading.Thread:
    """Import, in the background once the page serves, what the first page load and the first Draw need
    (the method modules with open_clip and torchvision, the tokenizer's tables, scikit-image's Otsu, the focus
    view's Plotly): the
    page was built without them. A request that needs one meanwhile waits for its import, nothing more."""

    def work():
        from explorer.grounding.masks import otsu_mask
        from explorer.models.methods import discover_methods
        from explorer.models.tokenizer import CLIP_TOKENS

        discover_methods()
        CLIP_TOKENS.count("warm up")
        otsu_mask([[0.0, 1.0]])
        # The focus view's first open imported Plotly's subplots and scikit-image's contours: 0.7 s of its time.
        import plotly.subplots  # noqa: F401
        import skimage.measure  # noqa: F401

        keep_start_up_out_of_collections()  # what start-up made is not walked by every full collection again

    thread = threading.Thread(target=work, name="explorer-warm-up", daemon=True)
    thread.start()
    return thread
