"""The model zoo: one JSON manifest per model under ``checkpoints/``.

A manifest says what a model is and where its weights are:

    {"name": "longclip-B", "method": "longclip", "architecture": "ViT-B/16",
     "weights": "/data/longclip-B.pt", "context_length": 248,
     "source": "Long-CLIP release (beichenzbc/Long-CLIP)"}

optional: "format" (as detected), "options" (architecture overrides such
as {"quick_gelu": false}), "allow_pickle" (the user's recorded opt-in),
"trained" (false for the built-in untrained model), "notes".
Relative weight paths are relative to the manifest. Nothing is ever fetched:
a manifest points at a local file.
"""

from __future__ import annotations

import json
import re
from collections import OrderedDict
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

from explorer.core import paths
from explorer.core.errors import CheckpointError, ExplorerError, ManifestError
from explorer.models.io.loading import check, load_method
from explorer.models.model import Model
from explorer.zoo.builtin import BUILTIN_PREFIX, BUILTINS

REQUIRED = ("name", "method", "weights")


@dataclass
class Manifest:
    name: str
    method: str
    weights: str
    architecture: str = ""
    context_length: int = 0
    source: str = ""
    format: str = ""
    options: dict = field(default_factory=dict)
    allow_pickle: bool = False
    trained: bool = True
    notes: str = ""
    path: Path | None = None  # where the manifest itself lives (not written)

    @classmethod
    def read(cls, path: str | Path) -> "Manifest":
        path = Path(path)
        try:
            data = json.loads(path.read_text())
        except FileNotFoundError as error:
            raise ManifestError(f"No manifest at {path}.") from error
        except (json.JSONDecodeError, UnicodeDecodeError) as error:
            raise ManifestError(f"{path} is not valid JSON ({error}).") from error
        if not isinstance(data, dict):
            raise ManifestError(f"{path} must hold a JSON object.")
        missing = [key for key in REQUIRED if not data.get(key)]
        if missing:
            raise ManifestError(f"{path} lacks {', '.join(missing)}.")
        known = {f for f in cls.__dataclass_fields__ if f != "path"}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ManifestError(f"{path} has unknown fields {unknown}; known: {sorted(known)}.")
        return cls(**data, path=path)

    def write(self, path: str | Path) -> Path:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        data = {k: v for k, v in asdict(self).items() if k != "path"}
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(json.dumps(data, indent=2) + "\n")
        tmp.replace(path)
        self.path = path
        return path

    @property
    def is_builtin(self) -> bool:
        return self.weights.startswith(BUILTIN_PREFIX)

    def weights_path(self) -> Path:
        weights = Path(self.weights).expanduser()
        if not weights.is_absolute() and self.path is not None:
            weights = self.path.parent / weights
        return weights

    def resolved_options(self) -> dict:
        """Options with file paths (keys ending in _file or _dir) made relative to the manifest, like weights."""
        options = dict(self.options)
        for key, value in options.items():
            if key.endswith(("_file", "_dir")) and isinstance(value, str) and self.path is not None:
                path = Path(value).expanduser()
                options[key] = str(path if path.is_absolute() else self.path.parent / path)
        return options

    def display_weights(self) -> str:
        return self.weights if self.is_builtin else str(self.weights_path())


def load_manifest(manifest: Manifest, device: str = "auto", precision: str = "fp32") -> Model:
    if manifest.is_builtin:
        key = manifest.weights[len(BUILTIN_PREFIX):]
        if key not in BUILTINS:
            raise ManifestError(f"{manifest.name}: unknown built-in model {key!r}; known: {sorted(BUILTINS)}.")
        method = BUILTINS[key]()
        return Model(method, name=manifest.name, device=device, precision=precision, trained=manifest.trained)
    method, report, _ = load_method(manifest.weights_path(), method=manifest.method,
                                    overrides=manifest.resolved_options(),
                                    allow_pickle=manifest.allow_pickle)
    return Model(method, name=manifest.name, report=report, device=device, precision=precision,
                 trained=manifest.trained)


class ModelCache:
    """At most ``capacity`` loaded models, least recently used dropped first."""

    def __init__(self, capacity: int = 2):
        if capacity < 1:
            raise ValueError("the model cache holds at least one model")
        self.capacity = capacity
        self._models: OrderedDict[tuple, Model] = OrderedDict()

    def get(self, key: tuple, load: Callable[[], Model]) -> Model:
        if key in self._models:
            self._models.move_to_end(key)
            return self._models[key]
        model = load()
        self._models[key] = model
        while len(self._models) > self.capacity:
            self._models.popitem(last=False)
        return model

    def __len__(self) -> int:
        return len(self._models)

    def keys(self) -> list[tuple]:
        return list(self._models)


