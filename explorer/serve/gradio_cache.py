"""Gradio's temp folder inside the page's budget: what this app wrote there, pruned by age and bytes, and
removed when the app stops.

Gradio copies every output file (a picture, an exported figure) into its temp folder (``GRADIO_TEMP_DIR``,
else ``<tmp>/gradio``), one folder per content hash, beside the uploads, and lists it in the app's
``temp_file_sets``; its own ``delete_cache`` goes by age only and leaves the folders. ``CachePruner`` goes
over those files only (the folder may be shared with other apps): every ``EVERY`` seconds it removes a
folder past ``Budget.cache_seconds``, then the oldest past ``Budget.cache_bytes`` on disk, never one that
holds an upload a session still holds (the upload ledger keeps those) nor one younger than ``FRESH``
seconds (an output the browser has yet to fetch). It also removes the empty ``tmp*`` file Gradio's
``gr.File(type="filepath")`` leaves in the folder on every call it reads (listed nowhere). ``clear``
removes all of it, at shutdown.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from explorer.core.disk_quota import remove
from explorer.serve.budget import Budget

log = logging.getLogger("explorer.access")
EVERY = 15  # seconds between two prunings
FRESH = 60  # seconds an output is kept whatever the bytes: its browser fetches it meanwhile
FOLDER_BYTES = 4096


@dataclass
class Entry:
    """One folder of Gradio's cache (or a file directly in it) and the app's files in it."""

    files: list[str] = field(default_factory=list)  # as Gradio lists them
    bytes: int = FOLDER_BYTES
    time: float = 0.0  # the newest file's ctime (what Gradio's delete_cache ages by)


class CachePruner:
    def __init__(self, blocks, budget: Budget, held: Callable[[], set[Path]] = set):
        self.blocks, self.budget, self.held = blocks, budget, held
        self.stop = threading.Event()
        self.seen: set[Path] = set()  # folders the app's files were in: Gradio's shutdown empties the files only

    def start(self) -> threading.Thread:
        def loop():
            while not self.stop.wait(EVERY):
                try:
                    self.prune()
                except Exception as error:  # noqa: BLE001 - the next round tries again; the page goes on
                    log.warning("pruning Gradio's cache failed: %s", error)

        thread = threading.Thread(target=loop, name="explorer-cache-pruner", daemon=True)
        thread.start()
        return thread

    def entries(self, keep: set[str] = frozenset()) -> dict[Path, Entry]:
        """The app's files in Gradio's cache but ``keep``, by folder, with what they take on disk."""
        found: dict[Path, Entry] = {}
        for temp_set in list(self.blocks.temp_file_sets):
            for name in list(temp_set):
                if name in keep:
                    continue
                path = Path(name)
                try:
                    stat = path.stat()
                except OSError:  # removed meanwhile (an expired or refused upload): Gradio forgets it too
                    temp_set.discard(name)
                    continue
                entry = found.setdefault(path.parent, Entry())
                self.seen.add(path.parent)
                entry.files.append(name)
                entry.bytes += max(stat.st_size, stat.st_blocks * 512)
                entry.time = max(entry.time, stat.st_ctime)
        return found

    def prune(self, now: float | None = None) -> list[Path]:
        """Remove the folders past the age, then the oldest past the bytes; the removed folders."""
        now = time.time() if now is None else now
        held = {path.resolve() for path in self.held()}
        # Gradio's own "keep in cache": the pictures of the page's examples and initial values, made at start.
        kept = {name for block in self.blocks.blocks.values() for name in getattr(block, "keep_in_cache", ())}
        entries = {folder: entry for folder, entry in self.entries(kept).items() if folder.resolve() not in held}
        total, removed = sum(entry.bytes for entry in entries.values()), []
        seconds, limit = self.budget.cache_seconds, self.budget.cache_bytes
        for folder, entry in sorted(entries.items(), key=lambda item: item[1].time):
            if now - entry.time < FRESH:
                continue
            if (seconds is not None and now - entry.time > seconds) or (limit is not None and total > limit):
                self._remove(entry)
                total -= entry.bytes
                removed.append(folder)
        return removed + self.leaked(FRESH, now)

    def leaked(self, older_than: float, now: float | None = None) -> list[Path]:
        """Remove the empty ``tmp*`` files directly in Gradio's folder older than ``older_than`` seconds (an
        upload being received is a ``tmp*`` file too, but it is not empty for long)."""
        from gradio.utils import get_upload_folder

        now, removed = time.time() if now is None else now, []
        root = Path(get_upload_folder())
        for path in root.glob("tmp*") if root.is_dir() else ():
            try:
                stat = path.lstat()
                if path.is_file() and stat.st_size == 0 and now - stat.st_mtime > older_than:
                    path.unlink()
                    removed.append(path)
            except OSError:  # gone meanwhile
                continue
        return removed

    def clear(self) -> None:
        """Everything the app wrote in Gradio's cache, folders included (the app is stopping)."""
        self.stop.set()
        self.leaked(older_than=0)
        for entry in self.entries().values():
            self._remove(entry)
        for folder in self.seen:
            try:
                folder.rmdir()  # only when empty: the folder itself may be Gradio's root, or hold others' files
            except OSError:
                pass

    def _remove(self, entry: Entry) -> None:
        for name in entry.files:
            remove(Path(name))
            for temp_set in self.blocks.temp_file_sets:
                temp_set.discard(name)
        try:
            Path(entry.files[0]).parent.rmdir()  # Gradio's folder for it, when nothing else is left in it
        except OSError:
            pass
