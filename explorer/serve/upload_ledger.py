"""Who holds which upload, for the page's quotas: each file on disk counted once, per session and in total.

Gradio names an upload by its content (``<cache>/<sha256>/<name>``), so one picture sent many times, by one
session or by many, is one file: the ledger counts files by resolved path, at what they take on disk (their
blocks and their folder's), and keeps the sessions that hold each one (a refcount). A request reserves its
length before Gradio saves anything and one file per part as its body streams in, then settles on what was
saved; every check and its record happen under one lock, so parallel requests cannot all pass one check.
A file leaves when its last holder's time is over, never to make room for another session, or at once when
its last holder is a session the page forgot (``forget``: an address minting past its session cap).

Every page-wide total has a per-address share too (``Budget.upload_files_per_address``,
``upload_bytes_per_address``: a quarter of each total on the public page), so one address, however many
sessions it mints, leaves three quarters of the room to everyone else. A file held from two addresses counts
in both shares and once in the total.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

from explorer.core.disk_quota import remove
from explorer.serve import picture_metadata
from explorer.serve.budget import Budget
from explorer.serve.refusals import Refusal

FOLDER_BYTES = 4096  # the folder Gradio makes for each upload: one block on disk, counted with its file
PICTURE_FORMATS = ("PNG", "JPEG", "WEBP", "TIFF", "BMP", "GIF", "MPO")


@dataclass
class Held:
    bytes: int  # on disk: the file's blocks and its folder
    holders: dict[str, float] = field(default_factory=dict)  # session -> when it last uploaded the file


@dataclass(eq=False)  # each request its own ticket, even when two look alike
class Ticket:
    """One upload request in flight: its length in bytes, and the parts counted so far."""

    session: str
    bytes: int
    files: int = 0
    address: str = ""  # the client's address (``clients.address_of``): its share of the totals


class UploadLedger:
    """The quotas of ``Budget``: ``uploads_per_session`` files and ``upload_bytes_per_session`` bytes a
    session, ``upload_files_total`` files and ``upload_bytes_total`` bytes in all, ``upload_seconds`` each."""

    def __init__(self, budget: Budget):
        self.budget = budget
        self.files: dict[Path, Held] = {}
        self.pending: list[Ticket] = []
        self.addresses: dict[str, str] = {}  # session -> the address it uploaded from
        self.lock = threading.Lock()

    # ---- a request: reserve, count its parts, settle ----------------------------------------------------

    def reserve(self, session: str, length: int, address: str = "") -> Ticket:
        """Room for a request of ``length`` bytes from ``address``, or ``Refusal``; give it back with ``settle``."""
        ticket = Ticket(session, length, address=address)
        with self.lock:
            self._expire()
            self.addresses[session] = address
            self._check(replace(ticket, files=1), extra_bytes=length)  # room for its first file too
            self.pending.append(ticket)
        return ticket

    def add_part(self, ticket: Ticket) -> None:
        """One more file in ``ticket``'s body, or ``Refusal`` once it passes a count."""
        with self.lock:
            ticket.files += 1
            try:
                self._check(ticket)
            except Refusal:
                ticket.files -= 1
                raise

    def settle(self, ticket: Ticket, saved: list[Path]) -> None:
        """Record ``saved`` (the files Gradio wrote for ``ticket``) at what they take on disk; past a quota, the
        request is undone (its new files deleted unless another session holds them) and refused."""
        with self.lock:
            self.pending.remove(ticket)
            now, added = time.time(), []
            for path in {path.resolve() for path in saved}:
                held = self.files.get(path)
                if held is None:
                    if not path.is_file():
                        continue
                    held = self.files[path] = Held(disk_bytes(path))
                added.append((path, held.holders.get(ticket.session)))
                held.holders[ticket.session] = now
            try:
                self._check(Ticket(ticket.session, 0, address=ticket.address))
            except Refusal:
                for path, before in added:
                    self._release(path, ticket.session, before)
                raise

    def cancel(self, ticket: Ticket) -> None:
        with self.lock:
            if ticket in self.pending:
                self.pending.remove(ticket)

    def forget(self, sessions: list[str]) -> None:
        """``sessions`` are gone (the page forgot them): their holds end now, and a file nobody else holds is
        deleted at once, so an address that mints sessions past its cap gives their uploads back."""
        gone = set(sessions)
        with self.lock:
            for session in gone:
                self.addresses.pop(session, None)
            for path, held in list(self.files.items()):
                if gone.intersection(held.holders):
                    held.holders = {s: t for s, t in held.holders.items() if s not in gone}
                    if not held.holders:
                        del self.files[path]
                        delete_upload(path)

    def discard(self, paths: list[Path]) -> None:
        """Delete ``paths`` (a refused request's files) unless a session holds them."""
        with self.lock:
            for path in {path.resolve() for path in paths}:
                if path not in self.files:
                    delete_upload(path)

    # ---- what is held ------------------------------------------------------------------------------------

    def total_bytes(self) -> int:
        with self.lock:
            return sum(held.bytes for held in self.files.values())

    def held_folders(self) -> set[Path]:
        """The folders of the files sessions hold (``gradio_cache`` keeps them)."""
        with self.lock:
            return {path.parent for path in self.files}

    def session_files(self, session: str) -> list[Path]:
        with self.lock:
            return [path for path, held in self.files.items() if session in held.holders]

    # ---- under the lock ----------------------------------------------------------------------------------

    def _check(self, ticket: Ticket, extra_bytes: int = 0) -> None:
        """``Refusal`` when the session's or the page's files and bytes, held and pending, pass the budget."""
        budget, session = self.budget, ticket.session
        mine = [held for held in self.files.values() if session in held.holders]
        waiting = [t for t in self.pending if t.session == session and t is not ticket] + [ticket]
        files = len(mine) + sum(t.files for t in waiting)
        if budget.uploads_per_session is not None and files > budget.uploads_per_session:
            raise Refusal(429, f"this page session would hold {files} uploaded files (at most "
                               f"{budget.uploads_per_session}); reload the page later")
        used = sum(held.bytes for held in mine) + sum(t.bytes for t in waiting if t is not ticket) + extra_bytes
        if budget.upload_bytes_per_session is not None and used > budget.upload_bytes_per_session:
            raise Refusal(413, f"this page session's uploads would pass {budget.upload_bytes_per_session // 2**20}"
                               " MB; reload the page later")
        everyone = [t for t in self.pending if t is not ticket] + [ticket]
        total_files = len(self.files) + sum(t.files for t in everyone)
        total = sum(held.bytes for held in self.files.values()) + sum(t.bytes for t in everyone if t is not ticket)
        self._check_share(ticket, extra_bytes)
        if ((budget.upload_files_total is not None and total_files > budget.upload_files_total)
                or (budget.upload_bytes_total is not None and total + extra_bytes > budget.upload_bytes_total)):
            raise Refusal(429, "this page holds all the uploads it can for now (every visitor's together); "
                               "try again later")

    def _check_share(self, ticket: Ticket, extra_bytes: int) -> None:
        """``Refusal`` when the files and bytes held and pending from the ticket's address, all its sessions
        together, pass the address's share of the totals."""
        budget, address = self.budget, ticket.address
        if budget.upload_files_per_address is None and budget.upload_bytes_per_address is None:
            return
        sessions = {session for session, at in self.addresses.items() if at == address}
        ours = [held for held in self.files.values() if sessions.intersection(held.holders)]
        waiting = [t for t in self.pending if t.address == address and t is not ticket] + [ticket]
        files = len(ours) + sum(t.files for t in waiting)
        used = sum(held.bytes for held in ours) + sum(t.bytes for t in waiting if t is not ticket) + extra_bytes
        if ((budget.upload_files_per_address is not None and files > budget.upload_files_per_address)
                or (budget.upload_bytes_per_address is not None and used > budget.upload_bytes_per_address)):
            raise Refusal(429, "your address holds its share of this page's uploads (a quarter of them, every "
                               "session together); try again later")

    def _expire(self) -> None:
        """Holders past ``upload_seconds`` let go; a file nobody holds (or that left the disk) goes."""
        seconds = self.budget.upload_seconds
        now = time.time()
        for path, held in list(self.files.items()):
            if seconds is not None:
                held.holders = {s: t for s, t in held.holders.items() if now - t <= seconds}
            if not held.holders or not path.exists():
                del self.files[path]
                delete_upload(path)
        holding = {session for held in self.files.values() for session in held.holders}
        holding.update(t.session for t in self.pending)
        self.addresses = {s: a for s, a in self.addresses.items() if s in holding}

    def _release(self, path: Path, session: str, before: float | None) -> None:
        """Undo one hold of ``session`` on ``path`` (``before``: its earlier hold, kept)."""
        held = self.files[path]
        if before is not None:
            held.holders[session] = before
            return
        held.holders.pop(session, None)
        if not held.holders:
            del self.files[path]
            delete_upload(path)


