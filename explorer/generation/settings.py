"""One settings object for a generation: the page, the CLI and the JSON saved beside each image.

Saving it with the picture is what makes a picture reproducible: ``explorer generate`` run with
the same settings (same SDXL, seed, scheduler, steps, size, guidance, layer) draws it again.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

from explorer.core.errors import CaptionError, ExplorerError
from explorer.generation.sdxl_source import SdxlOptions

MAX_STEPS = 200
# The long tower's layer that conditions SDXL (bigG reads the same one).
LAYERS = {
    "last": "last layer after the final LayerNorm, no projection (Long-CLIP's and FineLIP's SDXL code)",
    "penultimate": "penultimate layer without the final LayerNorm (stock SDXL's choice, ComfyUI's)",
}
CUT_MARK = " ‖ "  # where stock SDXL stops reading, shown inside the saved stock prompt
SIZES = (64, 2048)  # smallest and largest side; SDXL base is trained at 1024


@dataclass
class GenerationSettings:
    prompt: str
    negative: str = ""
    seeds: list[int] = field(default_factory=lambda: [0])
    steps: int = 30
    size: int = 1024
    guidance: float = 5.0
    layer: str = "last"  # the long tower's layer: "last" (Long-CLIP's and FineLIP's code) or "penultimate"
    models: list[str] = field(default_factory=list)  # long-text models, one swapped column each
    stock: bool = True  # a stock SDXL column (the prompt cut at 77 tokens)
    allow_cut: bool = False  # a prompt past 248 tokens: cut it and go on instead of refusing
    sdxl: str = ""
    sdxl_config: str = ""  # configs for a single-file SDXL
    refiner: str = ""  # SDXL refiner folder (optional): base denoises to refiner_start, the refiner finishes
    refiner_start: float = 0.8  # the fraction of the schedule the base runs (Long-CLIP's SDXL script: 0.8)
    device: str = "auto"
    precision: str = "fp16"
    cpu_offload: bool = False
    attention_slicing: bool = False
    vae_tiling: bool = False
    scheduler: str = ""  # recorded: the pipeline's scheduler class (the folder's own is used)

    def options(self) -> SdxlOptions:
        return SdxlOptions(device=self.device, precision=self.precision, cpu_offload=self.cpu_offload,
                           attention_slicing=self.attention_slicing, vae_tiling=self.vae_tiling)

    @property
    def columns(self) -> list[str]:
        return (["stock"] if self.stock else []) + list(self.models)

    def check(self) -> "GenerationSettings":
        """Itself, or an error that says what to change."""
        if not self.prompt or not self.prompt.strip():
            raise CaptionError("The prompt is empty: write the long caption to draw.")
        if not self.columns:
            raise ExplorerError("Nothing to draw: choose a long-text model, stock SDXL, or both.")
        if not self.seeds:
            raise ExplorerError("Give at least one seed.")
        if not 1 <= self.steps <= MAX_STEPS:
            raise ExplorerError(f"steps must be 1..{MAX_STEPS}, not {self.steps}")
        if not SIZES[0] <= self.size <= SIZES[1] or self.size % 8:
            raise ExplorerError(f"size must be a multiple of 8 in {SIZES[0]}..{SIZES[1]}, not {self.size}")
        if self.guidance < 0:
            raise ExplorerError(f"guidance must be >= 0, not {self.guidance}")
        if self.refiner and not 0 < self.refiner_start < 1:
            raise ExplorerError(f"refiner_start must be between 0 and 1, not {self.refiner_start}")
        if self.layer not in LAYERS:
            raise ExplorerError(f"layer is one of {', '.join(LAYERS)}, not {self.layer!r}")
        return self

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict) -> "GenerationSettings":
        known = {f.name for f in fields(cls)}
        return cls(**{key: value for key, value in data.items() if key in known})

    def save(self, path: Path, extra: dict | None = None) -> Path:
        path.write_text(json.dumps({**self.to_json(), **(extra or {})}, indent=2), encoding="utf-8")
        return path

    @classmethod
    def read(cls, path: Path) -> "GenerationSettings":
        return cls.from_json(json.loads(Path(path).read_text(encoding="utf-8")))
