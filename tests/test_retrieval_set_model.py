"""The retrieval data model: images, a flat caption list and each caption's image."""

from __future__ import annotations

import pytest
from PIL import Image

from explorer.data.retrieval_sets.base import RetrievalSet, Skipped, build_set
from explorer.core.errors import ExplorerError


def test_build_set_keeps_order_skips_missing_images_and_empty_captions(tmp_path):
    paths = []
    for name in ("a", "b", "c"):
        path = tmp_path / f"{name}.png"
        Image.new("RGB", (8, 8)).save(path)
        paths.append(path)
    pairs = [(paths[0], ["A red cube.", "  A  cube\nin red. "], "a"), (tmp_path / "gone.png", ["lost"], "gone"),
             (paths[1], ["", "A blue ball."], "b"), (paths[2], ["   "], "c")]
    found = build_set("test-layout", tmp_path, "test", pairs, notes=["a note"])
    assert found.images == (paths[0], paths[1]) and found.image_ids == ("a", "b")
    assert found.captions == ("A red cube.", "A cube in red.", "A blue ball.")
    assert found.caption_image == (0, 0, 1) and found.captions_of(0) == [0, 1]
    assert [s.reason for s in found.skipped] == ["image missing", "caption empty", "caption empty"]
    assert "2 images, 3 captions; 3 left out (2 caption empty, 1 image missing)" in found.summary()


def test_a_caption_cannot_point_outside_the_images(tmp_path):
    with pytest.raises(ExplorerError, match="not in the set"):
        RetrievalSet("x", tmp_path, "test", images=(tmp_path / "a.png",), captions=("a",), caption_image=(1,))
    with pytest.raises(ExplorerError, match="image index"):
        RetrievalSet("x", tmp_path, "test", images=(), captions=("a",), caption_image=())
    assert Skipped("x", "why").reason == "why"
