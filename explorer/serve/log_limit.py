"""Repeated log lines said once with a count, so that no flood of requests can flood the server's log.

``install()`` puts one ``LogLimit`` filter on the loggers a visitor's requests can make speak (our refusals,
uvicorn's "Exception in ASGI application", asyncio's "socket.accept() out of system resource", Python's warnings),
and sends Gradio's own tracebacks there too: Gradio prints them with ``traceback.print_exc()`` straight to stderr,
two per request it cannot read (a value its checks refuse), so 300 such requests wrote 11,700 lines in 16 s; its
modules now print through ``gradio.errors`` (``route_gradio_tracebacks``). The first record of
a kind passes; more of that kind within a minute are only counted, and the next one to pass says "N more like this in
the last minute". At most ``LINES_PER_MINUTE`` records and ``TRACEBACKS_PER_MINUTE`` tracebacks pass a minute in
all, each line at most ``LINE_CHARS`` long: a few kilobytes a minute, whatever a flood sends. Kinds are keyed with
their numbers blanked, so a flood from many addresses is one kind; ``LogLimit.dropped`` counts what was held back.
"""

from __future__ import annotations

import logging
import re
import sys
import threading
import traceback
import time
from collections import OrderedDict

WINDOW_S = 60.0
LINES_PER_MINUTE = 30
TRACEBACKS_PER_MINUTE = 3
LINE_CHARS = 400
KINDS_KEPT = 1024  # kinds remembered (least recently seen forgotten): bounded memory
GRADIO_ERRORS = "gradio.errors"  # Gradio's tracebacks, once ``route_gradio_tracebacks`` has run
LOGGERS = ("explorer.access", "uvicorn.error", "uvicorn", "asyncio", "py.warnings", "gradio", GRADIO_ERRORS)
GRADIO_MODULES = ("gradio.queueing", "gradio.routes", "gradio.route_utils", "gradio.utils", "gradio.blocks")
_NUMBERS = re.compile(r"\d+")


class LogLimit(logging.Filter):
    def __init__(self, clock=time.monotonic):
        super().__init__()
        self.clock = clock
        self.kinds: OrderedDict[tuple, list] = OrderedDict()  # kind -> [its window's start, held in it]
        self.minute = [clock(), 0, 0, 0]  # [start, lines passed, tracebacks passed, lines held]
        self.dropped = 0  # records held back since the start
        self.lock = threading.Lock()

    def start_new_window(self) -> None:
        """Forget what this minute has passed and which kinds were said: the next line starts a new minute (a test
        suite's tests share the process's limiter, and each starts on its own minute)."""
        with self.lock:
            self.kinds.clear()
            self.minute = [self.clock(), 0, 0, 0]

    def filter(self, record: logging.LogRecord) -> bool:
        now = self.clock()
        with self.lock:
            kind = (record.name, record.levelno, _NUMBERS.sub("#", _text(record))[:120])
            window = self.kinds.get(kind)
            if window is not None and now - window[0] < WINDOW_S:
                window[1] += 1  # the same as one said less than a minute ago: counted, not written
                self.dropped += 1
                return False
            if not self._room(now):
                self.dropped += 1
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
    """The process's one ``LogLimit``, on every logger of ``LOGGERS`` (again: the same one, nothing added);
    Python's warnings and Gradio's tracebacks go through it too."""
    if not _installed:
        _installed.append(LogLimit())
        for name in LOGGERS:
            logging.getLogger(name).addFilter(_installed[0])
        warned = logging.getLogger("py.warnings")
        if not warned.handlers:  # else captureWarnings would give it a NullHandler: warnings said nowhere
            warned.addHandler(logging.StreamHandler())
            warned.propagate = False
        logging.captureWarnings(True)  # a warning per request (Gradio's "value not in the choices") is a record
        route_gradio_tracebacks()
    return _installed[0]


class _TracebacksToLog:
    """Stands in for the ``traceback`` module inside Gradio's modules: ``print_exc`` logs the exception being
    handled to ``GRADIO_ERRORS`` (through the ``LogLimit``) instead of printing it; the rest is ``traceback``'s."""

    def __getattr__(self, name):
        return getattr(traceback, name)

    @staticmethod
    def print_exc(*args, **kwargs) -> None:
        error = sys.exc_info()[1]
        logging.getLogger(GRADIO_ERRORS).error("Gradio: %s: %s", type(error).__name__, str(error)[:LINE_CHARS],
                                               exc_info=error is not None)


def route_gradio_tracebacks() -> None:
    """Gradio's modules print their tracebacks through the log (``_TracebacksToLog``), process-wide, once."""
    import importlib

    for name in GRADIO_MODULES:
        module = importlib.import_module(name)
        if getattr(module, "traceback", None) is traceback:
            module.traceback = _TracebacksToLog()
