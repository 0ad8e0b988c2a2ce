"""A view from settings to panels: compute (models, cached), render (panels); ``figure_pages`` writes them
(figure + JSON), ``bundle_inputs`` keeps their inputs beside."""


from __future__ import annotations

import re
import shutil
from pathlib import Path

from explorer.grounding.sentence_maps import MapCache
from explorer.views.kinds_view import KindsView, compute_kinds, render_kinds
from explorer.views.maps_view import Loader, MapsView, compute_maps, render_maps_figure
from explorer.views.panels import PanelGrid
from explorer.views.pca_view import PcaView, compute_pca, render_pca
from explorer.views.regions_view import RegionsView, compute_regions, render_regions
from explorer.views.retrieval_figure import RetrievalFigureView, compute_retrieval, render_retrieval
from explorer.views.settings import ViewSettings

View = MapsView | RegionsView | PcaView | KindsView | RetrievalFigureView


def compute_view(load: Loader, settings: ViewSettings, cache: MapCache | None = None,
                 truth_dir: Path | None = None) -> View:
    """Run what the view needs from the models (each result cached in ``cache``)."""
    if settings.view == "maps":
        return compute_maps(load, settings, cache, truth_dir=truth_dir)
    if settings.view == "regions":
        return compute_regions(load, settings, cache)
    if settings.view == "kinds":
        return compute_kinds(load, settings, cache, truth_dir=truth_dir)
    if settings.view == "retrieval":
        return compute_retrieval(load, settings)
    return compute_pca(load, settings, cache)


def render_view(view: View, settings: ViewSettings, side: int | None = None) -> PanelGrid:
    """Panels from display settings only; no model runs here."""
    if isinstance(view, MapsView):  # as settings.layout lays them out
        return render_maps_figure(view, settings, side)
    if isinstance(view, RegionsView):
        return render_regions(view, settings, side)
    if isinstance(view, KindsView):
        return render_kinds(view, settings, side)
    if isinstance(view, RetrievalFigureView):
        return render_retrieval(view, settings, side)
    return render_pca(view, settings, side)


KEPT_SUFFIXES = (".png", ".jpg", ".jpeg", ".webp", ".tif", ".tiff", ".bmp", ".gif", ".npz")


def bundle_inputs(view: View, settings: ViewSettings, folder: str | Path) -> ViewSettings:
    """Copy the view's input files into ``folder``/inputs and return settings that point at the copies.

    The app's uploads live in temporary folders; an exported figure carries its own picture(s),
    mask and scene truth, so ``explorer figure replay`` works after the app has gone.
    """
    inputs = Path(folder) / "inputs"
    inputs.mkdir(parents=True, exist_ok=True)
    counter = iter(range(1, 1000))

    def keep(path: str) -> str:
        if not path:
            return path
        source = Path(path)
        # The copy's name never comes from the sender as is: the exports folder is served by the app, and a
        # name like page.html would be served as a page. Pictures and truth keep their suffix, others lose it.
        suffix = source.suffix.lower() if source.suffix.lower() in KEPT_SUFFIXES else ".bin"
        stem = re.sub(r"[^A-Za-z0-9_-]+", "-", source.stem)[:60] or "input"
        copy = inputs / f"{next(counter)}-{stem}{suffix}"
        shutil.copy2(source, copy)
        return str(copy.resolve())

    changes = {"image": keep(settings.image), "images": [keep(p) for p in settings.images],
               "truth": keep(settings.truth)}
    truth_file = getattr(view, "truth_file", None)
    if truth_file is not None and not settings.truth:  # a scene's truth, found by the picture's pixels
        scenes = inputs / "truth"
        scenes.mkdir(exist_ok=True)
        shutil.copy2(truth_file, scenes / Path(truth_file).name)
        changes["truth_dir"] = str(scenes.resolve())
    return ViewSettings(**{**vars(settings), **changes})
