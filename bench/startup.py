"""``python app.py`` to its first served page, against a bare Gradio page, in the same run.

    python bench/startup.py [--runs 3]

Each measurement is a new Python process, started by this script; the clock runs from the spawn
until ``GET /`` answers 200 (the page a browser would get), polled every 50 ms. Interleaved: bare,
app, bare, app, ... so both see the same machine. The bare page is the smallest Gradio app (one
Markdown block, ``launch()``); the app is the README's ``python app.py`` on the built-in demo zoo.
Printed: each run's seconds, the medians and their ratio, and when the app printed its URL.
Target: ratio <= 1.5.
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


def command(kind: str, port: int) -> list[str]:
    if kind == "bare":
        return [sys.executable, "-c", BARE, str(port)]
    return [sys.executable, str(ROOT / "app.py"), "--port", str(port)]


def served(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=2) as response:
            return response.status == 200
    except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
        return False


def time_to_page(kind: str, timeout: float = 120.0) -> dict:
    """Seconds from spawn to the first 200 on ``/``, and to the line where the process printed its URL."""
    port = free_port()
    env = {**os.environ, "GRADIO_ANALYTICS_ENABLED": "False", "PYTHONUNBUFFERED": "1"}
    start = time.perf_counter()
    process = subprocess.Popen(command(kind, port), cwd=ROOT, env=env, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True)
    try:
        while not served(port):
            if process.poll() is not None:
                raise RuntimeError(f"{kind} exited before serving:\n{process.stdout.read()}")
            if time.perf_counter() - start > timeout:
                raise RuntimeError(f"{kind} did not serve within {timeout:.0f} s")
            time.sleep(0.05)
        seconds = time.perf_counter() - start
    finally:
        process.terminate()
        output, _ = process.communicate(timeout=30)
    url_line = next((line for line in output.splitlines() if f":{port}" in line), "")
    return {"seconds": seconds, "url_line": url_line.strip()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args(argv)
    times: dict[str, list[float]] = {"bare": [], "app": []}
    for run in range(args.runs):
        for kind in ("bare", "app"):
            result = time_to_page(kind)
            times[kind].append(result["seconds"])
            print(f"run {run + 1} {kind:4s}: {result['seconds']:6.2f} s to the first page   {result['url_line']}")
    bare, app = statistics.median(times["bare"]), statistics.median(times["app"])
    print(f"median: bare Gradio page {bare:.2f} s, python app.py {app:.2f} s, ratio {app / bare:.2f} "
          f"(target <= 1.5) on {os.cpu_count()} cores")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
