"""What a view shows, as data: the same settings drive the page, the CLI and the saved JSON.

A figure is regenerated from its settings file (``explorer figure replay fig.png.json``),
so every choice that changes the picture lives here and nowhere else.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

from explorer.core.errors import ExplorerError
from explorer.models.precision import AUTO, PRECISION_CHOICES
from explorer.views.figure_style import ANNOTATIONS, DEFAULT_PRESET, FONTS, HEADERS, PRESETS, FigureStyle, resolve_style
from explorer.views.render import COLORMAPS

VIEWS = ("maps", "regions", "pca", "kinds", "retrieval")
DIRECTIONS = ("t2i", "i2t")  # a caption finds pictures, or a picture finds captions
PATH_FIELDS = ("image", "truth", "truth_dir", "data")  # read relative to the settings file's folder
MAX_QUERIES, MAX_K = 8, 20
MASK_MODES = ("contour", "mask", "both", "none")  # how the Otsu (or manual) mask is drawn
SCALES = ("map", "model", "shared")  # colour range: each map's own, per model, or one for all
PCA_SOURCES = ("features", "attention")
# One basis per model row (the default: models' feature spaces are not aligned, so each is read on its own
# axes), one for all panels ("joint": colours mean the same everywhere, one model's row can come out flat), or
# one per panel.
PCA_FITS = ("per-model", "joint", "per-image")
NATIVE = "native"  # each model's own first map kind (generic when it has none)
MAX_MODELS = 4
# the sentence maps' figure: a row per sentence and a column per model (the page's), or today's transpose
SENTENCES_AS_ROWS, MODELS_AS_ROWS = "sentences-as-rows", "models-as-rows"
LAYOUTS = (SENTENCES_AS_ROWS, MODELS_AS_ROWS)


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
    precision: str = AUTO  # what the models computed in: a figure records the format that ran (bf16, fp32...)
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
    layout: str = SENTENCES_AS_ROWS  # a row per sentence (the page's) or per model
    picture: bool = True  # the plain picture's column beside the maps
    # spans of the caption's sentences drawn as extra rows, in order: {"sentence": n from 1, "words": "..."}
    spans: list[dict] = field(default_factory=list)
    # FLISM regions
    detector: str = ""  # a local YOLOS directory, or "felzenszwalb"; empty: $EXPLORER_DETECTOR if set
    # PCA maps
    images: list[str] = field(default_factory=list)  # more pictures beside ``image`` (PCA compares them)
    pca_source: str = "features"
    pca_fit: str = "per-model"
    # map kinds compared (`explorer figure kinds`; empty: the explainers and each model's own maps)
    kinds: list[str] = field(default_factory=list)
    # qualitative retrieval (`explorer figure retrieval`)
    data: str = ""  # the dataset folder (or index file)
    split: str = ""  # empty: the layout's default
    limit: int | None = None  # only the first N pictures
    queries: list[str] = field(default_factory=list)  # captions (t2i) or pictures (i2t) by number, or texts
    k: int = 5
    direction: str = "t2i"
    # the figure
    preset: str = DEFAULT_PRESET  # column (3.3 in), page (6.9 in), slide (13.3 x 7.5 in)
    width: float | None = None  # inches; None: the preset's
    font: str = "sans"  # sans, serif, or cm (Computer Modern, as LaTeX sets it)
    font_size: float | None = None  # points; None: the preset's (8 pt in print)
    header: str = "sentence"  # a map's column header: its sentence, or S1.. with a legend
    annotate: str = "scores"  # under each map: none; IoU and hit when truth is known; all (thresholds too)
    dpi: int = 300  # for PNG

    def __post_init__(self):
        self.validate()

    def validate(self) -> None:
        _check_types(self)
        _one_of("view", self.view, VIEWS)
        _one_of("precision", self.precision, PRECISION_CHOICES)
        _one_of("cmap", self.cmap, COLORMAPS)
        _one_of("mask", self.mask, MASK_MODES)
        _one_of("scale", self.scale, SCALES)
        _one_of("layout", self.layout, LAYOUTS)
        _one_of("pca_source", self.pca_source, PCA_SOURCES)
        _one_of("pca_fit", self.pca_fit, PCA_FITS)
        _one_of("direction", self.direction, DIRECTIONS)
        _one_of("preset", self.preset, PRESETS)
        _one_of("font", self.font, FONTS)
        _one_of("header", self.header, HEADERS)
        _one_of("annotate", self.annotate, ANNOTATIONS)
        if self.font_size is not None and not 4 <= float(self.font_size) <= 40:
            raise SettingsError(f"a font size is 4 to 40 points, not {self.font_size}")
        if not 1 <= self.k <= MAX_K or len(self.queries) > MAX_QUERIES:
            raise SettingsError(f"a retrieval figure shows 1 to {MAX_K} results for at most {MAX_QUERIES} queries, "
                                f"not {self.k} for {len(self.queries)}")
        if self.limit is not None and self.limit < 1:
            raise SettingsError(f"limit is at least 1, not {self.limit}")
        if not 0.0 <= float(self.opacity) <= 1.0:
            raise SettingsError(f"opacity is between 0 and 1, not {self.opacity}")
        if self.threshold is not None and not 0.0 <= float(self.threshold) <= 1.0:
            raise SettingsError(f"a manual threshold is a fraction of the map's range (0 to 1), not {self.threshold}")
        if len(self.models) > MAX_MODELS:
            raise SettingsError(f"compare at most {MAX_MODELS} models at once, not {len(self.models)}")
        if not 0.5 <= float(self.figure_width) <= 40 or not 30 <= int(self.dpi) <= 1200:
            raise SettingsError(f"a figure is 0.5 to 40 inches wide at 30 to 1200 dpi, not {self.figure_width} in "
                                f"at {self.dpi}")
        _check_spans(self.spans)
        if self.per_page < 1 or self.page < 0:
            raise SettingsError(f"page {self.page} with {self.per_page} per page makes no sense")

    @property
    def figure_width(self) -> float:
        return PRESETS[self.preset].width if self.width is None else float(self.width)

    def style(self) -> FigureStyle:
        """How the figure looks: the preset's width and font size unless overridden."""
        return resolve_style(self.preset, self.width, self.font, self.font_size, self.header, self.annotate)

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
        data.setdefault("layout", MODELS_AS_ROWS)  # a file from before layouts was drawn so: replayed as drawn
        data.setdefault("precision", "fp32")  # ... and one from before precisions, in fp32
        return cls.from_dict(relative_to(data, Path(path).resolve().parent))


