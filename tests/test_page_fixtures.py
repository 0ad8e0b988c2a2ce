"""The shared page fixtures (tests/page_fixtures.py) do what they say: a served Blocks answers on loopback and
stops with the block; one module Chromium opens tabs that are separate visitors (no shared cookies)."""

from __future__ import annotations

import httpx
import pytest

from page_fixtures import chromium, open_tab, serving  # noqa: F401  (fixtures)

pytestmark = [pytest.mark.browser, pytest.mark.slow(reason="imports Gradio, serves a page and starts Chromium")]


@pytest.fixture(scope="module")
def tiny_url():
    import gradio as gr

    with gr.Blocks() as app:
        box = gr.Textbox(elem_id="box")
        gr.Button("Go", elem_id="go").click(lambda text: text.upper(), inputs=box, outputs=box)
    with serving(app) as url:
        yield url
    with pytest.raises(httpx.HTTPError):  # closed with the block
        httpx.get(url + "/config", timeout=2)


def test_a_served_page_answers_on_loopback(tiny_url):
    assert tiny_url.startswith("http://127.0.0.1:")
    assert httpx.get(tiny_url + "/config", timeout=10).status_code == 200


def test_two_tabs_of_one_chromium_are_two_visitors(chromium, tiny_url):  # noqa: F811
    from playwright.sync_api import expect

    with open_tab(chromium, tiny_url, ready="#go") as first, open_tab(chromium, tiny_url, ready="#go") as second:
        first.evaluate("document.cookie = 'visitor=first'")
        assert "visitor=first" not in second.evaluate("document.cookie")
        first.locator("#box textarea").fill("hello")
        first.locator("#go").click()
        expect(first.locator("#box textarea")).to_have_value("HELLO", timeout=30_000)
        assert first.outside_requests == [] and second.outside_requests == []
    assert len(chromium.contexts) == 0  # each tab's context closed with it
