"""The zoo folder: every manifest under ``checkpoints/`` (read once, re-read when it changes),
whether each loads, adding a checkpoint, and the cache of loaded models. Reading the folder imports
no torch (the page is built from it first); checking or loading a weights file imports the loaders."""

from __future__ import annotations

import hashlib
import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from explorer.core import paths
from explorer.core.cache import GB, BoundedCache
from explorer.core.errors import CheckpointError, ExplorerError, ManifestError, ModelNameError
from explorer.core.files import atomic_path
from explorer.zoo.builtin import BUILTIN_PREFIX, BUILTINS
from explorer.zoo.manifest import Manifest, load_manifest

if TYPE_CHECKING:
    from explorer.models.io.loading import CheckResult
    from explorer.models.model import Model


def check(weights: str | Path, allow_pickle: bool = False) -> CheckResult:
    """``explorer.models.io.loading.check``, whose module (torch, the method registry) loads on first use."""
    from explorer.models.io.loading import check as check_file

    return check_file(weights, allow_pickle=allow_pickle)


class ModelCache(BoundedCache):
    """Loaded models (their weights), least recently used dropped first."""

    def __init__(self, capacity: int = 2, max_bytes: int | None = 8 * GB):
        # A model bigger than the bound is kept alone: it is in memory while in use anyway.
        super().__init__("loaded models", max_items=capacity, max_bytes=max_bytes, keep_oversized=True)


@dataclass
class ZooEntry:
    manifest: Manifest | None
    manifest_path: Path
    status: str  # "loads", "built in code", or what is wrong

    @property
    def ok(self) -> bool:
        return self.manifest is not None and not self.status.startswith("error")


MAX_NAME = 100  # characters of a model's name (its files' names stay far below the 255 bytes a file system takes)

# Trained demo models with a native grounding map, in the order the views prefer them.
PREFERRED_DEFAULTS = ("demo-mulclip", "demo-caft", "demo-flair", "demo-finelip", "demo-longclip")


