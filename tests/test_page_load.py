"""A page load is an event a tab, not one a list (``explorer.ui.page_load``): the caption's budget and the chosen
models' labels each at once, every other tab's lists in one event whose handlers each read their own inputs and
write their own outputs, a failing one leaving its part as built while the others still load."""

from __future__ import annotations

import gradio as gr
import pytest

from explorer.serve.access import Access
from explorer.ui import page_load
from explorer.ui.app import build_app
from explorer.zoo import Zoo


def test_handlers_share_one_event_each_reading_its_inputs_and_writing_its_outputs(caplog):
    with gr.Blocks():
        a, b, shared = gr.Textbox("a"), gr.Textbox("b"), gr.Number(2)
        out_a, out_b1, out_b2, out_c = gr.Textbox(), gr.Textbox(), gr.Textbox(), gr.Textbox()

    def broken(value):
        raise RuntimeError("the zoo folder went away")

    event = page_load.one_event([dict(fn=lambda x, n: x * int(n), inputs=[a, shared], outputs=out_a),
                                 dict(fn=lambda y, n: (y, n + 1), inputs=[b, shared], outputs=[out_b1, out_b2]),
                                 dict(fn=broken, inputs=a, outputs=[out_c])])
    assert event["inputs"] == [a, shared, b]  # each input sent once
    assert event["outputs"] == [out_a, out_b1, out_b2, out_c]
    assert event["fn"]("x", 3, "y") == ("xxx", "y", 4, gr.update())
    assert "broken failed" in caplog.text  # said in the log; its output left as the page was built


def test_what_cannot_share_an_event_is_refused_when_the_page_is_built():
    with gr.Blocks():
        box = gr.Textbox()
    with pytest.raises(ValueError, match="concurrency_id"):
        page_load.one_event([dict(fn=str, inputs=box, outputs=box, concurrency_id="explorer-text")])
    with pytest.raises(ValueError, match="write the same component"):
        page_load.one_event([dict(fn=str, outputs=box), dict(fn=str, outputs=box)])


@pytest.mark.parametrize("public", [False, True])
def test_a_page_load_is_an_event_a_tab(tmp_path, monkeypatch, public):
    monkeypatch.setenv("EXPLORER_HOME", str(tmp_path / "home"))
    zoo = Zoo()
    app = build_app(zoo, access=Access.for_app(zoo.root, public=public))
    loads = [fn for fn in app.fns.values() if any(event == "load" for _, event in fn.targets)]
    tabs = ["Retrieval", "Generation", "Models"] if public else ["Retrieval", "Generation", "Jobs", "Models"]
    assert [fn.name for fn in loads] == ["safe_budget", "models_load"] + ["on_load"] * len(tabs)  # 12 before
    tables = [block for block in app.blocks.values() if getattr(block, "elem_id", None) == "zoo-table"]
    assert tables and loads[-1].outputs[0] is tables[0]  # the Models tab's table in an event of its own
