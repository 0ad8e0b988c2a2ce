"""Sentence maps view: one row per model, one map per sentence, Otsu masks, scores against truth.

Computing (``compute_maps``) runs each model once per (model, picture, sentences, kind) through
``grounding.ground`` and its cache. Everything after that (colour map, opacity, threshold,
mask style, colour scale, page) only re-renders (``render_maps``): masks and resized maps are
memoised on the result, so a slider change never touches a model.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Sequence

import numpy as np
from PIL import Image

from explorer.core import paths
from explorer.core.cache import MB, BoundedCache
from explorer.core.errors import InputError
from explorer.evaluation.grounding_eval import native_kind
from explorer.grounding.masks import MaskSide, mask_side, otsu_masks
from explorer.grounding.sentence_maps import GroundingResult, MapCache, ground, working_picture
from explorer.models.map_kinds import GENERIC_MAP, UNMEASURED_DEFAULT
from explorer.views.panels import (Colorbar, Header, Panel, PanelGrid, fit_size, map_panels, outline, picture_panel,
                                   resize_maps, resize_masks)
from explorer.views.settings import MODELS_AS_ROWS, NATIVE, ViewSettings

if TYPE_CHECKING:  # the page is built before torch is imported
    from explorer.models.model import Model

Loader = Callable[[str], "Model"]


def default_kind(model: Model) -> str:
    """What "native" draws: the method's own sentence map (``native_kind``), else the kind its method measured
    best (``Method.measured_grounding``), else Grad-CAM for an unmeasured method, else its first other map,
    else the generic one."""
    own = native_kind(model)
    if own is not None:
        return own
    best = model.best_measured_kind() if hasattr(model, "best_measured_kind") else None
    if best is not None:
        return best
    if UNMEASURED_DEFAULT in model.map_kinds:
        return UNMEASURED_DEFAULT
    return next((k for k in model.map_kinds if k != GENERIC_MAP), GENERIC_MAP)


def resolve_kind(model: Model, wanted: str) -> tuple[str, str | None]:
    """The map kind to draw for ``model``: (kind, note when it differs from what was asked)."""
    if wanted == NATIVE:
        return default_kind(model), None
    if wanted in model.map_kinds:
        return wanted, None
    fallback = default_kind(model)
    return fallback, f"{model.name} has no {wanted!r} map; showing its {fallback!r} map"


SAME_MAP_NOTE = "this map does not depend on the sentence"
FLAT_NOTE = "flat map (constant): points at nothing"
FLAT_TOLERANCE = 1e-6  # a map whose range is below this fraction of its magnitude is constant
MEMO_SIZE = 16  # display variants kept per model (thresholds x sizes): enough for slider work, bounded
DISPLAY_MEMO = "display variants of one view"  # each open view's memo: the memory panel sums them
MEMO_BYTES = 32 * MB  # per view: a display size of 60 maps at 256 px is 16 MB


def display_memo() -> BoundedCache:
    return BoundedCache(DISPLAY_MEMO, max_items=MEMO_SIZE, max_bytes=MEMO_BYTES)


def _threshold_key(fraction: float | None):
    return "otsu" if fraction is None else round(float(fraction), 6)


@dataclass
class ModelMaps:
    """One model's maps of the caption, plus memoised thresholds, masks and display-size copies."""

    name: str
    result: GroundingResult
    trained: bool = True
    synthetic_only: bool = False  # a demo model: trained on the synthetic shapes only
    precision: str = "fp32"  # the format the model computed its maps in
    measured_default: bool = False  # its kind is "native" resolved to the kind its method measured best
    _memo: BoundedCache = field(default_factory=display_memo, repr=False, init=False)  # a copy gets its own

    @property
    def maps(self) -> np.ndarray:
        return self.result.maps.maps

    @property
    def same_for_every_sentence(self) -> bool:
        """Whether the maps do not depend on the sentence (GOAL's self-attention is image-only; a
        collapsed model draws one map for all): then the page says so rather than show copies."""
        grid = np.asarray(self.result.maps.grid, dtype=np.float64)
        if len(grid) < 2:
            return False
        spread = float(np.nanmax(grid) - np.nanmin(grid)) or 1.0
        return bool(np.nanmax(np.abs(grid - grid[:1])) <= 1e-4 * spread)

    @property
    def kind(self) -> str:
        return self.result.maps.kind

    def flat(self, sentence: int) -> bool:
        """Whether a sentence's map is constant (e.g. Grad-CAM with no positive gradient: all zero): it points
        at nothing, so views label it as flat instead of drawing a mask of nothing (or of everything)."""
        values = self.maps[sentence]
        spread = float(values.max() - values.min())
        return spread <= FLAT_TOLERANCE * max(1.0, float(np.abs(values).max()))

    def thresholds(self, fraction: float | None) -> np.ndarray:
        """[M] thresholds in map units: Otsu's (None) or ``fraction`` of each map's own range."""
        def compute():
            if fraction is None:
                return otsu_masks(self.maps)[1]
            low, high = self.maps.min(axis=(1, 2)), self.maps.max(axis=(1, 2))
            return low + float(fraction) * (high - low)

        return self._memo.get(("thresholds", _threshold_key(fraction)), compute)

    def masks(self, fraction: float | None) -> np.ndarray:
        """[M, H, W] bool at the working picture's size: each map strictly above its threshold."""
        return self.maps > self.thresholds(fraction)[:, None, None]

    def mask_sides(self, fraction: float | None) -> list[MaskSide]:
        """Per sentence, which side of its outline the mask lies on (``MaskSide``): every view and figure asks
        here, so the page, the focus view and the figures hatch and label the same maps."""
        return self._memo.get(("sides", _threshold_key(fraction)),
                              lambda: [mask_side(mask) for mask in self.masks(fraction)])

    def display_masks(self, fraction: float | None, size: tuple[int, int]) -> list[tuple]:
        """Per sentence (mask, (inner, outer) outline) at ``size``, memoised: a colour change reuses them."""
        def compute():
            return [(mask, outline(mask)) for mask in resize_masks(self.masks(fraction), size)]

        return self._memo.get(("masks", _threshold_key(fraction), size), compute)

    def resized(self, size: tuple[int, int] | None) -> np.ndarray:
        """The maps at ``size`` = (width, height) for display (memoised); None: as computed."""
        if size is None or size == (self.maps.shape[2], self.maps.shape[1]):
            return self.maps
        return self._memo.get(("maps", size), lambda: resize_maps(self.maps, size))


