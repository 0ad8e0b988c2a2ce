"""What every request meets on its way to a handler, installed once on the app by ``explorer.serve.queue_guard.install``.

- Texts: every handler is wrapped so that a text input past the budget's caption cap is refused (one
  line, ``BudgetExceeded``) before the handler reads it: no tokenizer, splitter or renderer ever sees a
  10 MB caption, whichever endpoint it is sent to.
- Heavy requests: the events tagged ``budget.HEAVY`` share one concurrency group of
  ``Budget.heavy_at_once`` (Gradio's own limit is per event: two of each, not two in all); those tagged
  ``budget.TEXT`` (a caption read for its token summary or budget line) one of ``Budget.text_at_once``.
- Time: a handler runs under ``Budget.request_seconds`` (``explorer.core.deadline``): past it, its next model run
  or its next step is not taken and the page says that the request was stopped.
- No outbound connection: Gradio fetches a file input given as a URL; its fetch functions are replaced
  by a refusal (the request is also refused earlier, by ``page_guard``; this is the last line).
- Errors: Gradio's own error texts (which can name server paths) are replaced by ours on a page that does
  not show errors (public); our refusals (``gr.Error``) are shown as they are. An ``ExplorerError`` a
  handler lets escape is shown as its message; anything else as "Internal error (id ...)", its traceback
  logged under that id (``explorer.serve.messages``).
- Server paths: on a public page, every text a handler sends back (messages, tables, labels) names a file
  by its own name, never by the server folder it lies in (``scrub_paths``); files to download keep theirs.
"""

from __future__ import annotations

import functools
import inspect
import logging
import re
import time
from pathlib import PurePosixPath

import gradio as gr

from explorer.core.deadline import check as check_deadline
from explorer.core.deadline import deadline
from explorer.core.errors import ExplorerError
from explorer.serve.budget import HEAVY, TEXT, Budget, BudgetExceeded
from explorer.serve.messages import internal_error, short_numbers

log = logging.getLogger("explorer.access")
OUTBOUND_REFUSAL = "this page does not fetch links: upload the file itself"
GRADIO_ERROR = "the page could not read this request (a value of the wrong type or a file that was not uploaded here)"


TEXT_OUTPUTS = (gr.Markdown, gr.Textbox, gr.HTML, gr.Dataframe, gr.HighlightedText, gr.Label, gr.JSON)
# An absolute path: "/" then at least one "folder/" (not a URL's path, nor "77 / 248", nor "km/h").
_DATA_URI = re.compile(r"data:[\w.+-]+/[\w.+-]+;base64,[A-Za-z0-9+/=]+")
_SERVER_PATH = re.compile(r"(?<![\w:/.~=-])/(?:[^\s/`'\"<>()\[\]]+/)+[^\s/`'\"<>()\[\],;*]*")


def install(app: gr.Blocks, budget: Budget, public: bool = False) -> None:
    """Wrap every handler of ``app`` with the budget's checks (and, ``public``, its texts with
    ``scrub_paths``); put the heavy events in one group."""
    refuse_outbound_fetches()
    replace_gradio_error_texts()
    bound_example_indices()
    for block_fn in app.fns.values():
        if block_fn.fn is not None and not getattr(block_fn.fn, "_explorer_checked", False):
            texts = ({i for i, block in enumerate(block_fn.outputs) if isinstance(block, TEXT_OUTPUTS)} if public
                     else set())
            sent = {i for i, block in enumerate(block_fn.inputs) if not isinstance(block, gr.State)}
            block_fn.fn = checked(block_fn.fn, budget, texts, len(block_fn.outputs), sent)
        if block_fn.concurrency_id == HEAVY["concurrency_id"]:
            block_fn.concurrency_limit = budget.heavy_at_once
        elif block_fn.concurrency_id == TEXT["concurrency_id"]:
            block_fn.concurrency_limit = budget.text_at_once


