"""A folder bounded in bytes and age: what is past the bound is removed, oldest first.

    prune(exports, max_bytes=200 * 2**20, max_seconds=3600)   # each entry of the folder is one unit

Each direct entry of the folder (a file, or a folder with everything under it) is one unit, dated by
its modification time; a unit older than ``max_seconds`` goes, then the oldest until the folder holds
at most ``max_bytes``. ``keep`` names units that stay whatever their age (the one just written).
"""

from __future__ import annotations

import shutil
import time
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Unit:
    path: Path
    bytes: int
    mtime: float


def units(folder: str | Path) -> list[Unit]:
    """The folder's direct entries with their sizes (everything under a folder), oldest first."""
    found = []
    for entry in Path(folder).iterdir() if Path(folder).is_dir() else ():
        try:
            size = entry.stat().st_size if entry.is_file() else sum(
                p.stat().st_size for p in entry.rglob("*") if p.is_file())
            found.append(Unit(entry, size, entry.stat().st_mtime))
        except FileNotFoundError:  # removed meanwhile by another request
            continue
    return sorted(found, key=lambda unit: unit.mtime)


def remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


def prune(folder: str | Path, max_bytes: int | None = None, max_seconds: float | None = None,
          keep: tuple[Path, ...] = ()) -> list[Path]:
    """Remove what is past the bounds, oldest first; the removed units."""
    now, removed = time.time(), []
    present = units(folder)
    total = sum(unit.bytes for unit in present)
    for unit in present:
        if unit.path in keep:
            continue
        too_old = max_seconds is not None and now - unit.mtime > max_seconds
        too_big = max_bytes is not None and total > max_bytes
        if not (too_old or too_big):
            continue
        remove(unit.path)
        total -= unit.bytes
        removed.append(unit.path)
    return removed


def folder_bytes(folder: str | Path) -> int:
    return sum(unit.bytes for unit in units(folder))
