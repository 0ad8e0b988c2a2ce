"""FLISM regions on the page: boxes by source, the sentence x region heat map, the best pair, export."""

from __future__ import annotations

import gradio as gr

from explorer.grounding.detectors import detector_setting
from explorer.grounding.sentence_maps import MapCache
from explorer.ui.messages import explain
from explorer.ui.view_controls import PREVIEW_SIDE, Inputs, base_settings, export_row
from explorer.views.panels import compose
from explorer.views.regions_view import RegionsView, compute_regions, render_regions, similarity_matrix, similarity_plot
from explorer.views.settings import ViewSettings
from explorer.zoo import Zoo

MATCH_COLUMNS = ["model", "#", "sentence", "best region", "source", "label", "cosine", "best pair"]


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
        lines.append(f"- **{name}**: best pair S{s + 1} ↔ R{r + 1} (cosine {result.best_score:.3f})")
    lines += [f"- {note}" for note in view.notes]
    return "\n".join(lines)


def find_regions(load, cache: MapCache, *values):
    """The "Find regions" button: (view, settings, picture, heat map, status, table)."""
    common, detector = values[:6], values[6]
    try:
        settings = ViewSettings(**base_settings("regions", *common), detector=detector_setting(detector))
        view = compute_regions(load, settings, cache)
        picture = compose(render_regions(view, settings, PREVIEW_SIDE))
        plot = similarity_plot([similarity_matrix(view, i) for i in range(len(view.names))])
    except Exception as error:  # noqa: BLE001 - the page shows it; nothing else changes
        return None, None, None, None, explain(error), []
    return view, settings, picture, plot, status_text(view), match_rows(view)


def build(inputs: Inputs, zoo: Zoo, cache: MapCache) -> None:
    detector = gr.Textbox(label="YOLOS detector directory (local Hugging Face folder; empty: $EXPLORER_DETECTOR, "
                                "else Felzenszwalb segments from scikit-image)", elem_id="regions-detector")
    run = gr.Button("Find regions", variant="primary", elem_id="regions-run")
    status = gr.Markdown("FLISM proposes regions (detector boxes, four quadrants, the centre box), and every "
                         "sentence takes its most similar region.", elem_id="regions-status")
    picture = gr.Image(label="Regions (orange: detector, blue: quadrants, green: centre, red: the best pair)",
                       interactive=False, elem_id="regions-grid", format="png")
    plot = gr.Plot(label="Sentence x region similarity", elem_id="regions-plot")
    table = gr.Dataframe(headers=MATCH_COLUMNS, interactive=False, wrap=True, elem_id="regions-table",
                         max_height=320)
    view_state, settings_state = gr.State(None), gr.State(None)
    export_row("regions", view_state, settings_state, zoo)
    run.click(lambda *values: find_regions(zoo.load, cache, *values), inputs=inputs.components() + [detector],
              outputs=[view_state, settings_state, picture, plot, status, table])
