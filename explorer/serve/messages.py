"""What every tab shares: turning failures into messages the page can show.

One contract (``explorer.core.errors``): an ``ExplorerError`` is about the input and its message says what to
do; anything else is a bug. The page shows a bug as "Internal error (id ...)" and the log holds its traceback
under that id, once.
"""

from __future__ import annotations

import logging
import re
import secrets

from explorer.core.errors import ExplorerError

LONG_DIGITS = 12  # a number a message repeats has at most this many digits
log = logging.getLogger("explorer.ui")
INTERNAL = "this is a bug, not your input; the server log has the details"


def internal_error(error: BaseException) -> str:
    """Log ``error`` with its traceback under a fresh id; the line the person sees (no period, no markup)."""
    ident = secrets.token_hex(4)
    log.error("internal error %s: %s: %s", ident, type(error).__name__, error,
              exc_info=(type(error), error, error.__traceback__))
    return f"Internal error (id {ident}): {INTERNAL}"


def explain(error: Exception) -> str:
    """A message for the page. Our own errors speak for themselves; anything else is a bug."""
    if isinstance(error, ExplorerError):
        return f"**Cannot do that:** {short_numbers(str(error))}"
    return f"**{internal_error(error)}.** The app is still running."


_LONG_NUMBER = re.compile(r"[-+]?\d[\d,]{%d,}(?:\.\d+)?(?:e[-+]?\d+)?" % (LONG_DIGITS - 1))


def short_numbers(text: str) -> str:
    """``text`` with every number longer than ``LONG_DIGITS`` digits said as "a number too long to repeat": a
    visitor's 1e308 came back as 309 digits."""
    return _LONG_NUMBER.sub("a number too long to repeat", text)
