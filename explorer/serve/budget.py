"""What one visitor may spend: the page's resource budget, beside ``Access`` (what a visitor may touch).

Every number a visitor's requests are bounded by lives here, one ``Budget`` per mode, and is applied on
the server: texts and sentences in the handlers (``explorer.serve.request_rules`` wraps every handler),
decodes in ``explorer.core.images``, heavy requests by the queue's shared concurrency group ``HEAVY``,
uploads, request bodies and exports in front of Gradio's routes (``explorer.serve.page_guard``), the
per-address caps there and in the queue (``explorer.serve.clients``). The
docs/sharing.md ("The budget") lists the same numbers.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from explorer.core.errors import ExplorerError

MB = 1024 * 1024
# Events that decode pictures, run models or render figures share one concurrency group: at most
# ``Budget.heavy_at_once`` of them run at once across every event and visitor.
HEAVY = {"concurrency_id": "explorer-heavy"}
# Events that read a caption without drawing (the token summary, the budget line) share another: cheap each, but
# a visitor's text reaches them on every keystroke, so they too are counted per address (``Budget.text_*``).
TEXT = {"concurrency_id": "explorer-text"}
# Events that redraw what a Draw stored (the focus view of a sentence from the board's maps) run no model: a group
# of their own, so a click never waits behind another visitor's Draw (issue 63), at most two at once.
STORED = {"concurrency_id": "explorer-stored", "concurrency_limit": 2}


class BudgetExceeded(ExplorerError):
    """A request asks for more than the page's budget allows (a caption too long, too many sentences...)."""


@dataclass(frozen=True)
class Budget:
    caption_chars: int  # the longest text any input takes, checked before any tokenizing
    sentences_per_draw: int  # sentences one Draw (maps, regions, PCA) may have
    swaps_per_request: int = 32  # swaps one request of the Swap panel may score (explorer.probe)
    decodes_at_once: int = 2  # full-size picture decodes at once in the whole process
    heavy_at_once: int = 2  # requests of the HEAVY group running at once, all events and visitors together
    heavy_per_session: int | None = None  # HEAVY requests one visitor session may have queued or running
    # Per address (``explorer.serve.clients``), since a client invents as many session hashes as it likes:
    heavy_per_address: int | None = None  # HEAVY requests queued or running from one address, all its sessions
    requests_per_address: int | None = None  # requests queued or running from one address (a page load sends 9)
    open_per_address: int | None = None  # HTTP requests open at once from one address (event streams too)
    text_at_once: int = 2  # requests of the TEXT group running at once, all visitors together
    text_per_address: int | None = None  # TEXT requests queued or running from one address
    request_seconds: float | None = None  # a handler still running past this is stopped (``core.deadline``)
    sessions_per_address: int = 10_000  # page sessions one address keeps (minting more forgets its own oldest)
    # A request body must arrive within body_seconds plus a second per body_bytes_per_second it declares, at
    # most body_seconds_max (None: no ceiling); past that it is dropped (HTTP 408).
    body_seconds: float = 60.0
    body_bytes_per_second: int = 128 * 1024
    body_seconds_max: float | None = None
    request_bytes: int = 4 * MB  # a request body other than an upload
    json_depth: int = 64  # lists and objects nested in a request body, counted before anything parses it
    uploads_per_session: int | None = None  # files one page session may upload
    upload_bytes_per_session: int | None = None
    upload_bytes_total: int | None = None  # every session's uploads together (on disk, each file once)
    upload_files_total: int | None = None  # every session's uploads together, in files (each in its folder)
    # One address's share of those totals, all its sessions together (``upload_ledger``): a quarter on the public
    # page, so one address minting sessions cannot hold every visitor's room.
    upload_files_per_address: int | None = None
    upload_bytes_per_address: int | None = None
    upload_seconds: int | None = None  # an upload is removed this long after it arrived
    export_bytes: int | None = None  # the exports folder; the oldest exports are removed first
    export_seconds: int | None = None
    # Gradio's temp folder beside the uploads (its copies of outputs: pictures, exported files), pruned by
    # ``explorer.serve.gradio_cache``: oldest first past cache_bytes, anything past cache_seconds.
    cache_bytes: int | None = None
    cache_seconds: int | None = None
    # What page sessions hold in memory (Gradio's state per session hash: the board's view, features, swap
    # records...), counted in bytes per address (``session_state``): past an address's count or byte share its
    # oldest are forgotten; past the page's total, the least recently used of anyone's; idle ones after seconds.
    state_sessions_per_address: int | None = None
    state_bytes_per_address: int | None = None
    state_bytes_total: int | None = None
    state_seconds: float | None = None

    @classmethod
    def for_mode(cls, public: bool, caption_chars: int | None = None) -> "Budget":
        """The public page's budget or the owner's; ``caption_chars`` overrides the caption cap."""
        budget = PUBLIC if public else OWNER
        return replace(budget, caption_chars=caption_chars) if caption_chars else budget

    def check_text(self, text: str, what: str = "caption") -> str:
        """``text`` if it is within the caption cap, else ``BudgetExceeded`` (its length only is read)."""
        if len(text) > self.caption_chars:
            raise BudgetExceeded(f"the {what} is {len(text):,} characters long; this page reads at most "
                                 f"{self.caption_chars:,}. Shorten it, or split it across several Draws.")
        return text

    def check_sentences(self, count: int) -> None:
        if count > self.sentences_per_draw:
            raise BudgetExceeded(f"the caption has {count:,} sentences; one Draw on this page takes at most "
                                 f"{self.sentences_per_draw:,}. Draw it in parts.")

    def describe(self) -> str:
        """One line for the page, beside the caption."""
        return (f"At most {self.caption_chars:,} characters and {self.sentences_per_draw:,} sentences per Draw "
                "on this page.")


OWNER = Budget(caption_chars=200_000, sentences_per_draw=512, request_bytes=32 * MB)
PUBLIC = Budget(caption_chars=20_000, sentences_per_draw=64, request_bytes=1 * MB, heavy_per_session=2,
                heavy_per_address=4, requests_per_address=24, text_per_address=2, request_seconds=120.0,
                open_per_address=64, sessions_per_address=32,
                body_seconds=20.0, body_seconds_max=300.0,
                uploads_per_session=20,
                upload_bytes_per_session=200 * MB, upload_bytes_total=1024 * MB, upload_files_total=2000,
                upload_files_per_address=2000 // 4, upload_bytes_per_address=1024 * MB // 4,
                upload_seconds=3600, export_bytes=200 * MB, export_seconds=3600, cache_bytes=512 * MB,
                cache_seconds=3600, state_sessions_per_address=32, state_bytes_per_address=256 * MB,
                state_bytes_total=1024 * MB, state_seconds=1800.0)
