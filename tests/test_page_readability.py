"""The page's small words and colours without a browser (issue 58, parts 3-5): every text colour of the theme
and the maps board at least 4.5:1 against its background, PCA fitted per model unless asked, the retrieval
line's grammar. The browser's own check is tests/test_browser_access.py (axe-core)."""

from __future__ import annotations

import re

import pytest

from explorer.ui import maps_board
from explorer.ui.theme import contrast_ratio, page_theme

AA = 4.5
WHITE = "#ffffff"


def resolved(theme, name: str) -> str:
    """A theme variable's colour, following "*other_variable" references."""
    value = getattr(theme, name)
    while isinstance(value, str) and value.startswith("*"):
        value = getattr(theme, value[1:])
    return value


def test_the_ratio_is_wcags():
    assert contrast_ratio("#000000", WHITE) == pytest.approx(21.0)
    assert contrast_ratio("#bbbbc2", WHITE) == pytest.approx(1.91, abs=0.01)  # Gradio's subdued grey
    assert contrast_ratio(WHITE, "#f97316") == pytest.approx(2.80, abs=0.01)  # white on its orange


@pytest.mark.parametrize("text, background", [
    ("body_text_color_subdued", "background_fill_primary"), ("body_text_color_subdued", "block_background_fill"),
    ("block_label_text_color", "block_background_fill"), ("block_title_text_color", "block_background_fill"),
    ("block_info_text_color", "block_background_fill"), ("color_accent", "background_fill_primary"),
    ("button_primary_text_color", "button_primary_background_fill"),
    ("button_primary_text_color", "button_primary_background_fill_hover"),
    ("button_cancel_text_color", "button_cancel_background_fill"),
    ("button_cancel_text_color", "button_cancel_background_fill_hover"),
    ("body_text_color", "background_fill_primary")])
def test_every_theme_text_reads_at_aa(text, background):
    theme = page_theme()
    fg, bg = resolved(theme, text), resolved(theme, background)
    assert contrast_ratio(fg, bg) >= AA, (text, fg, background, bg, contrast_ratio(fg, bg))


def test_the_boards_own_colours_read_at_aa():
    rules = re.findall(r"(\.[\w-]+[^{]*)\{([^}]*)\}", maps_board.CSS)
    pairs = []
    for selector, body in rules:
        colour = re.search(r"(?<!-)color:\s*(#[0-9a-fA-F]{6})", body)
        if colour:
            background = re.search(r"background:\s*(#[0-9a-fA-F]{6})", body)
            pairs.append((selector.strip(), colour.group(1), background.group(1) if background else WHITE))
    assert len(pairs) >= 6, pairs  # the stale line, warning, cut, hit, miss, flat, outside...
    for selector, fg, bg in pairs:
        assert contrast_ratio(fg, bg) >= AA, (selector, fg, bg, contrast_ratio(fg, bg))


def test_pca_is_fitted_per_model_unless_joint_is_asked():
    from explorer.ui.pca_tab import FIT_LABELS
    from explorer.views.settings import PCA_FITS, ViewSettings

    assert ViewSettings().pca_fit == "per-model" == PCA_FITS[0]
    assert "joint" in PCA_FITS and FIT_LABELS["joint"].startswith("joint")


def test_the_retrieval_line_names_the_query_once():
    from PIL import Image

    from explorer.ui.retrieval_tab import query_words

    assert query_words("a red cube") == "the text" and query_words(3) == "picture #3"
    assert query_words(Image.new("RGB", (4, 4))) == "your picture"  # not "the your picture"


def test_a_refresh_queued_behind_others_keeps_the_visitors_picks(tmp_path):
    """A zoo refresh (page load, a timer) carries the choice as it was sent: it must not set it back after the
    visitor picked other models; it sets a value only where a chosen model left the zoo."""
    from explorer.ui import generation_tab, grounding_tab, retrieval_tab
    from explorer.zoo import Manifest, Zoo

    zoo = Zoo(tmp_path)
    for name in ("a", "b"):
        Manifest(name=name, method="clip", weights="builtin:tiny-clip").write(tmp_path / f"{name}.json")
    for tab in (grounding_tab, retrieval_tab):
        assert "value" not in tab.refresh_models(zoo, ["a"])  # the page keeps whatever it holds now
        assert tab.refresh_models(zoo, ["a", "gone"])["value"] == ["a"]
    assert "value" not in generation_tab.refresh_models(Zoo("checkpoints"), ["demo-longclip"])
