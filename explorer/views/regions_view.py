"""FLISM regions view: proposed boxes by source, the sentence x region similarity, the best matches.

Regions are the detector's boxes (YOLOS from a local directory when configured, else the
classical proposals of ``explorer.grounding.detectors``), the four quadrants and the centre box
(``explorer.grounding.flism``). Each model embeds the crops and the sentences itself; results are cached
per (model, picture, sentences, detector), so re-drawing never re-runs a model.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from PIL import Image, ImageDraw

from explorer.grounding.budget import caption_sentences
from explorer.grounding.detectors import load_detector
from explorer.grounding.flism import FlismResult, flism
from explorer.grounding.sentence_maps import MapCache, image_digest, prepare_image
from explorer.views.maps_view import Loader
from explorer.views.panels import Panel, PanelGrid, ui_font
from explorer.views.settings import ViewSettings

SOURCE_COLOURS = {"detector": (255, 127, 14), "quadrant": (31, 119, 180), "centre": (44, 160, 44)}
SOURCE_COLOUR_NAMES = {"detector": "orange", "quadrant": "blue", "centre": "green"}
BEST_PAIR_COLOUR = (214, 39, 40)


@dataclass
class SimilarityMatrix:
    """What a heat map of one model's FLISM similarities needs (page: plotly; figure: matplotlib)."""

    values: np.ndarray  # [M, R]
    sentences: list[str]
    regions: list[str]  # "R1 detector: cat 0.91", ...
    best_region: list[int]  # per sentence
    best_pair: tuple[int, int]
    title: str


@dataclass
class RegionsView:
    picture: Image.Image
    sentences: list[str]
    names: list[str]
    results: list[FlismResult]
    detector: str  # which proposal method made the detector boxes
    notes: list[str] = field(default_factory=list)


def detector_key(detector) -> tuple:
    """What makes two detectors propose the same boxes: their kind, folder and options."""
    return (type(detector).__name__, detector.name, str(getattr(detector, "directory", "")),
            getattr(detector, "threshold", None), getattr(detector, "max_boxes", None))


def region_label(index: int, region) -> str:
    kind = region.source if not region.label else f"{region.source}: {region.label}"
    return f"R{index + 1} {kind}"


def compute_regions(load: Loader, settings: ViewSettings, cache: MapCache | None = None) -> RegionsView:
    if not settings.models:
        raise ValueError("Pick at least one model.")
    sentences = caption_sentences(settings.caption)  # only the split: no model's token count is shown here
    picture, notes = prepare_image(settings.image)
    detector, detector_notes = load_detector(settings.detector or None)
    notes.extend(detector_notes)
    names, results = [], []
    for name in settings.models:
        model = load(name)
        key = ("flism", model.name, id(model), image_digest(picture), tuple(sentences), detector_key(detector))

        def compute(model=model):
            return flism(model, picture, sentences, detector=detector)

        results.append(cache.get(key, compute) if cache is not None else compute())
        names.append(model.name)
        if not model.trained:
            notes.append(f"{model.name} is UNTRAINED (random weights): its matches mean nothing")
    return RegionsView(picture=picture, sentences=sentences, names=names, results=results,
                       detector=detector.name, notes=notes)


def draw_regions(picture: Image.Image, result: FlismResult, side: int | None = None) -> np.ndarray:
    """The picture with every region outlined in its source's colour, sentences at their best region,
    and the single best (sentence, region) pair in thick red."""
    scale = 1.0 if side is None or max(picture.size) <= side else side / max(picture.size)
    canvas = picture.convert("RGB").resize((round(picture.width * scale), round(picture.height * scale)))
    draw = ImageDraw.Draw(canvas)
    font = ui_font(max(10, round(12 * max(1.0, canvas.width / 400))))
    width = max(1, round(canvas.width / 200))
    takers: dict[int, list[int]] = {}
    for sentence, region in enumerate(result.best_region.tolist()):
        takers.setdefault(region, []).append(sentence)
    pair_sentence, pair_region = result.best_pair
    for j, region in enumerate(result.regions):
        box = [v * scale for v in region.box]
        best = j == pair_region
        draw.rectangle(box, outline=BEST_PAIR_COLOUR if best else SOURCE_COLOURS[region.source],
                       width=3 * width if best else width)
        label = f"R{j + 1}" + (": " + ",".join(f"S{s + 1}" for s in takers[j]) if j in takers else "")
        draw.text((box[0] + 2 * width, box[1] + 2 * width), label, fill="white", font=font,
                  stroke_width=2, stroke_fill="black")
    return np.asarray(canvas)


