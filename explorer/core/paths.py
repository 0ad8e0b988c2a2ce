"""Where explorer keeps things: the one place that decides paths.

- ``home()``: ``$EXPLORER_HOME``, else ``~/.cache/explorer``. Caches, exports, the examples' truth
  registry and the demo-zoo work folder live under it, so a test or a tool can isolate them by setting
  one variable.
- ``repo_root()``: the source checkout (the package's parent folder), where ``checkpoints/`` sits.
- ``checkpoints_root()``: ``$EXPLORER_CHECKPOINTS``, else the checkout's ``checkpoints/``, else
  ``./checkpoints``.
- ``assets_dir()``: ``$EXPLORER_ASSETS``, else the checkout's ``assets/`` (the page's example files; an
  installed package has none unless one is named).

Functions, not constants: the environment is read when a path is needed, not at import.
Folders are made on first use by whoever writes into them (``ensure``).
"""

from __future__ import annotations

import os
from pathlib import Path

HOME_ENV = "EXPLORER_HOME"
CHECKPOINTS_ENV = "EXPLORER_CHECKPOINTS"
ASSETS_ENV = "EXPLORER_ASSETS"


def home() -> Path:
    env = os.environ.get(HOME_ENV)
    return Path(env).expanduser() if env else Path.home() / ".cache" / "explorer"


def repo_root() -> Path:
    return Path(__file__).resolve().parents[2]


def checkpoints_root() -> Path:
    env = os.environ.get(CHECKPOINTS_ENV)
    if env:
        return Path(env).expanduser()
    repo = repo_root() / "checkpoints"
    return repo if repo.is_dir() else Path.cwd() / "checkpoints"


def demo_zoo_root() -> Path:
    """The demo zoo that ships with the checkout (``explorer zoo build-demo`` rewrites it)."""
    return repo_root() / "checkpoints" / "demo"


def assets_dir() -> Path:
    """The example pictures, captions and truth masks the page opens on (``explorer assets write`` makes it)."""
    env = os.environ.get(ASSETS_ENV)
    return Path(env).expanduser() if env else repo_root() / "assets"


def examples_dir() -> Path:
    """What the app derives from its examples (their truth registry); the examples themselves are ``assets_dir()``."""
    return home() / "examples"


def example_truth_dir() -> Path:
    """Ground truth of the example scenes, keyed by picture content (``explorer.grounding.truth``)."""
    return examples_dir() / "truth"


def datasets_dir() -> Path:
    """Datasets the app offers and writes (the synthetic worlds of the Retrieval and Jobs tabs)."""
    return home() / "datasets"


def exports_dir() -> Path:
    """Figures exported from the app (the page may download from here)."""
    return home() / "exports"


def demo_build_dir() -> Path:
    """Scratch space of ``explorer zoo build-demo``: the world and the training runs."""
    return home() / "demo-build"


def ensure(path: Path) -> Path:
    """``path``, made if missing."""
    path.mkdir(parents=True, exist_ok=True)
    return path


SDXL_ENV = "EXPLORER_SDXL"


def sdxl_default() -> Path | None:
    """Where SDXL base sits when no one says: ``$EXPLORER_SDXL`` (a diffusers folder or a file), else None."""
    env = os.environ.get(SDXL_ENV)
    return Path(env).expanduser() if env else None

