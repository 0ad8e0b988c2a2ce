"""The page serves before the heavy libraries (torch among them) and the zoo's checks: they come on page
load, or when a feature first needs them (issue 24). A page whose first answer is slow still starts: Gradio's
own readiness check gives up after 3 s."""

from __future__ import annotations

import inspect
import json
import subprocess
import sys
import time

import gradio as gr
import httpx
import pytest
from gradio import blocks, networking
from starlette.middleware import Middleware

from explorer.ui import grounding_tab
from explorer.serve.access import Access
from explorer.serve.startup import start_page
from explorer.zoo import Zoo

HEAVY = ("torch", "open_clip", "transformers", "diffusers", "faiss", "torchvision", "skimage.filters",
         "explorer.models.nn.backbone", "explorer.models.methods.clip")

BUILD_THE_PAGE = f"""
import json, sys
from explorer.core.runtime import prepare_process
prepare_process()
from explorer.ui.app import build_app
build_app()
print(json.dumps([name for name in {HEAVY!r} if name in sys.modules]))
"""


@pytest.mark.slow(reason="builds the page in a fresh Python to list what it imported")
def test_building_the_page_imports_no_heavy_library(tmp_path):
    # A fresh process: this one has imported everything already.
    env_home = {"EXPLORER_HOME": str(tmp_path), "PATH": "", "HF_HUB_OFFLINE": "1", "GRADIO_ANALYTICS_ENABLED": "False"}
    result = subprocess.run([sys.executable, "-c", BUILD_THE_PAGE], capture_output=True, text=True, timeout=300,
                            env=env_home)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout.strip().splitlines()[-1]) == []


def test_the_page_load_fills_in_what_the_page_was_built_without(tmp_path):
    zoo = Zoo()
    with gr.Blocks():
        inputs, loads = grounding_tab.build(zoo, grounding_tab.MapCache(), Access.for_app(zoo.root))
    budget_load, models_load = loads
    assert budget_load["inputs"] == inputs.caption and models_load["outputs"][:2] == [inputs.models, inputs.kind]
    names = zoo.default_names(2)
    caption = "A red square. A blue circle on the left."
    models, kinds, note, kind_line = models_load["fn"](names, "gradcam")
    spans, summary, rows = budget_load["fn"](caption)
    assert "value" not in models  # the load keeps what the visitor chose (it may have changed since it was sent)
    labels = dict((name, label) for label, name in models["choices"])
    assert all(" · maps: generic" in labels[name] for name in names)  # the method's title and its maps
    assert "gradcam" in kinds["choices"] and kinds.get("value", "gradcam") == "gradcam"
    assert all(f"**{name}**" in note for name in names)
    assert "Grad-CAM" in kind_line  # the kind note says what the chosen kind draws
    assert [row[1] for row in rows] == ["A red square.", "A blue circle on the left."]
    assert "tokens" in summary and spans


def test_a_draw_says_which_model_it_is_loading_and_preloads_only_what_draw_accepts():
    from explorer.ui.view_controls import MAX_MODELS, loading_first

    zoo = Zoo()
    names = zoo.default_names(2)
    drawn = lambda load, *values: ("drawn", [load(name).name for name in values[2]])  # noqa: E731
    handler = loading_first(zoo, drawn, status_at=1, n_outputs=2)
    steps = list(handler(None, "A caption.", names))
    assert [step[1] for step in steps[:-1]] == [f"Loading **{name}** ({i} of 2 to load)…"
                                                for i, name in enumerate(names, start=1)]
    assert all(step[0] == gr.update() for step in steps[:-1])  # nothing else on the page changes meanwhile
    assert steps[-1] == ("drawn", names) and all(zoo.is_loaded(name) for name in names)
    assert list(handler(None, "A caption.", names)) == [("drawn", names)]  # in memory: straight to the draw

    refused = lambda load, *values: "refused"  # noqa: E731 - what draw answers to a request it does not accept
    for models in (["no-such-model"] * (MAX_MODELS + 1), {"a": 1}, 3, [["nested"]]):
        fresh = Zoo()
        assert list(loading_first(fresh, refused, 1, 2)(None, "c", models)) == ["refused"]
        assert fresh.cache.keys() == []
    failing = list(loading_first(Zoo(), refused, 1, 2)(None, "c", ["no-such-model", names[0]]))
    assert failing[-1] == "refused" and len(failing) == 2  # the failed load stops the preloading



def test_gradio_still_refuses_to_start_when_its_one_readiness_check_fails():
    """What ``start_page`` replaces during a launch; if Gradio renames it, the patience no longer applies."""
    code = " ".join(inspect.getsource(blocks.Blocks.launch).split())
    assert "not networking.url_ok(self.local_url)" in code
    assert "timeout=3" in " ".join(inspect.getsource(networking.url_ok).split())


class SlowFirstAnswer:
    """Answers its first ``HEAD`` (Gradio's readiness check) after ``delay`` seconds: a busy machine."""

    delay = 3.5

    def __init__(self, app):
        self.app, self.answered = app, False

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http" and scope["method"] == "HEAD" and not self.answered:
            self.answered = True
            time.sleep(self.delay)  # blocks the server's loop, as a busy CPU would
        await self.app(scope, receive, send)


@pytest.mark.slow(reason="serves a page whose first answer takes 3.5 s on purpose")
def test_a_page_slower_than_gradios_three_seconds_still_starts():
    with gr.Blocks() as app:
        gr.Textbox("hello")
    original = networking.url_ok
    started = time.monotonic()
    start_page(app, server_name="127.0.0.1", prevent_thread_lock=True, quiet=True,  # Gradio picks a free port
               app_kwargs={"middleware": [Middleware(SlowFirstAnswer)]})
    try:
        assert time.monotonic() - started >= SlowFirstAnswer.delay  # the slow answer was waited for
        assert httpx.get(f"{app.local_url}config", timeout=30).status_code == 200
        assert networking.url_ok is original  # Gradio's own check is back for anyone else
    finally:
        app.close()
