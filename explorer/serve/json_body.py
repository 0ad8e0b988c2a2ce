"""A request body read as JSON without any recursion a visitor can drive: depth first, then the link check.

``json.loads`` and every walk over its result recurse once per level, so a body nested 500 deep would end
in ``RecursionError`` (an HTTP 500 and a traceback). ``check_depth`` counts the brackets of the raw bytes
(strings blanked out first) before anything parses them; ``carries_link`` walks with a list, not the stack.
"""

from __future__ import annotations

import json

import numpy as np

from explorer.serve.refusals import Refusal

_STEP = np.zeros(256, dtype=np.int8)  # +1 for an opening bracket, -1 for a closing one
_STEP[[ord("["), ord("{")]], _STEP[[ord("]"), ord("}")]] = 1, -1
_SLICE = 2**20  # bytes counted at a time: a few MB of arrays whatever the body's size


def json_depth(body: bytes) -> int:
    """How deep ``body``'s lists and objects nest (outside strings), read from its bytes without parsing.
    Escaped backslashes go first, then escaped quotes, so the quotes left alternate: open, close."""
    bare = body.replace(b"\\\\", b"").replace(b'\\"', b"")
    deepest, depth, inside = 0, 0, 0
    for start in range(0, len(bare), _SLICE):
        data = np.frombuffer(bare, dtype=np.uint8, count=min(_SLICE, len(bare) - start), offset=start)
        quotes = np.cumsum(data == ord('"'), dtype=np.int64) + inside
        steps = np.where(quotes % 2 == 1, 0, _STEP[data]).astype(np.int64)
        levels = np.cumsum(steps) + depth
        deepest = max(deepest, int(levels.max(initial=depth)))
        depth, inside = int(levels[-1]), int(quotes[-1]) % 2
    return deepest


def check_depth(body: bytes, limit: int) -> None:
    """``Refusal`` (400) when ``body`` nests deeper than ``limit``."""
    depth = json_depth(body)
    if depth > limit:
        raise Refusal(400, f"a request nested {depth} levels deep; this page reads at most {limit}")


def read_json(body: bytes):
    """The body's JSON, or None when it is not JSON (check its depth first)."""
    try:
        return json.loads(body)
    except (ValueError, UnicodeDecodeError, RecursionError):
        return None


def carries_link(value) -> bool:
    """Whether a request's data holds a file input given as a link (``{"path": "http(s)://..."}``: what
    Gradio would download; the ``url`` the page itself sends beside an uploaded file's ``path`` is not read)."""
    waiting = [value]
    while waiting:
        item = waiting.pop()
        if isinstance(item, dict):
            path = item.get("path")
            if isinstance(path, str) and path.strip().lower().startswith(("http://", "https://", "//")):
                return True
            waiting.extend(item.values())
        elif isinstance(item, list):
            waiting.extend(item)
    return False
