"""Repeated log lines said once with a count, so that no flood of requests can flood the server's log.

``install()`` puts one ``LogLimit`` filter on the loggers a visitor's requests can make speak (our refusals,
uvicorn's "Exception in ASGI application", asyncio's "socket.accept() out of system resource"). The first record of
a kind passes; more of that kind within a minute are only counted, and the next one to pass says "N more like this in
the last minute". At most ``LINES_PER_MINUTE`` records and ``TRACEBACKS_PER_MINUTE`` tracebacks pass a minute in
all, each line at most ``LINE_CHARS`` long: a few kilobytes a minute, whatever a flood sends.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections import OrderedDict

WINDOW_S = 60.0
LINES_PER_MINUTE = 30
TRACEBACKS_PER_MINUTE = 3
LINE_CHARS = 400
KINDS_KEPT = 1024  # kinds remembered (least recently seen forgotten): bounded memory
LOGGERS = ("explorer.access", "uvicorn.error", "asyncio")
_NUMBERS = re.compile(r"\d+")


class LogLimit(logging.Filter):
    def __init__(self, clock=time.monotonic):
        super().__init__()
        self.clock = clock
        self.kinds: OrderedDict[tuple, list] = OrderedDict()  # kind -> [its window's start, held in it]
        self.minute = [clock(), 0, 0, 0]  # [start, lines passed, tracebacks passed, lines held]
        self.lock = threading.Lock()

    def filter(self, record: logging.LogRecord) -> bool:
        now = self.clock()
        with self.lock:
            kind = (record.name, record.levelno, _NUMBERS.sub("#", _text(record))[:120])
            window = self.kinds.get(kind)
            if window is not None and now - window[0] < WINDOW_S:
                window[1] += 1  # the same as one said less than a minute ago: counted, not written
                return False
            if not self._room(now):
                return False
            held = window[1] if window else 0
            self.kinds[kind] = [now, 0]
            self.kinds.move_to_end(kind)
            while len(self.kinds) > KINDS_KEPT:
                self.kinds.popitem(last=False)
            self._shorten(record, held)
            return True

    def _room(self, now: float) -> bool:
        """Whether this minute has room for one more line (a new minute first says what the last one held)."""
        minute = self.minute
        if now - minute[0] >= WINDOW_S:
            self.minute = minute = [now, 0, 0, minute[3]]
        if minute[1] >= LINES_PER_MINUTE:
            minute[3] += 1
            return False
        minute[1] += 1
        return True

    def _shorten(self, record: logging.LogRecord, held: int) -> None:
        """One line at most ``LINE_CHARS`` long, the counts said, a traceback only while the minute has room."""
        notes = [f"{held} more like this in the last minute"] if held else []
        if self.minute[3]:
            notes.append(f"{self.minute[3]} other lines held back")
            self.minute[3] = 0
        text = _text(record)[:LINE_CHARS] + (f" ({'; '.join(notes)})" if notes else "")
        record.msg, record.args = text, None
        if record.exc_info or record.exc_text:
            if self.minute[2] >= TRACEBACKS_PER_MINUTE:
                record.exc_info, record.exc_text, record.stack_info = None, None, None
            else:
                self.minute[2] += 1


def _text(record: logging.LogRecord) -> str:
    try:
        return record.getMessage()
    except Exception:  # noqa: BLE001 - a record whose arguments do not fit its format is still a line
        return str(record.msg)


_installed: list[LogLimit] = []


def install() -> LogLimit:
    """The process's one ``LogLimit``, on every logger of ``LOGGERS`` (again: the same one, nothing added)."""
    if not _installed:
        _installed.append(LogLimit())
        for name in LOGGERS:
            logging.getLogger(name).addFilter(_installed[0])
    return _installed[0]
