"""The model zoo: one JSON manifest per model under ``checkpoints/``.

A manifest says what a model is and where its weights are:

    {"name": "longclip-B", "method": "longclip", "architecture": "ViT-B/16",
     "weights": "/data/longclip-B.pt", "context_length": 248,
     "source": "Long-CLIP release (beichenzbc/Long-CLIP)"}

optional: "format" (as detected), "options" (architecture overrides such
as {"quick_gelu": false}), "allow_pickle" (the user's recorded opt-in),
"trained" (false for the built-in untrained model), "notes", "recipe".
A *demo* model is one ``explorer zoo build-demo`` trained on the synthetic shapes (its recipe's command
or its source says so); a *real* one is any other trained model (``is_real``).
Relative weight paths are relative to the manifest. Nothing is ever fetched:
a manifest points at a local file.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from explorer.core.errors import ManifestError
from explorer.core.files import write_text_atomic
from explorer.zoo.builtin import BUILTIN_PREFIX, BUILTINS

if TYPE_CHECKING:
    from explorer.models.model import Model

REQUIRED = ("name", "method", "weights")
DEMO_COMMAND = "explorer zoo build-demo"  # what the demo zoo's manifests record (explorer.training.demo_zoo)


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
    # how the weights were trained (steps, batch, rates, losses' options, data), for people and tools;
    # never applied when loading (``options`` are)
    recipe: dict = field(default_factory=dict)
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
        data = {k: v for k, v in asdict(self).items() if k != "path" and not (k == "recipe" and not v)}
        write_text_atomic(path, json.dumps(data, indent=2) + "\n")
        self.path = path
        return path

    @property
    def is_builtin(self) -> bool:
        return self.weights.startswith(BUILTIN_PREFIX)

    @property
    def is_demo(self) -> bool:
        """Trained by the demo build on the synthetic shapes: its maps mean something on that world only."""
        command = self.recipe.get("command", "") if isinstance(self.recipe, dict) else ""
        return str(command).startswith(DEMO_COMMAND) or DEMO_COMMAND in self.source

    @property
    def is_real(self) -> bool:
        """Trained weights that are not the demo's (a released checkpoint, or one trained here)."""
        return self.trained and not self.is_demo

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
    # torch, the loaders and the method modules are imported on the first load, not with the zoo
    from explorer.models.io.loading import load_method
    from explorer.models.model import Model, weights_reader

    if manifest.is_builtin:
        key = manifest.weights[len(BUILTIN_PREFIX):]
        if key not in BUILTINS:
            raise ManifestError(f"{manifest.name}: unknown built-in model {key!r}; known: {sorted(BUILTINS)}.")
        method = BUILTINS[key]()
        return Model(method, name=manifest.name, device=device, precision=precision, trained=manifest.trained)
    method, report = load_method(manifest.weights_path(), method=manifest.method,
                                    overrides=manifest.resolved_options(),
                                    allow_pickle=manifest.allow_pickle,
                                    weights_in=weights_reader(precision, device))
    return Model(method, name=manifest.name, report=report, device=device, precision=precision,
                 trained=manifest.trained, synthetic_only=manifest.is_demo)
