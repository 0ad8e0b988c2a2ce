"""Fairness by client address, not by the session hash a client invents (``explorer.serve.clients``): the queue's
caps and turns, open requests, body deadlines, page sessions and ``--forwarded-allow-ips``, each over real HTTP
against a page served on 127.0.0.1, its visitors on their own loopback addresses (127.0.0.2, 127.0.0.3...);
and the log, which says a flood of refusals once with a count.

Each test fails with its rule taken out (checked by hand: the address caps and turns keyed by session hash,
no deadline on a body, no cap on open requests, every session under one address, no log filter).
"""

from __future__ import annotations

import io
import logging
import socket
import time
import uuid
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import gradio as gr
import httpx
import pytest

from explorer.serve.access import Access
from explorer.serve.budget import HEAVY, PUBLIC
from explorer.serve.clients import Clients
from explorer.serve.startup import start_page
from page_fixtures import loopback_transport

pytestmark = pytest.mark.slow(reason="serves pages and floods them from two loopback addresses")
VISITOR, ABUSER = "127.0.0.2", "127.0.0.3"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def serve_page(blocks: gr.Blocks, budget, **start) -> str:
    from explorer.ui.app import page_options, serve

    access = Access(roots=(Path.cwd(),), public=True, budget=budget)
    serve(blocks, access)
    port = free_port()
    start_page(blocks, server_name="127.0.0.1", server_port=port, prevent_thread_lock=True, quiet=True,
               **start, **page_options(access))
    return f"http://127.0.0.1:{port}"


def client(url: str, address: str) -> httpx.Client:
    """A client whose requests come from ``address`` (any 127.x address reaches a page on 127.0.0.1)."""
    return httpx.Client(base_url=url, transport=loopback_transport(local_address=address), timeout=60)


def echo_page() -> gr.Blocks:
    with gr.Blocks() as blocks:
        box = gr.Textbox()
        gr.Button().click(lambda text: text, inputs=box, outputs=box)
    return blocks


# ---- the queue: per-address caps and turns -------------------------------------------------------------


def test_one_address_flooding_the_queue_does_not_hold_another_behind_it():
    """16 heavy joins from one address (one cookie, a new session hash each, answers never read): past
    ``heavy_per_address`` refused in one line; another address's request answers within 4 heavy requests' time."""
    heavy_s = 1.0
    with gr.Blocks() as blocks:
        box = gr.Textbox()
        gr.Button().click(lambda text: time.sleep(heavy_s) or text, inputs=box, outputs=box, api_name="draw", **HEAVY)
    url = serve_page(blocks, PUBLIC)
    try:
        abuser = client(url, ABUSER)
        abuser.get("/")  # one cookie for every join
        joins = [abuser.post("/gradio_api/queue/join", json={"data": [f"x{i}"], "fn_index": 0,
                                                             "session_hash": uuid.uuid4().hex}) for i in range(16)]
        codes = [join.status_code for join in joins]
        assert codes[:PUBLIC.heavy_per_address] == [200] * PUBLIC.heavy_per_address
        assert set(codes[PUBLIC.heavy_per_address:]) == {503}
        assert "your address already has 4 pictures, maps or searches waiting or running (at most 4)" in joins[-1].text
        visitor = client(url, VISITOR)
        visitor.get("/")
        started, session = time.perf_counter(), uuid.uuid4().hex
        assert visitor.post("/gradio_api/queue/join", json={"data": ["mine"], "fn_index": 0,
                                                            "session_hash": session}).status_code == 200
        with visitor.stream("GET", "/gradio_api/queue/data", params={"session_hash": session}) as stream:
            done = next(line for line in stream.iter_lines() if '"process_completed"' in line)
        seconds = time.perf_counter() - started
        assert '"mine"' in done
        assert seconds < 4 * heavy_s, f"the other address's request took {seconds:.1f} s"  # 9 s behind all 16
    finally:
        blocks.close()


def test_addresses_take_turns_whatever_session_hashes_they_send():
    """Turns go by address: an abuser's requests under many session hashes are one client's."""
    from explorer.serve.queue_guard import take_turns

    def event(address, session=None):
        request = SimpleNamespace(scope={"client": (address, 40000)})
        return SimpleNamespace(session_hash=session or uuid.uuid4().hex, concurrency_id="g", request=request)

    running = event(ABUSER)
    waiting = [event(ABUSER), event(ABUSER), event(VISITOR), event(ABUSER), event("127.0.0.4")]
    queue = SimpleNamespace(event_ids_to_events={str(i): e for i, e in enumerate([running, *waiting])})
    take_turns(queue, waiting)
    assert [e.request.scope["client"][0] for e in waiting] == [VISITOR, "127.0.0.4", ABUSER, ABUSER, ABUSER]


# ---- connections: body deadlines, open requests per address ----------------------------------------------


