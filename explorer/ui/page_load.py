"""What runs when a page opens, as few events as the page needs.

Every tab hands the app the handlers to run on page load (``dict(fn=..., inputs=..., outputs=...)``: the model
lists as the zoo is now, the datasets added since, the runs, the zoo's table). Run as events of their own they
were twelve requests a page load, and each event costs the visitor's browser a round of status updates over
every component an event has touched (Gradio's frontend: 0.3-0.5 s of a 2-core machine's browser CPU an event)
and counts against the visitor's share of the queue (a public page holds an address to 24 requests at once:
two tabs opened together were 24). ``one_event`` runs a tab's handlers as one request, each in turn.
"""

from __future__ import annotations

import logging

import gradio as gr

log = logging.getLogger("explorer.page")


def one_event(handlers: list[dict]) -> dict:
    """``handlers`` as one page-load event (a ``dict`` for ``app.load``). Each handler reads its own inputs and
    writes its own outputs, in the order given; one that fails leaves its outputs as they are and is logged,
    and the others still run (as when each was an event of its own)."""
    for handler in handlers:
        unknown = set(handler) - {"fn", "inputs", "outputs"}
        if unknown:  # a concurrency group or a progress setting belongs to an event of its own
            raise ValueError(f"a page-load handler with {sorted(unknown)} cannot share an event")
    parts = [(handler["fn"], as_list(handler.get("inputs")), as_list(handler.get("outputs"))) for handler in handlers]
    inputs = unique(component for _, ins, _ in parts for component in ins)
    outputs = [component for _, _, outs in parts for component in outs]
    if len(unique(outputs)) != len(outputs):
        raise ValueError("two page-load handlers write the same component: their order would decide it")
    where = {id(component): index for index, component in enumerate(inputs)}

    def on_load(*values):
        written = []
        for fn, ins, outs in parts:
            try:
                answer = fn(*(values[where[id(component)]] for component in ins))
            except Exception:  # noqa: BLE001 - this part stays as the page was built; the others still load
                log.exception("page load: %s failed; its part of the page is left as built", name_of(fn))
                written.extend(gr.update() for _ in outs)
                continue
            written.extend(answer if len(outs) > 1 else [answer])
        return tuple(written)

    return dict(fn=on_load, inputs=inputs, outputs=outputs)


def as_list(components) -> list:
    if components is None:
        return []
    return list(components) if isinstance(components, (list, tuple)) else [components]


def unique(components) -> list:
    """``components`` in order, each once (a component is not hashable by value: by identity)."""
    seen, kept = set(), []
    for component in components:
        if id(component) not in seen:
            seen.add(id(component))
            kept.append(component)
    return kept


def name_of(fn) -> str:
    return getattr(fn, "__qualname__", repr(fn))