def disk_bytes(path: Path) -> int:
    """What a saved upload takes on disk: its allocated blocks (a one-pixel PNG takes a 4 KB block), and its
    folder."""
    stat = path.stat()
    return max(stat.st_size, stat.st_blocks * 512) + FOLDER_BYTES


def delete_upload(path: Path) -> None:
    """The file, and the folder Gradio made for it when it is left empty."""
    remove(path)
    try:
        path.parent.rmdir()
    except OSError:
        pass


def accepted_file(path: Path, weights: bool) -> bool:
    """Whether a saved upload is what the page's inputs take: a picture Pillow recognises from its header,
    or (``weights``: the owner's page) a file named ``.safetensors`` whose header is JSON. Any failure to
    read it (Pillow's decompression-bomb error included) is a no: the file is refused, never served. A picture
    whose metadata would cost more to open than ``picture_metadata`` allows is refused before Pillow opens it.
    It reads the file: call it off the event loop (``page_guard`` does, in a thread)."""
    try:
        if weights and path.suffix.lower() == ".safetensors":
            with open(path, "rb") as handle:
                size = int.from_bytes(handle.read(8), "little")
                return 2 <= size <= path.stat().st_size - 8 and handle.read(1) == b"{"
        from PIL import Image

        picture_metadata.check(path)

        with Image.open(path) as image:
            return image.format in PICTURE_FORMATS
    except Exception:  # noqa: BLE001 - whatever the decoder raises, the answer is "not a file we take"
        return False


