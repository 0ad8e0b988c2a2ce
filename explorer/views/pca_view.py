"""PCA maps view: the top 3 principal components of each model's patch vectors, as RGB.

Rows are models, columns are pictures. Fitted per model (default: each model's own basis across
its pictures; models' feature spaces are not aligned), jointly (one basis for everything on screen
that shares a feature size, so a colour means the same direction everywhere) or per picture.
Patch vectors are cached per (model, picture, source); refitting and re-drawing never
run a model.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import cv2
import numpy as np
from PIL import Image

from explorer.core.errors import InputError
from explorer.grounding.pca import pca_maps
from explorer.grounding.sentence_maps import MapCache, working_picture
from explorer.views.maps_view import Loader
from explorer.views.panels import Header, Panel, PanelGrid, fit_size, picture_panel
from explorer.views.settings import ViewSettings


@dataclass
class PcaView:
    pictures: list[Image.Image]
    names: list[str]
    features: list[list[np.ndarray]]  # [model][picture] -> [P, D]
    grids: list[list[tuple[int, int]]]
    source: str
    notes: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)  # "name: why" for each model that cannot give this source


def compute_pca(load: Loader, settings: ViewSettings, cache: MapCache | None = None) -> PcaView:
    if not settings.models:
        raise InputError("Pick at least one model.")
    paths = settings.all_images
    if not paths:
        raise InputError("Pick at least one image.")
    workings = [working_picture(path) for path in paths]  # decoded and hashed once for every model
    pictures = [working.image for working in workings]
    notes = [note for working in workings for note in working.notes]
    names, features, grids, skipped, errors = [], [], [], [], []
    for name in settings.models:
        model = load(name)
        row_features, row_grids = [], []
        try:
            for working in workings:
                picture = working.image
                key = ("patches", model.name, id(model), working.digest, settings.pca_source)

                def compute(model=model, picture=picture):
                    return model.patch_features(picture, settings.pca_source)

                vectors, grid = cache.get(key, compute) if cache is not None else compute()
                row_features.append(vectors)
                row_grids.append(grid)
        except InputError as error:  # this model cannot give these vectors (SEPS has no CLIP self-attention)
            errors.append(error)
            skipped.append(skip_note(model, settings.pca_source, error))
            continue
        names.append(model.name)
        features.append(row_features)
        grids.append(row_grids)
    if not names:  # nothing to show: the reason, as each model gave it
        if len(errors) == 1:
            raise errors[0]
        raise InputError(f"none of the models can give PCA maps of {settings.pca_source}: "
                         + "; ".join(f"{name}: {error}" for name, error in zip(settings.models, errors)))
    return PcaView(pictures=pictures, names=names, features=features, grids=grids, source=settings.pca_source,
                   notes=notes + skipped, skipped=skipped)


def skip_note(model, source: str, error: Exception) -> str:
    """What the page and the figure say about a model left out of the PCA view."""
    if source == "attention":
        return (f"{model.name}: skipped, no CLIP-style image self-attention to read ({model.title} does not "
                f"expose its image encoder's attention); its patch features can be drawn instead")
    return f"{model.name}: skipped, {error}"


def fit_groups(view: PcaView, fit: str) -> tuple[dict[tuple[int, int], np.ndarray], dict, list[str]]:
    """RGB grid per (model, picture), the explained-variance ratios per (model, picture), and notes.

    ``fit``: "joint" fits one basis on every panel that shares a feature size (models of
    different widths cannot share axes; the notes say when that splits the screen), "per-model"
    one basis per model across its pictures, "per-image" one basis per panel.
    """
    cells = [(m, i) for m in range(len(view.names)) for i in range(len(view.pictures))]
    if fit == "per-image":
        groups = [[cell] for cell in cells]
    elif fit == "per-model":
        groups = [[(m, i) for i in range(len(view.pictures))] for m in range(len(view.names))]
    else:
        by_size: dict[int, list] = {}
        for m, i in cells:
            by_size.setdefault(view.features[m][i].shape[1], []).append((m, i))
        groups = list(by_size.values())
    notes = []
    if fit == "joint" and len(groups) > 1:
        sizes = ", ".join(str(view.features[g[0][0]][g[0][1]].shape[1]) for g in groups)
        notes.append(f"the models' patch vectors differ in size ({sizes}): one joint fit per size.")
    if fit == "joint" and len(view.names) > 1:
        notes.append("Models' feature spaces are not aligned: a joint fit shows where each varies along shared "
                     "axes; fit per model to compare each model's own structure.")
    rgb, explained = {}, {}
    for group in groups:
        maps, bases = pca_maps([view.features[m][i] for m, i in group], [view.grids[m][i] for m, i in group],
                               joint=True)
        for cell, one in zip(group, maps):
            rgb[cell] = one
            explained[cell] = bases[0].explained
    return rgb, explained, notes


FIT_WORDS = {"joint": "one fit for all panels", "per-model": "one fit per model", "per-image": "one fit per panel"}


def render_pca(view: PcaView, settings: ViewSettings, side: int | None = None) -> PanelGrid:
    rgb, explained, notes = fit_groups(view, settings.pca_fit)
    # The pictures themselves first, so a reader can tell what each colour covers.
    rows = [[picture_panel(p.resize(fit_size(p.size, side)), f"image {i + 1}") for i, p in enumerate(view.pictures)]]
    labels = ["picture"]
    for m, name in enumerate(view.names):
        row = []
        for i, picture in enumerate(view.pictures):
            size = fit_size(picture.size, side)
            pixels = cv2.resize((rgb[(m, i)] * 255).round().astype(np.uint8), size, interpolation=cv2.INTER_NEAREST)
            row.append(Panel(pixels, f"image {i + 1}"))
        rows.append(row)
        share = float(np.sum(explained[(m, 0)]))
        # The explained share belongs to a fit, so it goes where the fit is one: the row, or each panel.
        if settings.pca_fit == "per-image":
            for i, panel in enumerate(row):
                share = f"{100 * float(np.sum(explained[(m, i)])):.0f}% var"
                panel.title += f" · {share}"
                panel.scores = share  # a figure prints it under the panel
            labels.append(name)
        else:
            labels.append(f"{name}\nPC1-3: {100 * share:.0f}% var" + (" (joint)" if settings.pca_fit == "joint" else ""))
    what = "patch features" if view.source == "features" else "last-layer attention rows"
    caption = f"Top 3 principal components of the {what} as RGB ({FIT_WORDS[settings.pca_fit]}). " + " ".join(notes)
    if view.skipped:
        caption += " " + " ".join(f"{note}." for note in view.skipped)
    headers = [Header(f"image {i + 1}") for i in range(len(view.pictures))]  # once above the columns, in a figure
    return PanelGrid(rows=rows, row_labels=labels, caption=caption.strip(), headers=headers)
