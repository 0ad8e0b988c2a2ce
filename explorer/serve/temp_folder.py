"""Each server's temp files in a folder of its own.

Gradio keeps every file it serves (uploads, the examples' pictures, outputs) in ``GRADIO_TEMP_DIR`` (else
``<tmp>/gradio``), one folder per content hash, and each app deletes its files when it stops. Two servers on
one machine (an owner page and a public demo, the ordinary way to show a demo while working) share that
folder, and the same picture has the same path in both: the page's default example, cached by both, was
deleted by the first to stop, and the other's first Draw failed ("No image file at .../synthetic-test-000000.png").
A browser shows it where a raw HTTP client does not: the page hands the example's cached path back to the
server as the Draw's input, where a client that uploads the picture gets a path of its own.

``own_temp_folder`` points Gradio at ``<shared>/explorer-<pid>-<random>`` before the app is built (Gradio reads
the variable when it names each file), so a server's files are its own and stopping it (``remove_own_temp_folder``)
deletes nothing another still serves. The random part keeps two containers whose servers have the same pid
apart when they share a temp folder.
"""

from __future__ import annotations

import os
import secrets
import shutil
import tempfile
from pathlib import Path

ENV = "GRADIO_TEMP_DIR"
PREFIX = "explorer-"
_own: list[Path] = []  # this process's folder, once made


def shared_temp_folder() -> Path:
    """Where Gradio would keep its files without us: ``$GRADIO_TEMP_DIR``, else ``<tmp>/gradio``."""
    return Path(os.environ.get(ENV) or Path(tempfile.gettempdir()) / "gradio")


def own_temp_folder() -> Path:
    """This process's folder inside the shared one, made (private to its user) and set as ``GRADIO_TEMP_DIR``;
    the same folder on every call in one process."""
    if _own and os.environ.get(ENV) == str(_own[0]):
        return _own[0]
    folder = shared_temp_folder() / f"{PREFIX}{os.getpid()}-{secrets.token_hex(4)}"
    folder.mkdir(parents=True, mode=0o700)
    os.environ[ENV] = str(folder)
    _own[:] = [folder]
    return folder


def remove_own_temp_folder() -> None:
    """Delete this process's folder and everything in it (the server is stopping); nobody else's."""
    if _own:
        shutil.rmtree(_own[0], ignore_errors=True)
