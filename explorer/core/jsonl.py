"""JSON Lines files (one JSON value per line), read with clear errors and written atomically.

    from explorer.core.jsonl import read_jsonl, write_jsonl
    for number, record in read_jsonl("scenes.jsonl"):   # (line number, value); blank lines skipped
        ...
    write_jsonl("out.jsonl", records)                   # any iterable, consumed lazily

- ``read_jsonl`` yields ``(line number, value)`` (numbers 1-based, counting blank lines), so a
  caller that rejects a record can name its line too. A line that is not JSON raises
  ``JsonlError`` ("<file>, line <n>: not JSON (<why>)"). Lines end at ``\\n``, ``\\r\\n`` or
  ``\\r`` only: JSON escapes those inside strings, while characters such as U+2028 may stand
  in a string unescaped and are not line ends. ``skip_torn_tail=True`` drops a bad LAST line
  instead (an append-only log cut off by a crash mid-write); a bad line with anything after it
  is still an error.
- ``write_jsonl`` writes one ``json.dumps(record, ensure_ascii=False)`` per line through
  ``atomic_write``: readers see the old file or the complete new one, never part of it.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from explorer.core.errors import ExplorerError
from explorer.core.files import atomic_write


class JsonlError(ExplorerError, ValueError):
    """A line of a JSON Lines file is not JSON; ``path`` and ``line`` (1-based) say which."""

    def __init__(self, path: Path, line: int, reason: str):
        super().__init__(f"{path}, line {line}: not JSON ({reason})")
        self.path, self.line = path, line


def read_jsonl(path: str | os.PathLike, *, skip_torn_tail: bool = False) -> Iterator[tuple[int, Any]]:
    """``(line number, value)`` for every non-blank line of the file at ``path`` (UTF-8), lazily."""
    path = Path(path)
    torn: JsonlError | None = None
    with open(path, encoding="utf-8") as lines:
        for number, line in enumerate(lines, 1):
            if torn is not None:  # the bad line was not the last one
                raise torn
            if not line.strip():
                continue
            try:
                value = json.loads(line)
            except ValueError as error:
                torn = JsonlError(path, number, str(error))
                if not skip_torn_tail:
                    raise torn from error
                continue
            yield number, value


def write_jsonl(path: str | os.PathLike, records: Iterable) -> Path:
    """Write ``records`` one per line, atomically; ``records`` is consumed as it is written."""
    path = Path(path)
    with atomic_write(path) as out:
        for record in records:
            out.write(json.dumps(record, ensure_ascii=False) + "\n")
    return path


__all__ = ["JsonlError", "read_jsonl", "write_jsonl"]