class Zoo:
    def __init__(self, root: str | Path | None = None, cache_size: int = 4, device: str = "auto",
                 precision: str = "fp32"):
        self.root = Path(root) if root is not None else paths.checkpoints_root()
        self.cache = ModelCache(cache_size)
        self.device, self.precision = device, precision
        self._status: dict[str, tuple[tuple, str]] = {}  # weights path -> (file stamp, whether it loads)
        # Manifests as last read, keyed by path, with the file's (mtime, size, inode) when read: a list or a
        # load reads each file once and again only after it changes, so the zoo stays live.
        # An unreadable one keeps its message (not the exception: re-raising one object grows its traceback).
        self._read: dict[Path, tuple[tuple[int, int, int], Manifest | str]] = {}

    def manifest_paths(self) -> list[Path]:
        if not self.root.is_dir():
            return []
        return sorted(p for p in self.root.rglob("*.json") if not p.name.endswith(".tmp"))

    def manifests(self) -> list[Manifest]:
        return [entry.manifest for entry in self.entries(check_weights=False) if entry.manifest is not None]

    def choice_order(self) -> list[Manifest]:
        """The manifests as the page's model lists offer them: real checkpoints first (the demo models were
        trained on synthetic shapes only), then the rest; folder order within each."""
        return sorted(self.manifests(), key=lambda manifest: not manifest.is_real)

    def entries(self, check_weights: bool = True) -> list[ZooEntry]:
        """Every manifest, readable or not, with whether its weights load (a malformed one is listed, not fatal)."""
        entries, paths = [], self.manifest_paths()
        for gone in set(self._read) - set(paths):
            self._read.pop(gone, None)
        for path in paths:
            try:
                manifest = self.read_manifest(path)
            except ManifestError as error:
                entries.append(ZooEntry(None, path, f"error: {error}"))
                continue
            status = self.status(manifest) if check_weights else ""
            entries.append(ZooEntry(manifest, path, status))
        return entries

    def read_manifest(self, path: Path) -> Manifest:
        """The manifest at ``path``, read again only if the file changed since the last read."""
        try:
            stat = path.stat()
        except OSError as error:
            self._read.pop(path, None)
            raise ManifestError(f"No manifest at {path}.") from error
        stamp = (stat.st_mtime_ns, stat.st_size, stat.st_ino)  # atomic rewrites change the inode too
        cached = self._read.get(path)
        if cached is None or cached[0] != stamp:
            try:
                cached = (stamp, Manifest.read(path))
            except ManifestError as error:
                cached = (stamp, str(error))
            self._read[path] = cached
        if isinstance(cached[1], str):
            raise ManifestError(cached[1])
        return cached[1]

    def recheck(self) -> None:
        """Forget whether each weights file loads: the next listing checks every one again."""
        self._status.clear()

    def status(self, manifest: Manifest) -> str:
        if manifest.is_builtin:
            return "built in code" if manifest.weights[len(BUILTIN_PREFIX):] in BUILTINS else "error: unknown built-in"
        weights = manifest.weights_path()
        stamp = (weights.stat().st_mtime if weights.exists() else None, manifest.allow_pickle)
        known = self._status.get(str(weights))
        if known is None or known[0] != stamp:  # one entry per file: a changed file replaces its own
            try:
                status = f"loads ({check(weights, allow_pickle=manifest.allow_pickle).format})"
            except ExplorerError as error:
                status = f"error: {str(error).splitlines()[0]}"
            known = self._status[str(weights)] = (stamp, status)
        return known[1]

    def get(self, name: str) -> Manifest:
        for manifest in self.manifests():
            if manifest.name == name:
                return manifest
        raise ManifestError(f"No model named {name!r} in {self.root}; known: "
                            f"{', '.join(m.name for m in self.manifests()) or 'none'}.")

    def default_names(self, n: int = 2) -> list[str]:
        """The models the Grounding tab opens on: the preferred trained model with a native map, then
        the base CLIP it was fine-tuned from (its generic map shows what the method adds), or the next."""
        names = [m.name for m in self.manifests()]
        first = self.default_name()
        picks = [first] if first else []
        for name in ("demo-clip-base", *PREFERRED_DEFAULTS, *names):
            if len(picks) >= n:
                break
            if name in names and name not in picks:
                picks.append(name)
        return picks

    def default_name(self) -> str | None:
        """The model views open on: a trained demo model with a native grounding map, if there is one."""
        names = [m.name for m in self.manifests()]
        for name in PREFERRED_DEFAULTS:
            if name in names:
                return name
        trained = [m.name for m in self.manifests() if m.trained]
        return (trained or names or [None])[0]

    def is_loaded(self, name: str) -> bool:
        """Whether a model of this name is in memory (any version of its manifest); never raises."""
        return any(key[0] == name for key in self.cache.keys())

    def load(self, name: str) -> Model:
        manifest = self.get(name)
        stamp = self._read[manifest.path][0] if manifest.path in self._read else None
        key = (name, str(manifest.path), stamp, self.device, self.precision)  # an edited manifest loads anew
        # ... and the model it described goes, so two versions are never held at once
        self.cache.discard(lambda k: k[:2] == key[:2] and k != key)
        return self.cache.get(key, lambda: load_manifest(manifest, self.device, self.precision))

    def add(self, weights: str | Path, name: str | None = None, source: str = "", method: str | None = None,
            allow_pickle: bool = False, options: dict | None = None) -> Manifest:
        """Check a weights file and write its manifest into the zoo (the weights are not copied)."""
        weights = Path(weights).expanduser().resolve()
        name = self.new_name(name or _slug(weights.stem)[:MAX_NAME])  # before the file is read: it is cheap
        result = check(weights, allow_pickle=allow_pickle)
        if method is not None and method != result.method:
            raise CheckpointError(f"{weights} is a {result.method} checkpoint ({result.format}), not {method}.")
        target = self.root / f"{name}.json"
        manifest = Manifest(name=name, method=result.method, weights=str(weights), architecture=result.architecture,
                            context_length=result.context_length, source=source or f"added from {weights}",
                            format=result.format, options=dict(options or {}), allow_pickle=allow_pickle)
        manifest.write(target)
        return manifest

    def add_upload(self, uploaded: str | Path, filename: str, name: str | None = None, source: str = "") -> Manifest:
        """Add a weights file uploaded through the page: safetensors only (an upload is never unpickled),
        checked first, then kept under ``$EXPLORER_HOME/uploads`` (the upload's temporary file goes)."""
        if Path(filename).suffix.lower() != ".safetensors":
            raise CheckpointError(f"{filename}: only .safetensors files can be uploaded (a .pt/.pth/.bin file may "
                                  "need unpickling, which an upload never gets). Give its path on this machine "
                                  "instead, or convert it to safetensors.")
        name = self.new_name(name or _slug(Path(filename).stem)[:MAX_NAME])
        check(uploaded, allow_pickle=False)  # refuses a bad file before anything is kept
        digest = hashlib.sha256()
        with open(uploaded, "rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
        # Content-addressed: the same upload twice is one file, and a leftover never blocks a name.
        target = paths.ensure(paths.home() / "uploads") / f"{_slug(name)}-{digest.hexdigest()[:12]}.safetensors"
        fresh = not target.exists()
        if fresh:
            with atomic_path(target) as temporary:
                shutil.copyfile(uploaded, temporary)
        try:
            return self.add(target, name=name, source=source or f"uploaded as {filename}")
        except Exception:
            if fresh:
                target.unlink(missing_ok=True)
            raise

    def new_name(self, name: str) -> str:
        """``name`` if a new model may take it, else ``ModelNameError`` saying why. The one rule for the page
        and the shell: no model of the zoo has it (a manifest's name, wherever its file sits in the folder),
        and it makes a short file name inside the folder (the manifest, and an upload's kept copy)."""
        shown = name if len(name) <= 40 else f"{name[:40]}…"
        if not name.strip():
            raise ModelNameError("give the model a name")
        if len(name) > MAX_NAME or len(name.encode("utf-8")) > 2 * MAX_NAME:
            raise ModelNameError(f"the name {shown!r} is too long: a model name has at most {MAX_NAME} characters "
                                 f"({2 * MAX_NAME} bytes in UTF-8)")
        if any(mark in name for mark in ("/", "\\")) or not name.isprintable() or name.startswith("."):
            raise ModelNameError(f"{shown!r} cannot be a model name (no '/', '\\', control characters or leading "
                                 f"'.'); e.g. {_slug(name)[:MAX_NAME]!r}")
        if name in {m.name for m in self.manifests()} or (self.root / f"{name}.json").exists():
            raise ModelNameError(f"a model named {name!r} is already in the zoo: choose another name")
        return name

    def remove(self, name: str) -> Path:
        """Take a model out of the zoo: its manifest goes. Its weights file stays where it is, unless
        it is an uploaded copy (under ``$EXPLORER_HOME/uploads``) no other model uses."""
        manifest = self.get(name)
        path = Path(manifest.path)
        if self.root.resolve() not in path.resolve().parents:
            raise ManifestError(f"{path} is not inside the zoo folder {self.root}; not removed.")
        path.unlink()
        self._read.pop(path, None)
        self.cache.discard(lambda key: key[0] == name)
        weights = manifest.weights_path().resolve() if not manifest.is_builtin else None
        uploads = (paths.home() / "uploads").resolve()
        if weights is not None and weights.parent == uploads and not any(
                not m.is_builtin and m.weights_path().resolve() == weights for m in self.manifests()):
            weights.unlink(missing_ok=True)
        return path


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", text).strip("-") or "model"
