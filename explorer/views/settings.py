"""What a view shows, as data: the same settings drive the page, the CLI and the saved JSON.

A figure is regenerated from its settings file (``explorer figure replay fig.png.json``),
so every choice that changes the picture lives here and nowhere else.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

from explorer.core.errors import ExplorerError
from explorer.views.render import COLORMAPS

VIEWS = ("maps", "regions", "pca")
MASK_MODES = ("contour", "mask", "both", "none")  # how the Otsu (or manual) mask is drawn
SCALES = ("map", "model", "shared")  # colour range: each map's own, per model, or one for all
PCA_SOURCES = ("features", "attention")
PCA_FITS = ("joint", "per-model", "per-image")  # one basis for all panels, per model row, or per panel
NATIVE = "native"  # each model's own first map kind (generic when it has none)
MAX_MODELS = 4


class SettingsError(ExplorerError):
    """A settings value the views cannot use."""


@dataclass
class ViewSettings:
    view: str = "maps"
    image: str = ""
    caption: str = ""
    models: list[str] = field(default_factory=list)
    kind: str = NATIVE
    dense_caption: str = ""
    # sentence maps
    cmap: str = "turbo"
    opacity: float = 0.55
    mask: str = "contour"
    threshold: float | None = None  # None: Otsu; else a fraction of each map's range
    scale: str = "map"
    page: int = 0
    per_page: int = 8
    truth: str = ""  # an uploaded label mask (file path)
    truth_dir: str = ""  # where scene truth is looked up by the picture's pixels (default: the examples')
    # FLISM regions
    detector: str = ""  # a local YOLOS directory, or "felzenszwalb"; empty: $EXPLORER_DETECTOR if set
    # PCA maps
    images: list[str] = field(default_factory=list)  # more pictures beside ``image`` (PCA compares them)
    pca_source: str = "features"
    pca_fit: str = "joint"
    # the figure
    width: float = 7.0  # inches (a two-column paper's text width; 3.5 for one column)
    dpi: int = 300  # for PNG

    def __post_init__(self):
        self.validate()

    def validate(self) -> None:
        _check_types(self)
        _one_of("view", self.view, VIEWS)
        _one_of("cmap", self.cmap, COLORMAPS)
        _one_of("mask", self.mask, MASK_MODES)
        _one_of("scale", self.scale, SCALES)
        _one_of("pca_source", self.pca_source, PCA_SOURCES)
        _one_of("pca_fit", self.pca_fit, PCA_FITS)
        if not 0.0 <= float(self.opacity) <= 1.0:
            raise SettingsError(f"opacity is between 0 and 1, not {self.opacity}")
        if self.threshold is not None and not 0.0 <= float(self.threshold) <= 1.0:
            raise SettingsError(f"a manual threshold is a fraction of the map's range (0 to 1), not {self.threshold}")
        if len(self.models) > MAX_MODELS:
            raise SettingsError(f"compare at most {MAX_MODELS} models at once, not {len(self.models)}")
        if not 0.5 <= float(self.width) <= 40 or not 30 <= int(self.dpi) <= 1200:
            raise SettingsError(f"a figure is 0.5 to 40 inches wide at 30 to 1200 dpi, not {self.width} in at {self.dpi}")
        if self.per_page < 1 or self.page < 0:
            raise SettingsError(f"page {self.page} with {self.per_page} per page makes no sense")

    @property
    def all_images(self) -> list[str]:
        return [path for path in [self.image, *self.images] if path]

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2) + "\n"

    @classmethod
    def from_dict(cls, data: dict) -> "ViewSettings":
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise SettingsError(f"unknown settings {', '.join(unknown)}; known: {', '.join(sorted(known))}")
        return cls(**data)

    @classmethod
    def load(cls, path: str | Path) -> "ViewSettings":
        try:
            data = json.loads(Path(path).read_text())
        except (OSError, ValueError) as error:
            raise SettingsError(f"cannot read the settings file {path}: {error}") from error
        if not isinstance(data, dict):
            raise SettingsError(f"{path} does not hold a settings object")
        return cls.from_dict(data)


def _one_of(name: str, value, allowed) -> None:
    if value not in allowed:
        raise SettingsError(f"{name} is one of {', '.join(map(str, allowed))}, not {value!r}")


def _check_types(settings: ViewSettings) -> None:
    """JSON is typed loosely: say which field holds the wrong kind of value."""
    for item in fields(settings):
        value = getattr(settings, item.name)
        expected = item.type if isinstance(item.type, str) else str(item.type)
        if expected == "str":
            ok = isinstance(value, str)
        elif expected == "list[str]":
            ok = isinstance(value, list) and all(isinstance(v, str) for v in value)
        elif expected == "int":
            ok = isinstance(value, int) and not isinstance(value, bool)
        elif expected == "float":
            ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        elif expected == "float | None":
            ok = value is None or (isinstance(value, (int, float)) and not isinstance(value, bool))
        else:
            ok = True
        if not ok:
            raise SettingsError(f"{item.name} should be {expected.replace('list[str]', 'a list of strings')}, "
                                f"not {value!r}")
