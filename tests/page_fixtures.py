"""Shared fixtures for tests that serve the page or drive it in Chromium (issue 65: one app server and one
Chromium per test module, not one per test). Import the fixtures you use by name into your module
(``from page_fixtures import chromium, served_page  # noqa: F401``), as the browser modules import
``app_url`` from ``test_browser``.

- ``free_port()``: a free loopback port.
- ``loopback_http(base_url, **options)``: an ``httpx.Client`` for a page on this machine, all of them on one TLS
  context (a client's own loads the system's certificates: 50 ms of CPU each, ~260 clients a run; the pages are
  plain HTTP, so no certificate is ever read).
- ``copy_of_the_zoo(folder)``: the repository's manifests in ``folder``, pointing at the same weights, so a
  test may add and remove models without touching the checkout.
- ``serving(app, access=None)``: a built ``gr.Blocks`` served on 127.0.0.1 (``start_page``, the app's own
  patient start), its URL yielded; closed after.
- ``served_page`` (module fixture): the owner's page on a copy of the zoo, ``$EXPLORER_HOME`` its own, with the
  queue and request rules ``explorer app`` serves it with (``explorer.ui.app.serve``):
  a dict with ``url``, ``zoo``, ``home``. One per module: a module that changes the zoo or the home changes
  it for its own tests only.
- ``chromium`` (module fixture): one Playwright Chromium for the module's tests (skipped when no Chromium is
  installed). Not per session: Playwright's sync API leaves its event loop set as the running one in the
  main thread while it is open, and any later test on the same worker that calls ``asyncio.run`` would fail.
- ``chosen_models(page)``: the names in the Grounding tab's model box, in order (its tokens).
- ``click_until(click, answered, tries=3)``: a click made again when nothing answered it (a click that lands as
  a panel or a plot is drawn again is lost on two loaded cores; a person clicks again, and so does the test).
- ``as_loaded(page, url)``, ``page_used_after`` (autouse, to import): a shared page as it loads, loaded again
  only when a test has used it.
- ``open_tab(browser, url, width=1400, height=1100)``: a fresh browser context and page on ``url`` (cookies
  and storage of its own: a new visitor), loaded up to the Draw button; closed after. Launching Chromium took
  0.7-7 s on the shared 2-core machine, a new context well under a second.
"""

from __future__ import annotations

import contextlib
import functools
import os
import shutil
import socket
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--disable-quic",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 "--no-first-run"]


# The pages' screenshots are for a person reviewing a change (no test reads them), so they are taken only when
# EXPLORER_ARTIFACTS names a folder (`EXPLORER_ARTIFACTS=artifacts bash scripts/test.sh -m browser`): a full-page
# one costs Chromium about 1.2 CPU s, and a run took 23.
ARTIFACTS = Path(os.environ["EXPLORER_ARTIFACTS"]) if os.environ.get("EXPLORER_ARTIFACTS") else None


def screenshot(target, name: str, full_page: bool = False) -> None:
    """``target`` (a page or an element) saved as ARTIFACTS/``name``, when ARTIFACTS is set."""
    if ARTIFACTS is None:
        return
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    options = {"full_page": True} if full_page else {}  # an element's screenshot takes no full_page
    target.screenshot(path=str(ARTIFACTS / name), **options)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@functools.cache
def _one_tls_context():
    import ssl

    return ssl.create_default_context()


def loopback_http(base_url: str = "", **options):
    """``httpx.Client(base_url, **options)`` on the shared TLS context (``transport=`` keeps its own)."""
    import httpx

    return httpx.Client(base_url=base_url, verify=_one_tls_context(), **options)


def loopback_transport(**options):
    """``httpx.HTTPTransport(**options)`` on the shared TLS context."""
    import httpx

    return httpx.HTTPTransport(verify=_one_tls_context(), **options)


def copy_of_the_zoo(folder: Path) -> Path:
    """The repository's manifests, pointing at the same weights (absolute paths), in ``folder``: tests
    that add and remove models change this copy, never the checkout."""
    from explorer.zoo import Manifest, Zoo

    for manifest in Zoo().manifests():  # $EXPLORER_CHECKPOINTS, else the checkout's checkpoints/
        copy = Manifest(**{**{k: v for k, v in vars(manifest).items() if k != "path"},
                           "weights": manifest.display_weights(), "options": manifest.resolved_options()})
        copy.write(folder / f"{manifest.name}.json")
    return folder


