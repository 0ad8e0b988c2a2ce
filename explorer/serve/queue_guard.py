"""The page's queue: what a session and an address may have queued or running, whose turn it is, and what the
sessions hold in memory; installed once on the app (``install``) with the rest of the request rules.

Gradio's queue keeps each event in ``event_ids_to_events`` from join to end; its ``push`` is the one door every
queued request goes through (and where Gradio makes a session's state). ``cap_sessions`` replaces it by one that,
under one lock (a burst cannot slip past): refuses (HTTP 503, one line) a request that names no session or passes a
cap (``over_cap``), counts the session's state against its address (``session_state.StateLedger``), then lets the
group take turns by address (``take_turns``). A client invents as many session hashes as it likes, not addresses.
"""

from __future__ import annotations

import asyncio
import logging
import os

from explorer.core.images import set_decode_slots
from explorer.serve import request_rules
from explorer.serve.access import QUEUE_SIZE, Access
from explorer.serve.budget import HEAVY, TEXT, Budget
from explorer.serve.clients import UNKNOWN, address_of
from explorer.serve.log_limit import install as limit_the_log
from explorer.serve.session_state import StateLedger

log = logging.getLogger("explorer.access")
# Gradio's queue rebuilds a pandas summary of its last 10,000 events after every event by default (its
# monitoring page's statistics): 25-36 ms of the server's time per slider change. Every 100th event is enough.
ANALYTICS_EVERY = 100
IDLE_CHECK_S = 60.0  # how often idle sessions' state is looked for when no request comes


def install(app, access: Access):
    """The app's queue: two requests at a time; on a public page no request skips it (the REST routes are closed,
    every event is queued, ``page_guard`` refuses the direct routes), it holds at most ``QUEUE_SIZE`` and each
    visitor session at most ``access.session_cap``."""
    if access.public:
        app.queue(default_concurrency_limit=2, max_size=QUEUE_SIZE, api_open=False)
        for block_fn in app.fns.values():  # Gradio's example lists run unqueued: through the door like the rest
            if block_fn.fn is not None:
                block_fn.queue = True
        cap_sessions(app, access.session_cap, access.budget)
    else:
        app.queue(default_concurrency_limit=2)
    request_rules.install(app, access.budget, access.public)  # texts in the budget, heavy events grouped, no fetches
    limit_the_log()  # a flood of refusals or errors writes a line a minute, with its count
    set_decode_slots(access.budget.decodes_at_once)
    if "GRADIO_ANALYTICS_CACHE_FREQUENCY" not in os.environ:  # the owner's own setting wins
        app._queue.ANAYLTICS_CACHE_FREQUENCY = ANALYTICS_EVERY  # (sic: Gradio's spelling)
    return app


def cap_sessions(app, cap: int, budget: Budget) -> StateLedger:
    """Refuse a request (HTTP 503, said in one line) that names no session, or past a cap on what is queued or
    running: ``cap`` requests and ``budget.heavy_per_session`` heavy ones (``budget.HEAVY``) per session, and
    ``budget.requests_per_address`` and ``budget.heavy_per_address`` per client address (``explorer.serve.clients``).
    A visitor who sends ten big pictures at once waits for two, and the others' Draws are not queued behind all ten.
    Returns the ledger of the sessions' state (``app.explorer_state``)."""
    queue = app._queue
    push = queue.push
    door = asyncio.Lock()
    ledger = app.explorer_state = StateLedger(budget)

    async def capped_push(body, request, username):
        fn = app.fns.get(body.fn_index) if isinstance(body.fn_index, int) else None
        address = address_of(request.scope) if request else UNKNOWN
        async with door:
            message = over_cap(queue, body.session_hash, address, fn, cap, budget)
            if message is None:
                keep_state_in_budget(app, ledger, body.session_hash, address)
                answer = await push(body=body, request=request, username=username)
                if fn is not None and fn.concurrency_id in queue.event_queue_per_concurrency_id:
                    take_turns(queue, queue.event_queue_per_concurrency_id[fn.concurrency_id].queue)
                return answer
        log.warning("refused: %s", message)
        return False, message, "queue_full"

    queue.push = capped_push
    return ledger


