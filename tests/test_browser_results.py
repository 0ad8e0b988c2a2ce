"""The Results view in a real browser at 1400 x 900 (issue 67), on a tiny RefCOCO-layout result.

A twin of three scenes is scored by the zoo's demo-clip-base (generic maps) and by a fake model whose maps
a blob placed by the expression's hash (not in the zoo: scored elsewhere, listed, not drawn). Asserted from
the DOM: the view is ``#results-view``; each table cell carries ``data-result-cell="<model>|<column>"``; the
units list's rows carry ``data-unit-id`` and show the metric as text, worst first as the work file has it; a
click on a row shows the board with ``data-map-panel`` panels for that unit; the two-model scatter is a plotly
graph in ``#results-scatter``. A public page has no Results view. Skipped only when no Chromium is installed.
"""

from __future__ import annotations

import pytest

from page_fixtures import chromium, click_until, open_tab, screenshot, served_page  # noqa: F401 - the shared server and Chromium (65)
from test_results_units import BlobModel

pytestmark = [pytest.mark.browser, pytest.mark.slow(reason="serves the app, scores a twin with a demo model, "
                                                          "draws units in Chromium")]

MODEL = "demo-clip-base"
CELL = f"{MODEL}|RefCOCO testA generic/miou"


@pytest.fixture(scope="module")
def tiny_result(served_page):  # noqa: F811 - fixtures imported from page_fixtures
    """A results JSON (and its work file) of the twin's RefCOCO testA, under the page's allowed home."""
    from explorer.data.grounding_sets import read_grounding_set
    from explorer.data.grounding_sets.refer_twin import write_refer_twin
    from explorer.evaluation.real_grounding import evaluate_grounding
    from explorer.evaluation.results import write_results
    from explorer.zoo import Zoo

    home, zoo_root = served_page["home"], served_page["zoo"]
    twin = home / "twin"
    write_refer_twin(twin, n_scenes=3, image_size=96)
    dataset = read_grounding_set(twin, split="testA", layout="refcoco")
    out = home / "refcoco.json"
    models = {MODEL: Zoo(zoo_root, precision="fp32").load(MODEL), "blob": BlobModel("blob", 3)}
    write_results(evaluate_grounding(models, dataset, kinds=["generic"], progress=False,
                                     work_file=out.with_name(out.name + ".work.jsonl")), out)
    return out


def test_results_view_opens_a_cell_its_units_and_a_unit_on_the_board(chromium, served_page, tiny_result):  # noqa: F811
    from explorer.ui.results_html import number
    from explorer.views.result_units import open_results, pick_units

    results = open_results(tiny_result)
    worst = pick_units(results, results.cell(*CELL.split("|")))
    with open_tab(chromium, served_page["url"], height=900) as page:
        page.get_by_role("tab", name="Results").click()
        view = page.locator("#results-view")
        view.wait_for()
        page.locator("#results-source textarea, #results-source input").first.fill(str(tiny_result))
        page.locator("#results-open").click()
        cell = page.locator(f'[data-result-cell="{CELL}"]')
        cell.wait_for(timeout=60_000)
        cells = page.locator("#results-table [data-result-cell]").evaluate_all(
            "(buttons) => buttons.map((b) => b.dataset.resultCell)")
        assert all(c.split("|", 1)[0] in (MODEL, "blob", "centre-box", "uniform") for c in cells)
        assert "blob|RefCOCO testA generic/pointing" in cells
        cell.click()
        rows = page.locator("#results-units [data-unit-id]")
        rows.first.wait_for(timeout=60_000)
        ids = rows.evaluate_all("(rows) => rows.map((r) => r.dataset.unitId)")
        assert ids == worst["unit_id"].tolist()  # worst first, ties by unit id, as the work file has them
        shown = rows.evaluate_all("(rows) => rows.map((r) => r.querySelector('[data-metric]').textContent)")
        assert shown == [f"iou {number(v)}" for v in worst["iou"]]  # the metric as text, the work file's value
        rows.first.click()
        panel = page.locator("#results-board [data-map-panel]")
        panel.first.wait_for(timeout=120_000)
        assert panel.first.get_attribute("data-map-panel") == f"{MODEL}|1"
        assert worst["text"].iloc[0] in page.locator("#results-board [data-sentence]").first.inner_text()
        versus = page.locator("#results-versus input")
        versus.click()
        versus.fill("blob")
        page.get_by_role("option", name="blob").first.click()
        page.locator("#results-scatter .js-plotly-plot").wait_for(timeout=60_000)
        note = page.locator("#results-unit-note")
        # A point opens its unit for both models (blob is not in the zoo: said, not drawn). On two loaded cores the
        # plot can be drawn again just as the point is clicked (CI, session 20): that click is lost.
        point = page.locator("#results-scatter .scatterlayer .point").first
        click_until(lambda: (point.wait_for(timeout=30_000), point.click(force=True)), lambda: page.wait_for_function(
            "() => /^Unit /.test(document.querySelector('#results-unit-note').innerText)", timeout=40_000))
        assert note.inner_text().split()[1] in ids
        assert "blob cannot be loaded here" in page.locator("#results-board").inner_text()
        screenshot(view, "results-view.png")


def test_a_public_page_has_no_results_view(served_page):  # noqa: F811
    from explorer.serve.access import Access
    from explorer.ui.app import build_app
    from explorer.zoo import Zoo

    zoo_root = served_page["zoo"]
    app = build_app(Zoo(zoo_root), access=Access.for_app(zoo_root, public=True))
    ids = {c.get("props", {}).get("elem_id") for c in app.config["components"]}
    assert "results-view" not in ids and "results-table" not in ids and "grounding-run" in ids
