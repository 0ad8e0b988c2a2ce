"""Dataset layouts as a registry: one module per released layout in a package, tried in a fixed order.

Each layout module has ``EXPECTS`` (what it looks for, said when nothing matches), ``matches(root)``
(cheap: file names only) and ``read(root, ...)``, whose keyword-only parameters are the layout's own options
(``options``). A layout named with a dash lives in a module named with an underscore (``fg-ovd``:
``fg_ovd.py``). Every family picks its reader through one: retrieval sets, grounding sets, hard-negative
sets and class sets.
"""

from __future__ import annotations

import importlib
import inspect
import os
import re
from pathlib import Path

from explorer.data.errors import DatasetError

_SPLIT_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_-]{0,31}")


def check_split(split: str | None) -> str | None:
    """``split`` if it is a plain name (letters, digits, ``_``, ``-``): a layout may build a file name from
    it, so a path never gets that far. Each layout then checks it is one of its own splits."""
    if split in (None, ""):
        return None
    if not isinstance(split, str) or not _SPLIT_NAME.fullmatch(split):
        raise DatasetError(f"a split is a plain name such as train, val or test, not {str(split)[:40]!r}")
    return split


class Layouts:
    def __init__(self, package: str, names: tuple[str, ...], what: str, folders_only: bool = False):
        self.package, self.names, self.what = package, names, what  # what: "dataset", "grounding"
        self.folders_only = folders_only  # False: a layout may be a single index file

    def module(self, name: str):
        if name not in self.names:
            raise DatasetError(f"unknown {self.what} layout {name!r}; known: {', '.join(self.names)}")
        return importlib.import_module(f"{self.package}.{name.replace('-', '_')}")

    def options(self, name: str) -> tuple[str, ...]:
        """The options ``name`` takes: its reader's keyword-only parameters."""
        parameters = inspect.signature(self.module(name).read).parameters.values()
        return tuple(p.name for p in parameters if p.kind is inspect.Parameter.KEYWORD_ONLY)

    def read(self, name: str, root: Path, *args, **options):
        """``name``'s reader on ``root`` with the ``options`` it takes (the others, None or not, left out)."""
        taken = self.options(name)
        return self.module(name).read(root, *args, **{k: v for k, v in options.items() if k in taken})

    def detect(self, root: str | os.PathLike) -> str:
        """The first layout whose files ``root`` holds; a ``DatasetError`` listing what every layout looks for."""
        root = Path(root)
        if self.folders_only and not root.is_dir():
            raise DatasetError(f"no {self.what} dataset at {root}: it is not a folder")
        if not root.exists():
            raise DatasetError(f"no dataset at {root}: the path does not exist")
        for name in self.names:
            if self.module(name).matches(root):
                return name
        tried = "; ".join(f"{name}: {self.module(name).EXPECTS}" for name in self.names)
        raise DatasetError(f"{root} matches no {self.what} layout. Tried: {tried}")


__all__ = ["Layouts"]
