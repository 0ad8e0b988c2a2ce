"""The app closes a connection that sends no complete request head in time (issue 57.5): uvicorn has no such
deadline of its own, and ~1,050 slow-header connections used every descriptor of the process."""

from __future__ import annotations

import socket
import time

import gradio as gr
import pytest

from explorer.serve import startup

pytestmark = pytest.mark.slow(reason="serves a page and waits out its 10 s head deadline")


def _page(monkeypatch) -> int:
    monkeypatch.setattr(startup, "HEAD_SECONDS", 0.5)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with gr.Blocks() as blocks:
        gr.Markdown("hello")
    startup.start_page(blocks, server_name="127.0.0.1", server_port=port, prevent_thread_lock=True, quiet=True)
    return blocks, port


def _closed_within(sock: socket.socket, seconds: float) -> bool:
    sock.settimeout(seconds)
    try:
        return sock.recv(1024) == b""
    except (socket.timeout, ConnectionResetError):
        return False


def test_a_slow_or_silent_head_is_closed_and_a_whole_one_is_answered(monkeypatch):
    blocks, port = _page(monkeypatch)
    try:
        silent = socket.create_connection(("127.0.0.1", port))
        slow = socket.create_connection(("127.0.0.1", port))
        slow.sendall(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n")  # and never the blank line
        started = time.monotonic()
        assert _closed_within(silent, 5) and _closed_within(slow, 5)
        assert time.monotonic() - started < 4
        whole = socket.create_connection(("127.0.0.1", port))
        whole.sendall(b"GET /config HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        whole.settimeout(10)
        assert whole.recv(64).startswith(b"HTTP/1.1 200")
        whole.close()
    finally:
        blocks.close()


def test_the_deadline_starts_again_after_each_response():
    """A kept-alive connection is closed when its next head does not come in time, not at once."""
    from uvicorn.protocols.http.h11_impl import H11Protocol

    protocol = startup.head_protocol(H11Protocol, 1.0)
    assert issubclass(protocol, H11Protocol) and protocol.on_response_complete is not H11Protocol.on_response_complete
