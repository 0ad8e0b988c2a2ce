"""Writing files atomically: a reader sees the old file or the whole new one, never part of it.

    with atomic_path(target) as tmp:        # a fresh temporary path beside the target
        save_file(tensors, tmp)             # any writer that takes a path
    with atomic_write(target) as out:       # or a handle (text UTF-8, or binary)
        out.write(text)
    write_text_atomic(target, text)
    file_stamp(target)                      # (inode, mtime, size): changes when the file is rewritten
    with exclusive_lock(folder / ".lock"):  # one writer at a time, across threads and processes
        ...

The temporary file is unique (two writers never share one), replaces the target only when the
block ends without an error, and is removed when it does not; a crash leaves at most a hidden
``.<name>.*.tmp`` beside the target. The new file keeps the target's permissions; a first one
gets the umask's, as any new file.
"""

from __future__ import annotations

import fcntl
import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO


@contextmanager
def atomic_path(path: str | os.PathLike, keep_mode: bool = True) -> Iterator[Path]:
    """A fresh temporary path beside ``path`` (not created: the writer creates it, with the
    process's umask like any new file). When the block ends without an error it replaces ``path``,
    keeping the replaced file's permissions (``keep_mode``); otherwise it is removed."""
    path = Path(path)
    directory = path.parent if str(path.parent) else Path(".")
    directory.mkdir(parents=True, exist_ok=True)
    try:
        mode = path.stat().st_mode & 0o7777 if keep_mode else None
    except FileNotFoundError:
        mode = None
    temporary = directory / f".{path.name}.{uuid.uuid4().hex[:12]}.tmp"
    try:
        yield temporary
        if mode is not None:
            os.chmod(temporary, mode)
        os.replace(temporary, path)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise


@contextmanager
def atomic_write(path: str | os.PathLike, *, binary: bool = False) -> Iterator[IO]:
    """A handle whose contents replace ``path`` when the block ends without an error (synced to disk)."""
    with atomic_path(path) as temporary:
        with open(temporary, "wb" if binary else "w", **({} if binary else {"encoding": "utf-8"})) as out:
            yield out
            out.flush()
            os.fsync(out.fileno())


def write_text_atomic(path: str | os.PathLike, text: str) -> Path:
    with atomic_write(path) as out:
        out.write(text)
    return Path(path)


def file_stamp(path: str | os.PathLike) -> tuple[int, int, int] | None:
    """A file's identity on disk: (inode, mtime in ns, size), which an atomic rewrite changes even
    within one mtime tick; None when there is no such file (or it cannot be read)."""
    try:
        stat = os.stat(path)
    except OSError:
        return None
    return stat.st_ino, stat.st_mtime_ns, stat.st_size


@contextmanager
def exclusive_lock(path: str | os.PathLike, error: type[Exception] | None = None, what: str = "") -> Iterator[None]:
    """An exclusive ``flock`` on the file ``path`` (made, with its folder, when missing) while the block runs:
    one holder at a time across threads and processes. When the file cannot be made: ``error`` saying that
    ``what`` (default: the folder) cannot be written, or the ``OSError`` itself without one."""
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        handle = open(path, "a")
    except OSError as problem:
        if error is None:
            raise
        raise error(f"{what or path.parent} cannot be written: {problem}") from problem
    with handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def read_json(path: str | os.PathLike, error: type[Exception] = ValueError, where: str = ""):
    """A JSON file's content, or ``error`` naming the file (and ``where`` it was looked for) when it
    cannot be read or is not JSON."""
    import json

    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as problem:
        raise error(f"{where or path}: {Path(path).name} is not valid JSON or cannot be read ({problem})") from problem


def copy_by_content(source: str | os.PathLike, folder: str | os.PathLike) -> Path:
    """A copy of ``source`` in ``folder`` named by its stem and a digest of its bytes (written once,
    atomically): the page may serve only its own folders, and two pictures of one name do not collide."""
    import hashlib

    source = Path(source)
    data = source.read_bytes()
    digest = hashlib.blake2b(data, digest_size=6).hexdigest()
    Path(folder).mkdir(parents=True, exist_ok=True)
    target = Path(folder) / f"{source.stem}-{digest}{source.suffix}"
    if not target.is_file():
        with atomic_path(target) as temporary:
            temporary.write_bytes(data)
    return target

