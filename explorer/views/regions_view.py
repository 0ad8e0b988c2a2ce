"""FLISM regions view: proposed boxes by source, the sentence x region similarity, the best matches.

Regions are the detector's boxes (YOLOS from a local directory when configured, else the
classical proposals of ``explorer.grounding.detectors``), the four quadrants and the centre box
(``explorer.grounding.flism``). Each model embeds the crops and the sentences itself; results are cached
per (model, picture, sentences, detector), so re-drawing never re-runs a model.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
from PIL import Image, ImageDraw

from explorer.core.markup import escape
from explorer.core.errors import InputError
from explorer.grounding.budget import caption_sentences
from explorer.grounding.sentence_maps import MapCache, working_picture
from explorer.views.maps_view import Loader
from explorer.views.panels import Panel, PanelGrid, ui_font
from explorer.views.settings import ViewSettings

if TYPE_CHECKING:  # the page is built before torch is imported; computing the view imports FLISM
    from explorer.grounding.flism import FlismResult

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


def region_kind(region) -> str:
    """Where a region came from: "quadrant: top-left", "detector: cat 0.91", "centre"."""
    return region.source if not region.label else f"{region.source}: {region.label}"


def region_label(index: int, region) -> str:
    return f"R{index + 1} {region_kind(region)}"


def compute_regions(load: Loader, settings: ViewSettings, cache: MapCache | None = None) -> RegionsView:
    from explorer.grounding.detectors import load_detector
    from explorer.grounding.flism import flism

    if not settings.models:
        raise InputError("Pick at least one model.")
    sentences = caption_sentences(settings.caption)  # only the split: no model's token count is shown here
    working = working_picture(settings.image)  # decoded and hashed once for every model
    picture, notes = working.image, list(working.notes)
    detector, detector_notes = load_detector(settings.detector or None)
    notes.extend(detector_notes)
    names, results = [], []
    for name in settings.models:
        model = load(name)
        key = ("flism", model.name, id(model), working.digest, tuple(sentences), detector_key(detector))

        def compute(model=model):
            return flism(model, picture, sentences, detector=detector)

        results.append(cache.get(key, compute) if cache is not None else compute())
        names.append(model.name)
        if not model.trained:
            notes.append(f"{model.name} is UNTRAINED (random weights): its matches mean nothing")
    return RegionsView(picture=picture, sentences=sentences, names=names, results=results,
                       detector=detector.name, notes=notes)


Rect = tuple[int, int, int, int]  # (x0, y0, x1, y1) in pixels, x1 and y1 exclusive


@dataclass
class RegionLabel:
    """One box id as drawn on the picture: where its tag sits, and the box it names."""

    text: str  # "R3"
    rect: Rect  # the tag (background included)
    box: tuple[float, float, float, float]  # the region's box on the drawn canvas
    colour: tuple[int, int, int]


def region_takers(result: FlismResult) -> dict[int, list[int]]:
    """Region index -> the sentences (indices) that chose it as their best region."""
    takers: dict[int, list[int]] = {}
    for sentence, region in enumerate(result.best_region.tolist()):
        takers.setdefault(region, []).append(sentence)
    return takers


def key_entries(result: FlismResult) -> list[tuple[str, str, str]]:
    """Which sentences chose which region: (id, where it came from, "S1, S4") per chosen region, the key
    to the ids drawn on the picture (the figure prints it beside the picture, the page as a table)."""
    return [(f"R{j + 1}", region_kind(result.regions[j]), ", ".join(f"S{s + 1}" for s in sentences))
            for j, sentences in sorted(region_takers(result).items())]


def region_key(result: FlismResult) -> list[str]:
    """``key_entries`` as lines: "R3 (quadrant: top-left): S1, S4"."""
    return [f"{region} ({kind}): {sentences}" for region, kind, sentences in key_entries(result)]


def _intersects(a: Rect, b: Rect) -> bool:
    return a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]


def _overlap(a: Rect, b: Rect) -> int:
    return max(0, min(a[2], b[2]) - max(a[0], b[0])) * max(0, min(a[3], b[3]) - max(a[1], b[1]))


def _clamped(spots, size: tuple[int, int], canvas: tuple[int, int]) -> list[Rect]:
    """Tag rectangles at ``spots``, moved inside the canvas (a tag wider than it starts at 0), no repeats."""
    w, h = size
    rects, seen = [], set()
    for x, y in spots:
        x, y = min(max(0, x), max(0, canvas[0] - w)), min(max(0, y), max(0, canvas[1] - h))
        if (x, y) not in seen:
            seen.add((x, y))
            rects.append((x, y, x + w, y + h))
    return rects


def _near(box, size: tuple[int, int], canvas: tuple[int, int], margin: int) -> list[Rect]:
    """Where a tag may go for ``box``, best first: the box's inside corners, just outside its corners,
    then along its top and left edges."""
    w, h = size
    x0, y0, x1, y1 = (round(v) for v in box)
    spots = [(x0 + margin, y0 + margin), (x1 - margin - w, y0 + margin), (x0 + margin, y1 - margin - h),
             (x1 - margin - w, y1 - margin - h), (x0, y0 - h - margin), (x0, y1 + margin),
             (x1 - w, y0 - h - margin), (x1 - w, y1 + margin), (x0 - w - margin, y0), (x1 + margin, y0)]
    spots += [(x, y0 + margin) for x in range(x0 + margin, x1 - w, max(1, w // 2))]
    spots += [(x0 + margin, y) for y in range(y0 + margin, y1 - h, max(1, h // 2))]
    return _clamped(spots, size, canvas)


def _anywhere(box, size: tuple[int, int], canvas: tuple[int, int]) -> list[Rect]:
    """Every spot on the canvas on a half-tag grid, nearest the box's corner first."""
    w, h = size
    x0, y0 = round(box[0]), round(box[1])
    spots = [(x, y) for y in range(0, max(1, canvas[1] - h + 1), max(1, h // 2))
             for x in range(0, max(1, canvas[0] - w + 1), max(1, w // 2))]
    spots.sort(key=lambda p: ((p[0] - x0) ** 2 + (p[1] - y0) ** 2, p[1], p[0]))
    return _clamped(spots, size, canvas)


def place_labels(boxes: list, sizes: list[tuple[int, int]], canvas: tuple[int, int], margin: int = 2) -> list[Rect]:
    """A tag rectangle per box, none overlapping another where the canvas has room (else the least
    overlap): at the box if a spot there is free, else the free spot nearest it (drawn with a leader).
    Small boxes choose first: they have the fewest spots near them."""
    order = sorted(range(len(boxes)), key=lambda j: ((boxes[j][2] - boxes[j][0]) * (boxes[j][3] - boxes[j][1]), j))
    placed: dict[int, Rect] = {}
    for j in order:
        taken = list(placed.values())

        def free(rects):
            return next((rect for rect in rects if not any(_intersects(rect, other) for other in taken)), None)

        near = _near(boxes[j], sizes[j], canvas, margin)
        chosen = free(near)
        if chosen is None:
            anywhere = _anywhere(boxes[j], sizes[j], canvas)
            chosen = free(anywhere) or min(near + anywhere,
                                           key=lambda rect: sum(_overlap(rect, other) for other in taken))
        placed[j] = chosen
    return [placed[j] for j in range(len(boxes))]


def _scale(picture: Image.Image, side: int | None) -> float:
    """Pictures are drawn ``side`` pixels on their longer side (None: as they are), so the box ids keep
    one size relative to the picture: a small picture is enlarged for the page, a large one shrunk."""
    return 1.0 if side is None else side / max(picture.size)


def _font_for(width: int):
    return ui_font(max(10, round(12 * max(1.0, width / 400))))


def region_labels(picture_size: tuple[int, int], result: FlismResult, scale: float = 1.0) -> list[RegionLabel]:
    """The box ids ("R1", "R2", ...) and where they sit on a canvas of ``picture_size`` x ``scale``:
    short tags placed so that no two overlap; which sentences chose a region is listed beside the
    picture (``region_key``, the page's table), not written on it."""
    canvas = (round(picture_size[0] * scale), round(picture_size[1] * scale))
    font = _font_for(canvas[0])
    pad = max(1, round(font.size / 6))
    texts = [f"R{j + 1}" for j in range(len(result.regions))]
    sizes = []
    for text in texts:
        left, top, right, bottom = font.getbbox(text)
        sizes.append((round(right - left) + 2 * pad, round(bottom - top) + 2 * pad))
    boxes = [tuple(v * scale for v in region.box) for region in result.regions]
    rects = place_labels(boxes, sizes, canvas)
    pair_region = result.best_pair[1]
    return [RegionLabel(text=text, rect=rect, box=box,
                        colour=BEST_PAIR_COLOUR if j == pair_region else SOURCE_COLOURS[region.source])
            for j, (text, rect, box, region) in enumerate(zip(texts, rects, boxes, result.regions))]


def away(label: RegionLabel) -> bool:
    """Whether a tag sits off its box (neither on it nor touching it)."""
    x0, y0, x1, y1 = label.rect
    bx0, by0, bx1, by1 = label.box
    return not _intersects((x0 - 1, y0 - 1, x1 + 1, y1 + 1), (round(bx0), round(by0), round(bx1) + 1, round(by1) + 1))


def draw_regions(picture: Image.Image, result: FlismResult, side: int | None = None) -> np.ndarray:
    """The picture with every region outlined in its source's colour (the best pair's region thick and
    red) and tagged with its id; tags never cover one another (``region_labels``)."""
    scale = _scale(picture, side)
    canvas = picture.convert("RGB").resize((round(picture.width * scale), round(picture.height * scale)))
    draw = ImageDraw.Draw(canvas)
    font = _font_for(canvas.width)
    width = max(1, round(canvas.width / 200))
    labels = region_labels(picture.size, result, scale)
    pair_region = result.best_pair[1]
    for j, label in enumerate(labels):  # the best pair's box last, so it is on top
        if j != pair_region:
            draw.rectangle(label.box, outline=label.colour, width=width)
    draw.rectangle(labels[pair_region].box, outline=BEST_PAIR_COLOUR, width=3 * width)
    for label in labels:  # a tag moved away from its box: a thin leader to the box's nearest point
        if away(label):
            x0, y0, x1, y1 = label.rect
            bx0, by0, bx1, by1 = label.box
            cx, cy = (x0 + x1) / 2, (y0 + y1) / 2
            draw.line([(cx, cy), (min(max(cx, bx0), bx1), min(max(cy, by0), by1))], fill=label.colour, width=1)
    for label in labels:  # the tags last: nothing is drawn over them
        x0, y0, x1, y1 = label.rect
        draw.rectangle((x0, y0, x1 - 1, y1 - 1), fill=label.colour)
        text_left, text_top = font.getbbox(label.text)[:2]
        pad = max(1, round(font.size / 6))
        draw.text((x0 + pad - text_left, y0 + pad - text_top), label.text, fill="white", font=font,
                  stroke_width=1, stroke_fill="black")
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
        title = f"best pair: S{s + 1} <-> R{r + 1} ({result.best_score:.3f})"  # ASCII: every font has it
        rows.append([Panel(draw_regions(view.picture, result, side), title, view.sentences[s],
                           key=["Sentences by region:"] + region_key(result))])
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
        hover = [[f"{escape(matrix.sentences[i])}<br>{escape(matrix.regions[j])}<br>cosine {matrix.values[i, j]:.3f}"
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
