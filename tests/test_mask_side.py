"""Maps that say which side is the mask (issue 58, part 2): where the Otsu mask is the background, the
board, the focus view and every figure hatch the masked side and say "mask: the region outside the outline (86 % of the picture)";
the decision is made once (``MaskSide``, asked through ``ModelMaps.mask_sides``)."""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image

from explorer.grounding.masks import mask_side
from explorer.grounding.sentence_maps import GroundingResult
from explorer.models.model import SentenceMaps
from explorer.views.maps_view import MapsView, ModelMaps, render_maps, render_maps_figure
from explorer.views.settings import ViewSettings

SIDE = 40


def two_maps() -> np.ndarray:
    """Sentence 1 heats the background around a dark square (mask 91 %), sentence 2 the square itself."""
    square = np.zeros((SIDE, SIDE), np.float32)
    square[14:26, 14:26] = 1.0
    return np.stack([1.0 - square, square])


@pytest.fixture()
def view() -> MapsView:
    picture = Image.fromarray(np.full((SIDE, SIDE, 3), 90, np.uint8))
    maps = SentenceMaps(maps=two_maps(), grid=two_maps(), kind="generic", sentences=["The background.", "A square."],
                        n_cut=[0, 0])
    result = GroundingResult(image=picture, analysis=None, maps=maps, model_name="m")
    return MapsView(picture=picture, sentences=list(maps.sentences), models=[ModelMaps(name="m", result=result)])


def test_the_side_is_decided_by_the_share_and_the_edge():
    maps = two_maps() > 0.5
    background, square = mask_side(maps[0]), mask_side(maps[1])
    assert background.outside and background.label == "mask: the region outside the outline (91 % of the picture)"
    assert not square.outside and square.label == "mask 9 %"
    frame = np.zeros((SIDE, SIDE), bool)
    frame[:3], frame[-3:], frame[:, :3], frame[:, -3:] = True, True, True, True  # a border: 28 %, all the edge
    assert mask_side(frame).outside and mask_side(frame).share < 0.5
    assert not mask_side(np.zeros((4, 4), bool)).outside
    # Issue 66: one property with a margin. A large object in the middle is inside its outline whatever its area;
    # look-alike grid masks (a third of the picture, a third of the border) all read inside.
    big = np.zeros((SIDE, SIDE), bool)
    big[4:36, 4:36] = True  # 64 % of the picture, none of the border
    assert not mask_side(big).outside
    for step in (3, 4, 5):
        grid = np.zeros((SIDE, SIDE), bool)
        grid[::step] = True
        assert not mask_side(grid).outside, step
    background = np.ones((SIDE, SIDE), bool)
    background[14:26, 14:26] = background[:10, :10] = False  # a corner shape too: 87 % of the border, outside
    half = np.ones((SIDE, SIDE), bool)
    half[:, :20] = False  # the right half: half of the border, inside its outline
    assert mask_side(background).outside and not mask_side(half).outside


def test_figures_and_the_page_hatch_and_label_the_background_mask(view):
    settings = ViewSettings(models=["m"], mask="contour", threshold=None)
    grid = render_maps(view, settings)
    background, square = grid.rows[0][1], grid.rows[0][2]
    label, key = "mask: the region outside the outline (91 % of the picture)", "mask outside the outline (91 %)"
    assert label in background.title and background.key == [key]  # a figure's narrow column: the short form
    assert label not in square.title and square.key == []
    # The hatch: light stripes inside the masked (outer) side only, none inside the square or on the other map.
    plain = render_maps(view, ViewSettings(models=["m"], mask="none", threshold=None)).rows[0][1].pixels
    changed = np.any(background.pixels != plain, axis=2)
    assert changed[2:10, 2:10].any() and not changed[17:23, 17:23].any()
    for layout in ("sentences-as-rows", "models-as-rows"):
        figure = render_maps_figure(view, ViewSettings(models=["m"], layout=layout, threshold=None))
        keys = [panel.key for row in figure.rows for panel in row]
        assert [key] in keys and keys.count([key]) == 1


def test_the_board_and_the_focus_view_say_it(view):
    from explorer.ui.maps_board import board_html
    from explorer.views.focus_view import focus_figure

    settings = ViewSettings(models=["m"], mask="contour", threshold=None)
    board = board_html(view, settings)
    assert board.count('data-mask-side="outside"') == 1 and "mask: the region outside the outline (91 % of the picture)" in board
    assert "mask 9%" in board  # the square's mask, on the inside as usual
    titles = [a.text for a in focus_figure(view, settings, 0).layout.annotations]
    assert any("mask: the region outside the outline (91 % of the picture)" in t for t in titles), titles
    assert not any("outside" in a.text for a in focus_figure(view, settings, 1).layout.annotations)
