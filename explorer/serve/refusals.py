"""A request the page refuses in front of Gradio's routes: an HTTP status and one line for the visitor.

``page_guard.PageGuard`` answers it as ``Cannot do that: <message>.`` and logs it as one warning, never a
traceback; the modules that decide (uploads, bodies) raise it.
"""

from __future__ import annotations

from explorer.core.errors import ExplorerError


class Refusal(ExplorerError):
    """Refused with ``status`` (a 4xx); the message is one line meant for the visitor."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status
