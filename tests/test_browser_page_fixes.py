"""The rest of the page at 1400 x 900 in a real browser (issue 48, part 4): Retrieval's message in view above
its pictures and its upload box whole, the FLISM heat map's label apart from its titles, the Jobs table's
words kept whole, and Generate off with its reason while no SDXL is set. Skipped only without Chromium."""

from __future__ import annotations

import pytest

from page_fixtures import screenshot
from test_browser import app_url, browser_page, home, photo, upload, zoo_root  # noqa: F401

pytestmark = [pytest.mark.browser, pytest.mark.slow(reason="drives Chromium against a served page")]

WINDOW = {"width": 1400, "height": 900}


@pytest.fixture(scope="module")
def page(app_url):
    with browser_page(app_url) as page:
        page.set_viewport_size(WINDOW)
        yield page


def box(locator) -> dict:
    return locator.bounding_box()


def apart(a: dict, b: dict) -> bool:
    return (a["x"] + a["width"] <= b["x"] or b["x"] + b["width"] <= a["x"]
            or a["y"] + a["height"] <= b["y"] or b["y"] + b["height"] <= a["y"])


# The texts of an element that reach past its box (Gradio centres the drop box's words in a 240 px area:
# a shorter box cuts them off, "Click to Upload" first).
CUT_TEXT = """e => { const b = e.getBoundingClientRect();
  const walk = document.createTreeWalker(e, NodeFilter.SHOW_TEXT); const cut = []; let node; while ((node = walk.nextNode())) { if (!node.textContent.trim()) continue;
    const range = document.createRange(); range.selectNodeContents(node); const r = range.getBoundingClientRect();
    if (r.height && (r.top < b.top - 0.5 || r.bottom > b.bottom + 0.5)) cut.push(node.textContent.trim()); }
  return cut; }"""


def test_the_retrieval_message_shows_above_the_pictures_and_the_upload_box_is_whole(page):
    """The "click Index first" message once sat under a 60-picture gallery, off screen; the upload box was cut."""
    from playwright.sync_api import expect

    page.get_by_role("tab", name="Retrieval").click()
    page.locator("#retrieval-text textarea").fill("a red cube on the left")
    page.locator("#retrieval-search-text").click()
    status = page.locator("#retrieval-status")
    expect(status).to_contain_text("click Index first", timeout=60_000)  # a fresh home: nothing is indexed
    page.evaluate("window.scrollTo(0, 0)")
    message, gallery = box(status), box(page.locator("#retrieval-query-gallery"))
    assert message["y"] + message["height"] <= gallery["y"], (message, gallery)
    assert 0 <= message["y"] and message["y"] + message["height"] <= WINDOW["height"], message
    cut = page.locator("#retrieval-query-image").evaluate(CUT_TEXT)
    assert cut == [], cut
    screenshot(page, "retrieval-message.png")


def test_the_flism_label_is_apart_from_the_heat_map_titles(page, photo):
    from playwright.sync_api import expect

    upload(page, photo)
    page.get_by_role("tab", name="FLISM regions").click()
    page.locator("#regions-run").click()
    expect(page.locator("#regions-status")).to_contain_text("best pair", timeout=60_000)
    titles = page.locator("#regions-plot .annotation-text")  # plotly's subplot titles: a model each
    expect(titles.first).to_be_visible(timeout=30_000)
    found = page.locator("#regions-plot-label, #regions-plot [data-testid='block-label']")
    labels = [found.nth(i) for i in range(found.count()) if found.nth(i).is_visible()]  # Gradio's own, if shown
    assert labels and titles.count() >= 1
    # Above the titles, not only beside them: whether a floating label reaches a title depends on the width.
    top = min(box(titles.nth(j))["y"] for j in range(titles.count()))
    for label in labels:
        assert box(label)["y"] + box(label)["height"] <= top, (label.inner_text(), box(label), top)
    page.get_by_role("tab", name="Sentence maps").click()


# The widest word each column of the run table must hold, besides what it shows now: an id, a status, a
# start date, a step count, a loss and the header "checkpoint".
WIDEST = {"status": "cancelled", "started": "2025-01-01", "step": "200/200", "last loss": "0.1234",
          "checkpoint": "checkpoint"}
SPLIT_WORDS = """(cells, widest) => { const ctx = document.createElement('canvas').getContext('2d');
  const heads = [...cells[0].closest('[role=grid]').querySelectorAll('th span.header')].map(h => h.innerText.trim());
  return cells.flatMap(c => { const cell = c.closest('th, .body-cell');
    const head = heads[+(cell.dataset.heading ?? cell.dataset.col)];
    const wrap = c.closest('.cell-wrap'); const s = getComputedStyle(wrap);
    const room = wrap.clientWidth - parseFloat(s.paddingLeft) - parseFloat(s.paddingRight);
    ctx.font = getComputedStyle(c).font;
    const words = [...c.innerText.split(/\\s+/), widest[head] || ''].filter(Boolean);
    return words.filter(w => ctx.measureText(w).width > room + 0.5).map(w => head + ': ' + w); }); }"""


def test_the_jobs_table_keeps_its_words_whole(page, home):
    """Narrow columns broke words ("metho d", "statu s", "cance lled"): each fits its column's widest word."""
    from playwright.sync_api import expect

    from explorer.jobs import JobManager
    from explorer.views import jobs_view

    jobs = JobManager(home=home)  # the app's run store: two runs, cancelled before they start
    for name in ("first-run", "second-run"):
        run = jobs_view.submit_form(jobs, jobs_view.Form("mulclip", max_steps=1, name=name, batch_size=4),
                                    start=False)
        jobs.cancel(run.id, wait=False)
    page.get_by_role("tab", name="Jobs").click()
    table = page.locator("#jobs-table")
    expect(table).to_contain_text("cancelled", timeout=30_000)
    cells = table.locator("th span.header, .body-cell span.text")
    split = cells.evaluate_all(SPLIT_WORDS, WIDEST)
    screenshot(table, "jobs-table.png")
    assert split == [], split


def test_generate_is_off_with_its_reason_while_no_sdxl_is_set(page, home):
    from playwright.sync_api import expect

    page.get_by_role("tab", name="Generation").click()
    go, reason = page.locator("#generation-go"), page.locator("#generation-go-reason")
    expect(go).to_be_disabled(timeout=15_000)  # the test app has no SDXL ($EXPLORER_SDXL unset)
    expect(reason).to_contain_text("no SDXL base is set")
    assert apart(box(go), box(reason)) and abs(box(go)["y"] - box(reason)["y"]) < box(go)["height"]  # beside it
    expect(page.locator("#generation-match")).to_be_hidden()  # no empty "1 2 3" table
    field = page.locator("#generation-sdxl textarea, #generation-sdxl input").first
    field.fill(str(home / "no-sdxl-here"))
    expect(reason).to_contain_text("cannot be used", timeout=15_000)
    expect(go).to_be_disabled()
    screenshot(page, "generation-off.png")
    field.fill("")
