"""JSON index files as the released benchmarks ship them, read for every family's readers: ``read_json`` keeps
bytes that are not UTF-8 as lone surrogates, so a reader can leave out just the entries they fall in
(``bad_text`` finds them); a file that is not JSON at all is a ``DatasetError`` naming it."""

from __future__ import annotations

import json
import re
from pathlib import Path

from explorer.data.errors import DatasetError

NOT_UTF8 = re.compile("[\udc80-\udcff]")  # bytes that were not UTF-8, kept by errors="surrogateescape"


def read_json(file: Path, expected: str = "", kind: type | None = None):
    """A JSON index file, its bytes that are not UTF-8 kept as lone surrogates (``bad_text`` finds them,
    so a reader can leave out just the entries they fall in); a ``DatasetError`` naming the file when it
    is not JSON at all (or not of ``kind``)."""
    try:
        value = json.loads(Path(file).read_bytes().decode("utf-8-sig", errors="surrogateescape"))
    except ValueError as error:
        raise DatasetError(f"{file} is not valid JSON ({error})" + (f"; expected {expected}" if expected else "")) \
            from error
    if kind is not None and not isinstance(value, kind):
        raise DatasetError(f"{file}: expected {expected or kind.__name__}")
    return value


def bad_text(*values) -> bool:
    """Whether any of the strings (in lists and dicts too) holds bytes that were not UTF-8 (``read_json``)."""
    for value in values:
        if isinstance(value, str) and NOT_UTF8.search(value):
            return True
        if isinstance(value, dict) and bad_text(*value.keys(), *value.values()):
            return True
        if isinstance(value, list) and bad_text(*value):
            return True
    return False


__all__ = ["NOT_UTF8", "bad_text", "read_json"]
