"""The soak benchmark in its short CI form: 2 sessions for about 30 s through the whole mix of
requests (Draw with 1-4 models, long captions, page changes, exports, regions, PCA) against the app
started as users start it; any failed request fails the test."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow
SOAK = Path(__file__).resolve().parents[1] / "bench" / "soak.py"


def test_short_soak_serves_every_request():
    run = subprocess.run([sys.executable, str(SOAK), "--sessions", "2", "--rounds", "2", "--seconds", "30",
                          "--side", "512", "--ci"], capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    assert "failed requests: 0" in run.stdout
    for endpoint in ("draw_maps", "export_maps", "find_regions", "draw_pca"):
        assert endpoint in run.stdout, f"{endpoint} was never called:\n{run.stdout}"
