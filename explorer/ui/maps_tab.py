"""Sentence maps on the page: a row per model, Otsu masks, scores against ground truth, export.

"Draw maps" runs the models (cached per model, picture, sentences and kind). Every other
control re-renders the stored result: colour map, opacity, mask style, threshold, colour
scale and page never run a model.
"""

from __future__ import annotations

import gradio as gr

from explorer.grounding.sentence_maps import MapCache
from explorer.ui.examples import truth_dir
from explorer.ui.messages import explain
from explorer.ui.budget import HEAVY
from explorer.ui.view_controls import PREVIEW_SIDE, Inputs, base_settings, export_row, loading_first
from explorer.views.maps_view import SAME_MAP_NOTE, MapsView, compute_maps, render_maps
from explorer.views.panels import compose
from explorer.views.render import COLORMAPS
from explorer.views.settings import MASK_MODES, SCALES, ViewSettings
from explorer.zoo import Zoo

SCORE_COLUMNS = ["model", "#", "sentence", "threshold", "mask %", "tokens cut", "IoU", "pointing"]
SCORE_WIDTHS = ["14%", "5%", "28%", "13%", "9%", "11%", "8%", "12%"]  # every column readable at 1280 px


def display_settings(cmap, opacity, mask, otsu, threshold, scale, page, per_page) -> dict:
    return {"cmap": cmap, "opacity": float(opacity), "mask": mask,
            "threshold": None if otsu else float(threshold), "scale": scale,
            "page": max(0, int(page or 1) - 1), "per_page": int(per_page or 8)}


def score_rows(view: MapsView, settings: ViewSettings) -> list[list]:
    rows = []
    for row in view.scores(settings.threshold):
        iou, hit = row.get("IoU"), row.get("pointing")
        rows.append([row["model"], row["#"], row["sentence"], round(row["threshold"], 4), round(row["mask %"], 1),
                     row["tokens cut"] or "", "" if iou is None else round(iou, 3),
                     "" if hit is None else ("hit" if hit else "miss")])
    return rows


def status_text(view: MapsView, settings: ViewSettings) -> str:
    names = ", ".join(f"**{m.name}** ({m.kind})" for m in view.models)
    pages = view.pages(settings.per_page)
    lines = [f"{names} · {len(view.sentences)} sentence(s)" + (f" · {pages} pages" if pages > 1 else "")]
    threshold = "Otsu" if settings.threshold is None else f"{settings.threshold:.2f} of each map's range"
    lines.append(f"Mask threshold: {threshold} (each map's value is in the table).")
    if view.truth is not None:
        summary = "; ".join(f"{s['model']}: mIoU {s['miou']:.3f}" + (
            "" if s["pointing"] is None else f", pointing {100 * s['pointing']:.0f}%")
            for s in view.summary(settings.threshold) if s["miou"] is not None)
        lines.append(f"Ground truth from {view.truth.source} ({view.summary(settings.threshold)[0]['n']} sentence(s)): "
                     f"{summary}")
    lines += [f"- {note}" for note in view.notes]
    lines += [f"- **{m.name}** ({m.kind}): {SAME_MAP_NOTE}: every sentence gets the same map"
              for m in view.models if m.same_for_every_sentence]
    return "\n".join(lines)


def draw(load, cache: MapCache, *values, budget=None):
    """The "Draw maps" button: (view, settings, picture, status, scores, page slider). A failure leaves
    only its message (the stored result is cleared, so nothing stale is exported)."""
    common, display = values[:6], values[6:]
    try:
        settings = ViewSettings(**base_settings("maps", *common, budget=budget), **display_settings(*display))
        view = compute_maps(load, settings, cache, truth_dir=truth_dir())  # the examples' scene truth
        settings.page = min(settings.page, view.pages(settings.per_page) - 1)
        picture = compose(render_maps(view, settings, PREVIEW_SIDE))
    except Exception as error:  # noqa: BLE001 - the page shows it and keeps serving
        return None, None, None, explain(error), [], gr.update()
    return view, settings, picture, status_text(view, settings), score_rows(view, settings), page_slider(view, settings)