def keep_state_in_budget(app, ledger: StateLedger, session: str, address: str) -> None:
    """Count ``session`` against ``address`` and forget the sessions past the budget's state bounds; then, while
    the page runs, look for idle ones every ``IDLE_CHECK_S`` (on the event loop, as every other change)."""
    holder = getattr(app, "state_holder", None)
    if holder is None:
        return
    gone = ledger.admit(holder, session, address, _busy(app))
    if gone:
        log.warning("forgot %d page sessions' state (past the state budget; %d so far)", len(gone), ledger.forgotten)
    if getattr(ledger, "timer", None) is None:
        loop = asyncio.get_running_loop()

        def idle_check():
            ledger.expire(holder, _busy(app))
            ledger.timer = loop.call_later(IDLE_CHECK_S, idle_check)

        ledger.timer = loop.call_later(IDLE_CHECK_S, idle_check)


def _busy(app) -> set[str]:
    """Sessions with an event queued or running."""
    return {event.session_hash for event in list(app._queue.event_ids_to_events.values())}


def over_cap(queue, session: str | None, address: str, fn, cap: int, budget: Budget) -> str | None:
    """Why one more request of ``fn`` from ``session`` at ``address`` would pass a cap (None: it would not)."""
    if not session:
        return "a request must name its session on this page"
    events = list(queue.event_ids_to_events.values())
    mine = [event for event in events if event.session_hash == session]
    ours = [event for event in events if client_of(event) == address]
    heavy = fn is not None and fn.concurrency_id == HEAVY["concurrency_id"]
    work = "pictures, maps or searches"
    checks = [(len(mine), cap, "this page", "requests"),
              (len(ours), budget.requests_per_address, "your address", "requests")]
    if heavy:
        checks += [(_in_group(mine, HEAVY), budget.heavy_per_session, "this page", work),
                   (_in_group(ours, HEAVY), budget.heavy_per_address, "your address", work)]
    if fn is not None and fn.concurrency_id == TEXT["concurrency_id"]:  # a caption read for its token counts
        checks.append((_in_group(ours, TEXT), budget.text_per_address, "your address", "caption counts"))
    for held, limit, who, what in checks:
        if limit is not None and held >= limit:
            return f"{who} already has {held} {what} waiting or running (at most {limit}): wait for them"
    return None


def _in_group(events: list, group: dict) -> int:
    return sum(event.concurrency_id == group["concurrency_id"] for event in events)


def client_of(event) -> str:
    """Whose turn an event is: its client's address (its session's hash when it has no request)."""
    request = getattr(event, "request", None)
    return address_of(request.scope) if request is not None else event.session_hash


def take_turns(queue, waiting: list) -> None:
    """Reorder a concurrency group's waiting events so that clients take turns: each address's k-th request
    (its running ones counted) waits behind every other address's earlier ones, arrival order otherwise.
    Gradio's queue is first come, first served: a client who queues many requests, through as many sessions as
    it likes, would otherwise hold every other visitor behind all of them."""
    group = {id(event) for event in waiting}
    turns: dict[str, int] = {}
    for event in list(queue.event_ids_to_events.values()):  # running in this group: they count as taken turns
        if id(event) not in group and waiting and event.concurrency_id == waiting[0].concurrency_id:
            turns[client_of(event)] = turns.get(client_of(event), 0) + 1
    ranked = []
    for position, event in enumerate(waiting):
        ranked.append((turns.get(client_of(event), 0), position, event))
        turns[client_of(event)] = turns.get(client_of(event), 0) + 1
    waiting[:] = [event for _, _, event in sorted(ranked, key=lambda item: item[:2])]
