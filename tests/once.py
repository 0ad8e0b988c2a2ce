"""Work done once per test run, whichever pytest-xdist worker asks first.

A session fixture runs once per *worker*, and work stealing spreads a module's tests over both workers: each
then paid for the same read-only result (the two gloo ranks of ``test_distributed`` were spawned twice in one
run, 32 and 34 s). ``once_per_run`` builds into a folder of the run's shared temp root under a file lock; the
other worker waits on the lock (its core goes to the builder meanwhile) and reads what was written.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Callable

from filelock import FileLock


def once_per_run(tmp_path_factory, name: str, build: Callable[[Path], None]) -> Path:
    """The folder ``name`` after ``build(folder)`` ran in it once in this run (again only if it raised)."""
    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent  # the run's own folder, which every worker's basetemp sits in
    folder, done = root / name, root / f"{name}.done"
    with FileLock(str(root / f"{name}.lock")):
        if not done.exists():
            shutil.rmtree(folder, ignore_errors=True)
            folder.mkdir(parents=True)
            build(folder)
            done.touch()
    return folder
