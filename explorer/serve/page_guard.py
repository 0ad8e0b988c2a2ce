"""In front of Gradio's routes: request bodies, uploads and file inputs given as links, per ``Budget``.

An ASGI middleware (``PageGuard``) that the app passes to Gradio's FastAPI app. It runs before any of
Gradio's routes, so a request it refuses never reaches a parser, a handler or the disk:
- a page session: the page (``GET /``) sets a session cookie; an upload without one is refused; sessions
  are kept per address (``explorer.serve.clients``): one address minting many forgets its own, nobody else's;
- per address, at most ``open_per_address`` requests open at once (429), and every body must arrive within
  its deadline (``body_seconds``...; 408);
- uploads (``/gradio_api/upload``): pictures only, ``.safetensors`` too on the owner's page (what the
  page's inputs take, checked from the saved file's header, off the event loop, its metadata within
  ``picture_metadata``'s bound before Pillow opens it; a file the check cannot read is refused and deleted); the quotas of ``explorer.serve.upload_ledger`` (each file on disk counted once, per session and
  in all, in files and bytes, checked per file as the body streams in); no session's file removed for
  another's; none kept past ``upload_seconds``;
- every other body at most ``request_bytes``; no multipart body anywhere else;
- a body nested past ``json_depth`` is refused before anything parses it (``explorer.serve.json_body``);
- a file input given as a link (``http(s)://``) is refused before Gradio could fetch it;
- on a public page, the routes that run an event without the queue (``DIRECT_ROUTES``): Gradio would make the
  session's state for any hash a client names there, outside the queue's count (``queue_guard``).
Refusals are one line of text with an HTTP status (400, 403, 408, 413, 415, 429, 503), the connection
closed, and a warning in the log (said once a minute with a count when it repeats: ``log_limit``).
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from http.cookies import SimpleCookie
from pathlib import Path

from explorer.serve.budget import Budget
from explorer.serve.json_body import carries_link, check_depth, read_json
from explorer.serve.refusals import Refusal
from explorer.serve.upload_ledger import PartGate, UploadLedger, accepted_file
from explorer.serve.clients import Clients, address_of

log = logging.getLogger("explorer.access")
COOKIE = "explorer_session"
UPLOAD_PATH = "/gradio_api/upload"
SESSIONS_KEPT = 10_000  # page sessions remembered (oldest forgotten first): bounded memory
JSON_ROUTES = ("/gradio_api/queue/join", "/gradio_api/run/", "/gradio_api/api/", "/gradio_api/call/")
# Routes that run an event (or a component's function) without the queue. Gradio makes the named session's state
# before it even checks that the route is open, so a public page refuses them here: every event is queued there.
DIRECT_ROUTES = ("/gradio_api/run/", "/gradio_api/api/", "/gradio_api/component_server")


class PageGuard:
    """The ASGI middleware (``Middleware(PageGuard, budget=..., public=...)``)."""

    def __init__(self, app, budget: Budget, public: bool, uploads: UploadLedger | None = None):
        self.app, self.budget, self.public = app, budget, public
        self.uploads = uploads or UploadLedger(budget)  # shared with the cache's pruning (``gradio_cache``)
        # Sessions per address; a session forgotten past the cap gives its uploads back at once.
        self.clients = Clients(budget.sessions_per_address, budget.open_per_address, on_forget=self.uploads.forget)
        self.lock = threading.Lock()

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        address = address_of(scope)
        if not self.clients.enter(address):  # before anything is read: a flood of connections costs no work
            log.warning("refused %s %s from %s: %s requests open", scope["method"], scope["path"], address,
                        self.budget.open_per_address)
            return await _answer(send, 429, f"Cannot do that: {self.budget.open_per_address} requests from your "
                                            "address are already open; wait for them.")
        try:
            await self._guarded(scope, self._timed(scope, receive), send)
        finally:
            self.clients.leave(address)

    async def _guarded(self, scope, receive, send):
        """The request's checks, then Gradio; a refusal is answered in one line."""
        try:
            if scope["method"] == "GET" and scope["path"] == "/":
                return await self.app(scope, receive, self._with_cookie(scope, send))
            if scope["method"] != "POST":
                return await self.app(scope, receive, send)
            if self.public and scope["path"].startswith(DIRECT_ROUTES):
                raise Refusal(404, "this page answers through its queue only")
            if scope["path"] == UPLOAD_PATH:
                return await self._upload(scope, receive, send)
            if b"multipart/" in _header(scope, b"content-type"):
                raise Refusal(403, "this page takes files through its upload only")
            body = await self._body(scope, receive, self.budget.request_bytes)
            self._check_json(scope["path"], body)
            return await self.app(scope, _replay(body, receive), send)
        except Refusal as refusal:
            log.warning("refused %s %s from %s: %s", scope["method"], scope["path"], address_of(scope), refusal)
            await _answer(send, refusal.status, f"Cannot do that: {refusal}.")

    # ---- the page session ---------------------------------------------------------------------------

    def session_of(self, scope) -> str | None:
        cookie = SimpleCookie()
        try:
            cookie.load(_header(scope, b"cookie").decode("latin-1"))
        except Exception:  # noqa: BLE001 - a malformed cookie header is no session
            return None
        token = cookie[COOKIE].value if COOKIE in cookie else None
        return token if self.clients.knows(token) else None

    def _with_cookie(self, scope, send):
        """``send`` setting a new session's cookie, unless the request has a live one. The session counts
        against the address it came from: minting many forgets that address's oldest, nobody else's."""
        if self.session_of(scope):
            return send
        token = self.clients.mint(address_of(scope))
        if token is None:
            raise Refusal(503, "this page has too many visitors at once; try again in a minute")

        async def sending(message):
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                headers.append((b"set-cookie", f"{COOKIE}={token}; Path=/; HttpOnly; SameSite=Strict".encode()))
                message = {**message, "headers": headers}
            await send(message)

        return sending

    # ---- uploads ------------------------------------------------------------------------------------

    async def _upload(self, scope, receive, send):
        session = self.session_of(scope)
        if session is None:
            raise Refusal(403, "an upload belongs to a page session: open the page first")
        length = _header(scope, b"content-length")
        if not length.isdigit():
            raise Refusal(411, "an upload must say its length")
        ticket = self.uploads.reserve(session, int(length), address_of(scope))  # bytes now, each file as it streams in
        try:
            gate = PartGate(receive, self.uploads, ticket, _header(scope, b"content-type"))
            status, headers, body = await _captured(self.app, scope, gate.receive)
            saved = [Path(p) for p in _json(body) or [] if isinstance(p, str)] if status == 200 else []
            try:
                await self._take(ticket, saved, gate.refusal)
            except Refusal:
                self.uploads.discard(saved)  # deleted unless another session holds the same file
                raise
        finally:
            self.uploads.cancel(ticket)
        await _send(send, status, headers, body)

    async def _take(self, ticket, saved: list[Path], refusal: Refusal | None) -> None:
        """Record the files Gradio saved, or ``Refusal``: too many, or one the page's inputs do not take. The
        check opens each file in a thread of its own (``CHECKS_AT_ONCE`` at a time): a picture that takes long to
        open never stalls another visitor's request on the event loop."""
        if refusal is not None:
            raise refusal
        verdicts = await asyncio.to_thread(self._check_files, saved)
        refused = [path for path, ok in zip(saved, verdicts) if not ok]
        if refused:
            also = "" if self.public else " (or .safetensors weights, on the Models tab)"
            raise Refusal(415, f"{refused[0].name[:80]}: this is not a picture (PNG, JPEG, WebP, TIFF, BMP, GIF)"
                               f"{also}")
        self.uploads.settle(ticket, saved)

    def _check_files(self, saved: list[Path]) -> list[bool]:
        with _CHECK_SLOTS:
            return [accepted_file(path, weights=not self.public) for path in saved]

    def _check_json(self, path: str, body: bytes) -> None:
        """Any body nested past ``Budget.json_depth`` is refused before a parser sees it (Gradio's included);
        on the event routes, a file input given as a link too."""
        check_depth(body, self.budget.json_depth)
        if path.startswith(JSON_ROUTES) and carries_link(_json(body)):
            raise Refusal(403, "this page does not fetch links: upload the file itself")

    # ---- bodies -------------------------------------------------------------------------------------

    def _timed(self, scope, receive):
        """``receive`` with a deadline on the request's body (``Budget.body_seconds``...; HTTP 408 past it):
        a client that sends a few bytes a minute holds no connection for long. Once the body is in, the
        client's channel as it is (a stream waits on it to learn that the client left)."""
        length = _header(scope, b"content-length")
        seconds = body_seconds(self.budget, int(length) if length.isdigit() else 0)
        deadline, done = time.monotonic() + seconds, False

        async def timed():
            nonlocal done
            if done:
                return await receive()
            try:
                message = await asyncio.wait_for(receive(), max(deadline - time.monotonic(), 0.0))
            except asyncio.TimeoutError:
                raise Refusal(408, f"the request's body did not arrive within {seconds:.0f} s") from None
            done = message["type"] != "http.request" or not message.get("more_body")
            return message

        return timed

    async def _body(self, scope, receive, limit: int) -> bytes:
        length = _header(scope, b"content-length")
        if length.isdigit() and int(length) > limit:
            raise Refusal(413, f"a request of {int(length):,} bytes; this page takes at most {limit:,}")
        chunks, size = [], 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                raise Refusal(400, "the request ended early")
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > limit:
                raise Refusal(413, f"a request of more than {limit:,} bytes; this page takes at most {limit:,}")
            chunks.append(chunk)
            if not message.get("more_body"):
                return b"".join(chunks)


