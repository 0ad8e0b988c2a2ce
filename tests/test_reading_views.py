"""Reading the regions and PCA views (issue 10): box ids that never overlap with the sentences listed
beside the picture, only glyphs the fonts have, and a PCA view that shows the models it can when one
model cannot give what was asked.

Models are the methods' tiny random examples, as in test_views.py; no zoo, no ~/.cache.
"""

from __future__ import annotations

import itertools
import re

import numpy as np
import pytest
import torch
from matplotlib.backends.backend_agg import FigureCanvasAgg
from PIL import Image, ImageDraw

import explorer
from explorer.core.regions import Region
from explorer.grounding.flism import FlismResult
from explorer.models.methods import get_method
from explorer.ui import pca_tab, regions_tab
from explorer.views.figures import build_figure, save_figure
from explorer.views.panels import compose, ui_font
from explorer.views.pca_view import compute_pca, render_pca
from explorer.views.regions_view import (RegionsView, away, compute_regions, draw_regions, region_key,
                                         region_labels, render_regions)
from explorer.views.settings import ViewSettings
from explorer.core.errors import ExplorerError

TWELVE = " ".join(f"Sentence {i + 1} says where thing number {i + 1} is in the picture." for i in range(12))
MISSING = "\ue000"  # a private-use code point: no font here has it, so it draws the font's "missing" box


def tiny(name: str) -> explorer.Model:
    return explorer.Model(get_method(name).example("tiny"), name=name, device="cpu")


@pytest.fixture(scope="module")
def zoo() -> dict[str, explorer.Model]:
    return {name: tiny(name) for name in ("clip", "seps")}


@pytest.fixture()
def shapes(tmp_path):
    """A 640 x 480 picture of ten coloured rectangles: the classical detector finds boxes in it."""
    rng = np.random.default_rng(0)
    picture = Image.new("RGB", (640, 480), (200, 200, 200))
    draw = ImageDraw.Draw(picture)
    for _ in range(10):
        x, y = int(rng.integers(0, 560)), int(rng.integers(0, 400))
        draw.rectangle((x, y, x + int(rng.integers(30, 200)), y + int(rng.integers(30, 200))),
                       fill=tuple(int(v) for v in rng.integers(0, 255, 3)))
    path = tmp_path / "shapes.png"
    picture.save(path)
    return path


def crowded_result(sentences: int = 12) -> FlismResult:
    """Eight detector boxes that all start near the same corner, the four quadrants and the centre box:
    the worst case for tags written at each box's top-left corner."""
    width, height = 640, 480
    regions = [Region((100 + 3 * k, 80 + 2 * k, 180 + 40 * k, 140 + 30 * k), "detector", f"thing {k}")
               for k in range(8)]
    regions += [Region(box, "quadrant", name) for box, name in (
        ((0, 0, 320, 240), "top-left"), ((320, 0, 640, 240), "top-right"),
        ((0, 240, 320, 480), "bottom-left"), ((320, 240, 640, 480), "bottom-right"))]
    regions.append(Region((160, 120, 480, 360), "centre"))
    similarity = torch.tensor(np.random.default_rng(1).uniform(-1, 1, (sentences, len(regions))), dtype=torch.float32)
    best_region = similarity.argmax(dim=1)
    flat = int(similarity.argmax())
    result = FlismResult(similarity=similarity, best_region=best_region,
                         best_pair=(flat // len(regions), flat % len(regions)), regions=regions,
                         sentences=[f"sentence {i + 1}" for i in range(sentences)])
    assert result.similarity.shape == (sentences, 13)
    return result, (width, height)


def disjoint(rects) -> bool:
    return not any(a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]
                   for a, b in itertools.combinations(rects, 2))


def has_glyph(font, character: str) -> bool:
    """Whether ``font`` draws ``character`` with a glyph of its own (not the missing-glyph box)."""
    if character == " ":
        return True
    missing = font.getmask(MISSING)
    mask = font.getmask(character)
    return mask.size != missing.size or bytes(mask) != bytes(missing)


# ---- FLISM regions --------------------------------------------------------------------------------


@pytest.mark.parametrize("side", [None, 256, 512, 922])
def test_box_ids_of_a_crowded_picture_never_overlap_and_stay_on_it(side):
    result, size = crowded_result()
    scale = 1.0 if side is None else side / max(size)
    labels = region_labels(size, result, scale)
    canvas = (round(size[0] * scale), round(size[1] * scale))
    assert [label.text for label in labels] == [f"R{j + 1}" for j in range(13)]  # short ids, no sentences
    assert disjoint([label.rect for label in labels])
    for label in labels:
        x0, y0, x1, y1 = label.rect
        assert 0 <= x0 < x1 <= canvas[0] and 0 <= y0 < y1 <= canvas[1]
    # the ids are drawn where they were placed: each tag is filled with its box's colour, and nothing
    # (another tag, a box, a leader) is drawn over its edge
    pixels = draw_regions(Image.new("RGB", size, (128, 128, 128)), result, side)
    assert pixels.shape[:2] == (canvas[1], canvas[0])
    for label in labels:
        x0, y0, x1, y1 = label.rect
        edge = np.concatenate([pixels[y0, x0:x1], pixels[y1 - 1, x0:x1], pixels[y0:y1, x0], pixels[y0:y1, x1 - 1]])
        assert (edge == label.colour).all(), label.text


