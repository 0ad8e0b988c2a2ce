"""What each page session holds in the server's memory, counted in bytes against its address and the page.

Gradio keeps a ``SessionState`` per session hash (``app.state_holder``): every ``gr.State`` value (the board's view,
stored picture features, swap records, span rows, focus data) and a copy of each component's config. A client
invents session hashes, so the page's cookie count does not bound them: ``StateLedger`` keys each session by the
address that queued its events (``clients.address_of``) and, each time a request is queued (``queue_guard``), it

- measures the sessions whose events have ended since (``state_bytes``: arrays, tensors and pictures by their buffers,
  everything else by ``sys.getsizeof``, each object once). Each session holds a config per component (454 on the
  page, 1.1 MB), which Gradio replaces whole when an event updates a component, and in which it only sets the
  ``value`` in place: ``ConfigSizes`` keeps each config's bytes but its value by the config's identity, so a
  measurement walks the values and the state, not the page's 20,000 config objects again (47 ms -> 1.3 ms an
  event, on the event loop, before every queued event),
- forgets, oldest first, a session past its address's count (``Budget.state_sessions_per_address``) or byte share
  (``state_bytes_per_address``), the page's least recently used ones past ``state_bytes_total`` whatever the number
  of addresses, and any idle past ``state_seconds``.

Forgetting frees the session's state (Gradio makes a fresh one if the visitor comes back: the page then asks for a
new Draw). A session with an event queued or running is never forgotten; the one asking is forgotten last.
"""

from __future__ import annotations

import inspect
import sys
import time
from collections import OrderedDict
from dataclasses import dataclass, field

from explorer.serve.budget import Budget

OBJECTS_WALKED = 200_000  # a bound on one measurement's work: past it the rest is counted as nothing more


class ConfigSizes:
    """The bytes of a session's component configs, each but its ``value``, kept by the config's identity.

    Gradio's ``SessionState.config_values`` maps a component to its config dict; an event's update replaces the
    dict (``config_for_block``) and a new value is set in place in ``props["value"]``. So a config's bytes without
    its value hold while the same dict (and the same ``props`` dict) is there: the cache holds the dicts it
    measured (the session holds them too), so an identity cannot be reused while it is kept."""

    def __init__(self):
        self.sizes: dict = {}  # component key -> (config, props, bytes without the value)

    def fixed_bytes(self, configs: dict) -> int:
        total, kept = 0, {}
        for key, config in configs.items():
            props = _props(config)
            known = self.sizes.get(key)
            if known is None or known[0] is not config or known[1] is not props:
                known = (config, props, deep_bytes(_without_value(config), keys=False))
            kept[key] = known
            total += known[2]
        self.sizes = kept  # replaced configs are let go
        return total


def _props(config):
    """A component config's ``props`` (None when the config is not a dict)."""
    return config.get("props") if isinstance(config, dict) else None


def _without_value(config):
    """``config`` with ``props["value"]`` left out (the value is measured with the rest of the session)."""
    props = _props(config)
    if not isinstance(props, dict) or "value" not in props:
        return config
    return {**config, "props": {name: prop for name, prop in props.items() if name != "value"}}


@dataclass
class Held:
    address: str
    bytes: int = 0
    used: float = field(default_factory=time.monotonic)
    dirty: bool = True  # an event may have written since the last measurement
    configs: ConfigSizes = field(default_factory=ConfigSizes)  # its configs' bytes (measured once each)


class StateLedger:
    """Sessions' state per address, with the budget's counts and bytes (called on the event loop only)."""

    def __init__(self, budget: Budget, clock=time.monotonic):
        self.budget, self.clock = budget, clock
        self.sessions: OrderedDict[str, Held] = OrderedDict()  # least recently used first
        self.forgotten = 0  # sessions forgotten so far (for the log and the tests)

    def admit(self, holder, session: str, address: str, busy: set[str]) -> list[str]:
        """Count ``session`` (from ``address``, about to queue an event) and enforce every bound on ``holder``
        (Gradio's ``StateHolder``); ``busy``: sessions with events queued or running. Returns the sessions
        forgotten."""
        now = self.clock()
        held = self.sessions.get(session)
        if held is None or held.address != address:
            held = self.sessions[session] = Held(address, used=now)
        held.used, held.dirty = now, True
        self.sessions.move_to_end(session)
        self._measure(holder, busy)
        return self._enforce(holder, session, busy, now)

    def bytes_of(self, address: str | None = None) -> int:
        return sum(h.bytes for h in self.sessions.values() if address is None or h.address == address)

    def _measure(self, holder, busy: set[str]) -> None:
        data = getattr(holder, "session_data", {})
        for session, held in self.sessions.items():
            if held.dirty and session in data:
                held.bytes = state_bytes(data[session], held.configs)
                held.dirty = session in busy  # still running: measured again next time
            elif session not in data:
                held.bytes = 0

    def _enforce(self, holder, asking: str, busy: set[str], now: float) -> list[str]:
        budget, gone = self.budget, self.idle(busy, now)
        address = self.sessions[asking].address
        ours = [s for s, h in self.sessions.items() if h.address == address and s not in gone]
        gone += _oldest_past(ours, self.sessions, budget.state_sessions_per_address, budget.state_bytes_per_address,
                             asking, busy)
        everyone = [s for s in self.sessions if s not in gone]
        gone += _oldest_past(everyone, self.sessions, None, budget.state_bytes_total, asking, busy)
        for session in gone:
            self.forget(holder, session)
        return gone

    def idle(self, busy: set[str], now: float) -> list[str]:
        """Sessions unused for longer than ``state_seconds`` with nothing queued or running."""
        seconds = self.budget.state_seconds
        if seconds is None:
            return []
        return [s for s, h in self.sessions.items() if now - h.used > seconds and s not in busy]

    def expire(self, holder, busy: set[str]) -> None:
        for session in self.idle(busy, self.clock()):
            self.forget(holder, session)

    def forget(self, holder, session: str) -> None:
        """Free ``session``'s state in ``holder`` and stop counting it."""
        self.sessions.pop(session, None)
        state = getattr(holder, "session_data", {}).pop(session, None)
        getattr(holder, "time_last_used", {}).pop(session, None)
        if state is not None:
            self.forgotten += 1
            for component, value, _ in list(state.state_components):
                try:
                    component.delete_callback(value)
                except Exception:  # noqa: BLE001 - a state's own clean-up failing still frees the rest
                    pass