def first_long_text(values, limit: int) -> str | None:
    """The first text among ``values`` (and lists or dicts of them) longer than ``limit`` characters."""
    for value in values:
        if isinstance(value, str) and len(value) > limit:
            return value
        inner = value.values() if isinstance(value, dict) else value if isinstance(value, (list, tuple)) else ()
        found = first_long_text(inner, limit)
        if found is not None:
            return found
    return None


def scrub_paths(value):
    """``value`` (a text, or lists, tuples and dicts of them) with every absolute path cut to its last part.
    Pictures inlined as data URIs (the maps board's) are left whole: base64 has slashes, not paths."""
    if isinstance(value, str):
        pieces, start = [], 0
        for inline in _DATA_URI.finditer(value):
            pieces += [_scrub_text(value[start:inline.start()]), inline.group()]
            start = inline.end()
        return "".join(pieces) + _scrub_text(value[start:])
    if isinstance(value, (list, tuple)):
        return type(value)(scrub_paths(inner) for inner in value)
    if isinstance(value, dict):
        return {key: scrub_paths(inner) for key, inner in value.items()}
    if hasattr(value, "map") and hasattr(value, "columns"):  # a pandas DataFrame
        return value.map(lambda cell: scrub_paths(cell) if isinstance(cell, str) else cell)
    return value


def _scrub_text(text: str) -> str:
    return _SERVER_PATH.sub(lambda m: PurePosixPath(m.group()).name or "…", text)


def scrub_outputs(result, texts: set[int], n_outputs: int):
    """The handler's outputs with the text ones (positions ``texts``) scrubbed."""
    if not texts:
        return result
    if n_outputs == 1:
        return scrub_paths(result)
    if isinstance(result, (tuple, list)) and len(result) == n_outputs:
        return type(result)(scrub_paths(v) if i in texts else v for i, v in enumerate(result))
    return result


def checked(fn, budget: Budget, texts: set[int] = frozenset(), n_outputs: int = 0, sent: set[int] | None = None):
    """``fn`` behind the text check of the inputs a visitor sends (positions ``sent``, default all: a
    ``gr.State`` is the server's own) and its text outputs (positions ``texts``) through ``scrub_paths``,
    keeping its kind (plain, coroutine, generator) and its signature (Gradio reads it to pass ``gr.Request``
    and progress)."""

    def check(args, kwargs):
        given = [value for i, value in enumerate(args) if sent is None or i in sent]
        text = first_long_text([*given, *kwargs.values()], budget.caption_chars)
        if text is not None:
            try:
                budget.check_text(text, "text")
            except BudgetExceeded as refusal:
                log.warning("refused: %s", refusal)
                raise gr.Error(f"Cannot do that: {refusal}", print_exception=False) from None

    def shown(result):
        return scrub_outputs(result, texts, n_outputs)

    seconds = budget.request_seconds

    if inspect.isasyncgenfunction(fn):
        async def wrapper(*args, **kwargs):
            check(args, kwargs)
            started = time.monotonic()
            try:
                steps = fn(*args, **kwargs)
                while True:
                    with deadline(seconds, started):  # each step: Gradio may run them in different contexts
                        check_deadline()
                        try:
                            item = await steps.__anext__()
                        except StopAsyncIteration:
                            return
                    yield shown(item)
            except Exception as error:  # noqa: BLE001 - said as the contract says (``as_page_error``)
                raise as_page_error(error) from None
    elif inspect.isgeneratorfunction(fn):
        def wrapper(*args, **kwargs):
            check(args, kwargs)
            started = time.monotonic()
            try:
                steps = fn(*args, **kwargs)
                while True:
                    with deadline(seconds, started):
                        check_deadline()
                        try:
                            item = next(steps)
                        except StopIteration:
                            return
                    yield shown(item)
            except Exception as error:  # noqa: BLE001
                raise as_page_error(error) from None
    elif inspect.iscoroutinefunction(fn):
        async def wrapper(*args, **kwargs):
            check(args, kwargs)
            try:
                with deadline(seconds):
                    return shown(await fn(*args, **kwargs))
            except Exception as error:  # noqa: BLE001
                raise as_page_error(error) from None
    else:
        def wrapper(*args, **kwargs):
            check(args, kwargs)
            try:
                with deadline(seconds):
                    return shown(fn(*args, **kwargs))
            except Exception as error:  # noqa: BLE001
                raise as_page_error(error) from None
    wrapper = functools.wraps(fn)(wrapper)
    wrapper._explorer_checked = True
    return wrapper