@contextlib.contextmanager
def serving(app, access=None, **options):
    """``app`` on a free loopback port, its URL yielded; ``access`` gives the page's options (public or owner)."""
    from explorer.serve.startup import start_page
    from explorer.ui.app import page_options

    port = free_port()
    start_page(app, server_name="127.0.0.1", server_port=port, prevent_thread_lock=True, quiet=True,
               **(page_options(access) if access is not None else page_options()), **options)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        app.close()


@pytest.fixture(scope="module")
def served_page(tmp_path_factory):
    """The owner's page on a copy of the zoo (the repository's demo weights may be added by their path), with
    its own ``$EXPLORER_HOME``: ``{"url", "zoo", "home"}``, one server for the module's tests."""
    from explorer.serve.access import Access
    from explorer.ui.app import build_app, serve
    from explorer.zoo import Zoo

    zoo, home = copy_of_the_zoo(tmp_path_factory.mktemp("zoo")), tmp_path_factory.mktemp("home")
    with pytest.MonkeyPatch.context() as patch:  # uploads, exports and caches of this app stay in the test
        patch.setenv("EXPLORER_HOME", str(home))
        access = Access.for_app(zoo, allow_roots=[REPO / "checkpoints"])
        app = serve(build_app(Zoo(zoo), access=access), access)  # the page's own queue and rules, as launched
        with serving(app, access) as url:
            yield {"url": url, "zoo": zoo, "home": home}


@pytest.fixture(scope="module")
def chromium():
    """One headless Chromium for the module's tests (see the module's note on why not one per session)."""
    if CHROMIUM is None:
        pytest.skip("Chromium is not installed (apt-get install chromium chromium-driver)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield browser
        browser.close()


@contextlib.contextmanager
def open_tab(browser, url: str, width: int = 1400, height: int = 1100, ready: str | None = "#grounding-run"):
    """A new visitor (its own context) on ``url``, loaded until ``ready`` shows; ``page.outside_requests``
    collects every request it makes to anywhere but the app."""
    context = browser.new_context(viewport={"width": width, "height": height})
    try:
        page = context.new_page()
        page.outside_requests = []
        page.on("request", lambda request: None if request.url.startswith((url, "data:", "blob:"))
                else page.outside_requests.append(request.url))
        page.goto(url, wait_until="domcontentloaded")
        if ready:
            page.locator(ready).wait_for(timeout=60_000)
        yield page
    finally:
        context.close()


def as_loaded(page, url: str, ready: str = "#grounding-run") -> None:
    """``page`` as a visitor first sees it: ``url`` loaded again, unless no test has used the page since it
    loaded (a module's first test: one page load fewer, 5-7 CPU s of Chromium and the app's load events).
    A page counts as used once a test that asked for it ends (``page_used_after``) or once this has run."""
    if getattr(page, "used", True):
        page.goto(url, wait_until="domcontentloaded")
        page.locator(ready).wait_for(timeout=60_000)
    page.used = True


@pytest.fixture(autouse=True)
def page_used_after(request):
    """Import into a module whose ``page`` fixture is shared by its tests: marks the page used after each test
    that asked for it (``as_loaded`` then loads it again)."""
    yield
    if "page" in request.fixturenames:
        request.getfixturevalue("page").used = True


class ClickAgain(UserWarning):
    """A click ``click_until`` made again: named in the run's warnings summary, not a failure."""


def click_until(click, answered, tries: int = 3) -> None:
    """``click()``, then ``answered()`` (a Playwright wait or ``expect``, which raises when it times out); the
    click made again when it did, ``tries`` times in all. Every check after it stays the test's own."""
    import time
    import warnings

    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    for attempt in range(tries):
        started = time.monotonic()
        click()
        try:
            answered()
            return
        except (AssertionError, PlaywrightTimeout):
            if attempt == tries - 1:
                raise
            # in the run's warnings summary, under the test's name: a lost click costs its whole wait, and the
            # slowest tests' times move by that much between runs
            warnings.warn(ClickAgain(f"a click was made again after {time.monotonic() - started:.0f} s "
                                     "without its answer"), stacklevel=2)


def chosen_models(page) -> list[str]:
    """The names in the Grounding tab's model box, in order: its tokens ("name · method · maps: ..."), not its
    text, which holds the list of options while the list is open."""
    tokens = page.locator("#grounding-model .token span").all_inner_texts()
    return [token.split(" · ")[0].strip() for token in tokens]
