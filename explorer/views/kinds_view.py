"""Map kinds compared: one picture and one or a few sentences, a row per model, a column per map kind.

The figure LeGrad's and ClearCLIP's papers print: the same sentence under Grad-CAM, LeGrad,
ClearCLIP, NACLIP and the method's own map. By default the columns are the explainers the chosen
models offer and an "own map" column (``native``: each model's own sentence map, named under it; empty
for a model without one). Maps come from ``grounding.ground`` (cached like the maps view's); the Otsu
contour, colours and scores against truth are drawn as the maps view draws them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from explorer.core.errors import ExplorerError
from explorer.evaluation.grounding_eval import native_kind
from explorer.grounding.sentence_maps import MapCache, ground, working_picture
from explorer.models.map_kinds import EXPLAINER_KINDS
from explorer.views.maps_view import Loader, ModelMaps, find_view_truth, score_note
from explorer.views.panels import Colorbar, Header, Panel, PanelGrid, fit_size, map_panels, picture_panel
from explorer.views.settings import NATIVE, ViewSettings

KIND_TITLES = {"gradcam": "Grad-CAM", "legrad": "LeGrad", "clearclip": "ClearCLIP", "naclip": "NACLIP",
               NATIVE: "own map", "generic": "patch cosine"}


class KindsError(ExplorerError):
    """A map kind none of the chosen models offers."""


def default_kinds(models) -> list[str]:
    """The explainers any of ``models`` offers (in the library's order), then the own-map column."""
    kinds = [kind for kind in EXPLAINER_KINDS if any(kind in model.map_kinds for model in models)]
    if any(native_kind(model) is not None for model in models):
        kinds.append(NATIVE)
    return kinds


def model_kind(model, kind: str) -> str | None:
    """The map kind a cell draws: ``kind`` itself, the model's own for ``native``; None when it has none."""
    if kind == NATIVE:
        return native_kind(model)
    return kind if kind in model.map_kinds else None


@dataclass
class KindsView:
    picture: object  # PIL.Image, the working picture every model saw
    sentences: list[str]
    names: list[str]
    kinds: list[str]  # the columns
    cells: dict[tuple[int, int], ModelMaps]  # (model row, kind column) -> the maps; missing: an empty cell
    trained: list[bool] = field(default_factory=list)
    truth: object | None = None
    truth_file: object | None = None
    notes: list[str] = field(default_factory=list)

    def shown(self, settings: ViewSettings) -> range:
        pages = max(1, -(-len(self.sentences) // settings.per_page))
        page = min(max(0, settings.page), pages - 1)
        return range(page * settings.per_page, min(len(self.sentences), (page + 1) * settings.per_page))


def compute_kinds(load: Loader, settings: ViewSettings, cache: MapCache | None = None, truth_dir=None) -> KindsView:
    """Every chosen model's maps of the caption in every chosen kind it offers (cached)."""
    if not settings.models:
        raise KindsError("pick at least one model")
    working = working_picture(settings.image)
    models = [load(name) for name in settings.models]
    kinds = list(settings.kinds) or default_kinds(models)
    offered = sorted({k for model in models for k in model.map_kinds} | {NATIVE})
    unknown = [kind for kind in kinds if kind not in offered]
    if unknown:
        raise KindsError(f"no chosen model offers the map kind(s) {', '.join(unknown)}; they offer "
                         f"{', '.join(offered)}")
    if not kinds:
        raise KindsError("the chosen models offer no explainer and no map of their own: name kinds with --kind")
    cells, notes, picture, sentences = {}, [], working.image, []
    for m, model in enumerate(models):
        for k, kind in enumerate(kinds):
            chosen = model_kind(model, kind)
            if chosen is None:
                continue
            result = ground(model, working, settings.caption, kind=chosen, cache=cache,
                            dense_caption=settings.dense_caption)
            notes.extend(n for n in result.notes if n not in notes)
            picture, sentences = result.image, result.maps.sentences
            cells[(m, k)] = ModelMaps(name=model.name, result=result, trained=model.trained)
    truth, truth_file = find_view_truth(settings, picture, sentences, truth_dir, working.original_size)
    return KindsView(picture=picture, sentences=sentences, names=[model.name for model in models], kinds=kinds,
                     cells=cells, trained=[model.trained for model in models], truth=truth, truth_file=truth_file,
                     notes=notes)


def _scores(maps: ModelMaps, truth, settings: ViewSettings) -> list[str]:
    """Per sentence "IoU 0.42, hit" against the truth ("" without truth)."""
    if truth is None:
        return [""] * len(maps.maps)
    from explorer.evaluation.metrics.maps import score_sentences

    scored = score_sentences(maps.maps, maps.masks(settings.threshold), truth)[0]
    return ["" if s.iou is None else score_note(s.iou, s.hit) for s in scored]


def render_kinds(view: KindsView, settings: ViewSettings, side: int | None = None) -> PanelGrid:
    """For each shown sentence, a row per model: the picture, then one overlay per kind."""
    size = fit_size(view.picture.size, side)
    base = view.picture.resize(size) if size != view.picture.size else view.picture
    scores = {cell: _scores(maps, view.truth, settings) for cell, maps in view.cells.items()}
    rows, labels, titles = [], [], []
    for i in view.shown(settings):
        for m, name in enumerate(view.names):
            row = [picture_panel(base, "image")]
            for k, kind in enumerate(view.kinds):
                maps = view.cells.get((m, k))
                if maps is None:
                    row.append(Panel(None, f"no {kind} map", scores="no own map" if kind == NATIVE else ""))
                    continue
                masks = maps.display_masks(settings.threshold, size) if settings.mask != "none" else None
                side = maps.mask_sides(settings.threshold)[i]
                outside = side.outside and masks is not None and not maps.flat(i)
                panel = map_panels(base, maps.resized(size)[i], None if masks is None else masks[i], settings,
                                   None, None, title=maps.kind, text=view.sentences[i], outside=outside)[0]
                panel.key = [side.key] if outside else []  # the mask is the background: the figure says so
                threshold = maps.thresholds(settings.threshold)[i]
                own = maps.kind if kind == NATIVE else ""  # which of its own maps the column shows
                panel.scores = ": ".join(part for part in (own, scores[(m, k)][i]) if part)
                panel.details, panel.sentence = f"t={threshold:.3g}", i
                row.append(panel)
            rows.append(row)
            labels.append(name + ("" if view.trained[m] else "\nUNTRAINED"))
            titles.append(f"S{i + 1}: {view.sentences[i]}" if m == 0 else "")
    headers = [Header("")] + [Header(KIND_TITLES.get(kind, kind)) for kind in view.kinds]

    colorbar = Colorbar(settings.cmap, 0.0, 1.0, "map value, normalised per map") if settings.mask != "mask" else None
    return PanelGrid(rows=rows, row_labels=labels, headers=headers, row_titles=titles, colorbar=colorbar, repeat=1)


__all__ = ["KindsView", "compute_kinds", "default_kinds", "render_kinds"]