CHECKS_AT_ONCE = 2  # upload checks in threads at once (each within picture_metadata's bound in memory)
_CHECK_SLOTS = threading.BoundedSemaphore(CHECKS_AT_ONCE)


def body_seconds(budget: Budget, declared: int) -> float:
    """How long a body of ``declared`` bytes may take to arrive."""
    seconds = budget.body_seconds + min(declared, 2**40) / budget.body_bytes_per_second
    return min(seconds, budget.body_seconds_max) if budget.body_seconds_max is not None else seconds


def _header(scope, name: bytes) -> bytes:
    for key, value in scope.get("headers", []):
        if key.lower() == name:
            return value
    return b""


def _json(body: bytes):
    return read_json(body)


def _replay(body: bytes, receive):
    """The body read once, then the client's own channel (which says when it disconnects)."""
    sent = False

    async def replayed():
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return replayed


async def _captured(app, scope, receive) -> tuple[int, list, bytes]:
    """Run ``app`` and keep its whole answer (an upload's answer is a short JSON list of paths)."""
    answer = {"status": 500, "headers": [], "body": []}

    async def send(message):
        if message["type"] == "http.response.start":
            answer["status"], answer["headers"] = message["status"], list(message.get("headers", []))
        elif message["type"] == "http.response.body":
            answer["body"].append(message.get("body", b""))

    await app(scope, receive, send)
    return answer["status"], answer["headers"], b"".join(answer["body"])


async def _send(send, status: int, headers: list, body: bytes) -> None:
    headers = [(k, v) for k, v in headers if k.lower() != b"content-length"]
    headers.append((b"content-length", str(len(body)).encode()))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


async def _answer(send, status: int, text: str) -> None:
    # Connection: close: the rest of a refused body is never read, and uvicorn would otherwise keep a
    # connection whose client goes on trickling bytes open for as long as it likes.
    await _send(send, status, [(b"content-type", b"text/plain; charset=utf-8"), (b"connection", b"close")],
                text.encode())
