"""A finished run joins the zoo: a manifest in ``<zoo>/jobs/`` pointing at the run's weights.

    name, path = publish(run, zoo_root)     # after training: "<run name>", or "<run name>-<id>" if taken
    unpublish(run)                          # removes that manifest only (never a weights file)

The weights stay in the run folder (``<out>/model.safetensors``); the zoo entry names them by
absolute path, so every model list (the app's tabs, ``explorer models list``) shows the run and the
Grounding tab opens it by its zoo name. Its ``source`` says which job trained it and how.
"""

from __future__ import annotations

import re
from pathlib import Path

from explorer.core.files import exclusive_lock
from explorer.jobs.records import Run

ZOO_SUBDIR = "jobs"


def publish(run: Run, manifest_path: str | Path, zoo_root: str | Path | None = None) -> tuple[str, Path]:
    """Write the zoo entry of ``run`` (whose own manifest is ``manifest_path``); returns (zoo name, its path)."""
    from explorer.core import paths
    from explorer.zoo import Manifest

    own = Manifest.read(manifest_path)
    root = Path(zoo_root) if zoo_root is not None else paths.checkpoints_root()
    folder = root / ZOO_SUBDIR
    base = _slug(run.name) or run.method
    # One publisher at a time: two runs of one name that finished together both found the name free, and the
    # second manifest replaced the first (one run's zoo entry lost; CI, two CPU runs named alike).
    with exclusive_lock(folder / ".publish.lock"):  # the name is chosen and written before another run looks
        name = base if not _taken(root, base, folder / f"{base}.json") else f"{base}-{run.id}"
        entry = Manifest(name=name, method=own.method, weights=str(own.weights_path().resolve()),
                         architecture=own.architecture, context_length=own.context_length,
                         source=f"explorer job {run.id} ({run.name}): {own.source}", format=own.format,
                         options=own.resolved_options(), trained=True, notes=own.notes)
        path = entry.write(folder / f"{name}.json")
    return name, path


def unpublish(run: Run) -> Path | None:
    """Remove the run's zoo manifest (not its weights); the path removed, or None."""
    if not run.zoo_manifest:
        return None
    path = Path(run.zoo_manifest)
    if path.is_file():
        path.unlink()
        return path
    return None


def _taken(root: Path, name: str, own_path: Path) -> bool:
    """Whether a manifest other than ``own_path`` already uses ``name`` in the zoo at ``root``."""
    from explorer.zoo import Zoo

    for manifest in Zoo(root, cache_size=1).manifests():
        if manifest.name == name and (manifest.path is None or Path(manifest.path).resolve() != own_path.resolve()):
            return True
    return own_path.exists()


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", text).strip("-")


__all__ = ["ZOO_SUBDIR", "publish", "unpublish"]
