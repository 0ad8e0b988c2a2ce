"""Regenerate docs/screenshots/: the page's views at 1400 x 900 in Chromium, on the demo models.

    python scripts/screenshots.py [--out docs/screenshots] [--chromium /usr/bin/chromium]

Serves the app on this checkout's demo zoo (precision "auto", as `python app.py` does; uploads and caches in a
temporary $EXPLORER_HOME), then drives Chromium with Playwright as a person would: four models on the default
example (maps view, then the focus view of one sentence), the FLISM regions and PCA views, a Retrieval search on
the synthetic world, and the Jobs tab with a short training run. Each picture is the window as it is, not the
whole page.
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
VIEWPORT = {"width": 1400, "height": 900}
FOUR = ["demo-mulclip", "demo-clip-base", "demo-caft", "demo-flair"]
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"]


def zoo_copy(folder: Path) -> Path:
    """The checkout's manifests, pointing at its weights, in ``folder``: the Jobs tab's run joins this copy,
    never the checkout's zoo."""
    from explorer.zoo import Manifest, Zoo

    folder.mkdir(parents=True, exist_ok=True)
    for manifest in Zoo(ROOT / "checkpoints").manifests():
        fields = {k: v for k, v in vars(manifest).items() if k != "path"}
        Manifest(**{**fields, "weights": manifest.display_weights(), "options": manifest.resolved_options()}).write(
            folder / f"{manifest.name}.json")
    return folder


def serve(port: int, home: Path):
    """The owner's page on a copy of the checkout's zoo; returns the app (close it when done)."""
    from explorer.serve.access import Access
    from explorer.ui.app import build_app, page_options
    from explorer.serve.startup import start_page
    from explorer.zoo import Zoo

    zoo_root = zoo_copy(Path(home) / "zoo")
    access = Access.for_app(zoo_root, allow_roots=[ROOT / "checkpoints"])
    app = build_app(Zoo(zoo_root, precision="auto"), access=access)  # as `python app.py` serves
    app.queue()
    start_page(app, server_name="127.0.0.1", server_port=port, prevent_thread_lock=True, quiet=True,
               **page_options(access))
    return app


def choose_models(page, names) -> None:
    box = page.locator("#grounding-model")
    if box.locator(".remove-all").count():
        box.locator(".remove-all").click()
    for name in names:
        box.locator("[data-testid=block-info]").first.click()  # blur, so the next click opens the list
        box.locator("input").click()
        box.locator("input").fill(name)
        page.get_by_role("option", name=f"{name} ·").first.click()
    page.keyboard.press("Escape")


def grounding(page, out: Path) -> None:
    from playwright.sync_api import expect

    choose_models(page, FOUR)
    page.locator("#grounding-run").click()
    expect(page.locator("[data-map-panel]")).to_have_count(4 * 6, timeout=180_000)
    page.locator("#grounding-status").scroll_into_view_if_needed()
    page.evaluate("document.getElementById('maps-board-view').scrollIntoView({block: 'start'})")
    page.mouse.wheel(0, -60)
    page.mouse.move(5, 5)  # no panel under the pointer (it would be outlined)
    page.wait_for_timeout(500)
    page.screenshot(path=str(out / "maps-view.png"))
    page.locator('[data-map-panel="demo-flair|3"] img').click()
    expect(page.locator("#maps-focus .nsewdrag")).to_have_count(4, timeout=60_000)
    page.evaluate("document.getElementById('maps-focus-note').scrollIntoView({block: 'start'})")
    page.wait_for_timeout(800)
    page.screenshot(path=str(out / "maps-focus.png"))


def one_view(page, out: Path, tab: str, prefix: str, done: str, name: str) -> None:
    """A Grounding view's tab, its button, and the window once its status says ``done``."""
    from playwright.sync_api import expect

    page.get_by_role("tab", name=tab).click()
    page.locator(f"#{prefix}-run").click()
    expect(page.locator(f"#{prefix}-status")).to_contain_text(done, timeout=180_000)
    page.evaluate(f"document.getElementById('{prefix}-run').scrollIntoView({{block: 'start'}})")  # the results
    page.wait_for_timeout(800)
    page.screenshot(path=str(out / name))


def regions_and_pca(page, out: Path) -> None:
    one_view(page, out, "FLISM regions", "regions", "best pair", "regions.png")
    one_view(page, out, "PCA maps", "pca", "picture(s)", "pca.png")
    page.get_by_role("tab", name="Sentence maps").click()


def retrieval(page, out: Path) -> None:
    from playwright.sync_api import expect

    page.get_by_role("tab", name="Retrieval").click()
    page.locator("#retrieval-index").click()
    status = page.locator("#retrieval-index-status")
    expect(status).to_contain_text("ready", timeout=300_000)
    expect(status).not_to_contain_text("running", timeout=300_000)
    expect(status).not_to_contain_text("queued", timeout=300_000)
    page.locator("#retrieval-text textarea").fill("A large dotted blue triangle at the bottom and a small purple ring.")
    page.locator("#retrieval-search-text").click()
    expect(page.locator("#retrieval-gallery-0 img").first).to_be_visible(timeout=120_000)
    page.locator("#retrieval-text").scroll_into_view_if_needed()
    page.wait_for_timeout(800)
    page.screenshot(path=str(out / "retrieval.png"))


def jobs(page, out: Path) -> None:
    from playwright.sync_api import expect

    page.get_by_role("tab", name="Jobs").click()
    page.locator("#jobs-max-steps input").fill("20")
    page.locator("#jobs-name textarea, #jobs-name input").first.fill("screenshot-run")
    page.locator("#jobs-submit").click()
    expect(page.locator("#jobs-table")).to_contain_text("screenshot-run", timeout=120_000)
    page.wait_for_timeout(15_000)  # a few steps' progress in the table
    page.evaluate("window.scrollTo(0, 0)")  # the table and the form, not the curves
    page.wait_for_timeout(500)
    page.screenshot(path=str(out / "jobs.png"))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "screenshots")
    parser.add_argument("--chromium", default=shutil.which("chromium") or "/usr/bin/chromium")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    home = tempfile.mkdtemp(prefix="explorer-screenshots-")
    os.environ.update(EXPLORER_HOME=home, GRADIO_ANALYTICS_ENABLED="False", HF_HUB_OFFLINE="1")
    sys.path.insert(0, str(ROOT))
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    app = serve(port, Path(home))
    from playwright.sync_api import sync_playwright

    try:
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=args.chromium, args=CHROMIUM_ARGS)
            page = browser.new_page(viewport=VIEWPORT)
            page.goto(f"http://127.0.0.1:{port}", wait_until="domcontentloaded")
            page.locator("#grounding-run").wait_for(timeout=120_000)
            page.wait_for_timeout(3000)  # the page-load handlers: the budget, the model labels
            for step in (grounding, regions_and_pca, retrieval, jobs):
                step(page, args.out)
                print(f"{step.__name__}: done", flush=True)
            browser.close()
    finally:
        app.close()
        shutil.rmtree(home, ignore_errors=True)
    print(f"wrote {', '.join(sorted(p.name for p in args.out.glob('*.png')))} to {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
