"""Start a Gradio page and wait for it patiently.

Gradio's ``launch`` asks its own page for one ``HEAD /`` with a 3-second timeout and, on the first timeout,
refuses to start ("When localhost is not accessible, a shareable link must be created"). On a busy machine
(CI on two cores, a server with training jobs beside it) the first answer can take longer than that, so
``start_page`` lets the launch ask again, for up to ``READY_WAIT_S``, before it gives up.

It also gives the server a deadline on request heads (``HEAD_SECONDS``): uvicorn (0.54) has none (its
``timeout_keep_alive`` starts only after a response; ``limit_concurrency`` answers 503 to requests, not to
connections still sending their head; ``h11_max_incomplete_event_size`` bounds a head's bytes, not its time), so a
client that opens connections and sends a header line now and then held each one, and ~1,050 of them used every
descriptor of the process. ``head_deadline`` closes a connection that has not sent a complete request head within
``HEAD_SECONDS`` of opening it or of its last response. Many slow connections from many addresses are the reverse
proxy's job (deploy/nginx-explorer.conf, scripts/serve_public.sh).
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
HEAD_SECONDS = 10.0  # a connection must send a whole request head this soon after opening or after a response
ASK_TIMEOUT_S = 10.0
_ANSWERS = (200, 301, 302, 303, 307, 308, 401)  # Gradio's own list: 401 behind auth, redirects under a proxy
_launching = threading.Lock()  # the patch is process-wide: one launch at a time


def start_page(app: gr.Blocks, forwarded_allow_ips: str | None = None, **launch_options) -> gr.Blocks:
    """``app.launch(**launch_options)``, waiting up to ``READY_WAIT_S`` for the page to answer; the server
    trusts ``X-Forwarded-For`` from ``forwarded_allow_ips`` only (``clients.trusted_proxies``: by default nobody)."""
    with _launching, trusted_proxies(forwarded_allow_ips), _patient_readiness_check(), head_deadline(HEAD_SECONDS):
        app.launch(**launch_options)
    return app


def head_protocol(base: type, seconds: float) -> type:
    """``base`` (uvicorn's HTTP protocol) closing a connection that sends no complete request head within
    ``seconds`` of opening or of its last response."""

    class HeadDeadline(base):
        def connection_made(self, transport):
            super().connection_made(transport)
            self._arm_head_timer()

        def _arm_head_timer(self):
            waited_for = self.cycle  # the request before: a new head makes a new cycle
            self.head_timer = self.loop.call_later(seconds, self._head_late, waited_for)

        def _head_late(self, waited_for):
            if self.cycle is waited_for and not self.transport.is_closing():
                self.transport.close()  # no head came: the descriptor goes back

        def on_response_complete(self):
            super().on_response_complete()
            self.head_timer.cancel()
            self._arm_head_timer()

        def connection_lost(self, exc):
            self.head_timer.cancel()
            super().connection_lost(exc)

    return HeadDeadline


@contextlib.contextmanager
def head_deadline(seconds: float):
    """While Gradio starts its server: uvicorn's config takes ``head_protocol`` as its HTTP protocol."""
    import uvicorn
    from uvicorn.protocols.http.h11_impl import H11Protocol

    original = uvicorn.Config

    class Config(original):
        def __init__(self, *args, **kwargs):
            kwargs.setdefault("http", head_protocol(H11Protocol, seconds))
            super().__init__(*args, **kwargs)

    uvicorn.Config = Config
    try:
        yield
    finally:
        uvicorn.Config = original


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
