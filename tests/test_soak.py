"""The soak benchmark in its short CI form: 2 sessions at once through one round of the whole mix of
requests (Draw with 1 and 2 models, a long caption and a short one, page changes, exports, regions, PCA)
against the app started as users start it; any failed request fails the test, and so does a resident peak
over the soak's 4 GB bound. Memory growth over rounds and latency are measurements: ``python bench/soak.py``
(8 sessions, 4 rounds) prints them (issue 65: this test ran 2 rounds for 30 s, 39 s in CI)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow(reason="starts python app.py and serves two sessions a round of every request")
SOAK = Path(__file__).resolve().parents[1] / "bench" / "soak.py"


def test_short_soak_serves_every_request():
    run = subprocess.run([sys.executable, str(SOAK), "--sessions", "2", "--rounds", "1", "--seconds", "30",
                          "--side", "512", "--ci"], capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    assert "failed requests: 0" in run.stdout
    assert "peak under 4 GB: met" in run.stdout, run.stdout
    for endpoint in ("draw_maps", "export_maps", "find_regions", "draw_pca"):
        assert endpoint in run.stdout, f"{endpoint} was never called:\n{run.stdout}"