def test_twelve_sentences_list_beside_the_picture_not_on_it(shapes, zoo, monkeypatch):
    monkeypatch.delenv("EXPLORER_DETECTOR", raising=False)
    chosen = ViewSettings(view="regions", image=str(shapes), caption=TWELVE, models=["clip"])
    view = compute_regions(zoo.__getitem__, chosen)
    assert len(view.sentences) == 12
    result = view.results[0]
    assert len(result.regions) > 5  # detector boxes as well as the quadrants and the centre
    for side in (None, regions_tab.REGIONS_PREVIEW_SIDE):
        scale = 1.0 if side is None else side / max(view.picture.size)
        labels = region_labels(view.picture.size, result, scale)
        assert disjoint([label.rect for label in labels])
        assert all(re.fullmatch(r"R\d+", label.text) for label in labels)

    grid = render_regions(view, chosen)
    panel = grid.rows[0][0]
    # every sentence is in the key under its region, once
    key = region_key(result)
    assert panel.key[1:] == key
    listed = [s for line in key for s in line.split(": ")[-1].split(", ")]
    assert sorted(listed, key=lambda s: int(s[1:])) == [f"S{i + 1}" for i in range(12)]
    # ... and the page shows the same as a table
    rows = regions_tab.key_rows(view)
    assert [f"{row[1]} ({row[2]}): {row[3]}" for row in rows] == key

    # in the figure the key is text under the picture, outside its axes
    figure = build_figure(grid, 7.0)
    texts = [t for t in figure.texts if t.get_text().startswith("Sentences by region")]
    assert len(texts) == 1
    picture_axes = figure.axes[0]
    assert texts[0].get_position()[1] <= picture_axes.get_position().y0
    renderer = FigureCanvasAgg(figure).get_renderer()
    key_box = texts[0].get_window_extent(renderer)
    assert key_box.y1 <= picture_axes.get_window_extent(renderer).y0 + 1e-6
    assert key_box.y0 >= 0  # inside the figure


def test_no_glyph_the_fonts_lack_in_the_regions_page_and_figure(shapes, zoo, monkeypatch, tmp_path):
    monkeypatch.delenv("EXPLORER_DETECTOR", raising=False)
    chosen = ViewSettings(view="regions", image=str(shapes), caption=TWELVE, models=["clip"])
    view = compute_regions(zoo.__getitem__, chosen)
    grid = render_regions(view, chosen, regions_tab.REGIONS_PREVIEW_SIDE)
    title = grid.rows[0][0].title
    s, r = view.results[0].best_pair
    assert title.startswith(f"best pair: S{s + 1} <-> R{r + 1}")
    # the page preview writes titles with PIL's default font: every character has its own glyph
    font = ui_font(12)
    assert all(has_glyph(font, character) for character in title), title
    assert has_glyph(font, "a") and not has_glyph(font, "↔")  # the check itself tells the two apart
    compose(grid)
    status = regions_tab.status_text(view)
    assert "↔" not in status and f"S{s + 1} <-> R{r + 1}" in status

    figure = build_figure(grid, 7.0)
    assert not any("↔" in text.get_text() for text in figure.findobj(lambda a: hasattr(a, "get_text")))
    svg = save_figure(grid, tmp_path / "regions.svg", dpi=100).read_text(encoding="utf-8")
    assert "<->" in svg or "&lt;-&gt;" in svg  # matplotlib keeps each text as a comment beside its glyphs
    assert "↔" not in svg and "&#8596;" not in svg and "&#x2194;" not in svg.lower()


def test_regions_figure_is_byte_reproducible_with_the_key(shapes, zoo, monkeypatch, tmp_path):
    monkeypatch.delenv("EXPLORER_DETECTOR", raising=False)
    chosen = ViewSettings(view="regions", image=str(shapes), caption=TWELVE, models=["clip"])
    view = compute_regions(zoo.__getitem__, chosen)
    for suffix in (".png", ".pdf", ".svg"):
        first = save_figure(render_regions(view, chosen, 300), tmp_path / f"a{suffix}", dpi=100).read_bytes()
        second = save_figure(render_regions(view, chosen, 300), tmp_path / f"b{suffix}", dpi=100).read_bytes()
        assert first == second, suffix


