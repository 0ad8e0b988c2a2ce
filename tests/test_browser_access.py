"""A page everyone can read (issue 58, part 4), in a real browser: axe-core (axe-playwright-python) on every
tab, the drawn maps board included, finds no contrast, label, name or alt violation; every picture on the
page has alt text; at a 390-px viewport each sentence sits above its row of maps and the maps fill the
board's width without a scroll bar. Skipped only when no Chromium is installed."""

from __future__ import annotations

import pytest

from test_browser import ARTIFACTS, app_url, home, zoo_root  # noqa: F401  (fixtures)
from test_browser_maps_board import window

pytestmark = [pytest.mark.browser, pytest.mark.slow]

TABS = ["Grounding", "Retrieval", "Generation", "Jobs", "Models"]
INNER = ["Sentence maps", "FLISM regions", "PCA maps"]  # the Grounding tab's views
# What "everyone can read" asks of the page: text contrast (WCAG AA, 4.5:1), a name for every form field and
# button, a text alternative for every picture.
RULES = ["color-contrast", "image-alt", "input-image-alt", "role-img-alt", "svg-img-alt", "object-alt", "label",
         "select-name", "aria-input-field-name", "aria-toggle-field-name", "button-name", "input-button-name",
         "link-name", "label-title-only"]
PHONE = {"width": 390, "height": 844}

# Pictures with no words: an <img> with an empty or missing alt (axe lets alt="" pass as decorative; none of
# this page's pictures is decoration).
WORDLESS = """() => [...document.querySelectorAll('img')].filter(i => i.offsetParent !== null
  && !(i.getAttribute('alt') || '').trim()).map(i => i.outerHTML.slice(0, 160))"""


def violations(page) -> list[str]:
    from axe_playwright_python.sync_playwright import Axe

    found = Axe().run(page, options={"runOnly": {"type": "rule", "values": RULES}}).response["violations"]
    return [f"{v['id']}: {node['target']} {(node.get('any') or [{}])[0].get('message', '')}"
            for v in found for node in v["nodes"]]


def open_tab(page, name: str) -> None:
    if name in INNER:
        page.get_by_role("tab", name="Grounding", exact=True).first.click()
    page.get_by_role("tab", name=name, exact=True).first.click()
    page.wait_for_timeout(800)  # the tab's contents render


def draw_default_example(page) -> None:
    """Draw maps as the page opens: its first example and two demo models."""
    from playwright.sync_api import expect

    open_tab(page, "Sentence maps")
    page.locator("#grounding-run").click()
    expect(page.locator("#maps-board-view")).to_have_attribute("data-stale", "false", timeout=120_000)
    page.locator("[data-map-panel] img").first.wait_for(timeout=120_000)


def test_every_tab_passes_axe_and_every_picture_has_words(app_url):
    with window(app_url) as page:
        page.wait_for_timeout(2000)  # the page-load handlers fill the model labels and map kinds
        found = {}
        for name in TABS + INNER:
            open_tab(page, name)
            found[name] = violations(page) + [f"no alt: {html}" for html in page.evaluate(WORDLESS)]
        draw_default_example(page)
        found["Sentence maps, drawn"] = violations(page) + [f"no alt: {h}" for h in page.evaluate(WORDLESS)]
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "access-drawn.png"))
    assert not any(found.values()), {tab: problems for tab, problems in found.items() if problems}


# Per sentence row: the sentence's box, its panels' boxes, and the board's own width and scroll width.
ROWS = """() => { const board = document.querySelector('#maps-board-view .mb-grid');
  const box = e => e.getBoundingClientRect();
  const rows = [...board.querySelectorAll('[data-sentence]')].map(s => ({
    sentence: box(s).toJSON(),
    panels: [...board.querySelectorAll(`[data-map-panel$="|${s.dataset.sentence}"]`)].map(p => box(p).toJSON())}));
  return {rows, board: box(board).toJSON(), scroll: board.parentElement.scrollWidth,
          client: board.parentElement.clientWidth}; }"""


def test_at_390_px_the_sentence_sits_above_its_maps_and_the_maps_fill_the_width(app_url):
    with window(app_url, **PHONE) as page:
        page.wait_for_timeout(2000)
        draw_default_example(page)
        page.locator("#maps-board-view").scroll_into_view_if_needed()
        layout = page.evaluate(ROWS)
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "maps-board-390.png"))
    board, rows = layout["board"], layout["rows"]
    assert rows and layout["scroll"] <= layout["client"] + 1, layout  # no sideways scroll inside the board
    assert board["right"] <= PHONE["width"], board
    for row in rows:
        sentence, panels = row["sentence"], row["panels"]
        assert panels, row
        assert sentence["bottom"] <= min(p["top"] for p in panels) + 0.5, row  # the text above its maps
        assert sentence["width"] >= 0.95 * board["width"], row  # across the board, not a 180-px column
        covered = sum(p["width"] for p in panels)
        assert covered >= 0.9 * board["width"], (covered, board["width"])  # the maps share the whole width


def test_the_token_summary_is_marked_while_it_recounts(app_url):
    """Typing replaces the summary at once (in the browser), so it never shows the previous caption's count."""
    from playwright.sync_api import expect

    summary = "#token-summary [data-testid=markdown], #token-summary .prose"
    with window(app_url) as page:
        expect(page.locator("#token-summary")).to_contain_text("sentence(s)", timeout=120_000)
        before = page.locator(summary).first.inner_text()
        page.locator("#grounding-caption textarea").press_sequentially(" One more sentence.", delay=5)
        marked = page.locator(summary).first.inner_text()
        expect(page.locator("#token-summary")).to_contain_text("sentence(s)", timeout=60_000)
        after = page.locator(summary).first.inner_text()
    assert marked.startswith("Counting the tokens of the caption as typed"), marked
    assert after != before and "sentence(s)" in after, (before, after)
