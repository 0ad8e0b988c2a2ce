"""One escaping helper for every view that builds HTML (``escape``).

A visitor's text reaches the page's HTML in many places: caption sentences, span words, a swap's replacement word,
an uploaded file's name, a model's name or kind from a plugin. Each goes in through ``escape``, in element text and
in a quoted attribute alike (quotes are escaped too), so no such text can open a tag or leave an attribute.
"""

from __future__ import annotations

import html


def escape(value) -> str:
    """``value`` as text that is safe in HTML element content and inside a double- or single-quoted attribute."""
    return html.escape(str(value), quote=True)
