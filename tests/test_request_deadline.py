"""What a caption costs counts in the visitor's budget (issue 57.1): the events that read a caption without
drawing (token summary, budget line) are one group with a per-address cap, and a request still running past
the page's deadline is stopped at its next step and says so."""

from __future__ import annotations

import time
import uuid
from types import SimpleNamespace

import gradio as gr
import pytest

from explorer.core.cache import BoundedCache
from explorer.core.deadline import DeadlinePassed, check, deadline
from explorer.serve.budget import HEAVY, PUBLIC, TEXT
from explorer.serve.request_rules import checked

QUICK = PUBLIC.__class__(**{**PUBLIC.__dict__, "request_seconds": 0.05})


def test_a_generator_past_the_deadline_is_stopped_and_says_so():
    steps = []

    def draw(caption):
        for step in range(5):
            steps.append(step)
            time.sleep(0.04)
            yield f"step {step}"

    with pytest.raises(gr.Error, match="ran past the page's 0.05 s limit and was stopped"):
        list(checked(draw, QUICK)("a caption"))
    assert steps == [0, 1]  # the third step was never started


def test_a_model_run_past_the_deadline_is_not_started():
    cache, runs = BoundedCache("test", max_items=4), []

    def handler(caption):
        time.sleep(0.08)
        return cache.get(caption, lambda: runs.append(caption) or "maps")

    with pytest.raises(gr.Error, match="was stopped"):
        checked(handler, QUICK)("a caption")
    assert runs == []
    assert checked(handler, PUBLIC)("a caption") == "maps"  # in time: it runs


def test_the_deadline_is_the_requests_only_and_never_extended():
    check()  # outside a request: no deadline
    with deadline(10.0):
        with deadline(0.0):
            with pytest.raises(DeadlinePassed):
                check()
        check()
        with deadline(100.0, started=time.monotonic() - 20):  # 80 s left of it, 10 of the outer: still in time
            check()
    with deadline(0.0):
        with deadline(100.0):  # an inner deadline cannot extend the outer one
            with pytest.raises(DeadlinePassed):
                check()


def _queue_of(*events):
    return SimpleNamespace(event_ids_to_events={str(i): e for i, e in enumerate(events)})


def _event(address, group):
    request = SimpleNamespace(scope={"client": (address, 40000)})
    return SimpleNamespace(session_hash=uuid.uuid4().hex, concurrency_id=group["concurrency_id"], request=request)


def test_caption_counts_are_capped_per_address_not_per_session():
    """An address with ``text_per_address`` token summaries waiting is refused one more, whatever session it
    names; another address is not; heavy requests are not counted against the text cap."""
    from explorer.serve.queue_guard import over_cap

    text_fn = SimpleNamespace(concurrency_id=TEXT["concurrency_id"])
    queue = _queue_of(*[_event("127.0.0.2", TEXT) for _ in range(PUBLIC.text_per_address)],
                      _event("127.0.0.3", HEAVY))
    refusal = over_cap(queue, uuid.uuid4().hex, "127.0.0.2", text_fn, 12, PUBLIC)
    assert refusal is not None and "caption counts" in refusal
    assert over_cap(queue, uuid.uuid4().hex, "127.0.0.3", text_fn, 12, PUBLIC) is None
    assert PUBLIC.text_per_address and PUBLIC.request_seconds


def test_the_caption_readers_are_in_the_text_group(tmp_path, monkeypatch):
    """Every event of the public page that reads the caption or the prompt without drawing (the token summary,
    the budget line, their page-load runs) is a TEXT event, capped per address; none is left outside a group."""
    from explorer.serve.access import Access
    from explorer.ui.app import build_app, serve
    from explorer.ui.generation_tab import on_prompt
    from explorer.ui.grounding_tab import safe_budget
    from explorer.zoo import Zoo

    monkeypatch.setenv("EXPLORER_HOME", str(tmp_path / "home"))
    access = Access.for_app(tmp_path / "zoo", public=True)
    app = serve(build_app(Zoo(tmp_path / "zoo"), access=access), access)
    readers = [fn for fn in app.fns.values() if getattr(fn.fn, "__wrapped__", None) in (safe_budget, on_prompt)]
    assert len(readers) >= 3  # the caption's change and page load, the prompt's change
    assert {fn.concurrency_id for fn in readers} == {TEXT["concurrency_id"]}
    assert {fn.concurrency_limit for fn in readers} == {PUBLIC.text_at_once}
