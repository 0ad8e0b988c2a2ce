"""Pickles of plain data only: lists, dicts, tuples, strings, numbers, booleans and None.

Some datasets ship their annotations as a pickle (the refer toolkit's ``refs(unc).p``). Unpickling
runs whatever the file names: a class, a function, ``os.system``. Every such call starts with the
file naming a global (opcodes GLOBAL / STACK_GLOBAL / INST / OBJ / EXT*), which the unpickler
resolves through ``find_class`` before anything is called. ``PlainUnpickler.find_class`` resolves
no global at all, and persistent ids are refused too, so nothing of the file's choosing ever runs:
the first global stops the read with a ``DatasetError`` naming it. Lists, dicts, tuples, strings,
numbers, booleans and None are built by the unpickler itself, with no global, in every protocol (sets
and bytes too from protocol 3 or 4 on; protocol 2 writes them through a global, refused like any).

This is not the weights loader's ``--allow-pickle`` (``explorer.models.io``), which trusts a file the
user vouches for; here nothing is trusted and no opt-in exists.

Python 2's ``str`` (the refer toolkit's pickles were written by Python 2) is read as UTF-8 text, a
byte that is not UTF-8 replaced rather than failing the whole file.
"""

from __future__ import annotations

import io
import os
import pickle
from pathlib import Path

from explorer.data.errors import DatasetError


class GlobalRefused(pickle.UnpicklingError):
    """The pickle names a global (a class, a function): refused before it is resolved."""


class PlainUnpickler(pickle.Unpickler):
    """An unpickler that resolves no global and no persistent id."""

    def find_class(self, module, name):  # noqa: D102 - every global is refused, whatever it is
        raise GlobalRefused(f"{module}.{name}")

    def persistent_load(self, pid):  # noqa: D102
        raise GlobalRefused(f"persistent id {str(pid)[:60]!r}")


def loads_plain(data: bytes, what: str = "pickle"):
    """The plain value pickled in ``data``; a ``DatasetError`` for a global or a damaged pickle."""
    try:
        return PlainUnpickler(io.BytesIO(data), encoding="utf-8", errors="replace").load()
    except GlobalRefused as error:
        raise DatasetError(f"{what} refused: it names {error}, and only plain data (lists, dicts, strings, "
                           "numbers) is read from a pickle; nothing in it was run") from error
    except (pickle.UnpicklingError, EOFError, ValueError, TypeError, IndexError, KeyError, AttributeError,
            MemoryError, OverflowError, UnicodeDecodeError) as error:
        raise DatasetError(f"{what} is not a readable pickle ({type(error).__name__}: {error})") from error


def load_plain(path: str | os.PathLike):
    """The plain value pickled in the file at ``path`` (``loads_plain``); a ``DatasetError`` when unreadable."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as error:
        raise DatasetError(f"cannot read {path}: {error.strerror or error}") from error
    return loads_plain(data, str(path))


__all__ = ["GlobalRefused", "PlainUnpickler", "load_plain", "loads_plain"]