def test_a_tag_with_no_room_at_its_box_moves_off_it_with_a_leader():
    """Many small boxes packed in one corner: tags that cannot sit at their box go to the nearest free
    spot, still disjoint, and a line in the box's colour joins each to its box."""
    regions = [Region((4 * k, 4 * k, 4 * k + 12, 4 * k + 12), "detector", "") for k in range(8)]
    regions.append(Region((0, 0, 200, 150), "centre"))
    similarity = torch.zeros(2, len(regions))
    similarity[0, 8] = 1.0
    result = FlismResult(similarity=similarity, best_region=similarity.argmax(dim=1), best_pair=(0, 8),
                         regions=regions, sentences=["a", "b"])
    labels = region_labels((200, 150), result, 2.0)
    assert disjoint([label.rect for label in labels])
    moved = [label for label in labels if away(label)]
    assert moved
    pixels = draw_regions(Image.new("RGB", (200, 150), (128, 128, 128)), result, 400)
    for label in moved:
        x0, y0, x1, y1 = label.rect
        ring = np.concatenate([pixels[max(0, y0 - 2):y1 + 2, max(0, x0 - 2):x0].reshape(-1, 3),
                               pixels[max(0, y0 - 2):y1 + 2, x1:x1 + 2].reshape(-1, 3),
                               pixels[max(0, y0 - 2):y0, x0:x1].reshape(-1, 3),
                               pixels[y1:y1 + 2, x0:x1].reshape(-1, 3)])
        assert (ring == label.colour).all(axis=1).any()  # the leader leaves the tag


# ---- PCA: a model that cannot give attention rows is skipped, not fatal -----------------------------


def write_picture(path, seed: int = 0):
    Image.fromarray((np.random.default_rng(seed).random((48, 64, 3)) * 255).astype(np.uint8)).save(path)
    return path


def test_pca_attention_with_seps_and_clip_shows_clip_and_names_seps(tmp_path, zoo):
    picture = write_picture(tmp_path / "p.png")
    chosen = ViewSettings(view="pca", image=str(picture), models=["seps", "clip"], pca_source="attention")
    view = compute_pca(zoo.__getitem__, chosen)
    assert view.names == ["clip"]
    assert len(view.skipped) == 1 and view.skipped[0].startswith("seps: skipped")
    assert "attention" in view.skipped[0] and view.skipped[0] in view.notes
    vectors, grid = view.features[0][0], view.grids[0][0]
    assert vectors.shape == (grid[0] * grid[1],) * 2  # CLIP's attention rows

    panels = render_pca(view, chosen)
    assert [label.split("\n")[0] for label in panels.row_labels] == ["picture", "clip"]
    assert panels.rows[1][0].pixels.shape == (48, 64, 3)
    assert "seps: skipped" in panels.caption  # the exported figure says it too

    status = pca_tab.status_text(view, chosen)
    assert "1 model(s)" in status and "**seps: skipped" in status
    refit = pca_tab.refit(view, chosen, "per-image")
    assert refit[0].pca_fit == "per-image" and "seps: skipped" in refit[2]


def test_pca_when_no_model_can_give_attention_rows_is_one_clear_error(tmp_path, zoo):
    picture = write_picture(tmp_path / "p.png")
    alone = ViewSettings(view="pca", image=str(picture), models=["seps"], pca_source="attention")
    with pytest.raises(ExplorerError, match="does not expose its image encoder's attention"):
        compute_pca(zoo.__getitem__, alone)
    twice = ViewSettings(view="pca", image=str(picture), models=["seps", "seps"], pca_source="attention")
    with pytest.raises(ExplorerError, match="none of the models can give PCA maps of attention: seps: "):
        compute_pca(zoo.__getitem__, twice)
    # the features of the same model are fine
    features = ViewSettings(view="pca", image=str(picture), models=["seps", "clip"], pca_source="features")
    view = compute_pca(zoo.__getitem__, features)
    assert view.names == ["seps", "clip"] and not view.skipped


def test_regions_view_object_is_what_the_tab_expects(shapes, zoo, monkeypatch):
    monkeypatch.delenv("EXPLORER_DETECTOR", raising=False)
    chosen = ViewSettings(view="regions", image=str(shapes), caption=TWELVE, models=["clip"])
    view = compute_regions(zoo.__getitem__, chosen)
    assert isinstance(view, RegionsView)
    assert regions_tab.key_rows(None) == []
    preview = render_regions(view, chosen, regions_tab.REGIONS_PREVIEW_SIDE).rows[0][0].pixels
    assert max(preview.shape[:2]) == regions_tab.REGIONS_PREVIEW_SIDE
