"""PCA maps on the page: models x pictures, fitted per model (default), jointly or per picture, export.

"Draw PCA" reads the patch vectors (cached per model, picture and source); switching between
a joint and a per-picture fit only refits the PCA on those vectors.
"""

from __future__ import annotations

import gradio as gr

from explorer.grounding.sentence_maps import MapCache
from explorer.serve.budget import HEAVY
from explorer.serve.access import Access
from explorer.serve.messages import explain
from explorer.ui.view_controls import PREVIEW_SIDE, Inputs, base_settings, export_row, loading_first
from explorer.views.panels import compose
from explorer.views.pca_view import PcaView, compute_pca, render_pca
from explorer.views.settings import PCA_FITS, PCA_SOURCES, ViewSettings
from explorer.zoo import Zoo

MAX_EXTRA_IMAGES = 3
FIT_LABELS = {"per-model": "per model (each model's own basis)", "joint": "joint (one basis for all models)",
              "per-image": "per picture"}


def status_text(view: PcaView, settings: ViewSettings) -> str:
    fit = {"joint": "one PCA for every panel (colours mean the same everywhere)",
           "per-model": "one PCA per model (colours compare across a row's pictures)",
           "per-image": "one PCA per panel (colours are not comparable across panels)"}[settings.pca_fit]
    lines = [f"{len(view.names)} model(s) x {len(view.pictures)} picture(s) · {fit}."]
    skipped = getattr(view, "skipped", [])
    lines += [f"- **{note}**" for note in skipped]  # a model left out of the view: said first, in bold
    lines += [f"- {note}" for note in view.notes if note not in skipped]
    return "\n".join(lines)


def draw(load, cache: MapCache, *values, budget=None):
    common, extra, source, fit = values[:6], values[6], values[7], values[8]
    try:
        extra = [str(p) for p in (extra or [])][:MAX_EXTRA_IMAGES]
        settings = ViewSettings(**base_settings("pca", *common, budget=budget), images=extra, pca_source=source,
                                pca_fit=fit)
        view = compute_pca(load, settings, cache)
        picture = compose(render_pca(view, settings, PREVIEW_SIDE))
    except Exception as error:  # noqa: BLE001
        return None, None, None, explain(error)
    return view, settings, picture, status_text(view, settings)


def refit(view: PcaView | None, settings: ViewSettings | None, fit: str):
    """Joint vs per-picture: a new PCA on the cached vectors."""
    if view is None or settings is None:
        return settings, gr.update(), gr.update()
    try:
        updated = ViewSettings(**{**vars(settings), "pca_fit": fit})
        return updated, compose(render_pca(view, updated, PREVIEW_SIDE)), status_text(view, updated)
    except Exception as error:  # noqa: BLE001
        return settings, gr.update(), explain(error)


def build(inputs: Inputs, zoo: Zoo, cache: MapCache, access: Access) -> None:
    extra = gr.File(label=f"More pictures to compare (up to {MAX_EXTRA_IMAGES})", file_count="multiple",
                    type="filepath", elem_id="pca-images", height=90, file_types=access.picture_types)
    with gr.Row():
        source = gr.Radio(list(PCA_SOURCES), value="features", label="Patch vectors (features or attention rows)",
                          elem_id="pca-source")
        fit = gr.Radio([(FIT_LABELS[f], f) for f in PCA_FITS], value=PCA_FITS[0], label="PCA fitted",
                       elem_id="pca-fit")
    run = gr.Button("Draw PCA maps", variant="primary", elem_id="pca-run")
    status = gr.Markdown("The top 3 principal components of each model's patch vectors, as RGB.",
                         elem_id="pca-status")
    # The label goes above the picture, not over it: on the picture it would hide the first row's label.
    gr.Markdown("**PCA maps**: the pictures, then a row per model, a column per picture.",
                elem_id="pca-grid-label")
    picture = gr.Image(interactive=False, elem_id="pca-grid", format="png", show_label=False,
                       alt_text="PCA maps: the pictures, then a row per model of its top 3 components as RGB")
    view_state, settings_state = gr.State(None), gr.State(None)
    export_row("pca", view_state, settings_state, zoo, access)
    run.click(loading_first(zoo, lambda load, *values: draw(load, cache, *values, budget=access.budget), status_at=3,
                            n_outputs=4),
              inputs=inputs.components() + [extra, source, fit],
              outputs=[view_state, settings_state, picture, status], api_name="draw_pca", **HEAVY)
    fit.change(refit, inputs=[view_state, settings_state, fit], outputs=[settings_state, picture, status],
               api_name="refit_pca", **HEAVY)  # a PCA fit and a render: picture work