def slow_post(port: int, address: str) -> socket.socket:
    """A POST that says 1,000,000 bytes and sends one."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=10, source_address=(address, 0))
    sock.sendall(b"POST /gradio_api/queue/join HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                 b"Content-Length: 1000000\r\n\r\n{")
    return sock


def answer_of(sock: socket.socket) -> tuple[int, bool]:
    """(the answer's status, whether the server then closed the connection)."""
    head = sock.recv(4096)
    sock.settimeout(3)
    try:
        closed = not sock.recv(4096) or not sock.recv(4096)
    except (TimeoutError, ConnectionResetError):
        closed = False
    return int(head.split()[1]), closed


def test_a_slow_body_is_dropped_and_one_address_holds_only_a_few_requests_open():
    budget = replace(PUBLIC, body_seconds=1.0, body_bytes_per_second=2**40, open_per_address=4)
    blocks = echo_page()
    url = serve_page(blocks, budget)
    port = int(url.rsplit(":", 1)[1])
    try:
        started = time.perf_counter()
        slow = [slow_post(port, ABUSER) for _ in range(6)]
        refused = [answer_of(sock) for sock in slow[4:]]  # past the cap: answered at once
        assert refused == [(429, True), (429, True)]
        other = client(url, VISITOR).get("/config")  # another address is not counted with them
        assert other.status_code == 200
        dropped = [answer_of(sock) for sock in slow[:4]]
        assert dropped == [(408, True)] * 4 and time.perf_counter() - started < 8
        assert client(url, ABUSER).get("/config").status_code == 200  # the address's slots are free again
        reply = client(url, ABUSER).post("/gradio_api/queue/join", content=b"{")  # (a body that arrives is fine)
        assert reply.status_code != 408
    finally:
        for sock in slow:
            sock.close()
        blocks.close()


def test_a_flood_of_refusals_is_logged_once_with_a_count():
    from explorer.serve import log_limit

    now = [0.0]
    limit = log_limit.LogLimit(clock=lambda: now[0])
    logger, written = logging.getLogger("test.flood"), io.StringIO()
    handler = logging.StreamHandler(written)
    logger.addHandler(handler)
    logger.addFilter(limit)
    logger.propagate = False
    try:
        for i in range(5000):  # one kind: the numbers in it differ
            try:
                raise OSError(24, "Too many open files")
            except OSError:
                logger.error("refused POST /gradio_api/queue/join from 10.0.%d.%d: slow", i // 256, i % 256,
                             exc_info=True)
        assert written.getvalue().count("\n") < 20 and written.getvalue().count("Traceback") == 1
        now[0] += 61
        logger.error("refused POST /gradio_api/queue/join from 10.0.0.1: slow")
        assert "4999 more like this in the last minute" in written.getvalue()
        for i in range(5000):  # many kinds: at most LINES_PER_MINUTE lines, a few tracebacks, short lines
            try:
                raise ValueError("x" * 5000)
            except ValueError:
                logger.error("kind %s %s", "abcdefghij"[i % 10] * (i % 7 + 1), "y" * 5000, exc_info=True)
        assert len(written.getvalue()) < 100_000
        assert written.getvalue().count("Traceback") <= 1 + log_limit.TRACEBACKS_PER_MINUTE
    finally:
        logger.removeHandler(handler)
        logger.removeFilter(limit)


# ---- page sessions: per address ------------------------------------------------------------------------


def page_load(url: str, address: str, cookie: str | None = None, forwarded: str | None = None) -> str | None:
    """The session cookie the page sets when opened from ``address`` with ``cookie`` (None: it set none)."""
    with client(url, address) as http:
        reply = http.get("/", cookies={"explorer_session": cookie} if cookie else None,
                         headers={"x-forwarded-for": forwarded} if forwarded else None)
        return reply.cookies.get("explorer_session")


def test_minting_sessions_from_one_address_never_forgets_anothers():
    budget = replace(PUBLIC, sessions_per_address=3)
    blocks = echo_page()
    url = serve_page(blocks, budget)
    try:
        mine = page_load(url, VISITOR)
        assert mine
        minted = [page_load(url, ABUSER) for _ in range(20)]
        assert len(set(minted)) == 20 and None not in minted  # each page load without a cookie mints one...
        assert page_load(url, VISITOR, mine) is None  # ...and the other address's session is still known
        assert page_load(url, ABUSER, minted[-1]) is None  # the abuser's newest: kept
        assert page_load(url, ABUSER, minted[0]) is not None  # its oldest: forgotten, a new one minted
    finally:
        blocks.close()


def test_addresses_are_bounded_and_a_busy_one_is_never_forgotten():
    clients = Clients(sessions_per_address=2, open_per_address=None, addresses_kept=3)
    busy = clients.mint("a")
    assert clients.enter("a")  # a request open: live
    idle = clients.mint("b")
    clients.mint("c")
    clients.mint("d")  # one address too many: the least recently seen idle one goes, not the busy one
    assert clients.knows(busy) and not clients.knows(idle)
    for address in ("c", "d"):
        assert clients.enter(address)
    assert clients.mint("e") is None  # every address busy: refused, nobody forgotten
    clients.leave("a")
    assert clients.mint("e") and not clients.knows(busy)


# ---- behind a proxy ------------------------------------------------------------------------------------


@pytest.mark.parametrize("trusted", [True, False])
def test_x_forwarded_for_names_the_client_only_from_a_trusted_proxy(trusted):
    budget = replace(PUBLIC, sessions_per_address=2)
    blocks = echo_page()
    url = serve_page(blocks, budget, forwarded_allow_ips="127.0.0.1" if trusted else None)
    try:
        victim = page_load(url, "127.0.0.1", forwarded="203.0.113.8")
        for _ in range(3):  # the proxy's last word counts: it appends the address it saw
            page_load(url, "127.0.0.1", forwarded="198.51.100.1, 203.0.113.7")
        kept = page_load(url, "127.0.0.1", victim, forwarded="203.0.113.8") is None
        assert kept is trusted  # untrusted: every visitor is the proxy, one address, and its oldest went
    finally:
        blocks.close()


def test_the_command_line_takes_the_trusted_proxies(app_command):
    run, seen = app_command
    assert run("--public", "--forwarded-allow-ips", "10.0.0.1, 192.168.0.0/16") == 0
    assert seen["forwarded_allow_ips"] == "10.0.0.1, 192.168.0.0/16"
    assert run("--public") == 0 and seen["forwarded_allow_ips"] is None
    seen.clear()
    assert run("--forwarded-allow-ips", "proxy.local") == 2 and not seen  # said, not launched
