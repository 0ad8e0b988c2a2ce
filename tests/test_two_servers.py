"""Two servers on one machine share ``GRADIO_TEMP_DIR`` (issue 57.4): each keeps its files in a folder of its
own (``explorer.serve.temp_folder``), so stopping one, with its full cleanup, deletes nothing the other serves.
Before, the same picture (the page's default example) had the same path in both, and the first to stop deleted
it under the other."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import httpx
import numpy as np
import pytest
from PIL import Image

pytestmark = pytest.mark.slow(reason="starts two real page servers in child processes")

SERVER = r"""
import json, sys
from pathlib import Path
import gradio as gr
from explorer.serve.budget import PUBLIC
from explorer.serve.gradio_cache import CachePruner
from explorer.serve.temp_folder import own_temp_folder, remove_own_temp_folder

own = sys.argv[2] == "own"
if own:
    own_temp_folder()
with gr.Blocks() as app:
    gr.Image(value=sys.argv[1], type="filepath")  # the page's default example, cached at start
app.launch(server_name="127.0.0.1", server_port=int(sys.argv[3]), prevent_thread_lock=True, quiet=True)
cached = [name for block in app.blocks.values() for name in getattr(block, "keep_in_cache", ())]
print(json.dumps({"url": app.local_url, "cached": cached}), flush=True)
sys.stdin.readline()  # "stop"
CachePruner(app, PUBLIC).clear()  # the page's own cleanup, as at shutdown
app.close()
if own:
    remove_own_temp_folder()
print("stopped", flush=True)
"""


def _start(example: Path, shared: Path, mode: str) -> subprocess.Popen:
    env = {**os.environ, "GRADIO_TEMP_DIR": str(shared), "GRADIO_ANALYTICS_ENABLED": "False"}
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return subprocess.Popen([sys.executable, "-c", SERVER, str(example), mode, str(port)], env=env, text=True,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE)


def _line(process: subprocess.Popen, start: str) -> str:
    """The child's first line of output that starts with ``start`` (Gradio prints its own lines too)."""
    for line in process.stdout:
        if line.startswith(start):
            return line
    raise AssertionError(f"the server ended without a line starting {start!r}")


def _stop(process: subprocess.Popen) -> None:
    process.stdin.write("stop\n")
    process.stdin.flush()
    _line(process, "stopped")
    process.wait(timeout=60)


def two_servers(tmp_path: Path, mode: str) -> tuple[bool, bool]:
    """(whether the two cached the example at the same path, whether the second still serves it once the
    first stopped)."""
    example = tmp_path / "synthetic-test-000000.png"
    Image.fromarray(np.zeros((32, 32, 3), dtype=np.uint8)).save(example)
    shared = tmp_path / "gradio"
    first, second = _start(example, shared, mode), _start(example, shared, mode)  # both start at once
    try:
        one, two = (json.loads(_line(process, "{")) for process in (first, second))
        assert one["cached"] and two["cached"]
        same = one["cached"][0] == two["cached"][0]
        _stop(first)
        kept = Path(two["cached"][0])
        served = httpx.get(f"{two['url'].rstrip('/')}/gradio_api/file={kept}", timeout=30)
        return same, kept.is_file() and served.status_code == 200
    finally:
        for process in (first, second):
            if process.poll() is None:
                process.kill()


def test_stopping_one_server_leaves_the_others_files(tmp_path):
    same, still_served = two_servers(tmp_path, "own")
    assert not same and still_served
    # Without a folder of its own (mode "shared") the two cache the example at one path and the first to stop
    # deletes it under the other: bench/abuse.py's "two servers" scenario shows it (a test would start two more
    # servers).
    assert [p.name for p in (tmp_path / "gradio").iterdir() if p.name.startswith("explorer-")] != []  # B's
