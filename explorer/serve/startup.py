"""Start a Gradio page and wait for it patiently.

Gradio's ``launch`` asks its own page for one ``HEAD /`` with a 3-second timeout and, on the first timeout,
refuses to start ("When localhost is not accessible, a shareable link must be created"). On a busy machine
(CI on two cores, a server with training jobs beside it) the first answer can take longer than that, so
``start_page`` lets the launch ask again, for up to ``READY_WAIT_S``, before it gives up.
"""

from __future__ import annotations

import contextlib
import threading
import time

import gradio as gr
import httpx
from gradio import networking

from explorer.serve.clients import trusted_proxies

READY_WAIT_S = 120.0
ASK_TIMEOUT_S = 10.0
_ANSWERS = (200, 301, 302, 303, 307, 308, 401)  # Gradio's own list: 401 behind auth, redirects under a proxy
_launching = threading.Lock()  # the patch is process-wide: one launch at a time


def start_page(app: gr.Blocks, forwarded_allow_ips: str | None = None, **launch_options) -> gr.Blocks:
    """``app.launch(**launch_options)``, waiting up to ``READY_WAIT_S`` for the page to answer; the server
    trusts ``X-Forwarded-For`` from ``forwarded_allow_ips`` only (``clients.trusted_proxies``: by default nobody)."""
    with _launching, trusted_proxies(forwarded_allow_ips), _patient_readiness_check():
        app.launch(**launch_options)
    return app


def page_answers(url: str, wait_s: float = READY_WAIT_S) -> bool:
    """Whether ``url`` answers a ``HEAD`` with a page (or a login, or a redirect) within ``wait_s``."""
    deadline = time.monotonic() + wait_s
    while True:
        try:
            if httpx.head(url, timeout=ASK_TIMEOUT_S, verify=False).status_code in _ANSWERS:
                return True
        except httpx.TransportError:  # not listening yet, or too busy to answer in time: ask again
            pass
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.5)


@contextlib.contextmanager
def _patient_readiness_check():
    original = networking.url_ok
    networking.url_ok = page_answers
    try:
        yield
    finally:
        networking.url_ok = original
