"""The public demo page (``--public``) in a real browser: what a visitor of a paper's demo does still works
(Draw on an uploaded picture and on an example, Retrieval search on a listed dataset), and the
management controls are not on the page at all. Skipped only when no Chromium is installed."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from explorer.serve.startup import start_page
from page_fixtures import click_until, screenshot
from test_browser import CAPTION, _free_port, browser_page, copy_of_the_zoo, photo, picture_size, upload  # noqa: F401

pytestmark = [pytest.mark.browser, pytest.mark.slow(reason="drives Chromium against a served public page")]

MANAGEMENT = ["#zoo-add-path", "#zoo-add", "#zoo-upload", "#zoo-upload-add", "#zoo-remove", "#zoo-remove-name",
              "#zoo-refresh", "#memory-show", "#jobs-submit", "#jobs-cancel", "#jobs-delete", "#jobs-data"]
ASSETS = Path(__file__).resolve().parents[1] / "assets"  # the page's examples (explorer assets write)
TYPED_PATHS = ["#retrieval-folder", "#generation-sdxl", "#generation-sdxl-config", "#regions-detector"]


@pytest.fixture(scope="module")
def public_url(tmp_path_factory):
    from explorer.serve.access import Access
    from explorer.ui.app import build_app, page_options, serve
    from explorer.zoo import Zoo

    zoo_root = copy_of_the_zoo(tmp_path_factory.mktemp("zoo"))
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("EXPLORER_HOME", str(tmp_path_factory.mktemp("home")))
        access = Access.for_app(zoo_root, public=True)
        app = serve(build_app(Zoo(zoo_root), access=access), access)
        port = _free_port()
        start_page(app, server_name="127.0.0.1", server_port=port, prevent_thread_lock=True, quiet=True,
                   **page_options(access))
        yield f"http://127.0.0.1:{port}"
        app.close()


@pytest.fixture(scope="module")
def page(public_url):
    with browser_page(public_url) as page:
        yield page


def test_the_page_says_it_is_a_demo_and_has_no_management_controls(page):
    from playwright.sync_api import expect

    expect(page.locator("#public-banner")).to_contain_text("Public demo")
    assert page.get_by_role("tab", name="Jobs").count() == 0
    page.get_by_role("tab", name="Models").click()
    # the table reads every manifest and checks each weight file on a cold server: 15 s was not enough when both
    # workers started a public page at once (as the owner page's test, 60 s)
    expect(page.locator("#zoo-table")).to_contain_text("demo-mulclip", timeout=60_000)
    for selector in MANAGEMENT:
        assert page.locator(selector).count() == 0, selector
    for selector in TYPED_PATHS:
        assert not page.locator(selector).is_visible(), selector
    screenshot(page, "public-models.png", full_page=True)


def test_draw_works_on_an_uploaded_picture(page, photo):
    from playwright.sync_api import expect

    upload(page, photo)  # waits for the picture's own check: the page holds a visitor to 2 heavy requests at once
    page.locator("#grounding-caption textarea").fill(CAPTION)
    # The page holds a visitor to 2 heavy requests at once and says "wait for them" to a third: a Draw refused so (a
    # CI run, after the picture's own checks had answered) is clicked again, as the page asks.
    status = page.locator("#grounding-status")
    click_until(page.locator("#grounding-run").click,
                lambda: expect(status).to_contain_text("3 sentence(s)", timeout=45_000))
    maps = page.locator("#maps-board [data-map-panel] img")
    maps.first.wait_for(timeout=30_000)
    # the public page scrubs server paths from what it shows; the maps' inlined pictures still decode
    page.wait_for_function("() => [...document.querySelectorAll('#maps-board [data-map-panel] img')]"
                           ".every(e => e.complete)", timeout=10_000)
    decoded = maps.evaluate_all("els => els.map(e => e.naturalWidth)")
    assert len(decoded) == 6 and min(decoded) > 0, decoded


def test_an_example_loads_and_draws(page):
    from playwright.sync_api import expect

    page.get_by_role("tab", name="Grounding").click()
    page.locator("#photo-examples").get_by_text("rocket:").click()  # an example: a scikit-image photo
    expect(page.locator("#grounding-caption textarea")).to_have_value(re.compile("rocket"), timeout=20_000)
    # and its picture arrived (the caption and the picture are two updates): a Draw clicked before that drew the
    # page's first picture and then said the inputs changed meanwhile (CI)
    width, height = picture_size(ASSETS / "rocket.png")
    expect(page.locator("#image-note")).to_contain_text(f"Image {width}x{height} px", timeout=60_000)
    page.locator("#grounding-run").click()
    expect(page.locator("#grounding-status")).to_contain_text("3 sentence(s)", timeout=60_000)
    screenshot(page, "public-example.png", full_page=True)


def test_retrieval_indexes_a_listed_dataset_and_searches_it(page):
    from playwright.sync_api import expect

    page.get_by_role("tab", name="Retrieval").click()
    page.locator("#retrieval-index").click()
    status = page.locator("#retrieval-index-status")
    expect(status).to_contain_text("ready", timeout=240_000)
    expect(status).not_to_contain_text("running", timeout=240_000)
    page.locator("#retrieval-text textarea").fill("a red cube on the left")
    page.locator("#retrieval-search-text").click()
    expect(page.locator("#retrieval-status")).to_contain_text("Top 10", timeout=60_000)
    page.locator("#retrieval-gallery-0 img").first.wait_for(timeout=30_000)
    screenshot(page, "public-retrieval.png", full_page=True)
    assert page.outside_requests == []  # the public page, too, reaches nothing outside the app
