"""A resumable evaluation's results so far: one JSON line per finished piece of work, keyed.

The first line is a header that names the run (dataset, units, working size...); a file written for
another run is refused rather than mixed in. Each later line is a record with a ``key``; records are
appended and flushed one at a time, so a kill loses at most the record being written. A line cut off
by a kill is dropped (the file is truncated back to its last complete line) when the file is opened.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from explorer.core.errors import ExplorerError
from explorer.core.jsonl import read_jsonl


class WorkFile:
    def __init__(self, path: str | os.PathLike, header: dict):
        self.path = Path(path)
        self.header = header
        self.records: dict[str, dict] = {}
        if self.path.is_file() and self.path.stat().st_size:
            self._load()
        else:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.path.write_text(json.dumps({"header": header}, ensure_ascii=False) + "\n", encoding="utf-8")

    def _load(self) -> None:
        data = self.path.read_bytes()
        if not data.endswith(b"\n"):  # a record torn by a kill: drop it
            data = data[: data.rfind(b"\n") + 1]
            self.path.write_bytes(data)
        lines = iter(read_jsonl(self.path))
        _, first = next(lines, (0, None))
        if not isinstance(first, dict) or first.get("header") != self.header:
            raise ExplorerError(f"{self.path} holds the results of another run ({(first or {}).get('header')}); "
                                f"delete it or write --out elsewhere to start this one")
        for _, record in lines:
            if isinstance(record, dict) and "key" in record:
                self.records[record["key"]] = record

    def __contains__(self, key: str) -> bool:
        return key in self.records

    def add(self, *records: dict) -> None:
        """Append ``records`` (each with a ``key``) and flush them to disk, in one write."""
        self.records.update((record["key"], record) for record in records)
        with open(self.path, "a", encoding="utf-8") as out:
            out.write("".join(json.dumps(record, ensure_ascii=False) + "\n" for record in records))
            out.flush()
            os.fsync(out.fileno())


class MemoryWork(WorkFile):
    """The same, kept in memory only (no --out to resume from)."""

    def __init__(self, header: dict):  # noqa: D107 - nothing on disk
        self.path, self.header, self.records = None, header, {}

    def add(self, *records: dict) -> None:
        self.records.update((record["key"], record) for record in records)




def skip_reasons(work: WorkFile, keys) -> dict[str, int]:
    """How many of the records at ``keys`` are skips, by reason (the text before its first ':')."""
    counts: dict[str, int] = {}
    for key in keys:
        record = work.records.get(key)
        if record is not None and "skipped" in record:
            reason = record["skipped"].split(":")[0]
            counts[reason] = counts.get(reason, 0) + 1
    return counts


__all__ = ["MemoryWork", "WorkFile", "skip_reasons"]
