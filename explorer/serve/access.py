"""Who may do what through the page: the folders a typed path must sit in, and the public demo mode.

Anyone who reaches the page can call every endpoint directly, with any values, so every check here
runs in the handlers on the server; hiding a control is a courtesy, not a check.

- Owner mode (``python app.py`` on 127.0.0.1, or ``--trusted`` with ``--auth``): the page manages the
  zoo, datasets and runs, but a path typed in it is accepted only under the allowed roots: the zoo
  folder, ``$EXPLORER_HOME`` and every ``--allow-root DIR`` (also ``$EXPLORER_ALLOWED_ROOTS``, folders
  joined by ``os.pathsep``). Symlinks and ``..`` are resolved before the check.
- Owner mode also answers only requests addressed to loopback (or an ``--allow-host`` name) and sent by
  no other site's page (``explorer.serve.host_guard``).
- Public mode (``--public``; implied by ``--share`` or an address others can reach, unless ``--trusted``):
  a read-only demo. The zoo is fixed, datasets come from a list, there are no runs, no typed paths,
  and each visitor session may have only a few requests queued or running at once.

The page never unpickles, in either mode: a file that needs pickle is added from a shell by the
machine's owner (``explorer models add PATH --allow-pickle``).
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

from explorer.core import paths
from explorer.core.errors import ExplorerError
from explorer.serve.budget import Budget
from explorer.serve.host_guard import host_names

ROOTS_ENV = "EXPLORER_ALLOWED_ROOTS"
SESSION_CAP = 12  # requests one visitor session may have queued or running at once (public mode; a page
# load alone sends 9)
PUBLIC_SEEDS = 4  # pictures per seed row a visitor may ask SDXL for at once (public mode)
PUBLIC_GENERATIONS = 2  # generations queued or running at once, all visitors together (public mode)
QUEUE_SIZE = 64  # requests the whole queue holds (public mode): a flood is refused, not buffered
PUBLIC_CACHE_SECONDS = (600, 3600)  # Gradio's delete_cache: (every, older than), public mode (see gradio_cache)
PUBLIC_UPLOAD_BYTES = 25 * 1024 * 1024  # a visitor's upload (pictures only; the image rules bound pixels)
PICKLE_ADVICE = ("The page never unpickles a file. If you own this machine and trust the file, add it from a "
                 "shell: `explorer models add {path} --allow-pickle`.")

log = logging.getLogger("explorer.access")


class AccessRefused(ExplorerError):
    """The page may not do this (a path outside the allowed roots, or an action a public demo turns off)."""


def env_roots() -> list[Path]:
    """Folders named in ``$EXPLORER_ALLOWED_ROOTS``."""
    value = os.environ.get(ROOTS_ENV, "")
    return [Path(part).expanduser() for part in value.split(os.pathsep) if part.strip()]


def _resolved(path: str | Path) -> Path:
    return Path(path).expanduser().resolve(strict=False)


@dataclass(frozen=True)
class Access:
    """The page's rules, built once at start and passed to every tab."""

    roots: tuple[Path, ...] = ()
    public: bool = False
    session_cap: int = SESSION_CAP
    sdxl: Path | None = None  # the SDXL the owner set at start (a public page has no field for it)
    sdxl_config: Path | None = None  # its configs folder, for a single-file SDXL
    hosts: tuple[str, ...] = ()  # names the owner's page answers at besides loopback's (``--allow-host``)
    budget: Budget | None = None  # what a visitor may spend (None: the mode's own, ``Budget.for_mode``)

    def __post_init__(self):
        if self.budget is None:
            object.__setattr__(self, "budget", Budget.for_mode(self.public))

    @classmethod
    def for_app(cls, zoo_root: str | Path, allow_roots: Iterable[str | Path] = (), public: bool = False,
                sdxl: str | Path | None = None, sdxl_config: str | Path | None = None,
                session_cap: int = SESSION_CAP, allow_hosts: Iterable[str] = (),
                caption_chars: int | None = None) -> "Access":
        """The zoo folder, ``$EXPLORER_HOME``, ``allow_roots`` and ``$EXPLORER_ALLOWED_ROOTS``, resolved;
        ``allow_hosts``: see ``explorer.serve.host_guard``; ``caption_chars``: the budget's caption cap."""
        found: list[Path] = []
        for root in [zoo_root, paths.home(), *allow_roots, *env_roots()]:
            resolved = _resolved(root)
            if resolved == Path(resolved.anchor):
                raise AccessRefused(f"{root} is the file system's root: allow narrower folders.")
            if resolved not in found:
                found.append(resolved)
        chosen = sdxl if sdxl is not None else paths.sdxl_default()
        return cls(roots=tuple(found), public=public, session_cap=session_cap,
                   budget=Budget.for_mode(public, caption_chars),
                   sdxl=Path(chosen).expanduser() if chosen else None,
                   sdxl_config=Path(sdxl_config).expanduser() if sdxl_config else None,
                   hosts=host_names(allow_hosts))

    # ---- checks, each raising AccessRefused with a one-line reason (logged) --------------------------

    def refuse(self, message: str) -> AccessRefused:
        log.warning("refused: %s", message)
        return AccessRefused(message)

    def path(self, value: str | Path, what: str) -> Path:
        """``value`` resolved (symlinks, ``..``, ``~``), if it lies under an allowed root."""
        text = str(value or "").strip()
        if not text:
            raise self.refuse(f"give the {what}")
        if "\x00" in text:
            raise self.refuse(f"the {what} {text!r} is not a path")
        if self.public:
            raise self.refuse(f"this is a public demo: a {what} cannot be typed here")
        try:
            resolved = _resolved(text)
        except (OSError, RuntimeError) as error:  # a name too long, a loop of links: not a path to read
            raise self.refuse(f"the {what} {text[:80]!r} is not a path this page can read ({error.strerror or error})"
                              if isinstance(error, OSError) else f"the {what} {text[:80]!r} is not a path this page "
                              "can read (a loop of links)") from None
        if not any(resolved == root or root in resolved.parents for root in self.roots):
            raise self.refuse(f"{text} is not under an allowed folder; start the app with --allow-root "
                              f"{_suggested_root(resolved)} (allowed now: {', '.join(map(str, self.roots))})")
        return resolved

    def owner_only(self, action: str) -> None:
        """Refuse ``action`` (e.g. "adding a model") on a public demo page."""
        if self.public:
            raise self.refuse(f"this is a public demo: {action} is turned off")

    @property
    def picture_types(self) -> list[str] | None:
        """``file_types`` of a picture upload: a public page takes pictures only (Gradio checks the type on the
        server, before any handler); the owner's page lets the image reader say what a file is."""
        return ["image"] if self.public else None

    def describe(self) -> str:
        """One line for the page's header."""
        if self.public:
            return ("**Public demo**: a fixed set of models and datasets, read-only. Upload your own pictures to "
                    "see where each sentence lands; models, datasets and training are managed by the owner.")
        return f"Owner mode: paths typed here must be under {', '.join(f'`{root}`' for root in self.roots)}."


def _suggested_root(path: Path) -> Path:
    """The folder to allow for ``path``: itself when it is a folder, else its parent."""
    try:
        return path if path.is_dir() else path.parent
    except OSError:  # a name too long to ask about: not a folder
        return path.parent
