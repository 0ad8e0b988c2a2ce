"""The documentation's gallery (docs/figures/, shown in docs/figures.md): each figure replays from its settings
JSON to the same pixels.

``explorer figure gallery`` wrote them from the demo zoo; their settings name their inputs relative to
the folder, so they replay from any clone. A figure that no longer matches its file means a change
altered what the figures look like: write the gallery again and look at it.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from explorer.cli import main
from explorer.views.gallery import KINDS
from explorer.views.settings import ViewSettings

pytestmark = pytest.mark.slow
GALLERY = Path(__file__).resolve().parents[1] / "docs" / "figures"


def pixels(path: Path) -> np.ndarray:
    with Image.open(path) as image:
        return np.asarray(image.convert("RGB"))


def test_the_gallery_holds_one_figure_of_each_kind():
    for kind in KINDS:
        assert (GALLERY / f"{kind}.png").is_file() and ViewSettings.load(GALLERY / f"{kind}.png.json").view == kind
    page = (GALLERY.parent / "figures.md").read_text()  # the docs site's Figures page shows each of them
    assert all(f"](figures/{kind}.png)" in page for kind in KINDS)


@pytest.mark.parametrize("kind", KINDS)
def test_each_gallery_figure_replays_to_the_same_pixels(kind, tmp_path, monkeypatch):
    monkeypatch.setenv("EXPLORER_HOME", str(tmp_path / "home"))  # embeddings made afresh, not read from a cache
    again = tmp_path / f"{kind}.png"
    assert main(["figure", "replay", str(GALLERY / f"{kind}.png.json"), "--out", str(again), "--device", "cpu"]) == 0
    expected, found = pixels(GALLERY / f"{kind}.png"), pixels(again)
    assert found.shape == expected.shape
    differ = np.abs(found.astype(int) - expected.astype(int)).max(axis=2)
    # Float rounding that differs between numpy / BLAS releases moves a handful of pixels by a level or two
    # (seen after a fresh install: 4 of 780,390 pixels, by 1-3 of 255); anything a change draws differently
    # moves more pixels, or further.
    assert (differ > 4).mean() == 0.0, f"{kind}: {100 * (differ > 4).mean():.3f}% of the pixels differ by more than 4"
    assert (differ > 0).mean() <= 1e-4, f"{kind}: {100 * (differ > 0).mean():.3f}% of the pixels differ"
