"""The abuse soak: one abusive visitor (big pictures to every picture endpoint, captions past the cap,
uploads, exports, in a loop) beside one ordinary visitor, against ``python app.py --public`` on loopback.
The ordinary visitor's Draw answers within 10x its quiet time, the server's resident peak stays under
3 GB, its upload folder under 1 GB and its exports under 200 MB (``bench/abuse.py --check``)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[1]


def test_an_abusive_visitor_does_not_take_the_page_from_an_ordinary_one():
    run = subprocess.run([sys.executable, str(REPO / "bench" / "abuse.py"), "--only", "soak", "--check",
                          "--side", "4000", "--seconds", "20"], capture_output=True, text=True, timeout=900, cwd=REPO)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    assert '"abusive answers"' in run.stdout and "Cannot do that" in run.stdout  # the abuser was refused, not idle


def test_gradios_temp_folder_is_emptied_when_the_page_stops():
    """A Draw and an export write into Gradio's temp folder; a SIGTERM (``bench/abuse.py`` stops its server so)
    leaves only Gradio's own start-up folder there (``vibe_edit_history``): no output, no folder, and none of the
    empty ``tmp*`` files Gradio's ``gr.File`` leaves on every call."""
    run = subprocess.run([sys.executable, str(REPO / "bench" / "abuse.py"), "--only", "output-cache", "--draws", "1"],
                         capture_output=True, text=True, timeout=600, cwd=REPO)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    printed = run.stdout[run.stdout.index("output-cache {") + len("output-cache "):]
    result = json.loads(printed[:printed.index("\n}\n") + 2])
    assert result["answers ok"] == result["of"] == 2 and result["entries growth"] > 0
    megabytes, entries = result["left after shutdown MB, entries"]
    assert megabytes < 0.1 and entries <= 1, result