class PartCounter:
    """Counts the parts of a multipart body as it streams in: every ``--boundary`` after the first closes one
    part (the last one closes the body), so a part is counted once its end has arrived."""

    def __init__(self, boundary: bytes):
        self.delimiter = b"--" + boundary
        self.tail = b""
        self.seen = 0

    def feed(self, chunk: bytes) -> int:
        """The parts ``chunk`` completes."""
        window = self.tail + chunk
        found = window.count(self.delimiter)
        self.tail = window[-(len(self.delimiter) - 1):] if len(self.delimiter) > 1 else b""
        before = self.seen
        self.seen += found
        return max(self.seen - 1, 0) - max(before - 1, 0)


def boundary_of(content_type: bytes) -> bytes | None:
    """The multipart boundary a ``Content-Type`` header names, or None."""
    from python_multipart.multipart import parse_options_header

    _, params = parse_options_header(content_type)
    return params.get(b"boundary") or None


class PartGate:
    """An upload's ``receive`` that counts its files as they stream in (``UploadLedger.add_part``): past a
    count it ends the form there (the closing boundary), so Gradio stops writing and answers with what it
    saved, and ``refusal`` says why (the request is then refused and its files deleted)."""

    def __init__(self, receive, ledger: UploadLedger, ticket: Ticket, content_type: bytes):
        boundary = boundary_of(content_type)
        self.counter = PartCounter(boundary) if boundary else None
        self._receive, self.ledger, self.ticket = receive, ledger, ticket
        self.refusal: Refusal | None = None

    async def receive(self):
        if self.refusal is not None:  # the form was ended: whatever else the client sends is not read
            return {"type": "http.disconnect"}
        message = await self._receive()
        if message["type"] != "http.request" or self.counter is None:
            return message
        try:
            for _ in range(self.counter.feed(message.get("body", b""))):
                self.ledger.add_part(self.ticket)
        except Refusal as refusal:
            self.refusal = refusal
            return {"type": "http.request", "body": b"\r\n" + self.counter.delimiter + b"--\r\n", "more_body": False}
        return message
