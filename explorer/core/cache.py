"""The one cache type: least recently used, bounded in entries and in bytes, safe across threads.

The app serves several sessions at once, and every cache in it is shared or could be, so the
bookkeeping is locked and a value is computed once per key even when two requests ask for it
together (the second waits for the first). Values are computed outside the cache's lock, so a
slow computation for one key never blocks hits on others.

Every cache has a name that says what it holds and a byte bound measured by ``nbytes`` (tensors,
arrays, pictures, and the containers and dataclasses around them), so a browser session cannot
grow the process without limit: a value bigger than the whole bound is returned but not kept.
``live_caches()`` lists them all, with what each holds, for benchmarks and logs.
"""

from __future__ import annotations

import dataclasses
import sys
import threading
import weakref
from collections import OrderedDict, deque
from dataclasses import dataclass
from typing import Any, Callable, Generic, Hashable, TypeVar

import numpy as np

from explorer.core.deadline import check as check_deadline
from explorer.core.tensors import torch_if_imported

V = TypeVar("V")
MB = 1 << 20
GB = 1 << 30


@dataclass(frozen=True)
class CacheStats:
    name: str
    items: int
    bytes: int
    max_items: int | None
    max_bytes: int | None
    hits: int
    misses: int

    def line(self) -> str:
        bound = f"{self.max_bytes / MB:.0f} MB" if self.max_bytes else "no byte bound"
        items = f"/{self.max_items}" if self.max_items else ""
        return f"{self.name}: {self.items}{items} entries, {self.bytes / MB:.1f} MB of {bound}"


_LIVE: "weakref.WeakSet[BoundedCache]" = weakref.WeakSet()


class _Slot:
    """A key being computed: its lock, the thread computing it, how many threads want it."""

    def __init__(self):
        self.lock = threading.Lock()
        self.owner: int | None = None
        self.waiters = 0


def live_caches() -> list[CacheStats]:
    """The state of every cache alive in the process, largest first."""
    return sorted((cache.stats() for cache in list(_LIVE)), key=lambda s: -s.bytes)


class BoundedCache(Generic[V]):
    """LRU over hashable keys, at most ``max_items`` entries and ``max_bytes`` bytes (None: no bound)."""

    def __init__(self, name: str, max_items: int | None = None, max_bytes: int | None = None,
                 sizeof: Callable[[Any], int] | None = None, keep_oversized: bool = False):
        """``keep_oversized``: a value bigger than ``max_bytes`` is still kept, alone (everything else
        is dropped). For values that stay in memory anyway while in use, such as a loaded model:
        not keeping it would only load it again on the next request."""
        if max_items is not None and max_items < 1:
            raise ValueError(f"the cache {name!r} must hold at least one entry")
        self.name, self.max_items, self.max_bytes = name, max_items, max_bytes
        self.keep_oversized = keep_oversized
        self._sizeof = sizeof or nbytes
        self._items: OrderedDict[Hashable, tuple[V, int]] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()
        self._computing: dict[Hashable, _Slot] = {}  # keys being computed now
        self._forgotten: deque = deque()  # keys to drop at the next operation (see ``forget``)
        self.hits = self.misses = 0
        _LIVE.add(self)

    def get(self, key: Hashable, compute: Callable[[], V]) -> V:
        """The cached value of ``key``, or ``compute()``'d, stored and returned.

        One computation per key at a time: others asking for it wait, then take the stored value
        (or compute it themselves if it failed). A ``compute`` that asks for its own key raises
        instead of waiting for itself forever.
        """
        me = threading.get_ident()
        with self._lock:
            self._purge()
            if key in self._items:
                return self._hit(key)
            slot = self._computing.get(key)
            if slot is None:
                slot = self._computing[key] = _Slot()
            elif slot.owner == me:
                raise RuntimeError(f"{self.name}: computing {key!r} asked for {key!r} again")
            slot.waiters += 1
        try:
            with slot.lock:
                with self._lock:
                    if key in self._items:  # computed while we waited
                        return self._hit(key)
                    # A request past its time computes nothing more (``explorer.core.deadline``), checked here,
                    # once it holds the key: it may have waited for another request's computation.
                    check_deadline()
                    self.misses += 1
                    slot.owner = me
                try:
                    value = compute()
                finally:
                    slot.owner = None
                self.put(key, value)
                return value
        finally:
            with self._lock:
                slot.waiters -= 1
                if slot.waiters == 0 and self._computing.get(key) is slot:
                    del self._computing[key]

    def put(self, key: Hashable, value: V) -> None:
        size = self._sizeof(value)
        with self._lock:
            self._purge()
            if key in self._items:
                self._bytes -= self._items.pop(key)[1]
            if self.max_bytes is not None and size > self.max_bytes:
                if not self.keep_oversized:
                    return  # bigger than the whole cache: the caller has it, nobody keeps it
                self._items.clear()
                self._bytes = 0
            self._items[key] = (value, size)
            self._bytes += size
            self._evict()

    def peek(self, key: Hashable) -> V | None:
        """The value if cached (counts as a use), else None; never computes."""
        with self._lock:
            return self._hit(key) if key in self._items else None

    def forget(self, key: Hashable) -> None:
        """Drop ``key`` at the cache's next operation. Takes no lock, so it is safe where a lock may
        already be held by this thread: a ``weakref.finalize`` callback runs wherever garbage
        collection happens to run, possibly inside this cache's own ``put``."""
        self._forgotten.append(key)

    def _purge(self) -> None:
        while self._forgotten:
            entry = self._items.pop(self._forgotten.popleft(), None)
            if entry is not None:
                self._bytes -= entry[1]

    def discard(self, predicate: Callable[[Hashable], bool]) -> int:
        """Drop the entries whose key matches; how many were dropped."""
        with self._lock:
            self._purge()
            doomed = [key for key in self._items if predicate(key)]
            for key in doomed:
                self._bytes -= self._items.pop(key)[1]
            return len(doomed)

    def clear(self) -> None:
        self.discard(lambda key: True)

    def keys(self) -> list[Hashable]:
        with self._lock:
            self._purge()
            return list(self._items)

    def __len__(self) -> int:
        with self._lock:
            self._purge()
            return len(self._items)

    @property
    def nbytes(self) -> int:
        with self._lock:
            self._purge()
            return self._bytes

    def stats(self) -> CacheStats:
        with self._lock:
            self._purge()
            return CacheStats(self.name, len(self._items), self._bytes, self.max_items, self.max_bytes,
                              self.hits, self.misses)

    def _hit(self, key: Hashable) -> V:
        self.hits += 1
        self._items.move_to_end(key)
        return self._items[key][0]

    def _evict(self) -> None:
        while len(self._items) > 1 and ((self.max_items is not None and len(self._items) > self.max_items)
                               or (self.max_bytes is not None and self._bytes > self.max_bytes)):
            _, (_, size) = self._items.popitem(last=False)
            self._bytes -= size


