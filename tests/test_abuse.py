"""The abuse soak: one abusive visitor (big pictures to every picture endpoint, captions past the cap,
uploads, exports, in a loop) beside one ordinary visitor, against ``python app.py --public`` on loopback.
The ordinary visitor's Draw answers within 10x its quiet time, the server's resident peak stays under
3 GB, its upload folder under 1 GB and its exports under 200 MB (``bench/abuse.py --check``)."""

from __future__ import annotations

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