def page_slider(view: MapsView, settings: ViewSettings):
    """The page control: shown when there is more than one page (Gradio needs minimum < maximum)."""
    pages = view.pages(settings.per_page)
    return gr.update(maximum=max(2, pages), value=settings.page + 1, visible=pages > 1)


def rerender(view: MapsView | None, settings: ViewSettings | None, *display):
    """Any display control: (settings, picture, status, scores, page slider) from the stored maps; no
    model runs."""
    if view is None or settings is None:
        return settings, gr.update(), gr.update(), gr.update(), gr.update()
    try:
        values = {**vars(settings), **display_settings(*display)}
        updated = ViewSettings(**values)
        updated.page = min(updated.page, view.pages(updated.per_page) - 1)
        picture = compose(render_maps(view, updated, PREVIEW_SIDE))
    except Exception as error:  # noqa: BLE001
        return settings, gr.update(), explain(error), gr.update(), gr.update()
    return updated, picture, status_text(view, updated), score_rows(view, updated), page_slider(view, updated)


def build(inputs: Inputs, zoo: Zoo, cache: MapCache, access=None) -> None:
    with gr.Row():
        cmap = gr.Radio(list(COLORMAPS), value=COLORMAPS[0], label="Colour map", elem_id="maps-cmap")
        opacity = gr.Slider(0.0, 1.0, value=0.55, step=0.05, label="Opacity", elem_id="maps-opacity")
        scale = gr.Radio(list(SCALES), value="map", label="Colour scale (per map, per model, shared)",
                         elem_id="maps-scale")
    with gr.Row():
        mask = gr.Radio(list(MASK_MODES), value="contour", label="Mask", elem_id="maps-mask")
        otsu = gr.Checkbox(value=True, label="Otsu threshold", elem_id="maps-otsu")
        threshold = gr.Slider(0.0, 1.0, value=0.5, step=0.01, label="Manual threshold (fraction of each map's range)",
                              elem_id="maps-threshold")
    with gr.Row():
        per_page = gr.Slider(1, 12, value=8, step=1, label="Sentences per page", elem_id="maps-per-page")
        page = gr.Slider(1, 2, value=1, step=1, label="Page", visible=False, elem_id="maps-page")
    run = gr.Button("Draw maps", variant="primary", elem_id="grounding-run")
    status = gr.Markdown("Pick an image, a caption and up to 4 models, then **Draw maps**.", elem_id="grounding-status")
    # The label goes above the picture, not over it: on the picture it would hide the first row's model name.
    gr.Markdown("**Maps**: a row per model, a panel per sentence.", elem_id="maps-grid-label")
    picture = gr.Image(interactive=False, elem_id="maps-grid", format="png", show_label=False)
    scores = gr.Dataframe(headers=SCORE_COLUMNS, interactive=False, wrap=True, elem_id="maps-scores",
                          max_height=320, column_widths=SCORE_WIDTHS)
    view_state, settings_state = gr.State(None), gr.State(None)
    export_row("maps", view_state, settings_state, zoo, access)

    display = [cmap, opacity, mask, otsu, threshold, scale, page, per_page]
    budget = access.budget if access is not None else None
    run.click(loading_first(zoo, lambda load, *values: draw(load, cache, *values, budget=budget), status_at=3,
                            n_outputs=6),
              inputs=inputs.components() + display,
              outputs=[view_state, settings_state, picture, status, scores, page], api_name="draw_maps", **HEAVY)
    for control in display:
        # A slider re-renders on "input" (a drag, or a number typed in its box and Enter) with only
        # the latest value kept while one is running; other controls on "change".
        event = control.input if isinstance(control, gr.Slider) else control.change
        event(rerender, inputs=[view_state, settings_state, *display],
              outputs=[settings_state, picture, status, scores, page], api_name=f"rerender_maps_{control.elem_id}",
              trigger_mode="always_last", **HEAVY)