def nbytes(value: Any) -> int:
    """Bytes a value holds in memory: tensor and array data, pictures' pixels, and what containers,
    dataclasses and objects hold, each buffer counted once. Small Python objects count their
    ``sys.getsizeof``; it is an estimate for bounding caches, not an exact account (a value it
    cannot walk, such as a sparse tensor or a very deep structure, counts its ``sys.getsizeof``)."""
    try:
        return _nbytes(value, set())
    except (RuntimeError, NotImplementedError, RecursionError, TypeError):
        return sys.getsizeof(value)


def _nbytes(value: Any, seen: set[int]) -> int:
    if value is None or isinstance(value, (bool, int, float)):
        return 0
    if id(value) in seen:
        return 0
    seen.add(id(value))
    if isinstance(value, np.ndarray):
        base = value.base if value.base is not None else value
        if id(base) in seen and base is not value:
            return 0
        seen.add(id(base))
        return int(base.nbytes) if isinstance(base, np.ndarray) else int(value.nbytes)
    if isinstance(value, (str, bytes, bytearray)):
        return sys.getsizeof(value)
    torch = torch_if_imported()
    if torch is not None:
        if isinstance(value, torch.Tensor):
            storage = value.untyped_storage()
            key = ("storage", storage.data_ptr())
            if hash(key) in seen:
                return 0
            seen.add(hash(key))
            return int(storage.nbytes())
        if isinstance(value, torch.nn.Module):
            return sum(_nbytes(t, seen) for t in (*value.parameters(), *value.buffers()))
    image_module = sys.modules.get("PIL.Image")
    if image_module is not None and isinstance(value, image_module.Image):
        return value.width * value.height * len(value.getbands())
    if isinstance(value, dict):
        return sum(_nbytes(k, seen) + _nbytes(v, seen) for k, v in value.items())
    if isinstance(value, (list, tuple, set, frozenset)):
        return sys.getsizeof(value) + sum(_nbytes(item, seen) for item in value)
    if dataclasses.is_dataclass(value):
        return sum(_nbytes(getattr(value, f.name, None), seen) for f in dataclasses.fields(value))
    if hasattr(value, "__dict__"):
        return sum(_nbytes(v, seen) for v in vars(value).values())
    return sys.getsizeof(value)