def relative_to(data: dict, folder: Path) -> dict:
    """Paths saved relative (a gallery in the repository) are read from the settings file's folder."""
    data = dict(data)
    for name in PATH_FIELDS:
        value = data.get(name)
        if isinstance(value, str) and value and not Path(value).expanduser().is_absolute():
            data[name] = str(folder / value)
    if isinstance(data.get("images"), list):
        data["images"] = [str(folder / p) if isinstance(p, str) and p and not Path(p).expanduser().is_absolute()
                          else p for p in data["images"]]
    return data


def _check_spans(spans) -> None:
    """Each span is {"sentence": a whole number from 1, "words": some words}, nothing else."""
    for span in spans:
        ok = (isinstance(span, dict) and set(span) == {"sentence", "words"} and isinstance(span["sentence"], int)
              and not isinstance(span["sentence"], bool) and span["sentence"] >= 1
              and isinstance(span["words"], str) and span["words"].strip())
        if not ok:
            raise SettingsError(f'a span is {{"sentence": a number from 1, "words": "some words"}}, not {span!r:.80}')


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
        elif expected == "list[dict]":
            ok = isinstance(value, list)
        elif expected == "list[str]":
            ok = isinstance(value, list) and all(isinstance(v, str) for v in value)
        elif expected == "bool":
            ok = isinstance(value, bool)
        elif expected == "int":
            ok = isinstance(value, int) and not isinstance(value, bool)
        elif expected == "float":
            ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        elif expected == "int | None":
            ok = value is None or (isinstance(value, int) and not isinstance(value, bool))
        elif expected == "float | None":
            ok = value is None or (isinstance(value, (int, float)) and not isinstance(value, bool))
        else:
            ok = True
        if not ok:
            raise SettingsError(f"{item.name} should be {expected.replace('list[str]', 'a list of strings')}, "
                                f"not {value!r}")
