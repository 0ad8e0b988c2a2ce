"""The Swap panel in a real browser at 1400 x 900, under the maps board of the default example with four models.

Asserted from the panel's DOM contract (``#swap-panel``, "Swap in sentence", ``data-swap-word`` /
``data-swap-type``, "Swap every <type>", ``data-swap-row``, ``data-swap-cell``, ``data-swap-maps``): sentence
2's colour word is found and marked, "Swap every colour" fills a row per other colour with a signed margin
per model, a row click shows a map pair per model, a span of the sentence joins the board as a seventh row
scored against the sentence's truth, and a bad sentence number is one line next to the control.
Skipped only when no Chromium is installed.
"""

from __future__ import annotations

import re

import pytest

from page_fixtures import click_until, screenshot
from test_browser import app_url, home, zoo_root  # noqa: F401
from test_browser_maps_board import FOUR, draw_example, window

pytestmark = [pytest.mark.browser, pytest.mark.slow(reason="drives Chromium: four demo models drawn, then every colour swapped for each (ten map pairs a model)")]
SIGNED = re.compile(r"^[+-]\d+\.\d{3}$")


@pytest.fixture(scope="module")
def page(app_url):  # noqa: F811 - the fixture imported from test_browser
    with window(app_url) as page:
        yield page


def test_every_colour_swapped_for_four_models_and_a_row_shows_its_maps(page):
    from playwright.sync_api import expect

    draw_example(page)
    panel = page.locator("#swap-panel")
    # the Draw shows sentence 1's words first (its chained refresh): wait for it, so it cannot land after ours
    expect(panel.locator('[data-swap-word="three"]')).to_have_attribute("data-swap-type", "count", timeout=60_000)
    number = panel.get_by_label("Swap in sentence")
    number.fill("2")
    number.press("Enter")
    colour = panel.locator('[data-swap-type="colour"]')
    expect(colour).to_have_count(1, timeout=30_000)
    expect(colour).to_have_attribute("data-swap-word", "blue")
    every = panel.get_by_role("button", name="Swap every colour")
    # a click on the word can land as the panel is drawn again (CI, two loaded cores: the button never came)
    click_until(colour.click, lambda: expect(every).to_be_visible(timeout=30_000))
    every.click()
    rows = panel.locator("[data-swap-row]")
    expect(rows).to_have_count(10, timeout=60_000)  # the other ten basic colours
    for name in FOUR:
        cell = panel.locator(f'[data-swap-cell="{name}|purple"]')
        expect(cell).to_have_count(1)
        assert SIGNED.match(cell.inner_text().strip()), cell.inner_text()
    panel.locator('[data-swap-row="purple"]').click()
    pair = panel.locator("[data-swap-maps]")
    expect(pair).to_have_attribute("data-swap-maps", "purple", timeout=60_000)
    expect(pair.locator("img")).to_have_count(2 * len(FOUR))
    expect(pair).to_contain_text("mask IoU")
    page.locator("#swap-note").evaluate("e => e.scrollIntoView({block: 'start'})")
    screenshot(page, "swap-panel.png")
    # issue 66.4: every row and cell is a button (Tab reaches it, Enter opens its maps); a cell's tooltip names
    # both scores
    cell = panel.locator('[data-swap-cell="demo-caft|orange"] button')
    assert "original sentence" in cell.get_attribute("title") and "with “orange”" in cell.get_attribute("title")
    cell.focus()
    page.keyboard.press("Enter")
    expect(pair).to_have_attribute("data-swap-maps", "orange", timeout=60_000)
    panel.locator('[data-swap-row="red"] th button').focus()
    page.keyboard.press("Enter")
    expect(pair).to_have_attribute("data-swap-maps", "red", timeout=60_000)
    heads = page.locator("#maps-board [data-map-model]").all_inner_texts()
    status = page.locator("#grounding-status").inner_text()
    panel.locator("#swap-span textarea, #swap-span input").first.fill("medium dotted blue cross")
    panel.get_by_role("button", name="Add the span to the board").click()  # a span of sentence 2: a 7th row
    expect(page.locator('[data-sentence="7"]')).to_contain_text("medium dotted blue cross", timeout=60_000)
    expect(page.locator('[data-map-panel="demo-caft|7"] figcaption')).to_contain_text("IoU")  # its truth
    # issue 66.1: a span row of its own: the headers' figures and the status line's count do not move
    expect(page.locator('[data-sentence="7"]')).to_have_attribute("data-span", "2")
    assert page.locator("#maps-board [data-map-model]").all_inner_texts() == heads
    expect(page.locator("#grounding-status")).to_contain_text("6 sentence(s) · 1 span row(s)")
    assert page.locator("#grounding-status").inner_text().split("\n")[1:] == status.split("\n")[1:]
    replayed_rows(page)
    for bad in ("0", "-1", "99"):  # not a sentence: one line next to the control (never a toast), the table stays
        number.fill(bad)
        number.press("Enter")
        expect(panel.locator("#swap-note")).to_contain_text(f"sentence {bad}", timeout=30_000)
        expect(panel.locator("#swap-note")).to_contain_text("numbered from 1")
        expect(rows).to_have_count(10)
    per_page = page.locator("#maps-per-page input[type=number]")  # a slider's box: the same, under the controls
    for bad in ("0", "99"):
        per_page.fill(bad)
        per_page.press("Enter")
        expect(page.locator("#grounding-status")).to_contain_text(f"sentences per page is 1 to 12, not {bad}",
                                                                  timeout=30_000)
    assert page.locator(".toast-body").count() == 0


def replayed_rows(page) -> None:
    """The maps export's settings record the span; replayed, they draw the page's rows (one model is enough:
    the rows are the caption's sentences and the spans)."""
    import json
    from pathlib import Path
    from urllib.parse import unquote

    from playwright.sync_api import expect

    from explorer.views.maps_view import compute_maps
    from explorer.views.settings import ViewSettings
    from explorer.zoo import Zoo

    page.locator("#maps-export").click()
    expect(page.locator("#maps-export-note")).to_contain_text(".json", timeout=90_000)
    link = page.locator('#maps-export-files a[href$=".json"]').first.get_attribute("href")
    path = Path(unquote(link.split("file=", 1)[1]))  # the file the page wrote (this test shares its disk)
    assert json.loads(path.read_text())["spans"] == [{"sentence": 2, "words": "medium dotted blue cross"}]
    settings = ViewSettings.load(path)  # as `explorer figure replay` reads it: the inputs copied beside it
    settings.models = settings.models[:1]
    shown = [t.strip() for t in page.locator("#maps-board .mb-text").all_inner_texts()]
    assert compute_maps(Zoo().load, settings).sentences == shown