@dataclass
class MapsView:
    picture: object  # PIL.Image, the working picture every model saw
    sentences: list[str]
    models: list[ModelMaps]
    truth: object | None = None  # explorer.grounding.truth.Truth when a ground-truth mask is known
    truth_file: Path | None = None  # where that truth was read from (a label mask, or a scene's .npz)
    notes: list[str] = field(default_factory=list)
    in_world: bool = False  # a known scene of the synthetic world, even when no sentence of the caption has truth
    # Rows past the caption's sentences are spans (``views.span_view``): per span row, the sentence (from 1) its
    # words come from. Headers, the status line and notes count sentences only; a span row shows its own scores.
    span_of: list[int] = field(default_factory=list)
    _memo: BoundedCache = field(default_factory=display_memo, repr=False, init=False)  # a copy gets its own

    @property
    def n_sentences(self) -> int:
        """The caption's sentences (the rows before the spans)."""
        return len(self.sentences) - len(self.span_of)

    def span_source(self, i: int) -> int | None:
        """For row ``i`` (0-based): the sentence (from 1) a span row comes from; None for a sentence."""
        return self.span_of[i - self.n_sentences] if i >= self.n_sentences else None

    def row_name(self, i: int) -> str:
        """What row ``i`` is, for notes: "S3 of 6" or "span 7 (of sentence 3)"."""
        source = self.span_source(i)
        return f"S{i + 1} of {self.n_sentences}" if source is None else f"span {i + 1} (of sentence {source})"

    def synthetic_warning(self) -> str | None:
        """A line for demo models drawn on a picture without truth (a photo, most likely): they were trained
        on synthetic shapes only, so what they light up there says nothing about the picture."""
        demo = [m.name for m in self.models if m.synthetic_only]
        if not demo or self.truth is not None or self.in_world:
            return None
        return (f"{', '.join(demo)} {'was' if len(demo) == 1 else 'were'} trained on synthetic shapes only: on a "
                "picture outside that world (no truth is known for this one) their maps mean nothing; add a real "
                "checkpoint to read a photo.")

    def picture_at(self, size: tuple[int, int]):
        """The picture at a panel's size (memoised)."""
        if size == self.picture.size:
            return self.picture
        return self._memo.get(("picture", size), lambda: self.picture.resize(size, Image.BICUBIC))

    def pages(self, per_page: int) -> int:
        return max(1, -(-len(self.sentences) // per_page))

    def page_indices(self, page: int, per_page: int) -> range:
        page = min(max(0, page), self.pages(per_page) - 1)
        return range(page * per_page, min(len(self.sentences), (page + 1) * per_page))

    def colour_range(self, scale: str, model_index: int) -> tuple[float | None, float | None]:
        """(low, high) for a model's maps: each map's own ("map": None, None), the model's, or everyone's."""
        if scale == "map":
            return None, None
        key = ("range", scale, model_index if scale == "model" else None)

        def compute():
            maps = [self.models[model_index].maps] if scale == "model" else [m.maps for m in self.models]
            return float(min(m.min() for m in maps)), float(max(m.max() for m in maps))

        return self._memo.get(key, compute)

    def scores(self, fraction: float | None) -> list[dict]:
        """A row per (model, sentence): threshold, mask area and, with truth, IoU and pointing hit."""
        return self._memo.get(("scores", _threshold_key(fraction)), lambda: self._score_rows(fraction))

    def _score_rows(self, fraction: float | None) -> list[dict]:
        from explorer.evaluation.metrics.maps import score_sentences

        rows = []
        for m, model in enumerate(self.models):
            thresholds, masks = model.thresholds(fraction), model.masks(fraction)
            scored = score_sentences(model.maps, masks, self.truth)[0] if self.truth is not None else None
            for i, sentence in enumerate(self.sentences):
                row = {"model": model.name, "row": m, "#": i + 1, "sentence": sentence,
                       "threshold": float(thresholds[i]), "mask %": float(100 * masks[i].mean()),
                       "tokens cut": model.result.maps.n_cut[i]}
                if scored is not None:
                    row["IoU"], row["pointing"] = scored[i].iou, scored[i].hit
                rows.append(row)
        return rows

    def default_notes(self, fraction: float | None) -> list[str]:
        """A line per model whose map kind is its measured default (``default_kind``: the kind its method
        grounded best on the held-out world) but whose figures on this picture say otherwise: its map points at
        none of the sentences' objects (pointing 0 %)."""
        notes = []
        for s in self.summary(fraction):
            model = self.models[s["row"]]
            if model.measured_default and s["pointing"] == 0:
                notes.append(f"{model.name}'s default map ({model.kind}, its best measured on the held-out synthetic "
                             f"world) points at the object of none of the {s['n']} sentence(s) with truth here (pointing 0 %, mIoU "
                             f"{s['miou']:.2f}): its measured default does not hold here; pick another map kind "
                             "to compare.")
        return notes

    def summary(self, fraction: float | None) -> list[dict]:
        """Per model (in row order): mIoU and pointing game over the caption's sentences that have truth (spans
        left out; empty without truth)."""
        if self.truth is None:
            return []

        def compute():
            from dataclasses import replace

            from explorer.evaluation.metrics.maps import score_sentences

            n = self.n_sentences  # the caption's sentences only: a span row does not move the model's figures
            truth = replace(self.truth, masks=self.truth.masks[:n])
            return [{"model": model.name, "row": m,
                     **score_sentences(model.maps[:n], model.masks(fraction)[:n], truth)[1]}
                    for m, model in enumerate(self.models)]

        return self._memo.get(("summary", _threshold_key(fraction)), compute)


def compute_maps(load: Loader, settings: ViewSettings, cache: MapCache | None = None,
                 truth_dir: Path | None = None) -> MapsView:
    """Run every model of ``settings`` on its picture and caption (cached), find the truth, and add the span rows
    ``settings.spans`` names."""
    if not settings.models:
        raise InputError("Pick at least one model.")
    models, notes, picture, sentences = [], [], None, None
    working = working_picture(settings.image)  # decoded once, seen by every model
    for name in settings.models:
        model = load(name)
        kind, note = resolve_kind(model, settings.kind)
        if note:
            notes.append(note)
        result = ground(model, working, settings.caption, kind=kind, cache=cache,
                        dense_caption=settings.dense_caption)
        notes.extend(n for n in result.notes if n not in notes)
        # why this model computes in its format ("auto"'s measurement of the CPU), beside "computed in ..."
        precision_note = getattr(model, "precision_note", None)
        if precision_note and precision_note not in notes:
            notes.append(precision_note)
        picture, sentences = result.image, result.maps.sentences
        measured = (settings.kind == NATIVE and native_kind(model) is None and hasattr(model, "best_measured_kind")
                    and model.best_measured_kind() == kind)
        models.append(ModelMaps(name=model.name, result=result, trained=model.trained,
                                synthetic_only=getattr(model, "synthetic_only", False),
                                precision=getattr(result.maps, "precision", getattr(model, "precision", "fp32")),
                                measured_default=measured))
    truth, truth_file = find_view_truth(settings, picture, sentences, truth_dir, working.original_size)
    if truth is not None:
        notes.extend(truth.notes)
    view = MapsView(picture=picture, sentences=sentences, models=models, truth=truth, truth_file=truth_file,
                    notes=notes, in_world=truth is not None or picture_in_world(settings, picture, truth_dir))
    if settings.spans:  # a replay: the spans the page had added, as rows of their own
        from explorer.views.span_view import with_spans

        view = with_spans(view, load, settings.spans, settings.dense_caption)
    return view


def find_view_truth(settings: ViewSettings, picture, sentences: list[str], truth_dir: Path | None,
                    original_size: tuple[int, int] | None = None):
    """(truth, the file it came from): the uploaded mask when there is one, else the truth of a known
    synthetic scene, else (None, None).

    Scenes are looked up by the picture's pixels in ``truth_dir``, else ``settings.truth_dir``,
    else the folder where the app keeps its examples' truth.
    """
    from explorer.grounding import truth

    if settings.truth:
        if original_size is None:
            from explorer.core.images import load_image

            original_size = load_image(settings.image).original_size
        found = truth.truth_from_mask_file(settings.truth, sentences, picture.size, original_size=original_size)
        return found, Path(settings.truth)
    truth_dir = _scene_truth_dir(settings, truth_dir)
    found = truth.find_truth(picture, sentences, truth_dir, source=settings.image or None)
    if found is None or not found.available:
        return None, None
    path = truth.truth_path(picture, truth_dir)
    return found, path if path.is_file() else None


def picture_in_world(settings: ViewSettings, picture, truth_dir: Path | None = None) -> bool:
    """Whether the picture is a known scene of the synthetic world (its truth stored, or a shipped example),
    whatever its caption says: the demo models' "outside that world" line is for the other pictures."""
    from explorer.grounding import truth

    return truth.is_known_scene(picture, _scene_truth_dir(settings, truth_dir), settings.image or None)


def _scene_truth_dir(settings: ViewSettings, truth_dir: Path | None) -> Path:
    """Where scene truth is looked up: ``truth_dir``, else ``settings.truth_dir``, else the examples' registry."""
    if truth_dir is None and settings.truth_dir:
        truth_dir = Path(settings.truth_dir)
    return paths.example_truth_dir() if truth_dir is None else truth_dir


def render_maps(view: MapsView, settings: ViewSettings, side: int | None = None,
                sentences: Sequence[int] | None = None) -> PanelGrid:
    """The current page as panels: the picture (unless ``settings.picture`` is off), then one overlay per
    sentence, a row per model (the page's composite; ``render_maps_figure`` follows ``settings.layout``).

    ``side`` shrinks every panel to at most that many pixels (the page's preview); None keeps
    the working resolution (figures). ``sentences`` (0-based) replaces the settings' page of sentences.
    """
    size = fit_size(view.picture.size, side)
    indices = _shown(view, settings, sentences)
    cells = _map_cells(view, settings, size, indices)
    summaries = _summaries(view, settings)
    first = [Header("")] if settings.picture else []
    headers = first + [header for i in indices for header in _sentence_headers(view, settings, i)]
    rows = [_picture_cells(view, settings, size) + [panel for i in indices for panel in cells[m][i]]
            for m in range(len(view.models))]
    labels = [f"{model.name}\n{model.kind}" + ("" if model.trained else "\nUNTRAINED")
              + (f"\n{SAME_MAP_NOTE}" if model.same_for_every_sentence else "") + summaries.get(m, "")
              for m, model in enumerate(view.models)]
    return PanelGrid(rows=rows, row_labels=labels, colorbar=_colorbar(view, settings), headers=headers,
                     repeat=len(first))


def render_maps_figure(view: MapsView, settings: ViewSettings, side: int | None = None,
                       sentences: Sequence[int] | None = None) -> PanelGrid:
    """The maps as ``settings.layout`` lays them out (figures and exports): a row per sentence, or per model."""
    if settings.layout == MODELS_AS_ROWS:
        return render_maps(view, settings, side, sentences)
    return render_sentence_rows(view, settings, side, sentences)


def render_sentence_rows(view: MapsView, settings: ViewSettings, side: int | None = None,
                         sentences: Sequence[int] | None = None) -> PanelGrid:
    """A row per sentence labelled with its number and text (S1.. and a legend with ``header`` number), a
    column per model headed by its name and map kind (two with ``mask`` both), the picture first."""
    size = fit_size(view.picture.size, side)
    indices = _shown(view, settings, sentences)
    cells = _map_cells(view, settings, size, indices)
    summaries = _summaries(view, settings)
    headers = [Header("")] if settings.picture else []
    for m, model in enumerate(view.models):
        headers.append(Header(f"{model.name}\n{model.kind}" + ("" if model.trained else "\nUNTRAINED")
                              + summaries.get(m, "")))
        if settings.mask == "both":
            headers.append(Header("mask"))
    rows = [_picture_cells(view, settings, size) + [panel for m in range(len(view.models)) for panel in cells[m][i]]
            for i in indices]
    numbered = settings.header == "number"
    spans = {i: f" (span of S{view.span_source(i)})" if view.span_source(i) else "" for i in indices}
    labels = [f"S{i + 1}" if numbered else f"{i + 1}. {view.sentences[i]}{spans[i]}" for i in indices]
    notes = [f"S{i + 1}: {view.sentences[i]}{spans[i]}" for i in indices] if numbered else []
    notes += [f"{model.name}: {SAME_MAP_NOTE}." for model in view.models if model.same_for_every_sentence]
    return PanelGrid(rows=rows, row_labels=labels, colorbar=_colorbar(view, settings), headers=headers,
                     caption=" ".join(notes), repeat=1 if settings.picture else 0)


def _shown(view: MapsView, settings: ViewSettings, sentences: Sequence[int] | None) -> list[int]:
    """The sentences drawn: those asked for, else the settings' page of them."""
    if sentences is None:
        return list(view.page_indices(settings.page, settings.per_page))
    return [i for i in sentences if 0 <= i < len(view.sentences)]


def _picture_cells(view: MapsView, settings: ViewSettings, size: tuple[int, int]) -> list:
    return [picture_panel(view.picture_at(size), "image")] if settings.picture else []


def _summaries(view: MapsView, settings: ViewSettings) -> dict[int, str]:
    """Per model row, its mIoU and pointing game as extra label lines (none without truth)."""
    return {s["row"]: f"\nmIoU {s['miou']:.2f}" + ("" if s["pointing"] is None else
                                                   f"\npointing {100 * s['pointing']:.0f}%")
            for s in view.summary(settings.threshold) if s["miou"] is not None}


def _map_cells(view: MapsView, settings: ViewSettings, size: tuple[int, int], indices: list[int]) -> list[dict]:
    """Per model, per sentence: its panels (the overlay, and the mask beside it with ``mask`` both), each
    with its title and the note a figure prints under it."""
    base = view.picture_at(size)
    scored = {(r["row"], r["#"] - 1): r for r in view.scores(settings.threshold)} if view.truth else {}
    cells = []
    for m, model in enumerate(view.models):
        maps = model.resized(size)
        thresholds = model.thresholds(settings.threshold)
        masks = model.display_masks(settings.threshold, size) if settings.mask != "none" else None
        sides = model.mask_sides(settings.threshold)
        low, high = view.colour_range(settings.scale, m)
        row = {}
        for i in indices:
            title = f"S{i + 1} · t={thresholds[i]:.3g}"
            outside = sides[i].outside and settings.mask != "none" and not model.flat(i)
            if outside:  # the mask is the background: say so wherever the panel goes
                title += " · " + sides[i].label
            cut = model.result.maps.n_cut[i]
            if cut:
                title += f" · {cut} tokens cut"  # the map saw a truncated sentence
            scores = f"{cut} tokens cut" if cut else ""
            score = scored.get((m, i))
            if score and score.get("IoU") is not None:
                iou = score_note(score["IoU"], score["pointing"])
                title += " · " + iou.replace(", ", " · ")
                scores = f"{iou}, {scores}" if scores else iou
            flat = model.flat(i)
            if flat:  # a constant map: no mask to draw, and the note says why
                title, scores = f"S{i + 1} · flat map", FLAT_NOTE + (f", {scores}" if scores else "")
            panels = map_panels(base, maps[i], None if masks is None or flat else masks[i], settings, low, high,
                                title=title, text=view.sentences[i], mask_title=f"S{i + 1} mask", outside=outside)
            if flat and settings.mask == "both":  # keep the columns: an empty cell where its mask would be
                panels.append(Panel(None, f"S{i + 1} mask", view.sentences[i]))
            for panel in panels:  # what a figure prints under it, by --annotate (the mask's side always)
                panel.scores, panel.details, panel.sentence = scores, f"t={thresholds[i]:.3g}", i
                panel.key = [sides[i].key] if outside else []
            row[i] = panels
        cells.append(row)
    return cells


def score_note(iou: float, hit: bool | None) -> str:
    """What a figure prints under a map scored against the truth: "IoU 0.42, hit"."""
    return f"IoU {iou:.2f}" + {True: ", hit", False: ", miss"}.get(hit, "")


def _sentence_headers(view: MapsView, settings: ViewSettings, i: int) -> list[Header]:
    """A sentence's column header (and its mask's, when both are drawn)."""
    headers = [Header(f"S{i + 1}", view.sentences[i])]
    if settings.mask == "both":
        headers.append(Header(f"S{i + 1} mask"))
    return headers


def _colorbar(view: MapsView, settings: ViewSettings) -> Colorbar | None:
    if settings.mask == "mask":  # binary masks only: no colour to explain
        return None
    if settings.scale == "shared":
        low, high = view.colour_range("shared", 0)
        return Colorbar(settings.cmap, low, high, "map value (one scale for all models)")
    return Colorbar(settings.cmap, 0.0, 1.0, "map value, normalised per " + settings.scale)


__all__ = ["MapsView", "ModelMaps", "compute_maps", "render_maps", "render_maps_figure", "render_sentence_rows",
           "resolve_kind"]
