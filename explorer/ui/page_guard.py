"""In front of Gradio's routes: request bodies, uploads and file inputs given as links, per ``Budget``.

An ASGI middleware (``PageGuard``) that the app passes to Gradio's FastAPI app. It runs before any of
Gradio's routes, so a request it refuses never reaches a parser, a handler or the disk:
- a page session: the page (``GET /``) sets a session cookie; an upload without one is refused;
- uploads (``/gradio_api/upload``): pictures only, ``.safetensors`` too on the owner's page (what the
  page's inputs take, checked from the saved file's header); each session at most
  ``uploads_per_session`` files and ``upload_bytes_per_session`` bytes, all sessions together
  ``upload_bytes_total``, the oldest removed first, none kept past ``upload_seconds``;
- every other body at most ``request_bytes``; no multipart body anywhere else;
- a file input given as a link (``http(s)://``) is refused before Gradio could fetch it.
Refusals are one line of text with an HTTP status (403, 413, 415, 429) and a warning in the log.
"""

from __future__ import annotations

import json
import logging
import secrets
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from http.cookies import SimpleCookie
from pathlib import Path

from explorer.core.disk_quota import remove
from explorer.ui.budget import Budget

log = logging.getLogger("explorer.access")
COOKIE = "explorer_session"
UPLOAD_PATH = "/gradio_api/upload"
SESSIONS_KEPT = 10_000  # page sessions remembered (oldest forgotten first): bounded memory
PICTURE_FORMATS = ("PNG", "JPEG", "WEBP", "TIFF", "BMP", "GIF", "MPO")
JSON_ROUTES = ("/gradio_api/queue/join", "/gradio_api/run/", "/gradio_api/api/", "/gradio_api/call/")


class Refusal(Exception):
    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


@dataclass
class Upload:
    path: Path
    bytes: int
    time: float = field(default_factory=time.time)


class UploadLedger:
    """Who uploaded what, for the quotas: per session, and the oldest first across sessions."""

    def __init__(self, budget: Budget):
        self.budget = budget
        self.sessions: OrderedDict[str, list[Upload]] = OrderedDict()
        self.lock = threading.Lock()

    def admit(self, session: str, incoming: int) -> None:
        """Refuse an upload of ``incoming`` bytes past the session's quota."""
        budget = self.budget
        with self.lock:
            self._expire()
            held = self.sessions.get(session, [])
            if budget.uploads_per_session is not None and len(held) >= budget.uploads_per_session:
                raise Refusal(429, f"this page session has uploaded {len(held)} files (at most "
                                   f"{budget.uploads_per_session}); reload the page later")
            used = sum(upload.bytes for upload in held)
            if budget.upload_bytes_per_session is not None and used + incoming > budget.upload_bytes_per_session:
                raise Refusal(413, f"this page session's uploads would pass {budget.upload_bytes_per_session // 2**20}"
                                   " MB; reload the page later")

    def record(self, session: str, files: list[Path]) -> None:
        """Count the saved files against the session, then remove the oldest uploads past the total."""
        with self.lock:
            held = self.sessions.setdefault(session, [])
            held.extend(Upload(path, path.stat().st_size) for path in files if path.is_file())
            self.sessions.move_to_end(session)
            self._expire()
            total = self.budget.upload_bytes_total
            if total is None:
                return
            everything = sorted((u for uploads in self.sessions.values() for u in uploads), key=lambda u: u.time)
            kept = sum(upload.bytes for upload in everything)
            for upload in everything:
                if kept <= total:
                    break
                self._drop(upload)
                kept -= upload.bytes

    def total_bytes(self) -> int:
        with self.lock:
            return sum(upload.bytes for uploads in self.sessions.values() for upload in uploads)

    def _expire(self) -> None:
        seconds = self.budget.upload_seconds
        if seconds is not None:
            now = time.time()
            for upload in [u for uploads in self.sessions.values() for u in uploads if now - u.time > seconds]:
                self._drop(upload)
        while len(self.sessions) > SESSIONS_KEPT:
            _, forgotten = self.sessions.popitem(last=False)
            for upload in forgotten:
                delete_upload(upload.path)

    def _drop(self, upload: Upload) -> None:
        delete_upload(upload.path)
        for session, uploads in list(self.sessions.items()):
            if upload in uploads:
                uploads.remove(upload)
                if not uploads:
                    del self.sessions[session]


def delete_upload(path: Path) -> None:
    """The file, and the folder Gradio made for it when it is left empty."""
    remove(path)
    try:
        path.parent.rmdir()
    except OSError:
        pass


