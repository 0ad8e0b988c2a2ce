"""What every tab shares: turning failures into messages the page can show."""

from __future__ import annotations

import logging
import traceback

from explorer.core.errors import ExplorerError

log = logging.getLogger("explorer.ui")


def explain(error: Exception) -> str:
    """A message for the page. Our own errors speak for themselves; anything else is a bug."""
    if isinstance(error, ExplorerError):
        return f"**Cannot do that:** {error}"
    if isinstance(error, ValueError):
        return f"**Cannot do that:** {error}"
    log.error("unexpected error in the app:\n%s", traceback.format_exc())
    return f"**Internal error** ({type(error).__name__}: {error}). The app is still running; the log has details."
