"""A request's deadline, checked where long work can stop cleanly.

Python cannot stop a thread from outside, so a request past its deadline is stopped from inside: the page's
request rules (``explorer.serve.request_rules``) open a ``deadline`` around each handler call (and around each
step of a generator handler), and long work calls ``check`` between its steps: before every cached computation
(``explorer.core.cache.BoundedCache.get``: every model run of a Draw goes through one), and between the steps a
handler yields. Past the deadline ``check`` raises ``DeadlinePassed``, which the page shows as its one line.
Outside a request there is no deadline and ``check`` does nothing.
"""

from __future__ import annotations

import contextlib
import time
from contextvars import ContextVar

from explorer.core.errors import ExplorerError

_DEADLINE: ContextVar[tuple[float, float] | None] = ContextVar("explorer_deadline", default=None)


class DeadlinePassed(ExplorerError):
    """The request ran past the page's time limit and was stopped."""


@contextlib.contextmanager
def deadline(seconds: float | None, started: float | None = None):
    """Within the block, ``check`` raises once ``seconds`` have passed since ``started`` (default now); None: no
    deadline. An inner deadline never extends an outer one."""
    if seconds is None:
        yield
        return
    start = time.monotonic() if started is None else started
    outer = _DEADLINE.get()
    end = start + seconds if outer is None else min(outer[0], start + seconds)
    token = _DEADLINE.set((end, seconds))
    try:
        yield
    finally:
        _DEADLINE.reset(token)


def check() -> None:
    """``DeadlinePassed`` if the current request's deadline has passed; nothing otherwise."""
    current = _DEADLINE.get()
    if current is not None and time.monotonic() > current[0]:
        raise DeadlinePassed(f"this request ran past the page's {current[1]:g} s limit and was stopped. Ask for "
                             "less at once (fewer models or sentences, a smaller picture).")
