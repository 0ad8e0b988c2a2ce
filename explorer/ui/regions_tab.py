"""FLISM regions on the page: boxes by source, the sentence x region heat map, the best pair, export."""

from __future__ import annotations

import gradio as gr

from explorer.grounding.sentence_maps import MapCache
from explorer.serve.budget import HEAVY
from explorer.serve.access import Access
from explorer.serve.messages import explain
from explorer.ui.view_controls import Inputs, base_settings, export_row, loading_first
from explorer.views.panels import compose
from explorer.views.regions_view import (RegionsView, compute_regions, key_entries, render_regions, similarity_matrix,
                                         similarity_plot)
from explorer.views.settings import ViewSettings
from explorer.zoo import Zoo

MATCH_COLUMNS = ["model", "#", "sentence", "best region", "source", "label", "cosine", "best pair"]
KEY_COLUMNS = ["model", "region", "source", "sentences that chose it"]
MATCH_WIDTHS = ["13%", "5%", "27%", "9%", "12%", "14%", "10%", "10%"]  # every column readable at 1280 px
KEY_WIDTHS = ["20%", "10%", "30%", "40%"]
# The regions preview is one picture per model with many boxes: larger than the other views' panels,
# so the box ids stay legible (the sentences are listed in the tables, not written on the picture).
REGIONS_PREVIEW_SIDE = 512


def match_rows(view: RegionsView) -> list[list]:
    rows = []
    for name, result in zip(view.names, view.results):
        for i, sentence in enumerate(view.sentences):
            j = int(result.best_region[i])
            region = result.regions[j]
            rows.append([name, i + 1, sentence, f"R{j + 1}", region.source, region.label,
                         round(float(result.similarity[i, j]), 4), "yes" if result.best_pair == (i, j) else ""])
    return rows


def status_text(view: RegionsView) -> str:
    counts = {}
    for region in view.results[0].regions:
        counts[region.source] = counts.get(region.source, 0) + 1
    found = ", ".join(f"{n} {source}" for source, n in counts.items())
    lines = [f"{len(view.sentences)} sentence(s) x {len(view.results[0].regions)} regions ({found}); "
             f"detector boxes from **{view.detector}**."]
    for name, result in zip(view.names, view.results):
        s, r = result.best_pair
        lines.append(f"- **{name}**: best pair S{s + 1} <-> R{r + 1} (cosine {result.best_score:.3f})")
    lines += [f"- {note}" for note in view.notes]
    return "\n".join(lines)


def key_rows(view: RegionsView | None) -> list[list]:
    """Which sentences chose which region, a row per (model, chosen region): the key to the box ids
    drawn on the picture."""
    if view is None:
        return []
    return [[name, *entry] for name, result in zip(view.names, view.results) for entry in key_entries(result)]


def find_regions(access: Access, load, cache: MapCache, *values):
    """The "Find regions" button: (view, settings, picture, heat map, status, table). A detector folder
    typed in the page must lie under an allowed root (a public page takes none: the owner's
    ``$EXPLORER_DETECTOR``, else segments)."""
    from explorer.grounding.detectors import detector_setting  # torch: imported by the first request

    common, detector = values[:6], values[6]
    try:
        typed = detector.strip() if isinstance(detector, str) else ""
        folder = str(access.path(typed, "detector folder")) if typed else ""
        settings = ViewSettings(**base_settings("regions", *common, budget=access.budget),
                                detector=detector_setting(folder))
        view = compute_regions(load, settings, cache)
        picture = compose(render_regions(view, settings, REGIONS_PREVIEW_SIDE))
        plot = similarity_plot([similarity_matrix(view, i) for i in range(len(view.names))])
    except Exception as error:  # noqa: BLE001 - the page shows it; nothing else changes
        return None, None, None, None, explain(error), []
    return view, settings, picture, plot, status_text(view), match_rows(view)


def build(inputs: Inputs, zoo: Zoo, cache: MapCache, access: Access) -> None:
    detector = gr.Textbox(label="YOLOS detector directory (local Hugging Face folder under an allowed folder; empty: "
                                "$EXPLORER_DETECTOR, else Felzenszwalb segments from scikit-image)",
                          elem_id="regions-detector", visible=not access.public)
    run = gr.Button("Find regions", variant="primary", elem_id="regions-run")
    status = gr.Markdown("FLISM proposes regions (detector boxes, four quadrants, the centre box), and every "
                         "sentence takes its most similar region.", elem_id="regions-status")
    # The label goes above the picture, not over it: on the picture it would hide the first row's title.
    gr.Markdown("**Regions**, a row per model: orange detector boxes, blue quadrants, green the centre box, "
                "thick red the best pair's region. The ids are keyed in the tables below.",
                elem_id="regions-grid-label")
    picture = gr.Image(interactive=False, elem_id="regions-grid", format="png", show_label=False,
                       alt_text="FLISM regions: the picture's regions and each sentence's best region per model")
    key = gr.Dataframe(headers=KEY_COLUMNS, interactive=False, wrap=True, elem_id="regions-key", max_height=260,
                       label="Sentences by region (the ids on the picture)", column_widths=KEY_WIDTHS)
    table = gr.Dataframe(headers=MATCH_COLUMNS, interactive=False, wrap=True, elem_id="regions-table",
                         max_height=320, label="Best region per sentence", column_widths=MATCH_WIDTHS)
    # As for the picture: Gradio draws a plot's label over its top-left corner, where it hid the first
    # model's heat-map title; a line above the plot says it instead.
    gr.Markdown("**Sentence x region similarity**, a heat map per model (hover a cell: its sentence, region and "
                "cosine).", elem_id="regions-plot-label")
    plot = gr.Plot(show_label=False, elem_id="regions-plot")
    view_state, settings_state = gr.State(None), gr.State(None)
    export_row("regions", view_state, settings_state, zoo, access)

    def run_view(load, *values):
        found = find_regions(access, load, cache, *values)
        return (*found, key_rows(found[0]))

    run.click(loading_first(zoo, run_view, status_at=4, n_outputs=7), inputs=inputs.components() + [detector],
              outputs=[view_state, settings_state, picture, plot, status, table, key], api_name="find_regions",
              **HEAVY)
