"""The focus view never waits behind model work (issue 63, part 4): it reads the maps a Draw stored, so its events
run in a group of their own (``serve.budget.STORED``), not in the heavy group that Draws share. Served over HTTP
through the page's own queue guards, with every heavy slot held by a Draw that the test blocks on an event."""

from __future__ import annotations

import json
import threading
import time
import uuid
from dataclasses import replace
from pathlib import Path

import gradio as gr
import httpx

from explorer.serve.access import Access
from explorer.serve.budget import HEAVY, PUBLIC, STORED
from page_fixtures import loopback_http, serving


def join(http: httpx.Client, api_name: str, data: list, session: str) -> None:
    config = http.get("/config").json()
    fn = next(d["id"] for d in config["dependencies"] if d.get("api_name") == api_name)
    joined = http.post("/gradio_api/queue/join", json={"data": data, "fn_index": fn, "session_hash": session})
    assert joined.status_code == 200, joined.text


def answer(http: httpx.Client, session: str) -> dict:
    """The session's completed message (its output data)."""
    with http.stream("GET", "/gradio_api/queue/data", params={"session_hash": session}) as stream:
        for line in stream.iter_lines():
            if line.startswith("data:"):
                message = json.loads(line[5:])
                if message.get("msg") == "process_completed":
                    return message
    return {}


def test_a_focus_opens_while_every_heavy_slot_holds_a_draw(tmp_path):
    from explorer.ui.app import serve
    from explorer.ui.maps_tab import focus_by_number

    budget = replace(PUBLIC, heavy_at_once=2)
    running, release = [0], threading.Event()

    def draw(text):  # a Draw's model work, held until the test lets go
        running[0] += 1
        release.wait(timeout=60)
        running[0] -= 1
        return text

    with gr.Blocks() as app:
        box, view, settings = gr.Textbox(), gr.State(None), gr.State(None)
        number, plot, note = gr.Number(value=1, precision=0), gr.Plot(), gr.Markdown()
        gr.Button().click(draw, inputs=box, outputs=box, api_name="draw_maps", **HEAVY)
        # the page's own focus handler, wired as maps_tab wires it (no maps stored: it says so)
        number.submit(focus_by_number, inputs=[view, settings, number], outputs=[plot, note],
                      api_name="focus_sentence", **STORED)
    access = Access(roots=(Path(tmp_path),), public=True, budget=budget)
    serve(app, access)
    with serving(app, access) as url, loopback_http(url, timeout=60) as http:
        http.get("/")  # the page's cookie, as a browser
        try:
            for _ in range(3):  # two Draws running (the group's every slot), a third waiting behind them
                join(http, "draw_maps", ["x"], uuid.uuid4().hex)
            deadline = time.monotonic() + 30
            while running[0] < 2 and time.monotonic() < deadline:
                time.sleep(0.02)
            assert running[0] == 2
            session = uuid.uuid4().hex
            began = time.monotonic()
            join(http, "focus_sentence", [None, None, 1], session)
            message = answer(http, session)
            waited = time.monotonic() - began
            assert message.get("success"), message
            assert "Draw the maps first" in json.dumps(message["output"]["data"])
            assert running[0] == 2 and not release.is_set()  # answered while both Draws still held their slots
            assert waited < 10  # (it would wait for the test's release, 60 s, in the heavy group)
        finally:
            release.set()
