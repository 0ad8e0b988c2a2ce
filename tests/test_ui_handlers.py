"""The Grounding tab's handlers on bad input: a clear message, and the app keeps working."""

from __future__ import annotations

import numpy as np
import pytest
from PIL import Image

from explorer.grounding import MapCache
from explorer.models.zoo import Zoo
from explorer.ui import grounding_tab, models_tab


@pytest.fixture(scope="module")
def zoo():
    return Zoo()  # the repository's checkpoints/: the built-in tiny model


@pytest.fixture()
def photo(tmp_path):
    path = tmp_path / "photo.png"
    Image.fromarray((np.random.default_rng(0).random((60, 90, 3)) * 255).astype(np.uint8)).save(path)
    return path


def draw(zoo, cache, image, caption):
    return grounding_tab.draw_maps(zoo, cache, str(image) if image else None, caption, "tiny-untrained",
                                   "generic", "turbo", 0.5)


def test_three_sentences_give_three_overlays(zoo, photo):
    result, gallery, status, rows = draw(zoo, MapCache(), photo, "A cat. A dog. A tree.")
    assert len(gallery) == 3 and len(rows) == 3
    assert gallery[0][0].size == (90, 60)  # drawn at the picture's own size
    assert "UNTRAINED" in status


@pytest.mark.parametrize("caption, message", [("", "caption is empty"), ("   \n ", "caption is empty")])
def test_empty_caption(zoo, photo, caption, message):
    result, gallery, status, _ = draw(zoo, MapCache(), photo, caption)
    assert result is None and gallery == [] and message in status


def test_one_word_caption_draws_one_map_and_says_so(zoo, photo):
    result, gallery, status, _ = draw(zoo, MapCache(), photo, "cat")
    assert len(gallery) == 1 and "one sentence" in status


def test_no_image(zoo):
    _, gallery, status, _ = draw(zoo, MapCache(), None, "A cat.")
    assert gallery == [] and "image" in status


@pytest.mark.parametrize("payload", [b"not an image at all", b"\x89PNG\r\n\x1a\n" + b"\x00" * 100])
def test_corrupt_or_non_image_file(zoo, tmp_path, payload, photo):
    bad = tmp_path / "upload.png"
    bad.write_bytes(payload)
    cache = MapCache()
    _, gallery, status, _ = draw(zoo, cache, bad, "A cat.")
    assert gallery == [] and "Cannot do that" in status
    # and the next good request still works, with the cache intact
    _, gallery, _, _ = draw(zoo, cache, photo, "A cat.")
    assert len(gallery) == 1


def test_re_rendering_uses_the_cache(zoo, photo):
    cache = MapCache()
    result, *_ = draw(zoo, cache, photo, "A cat. A dog.")
    draw(zoo, cache, photo, "A cat. A dog.")
    assert (cache.misses, cache.hits) == (1, 1)
    jet = grounding_tab.render_gallery(result, "jet", 0.8)
    assert len(jet) == 2 and cache.misses == 1  # colour change: no model run


def test_token_budget_marks_where_77_cuts():
    caption = " ".join(f"Sentence {i} says the red cube is on the left." for i in range(10))
    spans, summary, rows = grounding_tab.update_budget(caption)
    labels = [label for _, label in spans]
    assert labels[0] is None and grounding_tab.PAST[77] in labels
    assert "77 cuts" in summary and "Fits 248" in summary
    assert rows[0][3] == "yes" and rows[-1][3] == "CUT" and rows[-1][4] == "yes"
    assert "".join(piece for piece, _ in spans) == caption


def test_models_table_lists_the_builtin(zoo):
    rows = models_tab.zoo_table(zoo)
    assert any(row[0] == "tiny-untrained" and "UNTRAINED" in row[-1] for row in rows)


def test_models_check_reports_a_bad_path():
    assert "No weights file" in models_tab.check_file("/nonexistent/model.pt", False)


def test_seps_says_when_the_long_caption_stands_in_for_the_dense_one():
    from explorer.grounding import ground
    from explorer.models.methods.seps import SepsMethod
    from explorer.models.model import Model

    model = Model(SepsMethod.example("tiny"), name="seps-tiny", device="cpu")
    picture = Image.new("RGB", (50, 40), (20, 20, 200))
    caption = "A red cube sits on the left. A blue ball sits at the top."
    cache = MapCache()
    without = ground(model, picture, caption, kind="kept-dense", cache=cache)
    assert any("stands in" in note for note in without.notes)
    given = ground(model, picture, caption, kind="kept-dense", cache=cache, dense_caption="A red cube. A blue ball.")
    assert not any("stands in" in note for note in given.notes)
    assert cache.misses == 2  # the dense caption is part of what the maps depend on
    assert given.maps.maps.shape == (2, 40, 50)