def similarity_matrix(view: RegionsView, index: int) -> SimilarityMatrix:
    result = view.results[index]
    return SimilarityMatrix(values=result.similarity.numpy(), sentences=view.sentences,
                            regions=[region_label(j, r) for j, r in enumerate(result.regions)],
                            best_region=result.best_region.tolist(), best_pair=result.best_pair,
                            title=view.names[index])


def render_regions(view: RegionsView, settings: ViewSettings, side: int | None = None) -> PanelGrid:
    rows, labels, extras = [], [], []
    for index, (name, result) in enumerate(zip(view.names, view.results)):
        s, r = result.best_pair
        title = f"best pair: S{s + 1} ↔ R{r + 1} ({result.best_score:.3f})"
        rows.append([Panel(draw_regions(view.picture, result, side), title, view.sentences[s])])
        labels.append(name)
        extras.append(similarity_matrix(view, index))
    legend = ", ".join(f"{source} {colour}" for source, colour in SOURCE_COLOUR_NAMES.items())
    sentences = " ".join(f"S{i + 1}: {sentence}" for i, sentence in enumerate(view.sentences))
    caption = f"Boxes: {legend}; red: the best pair. Detector boxes from {view.detector}. {sentences}"
    return PanelGrid(rows=rows, row_labels=labels, caption=caption, extras=extras)


def similarity_plot(matrices: list[SimilarityMatrix]):
    """Plotly heat maps, one per model side by side: best region per sentence marked with a white
    ring, the single best pair with a red star; hovering shows the sentence and the region."""
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    figure = make_subplots(rows=1, cols=len(matrices), subplot_titles=[m.title for m in matrices],
                           horizontal_spacing=0.08)
    for column, matrix in enumerate(matrices, start=1):
        rows = [f"S{i + 1}" for i in range(len(matrix.sentences))]
        cols = [label.split(" ")[0] for label in matrix.regions]
        hover = [[f"{matrix.sentences[i]}<br>{matrix.regions[j]}<br>cosine {matrix.values[i, j]:.3f}"
                  for j in range(len(cols))] for i in range(len(rows))]
        figure.add_trace(go.Heatmap(z=matrix.values, x=cols, y=rows, colorscale="Viridis", hoverinfo="text",
                                    text=hover, showscale=column == len(matrices)), row=1, col=column)
        figure.add_trace(go.Scatter(x=[cols[j] for j in matrix.best_region], y=rows, mode="markers",
                                    marker=dict(symbol="circle-open", size=14, color="white", line=dict(width=2)),
                                    name="best region per sentence", showlegend=column == 1, hoverinfo="skip"),
                         row=1, col=column)
        i, j = matrix.best_pair
        figure.add_trace(go.Scatter(x=[cols[j]], y=[rows[i]], mode="markers", name="best pair",
                                    marker=dict(symbol="star", size=16, color="red"), showlegend=column == 1,
                                    hoverinfo="skip"), row=1, col=column)
        figure.update_yaxes(autorange="reversed", row=1, col=column)
    figure.update_layout(height=max(260, 60 + 28 * len(matrices[0].sentences)), margin=dict(l=40, r=20, t=40, b=30),
                         legend=dict(orientation="h", y=-0.15))
    return figure
