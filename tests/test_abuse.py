"""The abuse soak: one abusive visitor (big pictures to every picture endpoint, captions past the cap,
uploads, exports, in a loop) beside one ordinary visitor, against ``python app.py --public`` on loopback.
The ordinary visitor's every Draw is answered with its maps, the server's resident peak stays under 3 GB,
its upload folder under 1 GB and its exports under 200 MB (``bench/abuse.py --check``); then Gradio's temp
folder is emptied when the page stops.

One server and one short run for both tests (issue 65): two ordinary Draws quiet and at least two under abuse,
while the abuser finishes at least one whole round. The ordinary Draw's slowdown (median under 10x its quiet
time) is a measurement: ``python bench/abuse.py --only soak --check`` checks it over a 60 s soak."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from once import once_per_run

pytestmark = pytest.mark.slow(reason="starts python app.py --public and runs one round of abuse beside a visitor")
REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session")
def run(tmp_path_factory):
    """The bench's run, once a run of the suite (``once.once_per_run``): work stealing may give the two tests to two
    workers, and each would have started its own server and abuse."""
    def abuse(folder: Path) -> None:
        done = subprocess.run([sys.executable, str(REPO / "bench" / "abuse.py"), "--only", "soak,output-cache",
                               "--check", "--no-ratio-check", "--side", "4000", "--seconds", "3", "--rounds", "2",
                               "--draws", "1"], capture_output=True, text=True, timeout=900, cwd=REPO)
        (folder / "run.json").write_text(json.dumps(
            {"args": done.args, "returncode": done.returncode, "stdout": done.stdout, "stderr": done.stderr}))

    recorded = json.loads((once_per_run(tmp_path_factory, "abuse", abuse) / "run.json").read_text())
    return subprocess.CompletedProcess(**recorded)


def printed(run, name: str) -> dict:
    text = run.stdout[run.stdout.index(f"{name} {{") + len(name) + 1:]
    return json.loads(text[:text.index("\n}\n") + 2])


def test_an_abusive_visitor_does_not_take_the_page_from_an_ordinary_one(run):
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]  # memory and disk bounds, answered Draws
    soak = printed(run, "soak")
    assert soak["ordinary answers"] == {"ok": len(soak["Draw under abuse s"])} and len(soak["Draw under abuse s"]) >= 2
    assert any("Cannot do that" in answer for answer in soak["abusive answers"])  # the abuser was refused, not idle


def test_gradios_temp_folder_is_emptied_when_the_page_stops(run):
    """A Draw and an export write into Gradio's temp folder; a SIGTERM (``bench/abuse.py`` stops its server so)
    leaves only Gradio's own start-up folder there (``vibe_edit_history``): no output, no folder, and none of the
    empty ``tmp*`` files Gradio's ``gr.File`` leaves on every call. The soak's uploads were there too."""
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    result = printed(run, "output-cache")
    assert result["answers ok"] == result["of"] == 2 and result["entries growth"] > 0
    megabytes, entries = result["left after shutdown MB, entries"]
    assert megabytes < 0.1 and entries <= 1, result
