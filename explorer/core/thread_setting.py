"""A setting that holds for this thread only while inside a ``with`` (the loaders' switches)."""

from __future__ import annotations

import contextlib
import threading


@contextlib.contextmanager
def set_for_this_thread(local: threading.local, attribute: str, value):
    """Inside: ``local.<attribute>`` is ``value`` on this thread; the previous value comes back after."""
    previous = getattr(local, attribute, None)
    setattr(local, attribute, value)
    try:
        yield
    finally:
        setattr(local, attribute, previous)