def as_page_error(error: Exception) -> Exception:
    """What a handler's escaping exception becomes on the page: a ``gr.Error`` (ours, or Gradio's own
    signals) as it is; an ``ExplorerError`` as its message; anything else "Internal error (id ...)", the
    traceback logged under the id."""
    if isinstance(error, gr.Error) or type(error).__module__.startswith("gradio"):
        return error
    if isinstance(error, ExplorerError):
        return gr.Error(f"Cannot do that: {short_numbers(str(error))}", print_exception=False)
    return gr.Error(f"{internal_error(error)}.", print_exception=False)


class NoSuchExample(gr.Error):
    """An example list was sent an index it does not have."""


def bound_example_indices() -> None:
    """An example list (``gr.Dataset``) is sent the index of the example clicked, and Gradio reads
    ``raw_samples[index]`` as given: -1 loaded the last example and 10**9 raised an IndexError the page called a
    bug. Process-wide, once: an index that is not one of the list's is refused in one line (never echoed)."""
    if getattr(gr.Dataset, "_explorer_bounded", False):
        return
    original = gr.Dataset.preprocess

    def preprocess(self, payload):
        if payload is not None and (isinstance(payload, bool) or not isinstance(payload, int)
                                    or not 0 <= payload < len(self.raw_samples or [])):
            raise NoSuchExample(f"Cannot do that: there is no such example (the list has {len(self.raw_samples or [])}"
                                "; pick one of them).", print_exception=False)
        return original(self, payload)

    gr.Dataset.preprocess = preprocess
    gr.Dataset._explorer_bounded = True


class OutboundRefused(gr.Error):
    """A request asked the server to fetch a link."""


def refuse_outbound_fetches() -> None:
    """Replace Gradio's URL fetches (a file input given as ``http(s)://``) by a refusal, process-wide."""
    from gradio import processing_utils

    if getattr(processing_utils, "_explorer_offline", False):
        return

    def refuse(url, *args, **kwargs):
        log.warning("refused: a request asked the server to fetch %s", str(url)[:200])
        raise OutboundRefused(f"Cannot do that: {OUTBOUND_REFUSAL}.", print_exception=False)

    async def refuse_async(url, *args, **kwargs):
        refuse(url)

    for name in ("ssrf_protected_download", "save_url_to_cache"):
        setattr(processing_utils, name, refuse)
    for name in ("async_ssrf_protected_download", "async_ssrf_protected_get"):
        setattr(processing_utils, name, refuse_async)
    processing_utils._explorer_offline = True


def replace_gradio_error_texts() -> None:
    """Where the page does not show errors (public), a failure outside our handlers (Gradio refusing a
    value or a file path) says our one line, never Gradio's text, which can name server paths."""
    from gradio import queueing, route_utils, utils

    if getattr(utils, "_explorer_errors", False):
        return
    original = utils.error_payload

    def error_payload(error, show_error):
        if show_error or isinstance(error, gr.exceptions.AppError):
            return original(error, show_error)
        return {"error": f"Cannot do that: {GRADIO_ERROR}.", "visible": True}

    for module in (utils, queueing, route_utils):
        if getattr(module, "error_payload", None) is original:
            module.error_payload = error_payload
    utils._explorer_errors = True
