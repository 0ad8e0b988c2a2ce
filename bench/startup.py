"""``python app.py`` to its first served page, against a bare Gradio page, in the same run.

    python bench/startup.py [--runs 3] [--ready] [--app-root DIR]

Each measurement is a new Python process, started by this script; the clock runs from the spawn
until ``GET /`` answers 200 (the page a browser would get), polled every 50 ms. Interleaved: bare,
app, bare, app, ... so both see the same machine. The bare page is the smallest Gradio app (one
Markdown block, ``launch()``); the app is the README's ``python app.py`` on the built-in demo zoo.
Printed: each run's seconds, the medians and their ratio, and when the app printed its URL.
Target: ratio <= 1.5.

``--ready`` (needs Playwright and Chromium) also opens the app's page in a headless browser as soon
as it serves and times, from the spawn, until the page's load has filled it in (the Grounding tab's
token budget no longer says "Counting tokens…"): what was deferred past the served page (torch, the
method modules, the tokenizer) is in this figure. ``--app-root DIR``: the app of another checkout
(e.g. a git worktree of an older commit), to compare before and after in one run.
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BARE = """
import sys
import gradio as gr
with gr.Blocks() as page:
    gr.Markdown("bare")
page.launch(server_name="127.0.0.1", server_port=int(sys.argv[1]))
"""


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def command(kind: str, port: int, app_root: Path = ROOT) -> list[str]:
    if kind == "bare":
        return [sys.executable, "-c", BARE, str(port)]
    return [sys.executable, str(app_root / "app.py"), "--port", str(port)]


def time_to_filled_page(port: int, start: float, timeout: float) -> float:
    """Seconds from ``start`` until the served page's load has filled in the token budget."""
    import shutil

    from playwright.sync_api import sync_playwright

    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
        try:
            page = browser.new_page()
            page.goto(f"http://127.0.0.1:{port}/", timeout=timeout * 1000)
            page.wait_for_function("() => { const note = document.querySelector('#token-summary');"
                                   " return note && note.innerText.trim() && !note.innerText.includes('Counting'); }",
                                   timeout=timeout * 1000, polling=50)
            return time.perf_counter() - start
        finally:
            browser.close()


def served(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=2) as response:
            return response.status == 200
    except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
        return False


def time_to_page(kind: str, timeout: float = 120.0, ready: bool = False, app_root: Path = ROOT) -> dict:
    """Seconds from spawn to the first 200 on ``/`` (and, with ``ready``, to the filled page), and the line
    where the process printed its URL."""
    port = free_port()
    env = {**os.environ, "GRADIO_ANALYTICS_ENABLED": "False", "PYTHONUNBUFFERED": "1"}
    if app_root != ROOT:
        env["PYTHONPATH"] = str(app_root)
    start = time.perf_counter()
    process = subprocess.Popen(command(kind, port, app_root), cwd=app_root, env=env, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True)
    filled = None
    try:
        while not served(port):
            if process.poll() is not None:
                raise RuntimeError(f"{kind} exited before serving:\n{process.stdout.read()}")
            if time.perf_counter() - start > timeout:
                raise RuntimeError(f"{kind} did not serve within {timeout:.0f} s")
            time.sleep(0.05)
        seconds = time.perf_counter() - start
        if ready and kind != "bare":
            filled = time_to_filled_page(port, start, timeout)
    finally:
        process.terminate()
        output, _ = process.communicate(timeout=30)
    url_line = next((line for line in output.splitlines() if f":{port}" in line), "")
    return {"seconds": seconds, "filled": filled, "url_line": url_line.strip()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--ready", action="store_true", help="also time the page filled in (Playwright, Chromium)")
    parser.add_argument("--app-root", type=Path, default=ROOT, help="the checkout whose app.py runs")
    args = parser.parse_args(argv)
    times: dict[str, list[float]] = {"bare": [], "app": []}
    filled: list[float] = []
    for run in range(args.runs):
        for kind in ("bare", "app"):
            result = time_to_page(kind, ready=args.ready, app_root=args.app_root.resolve())
            times[kind].append(result["seconds"])
            ready = f", filled in at {result['filled']:6.2f} s" if result["filled"] is not None else ""
            print(f"run {run + 1} {kind:4s}: {result['seconds']:6.2f} s to the first page{ready}   {result['url_line']}")
            if result["filled"] is not None:
                filled.append(result["filled"])
    bare, app = statistics.median(times["bare"]), statistics.median(times["app"])
    print(f"median: bare Gradio page {bare:.2f} s, python app.py {app:.2f} s, ratio {app / bare:.2f} "
          f"(target <= 1.5) on {os.cpu_count()} cores")
    if filled:
        print(f"median: the app's page filled in (token budget counted) {statistics.median(filled):.2f} s after spawn")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