@dataclass
class ZooEntry:
    manifest: Manifest | None
    manifest_path: Path
    status: str  # "loads", "built in code", or what is wrong

    @property
    def ok(self) -> bool:
        return self.manifest is not None and not self.status.startswith("error")


# Trained demo models with a native grounding map, in the order the views prefer them.
PREFERRED_DEFAULTS = ("demo-caft", "demo-flair", "demo-finelip", "demo-longclip", "demo-mulclip")


class Zoo:
    def __init__(self, root: str | Path | None = None, cache_size: int = 4, device: str = "auto",
                 precision: str = "fp32"):
        self.root = Path(root) if root is not None else paths.checkpoints_root()
        self.cache = ModelCache(cache_size)
        self.device, self.precision = device, precision
        self._status: dict[tuple, str] = {}

    def manifest_paths(self) -> list[Path]:
        if not self.root.is_dir():
            return []
        return sorted(p for p in self.root.rglob("*.json") if not p.name.endswith(".tmp"))

    def manifests(self) -> list[Manifest]:
        return [entry.manifest for entry in self.entries(check_weights=False) if entry.manifest is not None]

    def entries(self, check_weights: bool = True) -> list[ZooEntry]:
        """Every manifest, readable or not, with whether its weights load (a malformed one is listed, not fatal)."""
        entries = []
        for path in self.manifest_paths():
            try:
                manifest = Manifest.read(path)
            except ManifestError as error:
                entries.append(ZooEntry(None, path, f"error: {error}"))
                continue
            status = self.status(manifest) if check_weights else ""
            entries.append(ZooEntry(manifest, path, status))
        return entries

    def status(self, manifest: Manifest) -> str:
        if manifest.is_builtin:
            return "built in code" if manifest.weights[len(BUILTIN_PREFIX):] in BUILTINS else "error: unknown built-in"
        weights = manifest.weights_path()
        stamp = (str(weights), weights.stat().st_mtime if weights.exists() else None, manifest.allow_pickle)
        if stamp not in self._status:
            try:
                result = check(weights, allow_pickle=manifest.allow_pickle)
                self._status[stamp] = f"loads ({result.format})"
            except ExplorerError as error:
                self._status[stamp] = f"error: {str(error).splitlines()[0]}"
        return self._status[stamp]

    def get(self, name: str) -> Manifest:
        for manifest in self.manifests():
            if manifest.name == name:
                return manifest
        raise ManifestError(f"No model named {name!r} in {self.root}; known: "
                            f"{', '.join(m.name for m in self.manifests()) or 'none'}.")

    def default_name(self) -> str | None:
        """The model views open on: a trained demo model with a native grounding map, if there is one."""
        names = [m.name for m in self.manifests()]
        for name in PREFERRED_DEFAULTS:
            if name in names:
                return name
        trained = [m.name for m in self.manifests() if m.trained]
        return (trained or names or [None])[0]

    def load(self, name: str) -> Model:
        manifest = self.get(name)
        key = (name, str(manifest.path), self.device, self.precision)
        return self.cache.get(key, lambda: load_manifest(manifest, self.device, self.precision))

    def add(self, weights: str | Path, name: str | None = None, source: str = "", method: str | None = None,
            allow_pickle: bool = False, options: dict | None = None) -> Manifest:
        """Check a weights file and write its manifest into the zoo (the weights are not copied)."""
        weights = Path(weights).expanduser().resolve()
        result = check(weights, allow_pickle=allow_pickle)
        if method is not None and method != result.method:
            raise CheckpointError(f"{weights} is a {result.method} checkpoint ({result.format}), not {method}.")
        name = name or _slug(weights.stem)
        if "/" in name or "\\" in name:  # the manifest must land inside the zoo folder
            raise ManifestError(f"{name!r} cannot be a model name (no '/' or '\\'); e.g. {_slug(name)!r}.")
        target = self.root / f"{name}.json"
        if target.exists():
            raise ManifestError(f"A model named {name!r} is already in the zoo ({target}); choose another --name.")
        manifest = Manifest(name=name, method=result.method, weights=str(weights), architecture=result.architecture,
                            context_length=result.context_length, source=source or f"added from {weights}",
                            format=result.format, options=dict(options or {}), allow_pickle=allow_pickle)
        manifest.write(target)
        return manifest


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", text).strip("-") or "model"