def accepted_file(path: Path, weights: bool) -> bool:
    """Whether a saved upload is what the page's inputs take: a picture Pillow recognises from its header,
    or (``weights``: the owner's page) a file named ``.safetensors`` whose header is JSON."""
    if weights and path.suffix.lower() == ".safetensors":
        try:
            with open(path, "rb") as handle:
                size = int.from_bytes(handle.read(8), "little")
                return 2 <= size <= path.stat().st_size - 8 and handle.read(1) == b"{"
        except OSError:
            return False
    from PIL import Image, UnidentifiedImageError

    try:
        with Image.open(path) as image:
            return image.format in PICTURE_FORMATS
    except (UnidentifiedImageError, OSError, ValueError, SyntaxError):
        return False


def carries_link(value) -> bool:
    """Whether a request's data holds a file input given as a link (``{"path": "http(s)://..."}``: what
    Gradio would download; the ``url`` the page itself sends beside an uploaded file's ``path`` is not read)."""
    if isinstance(value, dict):
        path = value.get("path")
        if isinstance(path, str) and path.strip().lower().startswith(("http://", "https://", "//")):
            return True
        return any(carries_link(inner) for inner in value.values())
    if isinstance(value, list):
        return any(carries_link(inner) for inner in value)
    return False


class PageGuard:
    """The ASGI middleware (``Middleware(PageGuard, budget=..., public=...)``)."""

    def __init__(self, app, budget: Budget, public: bool):
        self.app, self.budget, self.public = app, budget, public
        self.sessions: OrderedDict[str, None] = OrderedDict()
        self.uploads = UploadLedger(budget)
        self.lock = threading.Lock()

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        try:
            if scope["method"] == "GET" and scope["path"] == "/":
                return await self.app(scope, receive, self._with_cookie(scope, send))
            if scope["method"] != "POST":
                return await self.app(scope, receive, send)
            if scope["path"] == UPLOAD_PATH:
                return await self._upload(scope, receive, send)
            if b"multipart/" in _header(scope, b"content-type"):
                raise Refusal(403, "this page takes files through its upload only")
            body = await self._body(scope, receive, self.budget.request_bytes)
            if scope["path"].startswith(JSON_ROUTES) and carries_link(_json(body)):
                raise Refusal(403, "this page does not fetch links: upload the file itself")
            return await self.app(scope, _replay(body, receive), send)
        except Refusal as refusal:
            log.warning("refused %s %s: %s", scope["method"], scope["path"], refusal)
            await _answer(send, refusal.status, f"Cannot do that: {refusal}.")

    # ---- the page session ---------------------------------------------------------------------------

    def session_of(self, scope) -> str | None:
        cookie = SimpleCookie()
        try:
            cookie.load(_header(scope, b"cookie").decode("latin-1"))
        except Exception:  # noqa: BLE001 - a malformed cookie header is no session
            return None
        token = cookie[COOKIE].value if COOKIE in cookie else None
        with self.lock:
            return token if token in self.sessions else None

    def _with_cookie(self, scope, send):
        if self.session_of(scope):
            return send
        token = secrets.token_urlsafe(24)
        with self.lock:
            self.sessions[token] = None
            while len(self.sessions) > SESSIONS_KEPT:
                self.sessions.popitem(last=False)

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
        self.uploads.admit(session, int(length))
        status, headers, body = await _captured(self.app, scope, receive)
        if status != 200:
            return await _send(send, status, headers, body)
        saved = [Path(p) for p in _json(body) or [] if isinstance(p, str)]
        refused = [path for path in saved if not accepted_file(path, weights=not self.public)]
        if refused:
            for path in saved:
                delete_upload(path)
            takes = "pictures (PNG, JPEG, WebP, TIFF, BMP, GIF)" + ("" if self.public else " and .safetensors weights")
            raise Refusal(415, f"this page takes {takes}; {refused[0].name[:80]} is not one")
        self.uploads.record(session, saved)
        await _send(send, status, headers, body)

    # ---- bodies -------------------------------------------------------------------------------------

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


def _header(scope, name: bytes) -> bytes:
    for key, value in scope.get("headers", []):
        if key.lower() == name:
            return value
    return b""


def _json(body: bytes):
    try:
        return json.loads(body)
    except (ValueError, UnicodeDecodeError):
        return None


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
    await _send(send, status, [(b"content-type", b"text/plain; charset=utf-8")], text.encode())