def _oldest_past(sessions: list[str], held: dict[str, Held], count: int | None, limit: int | None, asking: str,
                 busy: set[str]) -> list[str]:
    """The oldest of ``sessions`` (least recently used first) to forget so that at most ``count`` remain and their
    bytes fit ``limit``: never a busy one, the asking one last."""
    order = [s for s in sessions if s != asking and s not in busy] + ([asking] if asking in sessions else [])
    kept, total, gone = len(sessions), sum(held[s].bytes for s in sessions), []
    for session in order:
        if not ((count is not None and kept > count) or (limit is not None and total > limit)):
            break
        gone.append(session)
        kept -= 1
        total -= held[session].bytes
    return gone


def _value_of(config):
    props = _props(config)
    return props.get("value") if isinstance(props, dict) else None


def state_bytes(state, configs: ConfigSizes | None = None) -> int:
    """What one Gradio ``SessionState`` holds: its state values and the component configs it copied, each config's
    bytes but its value from ``configs`` while it is the same dict (a new ``ConfigSizes`` when none is given)."""
    config_values = getattr(state, "config_values", {})
    fixed = (configs or ConfigSizes()).fixed_bytes(config_values)
    parts = [getattr(state, "state_data", {}), [_value_of(config) for config in config_values.values()]]
    config = getattr(state, "blocks_config", None)
    blocks = getattr(config, "blocks", {})
    root = getattr(config, "root_block", None)
    defaults = getattr(getattr(root, "default_config", None), "blocks", None) or {}
    # Components an event replaced (an update): their values only; the rest of a component is the page's.
    parts.append([getattr(b, "value", None) for key, b in blocks.items() if defaults.get(key) is not b])
    return fixed + deep_bytes(parts)


def deep_bytes(value, limit: int = OBJECTS_WALKED, keys: bool = True) -> int:
    """The bytes ``value`` keeps alive: arrays, tensors and pictures by their buffers, containers and objects by
    ``sys.getsizeof`` plus what they hold, each object once; at most ``limit`` objects walked. ``keys=False``
    leaves dicts' keys out (a config's prop names, strings every config shares)."""
    seen: set[int] = set()
    stack, total = [value], 0
    while stack and len(seen) < limit:
        item = stack.pop()
        if id(item) in seen or item is None or isinstance(item, (bool, int, float, type)):
            continue
        seen.add(id(item))
        if _shared(item):
            continue
        buffer = _buffer_bytes(item)
        if buffer is not None:
            total += buffer
            continue
        total += sys.getsizeof(item, 64)
        if isinstance(item, (str, bytes, bytearray)):
            continue
        if isinstance(item, dict):
            if keys:
                stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, (list, tuple, set, frozenset)):
            stack.extend(item)
        else:
            inner = getattr(item, "__dict__", None)
            if isinstance(inner, dict):
                stack.append(inner)
            for name in getattr(type(item), "__slots__", ()):
                stack.append(getattr(item, name, None))
    return total


def _shared(item) -> bool:
    """Objects a session's state may point at but does not own: models, Gradio's components, code."""
    kind = type(item)
    return (kind.__module__.startswith("gradio") or inspect.isroutine(item) or inspect.ismodule(item)
            or (hasattr(item, "state_dict") and hasattr(item, "parameters")))  # a model: the zoo's, shared


def _buffer_bytes(item) -> int | None:
    """An array's, tensor's or picture's buffer in bytes (None: not one of them)."""
    module = type(item).__module__
    if module.startswith("numpy") and hasattr(item, "nbytes"):
        base = getattr(item, "base", None)
        return int(base.nbytes if getattr(base, "nbytes", None) else item.nbytes)
    if module.startswith("torch") and hasattr(item, "untyped_storage"):
        try:
            return int(item.untyped_storage().nbytes())
        except Exception:  # noqa: BLE001 - a tensor without storage (meta) holds nothing
            return 0
    if module.startswith("PIL.") and hasattr(item, "size") and hasattr(item, "mode"):
        width, height = item.size
        return width * height * max(len(item.getbands()), 1)
    return None
