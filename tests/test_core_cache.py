"""The one cache type: bounded in entries and bytes, thread-safe, one computation per key."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest
import torch
from PIL import Image

from explorer.core.cache import MB, BoundedCache, live_caches, nbytes


def test_entries_bound_drops_the_least_recently_used():
    cache = BoundedCache("test", max_items=2)
    cache.get("a", lambda: 1)
    cache.get("b", lambda: 2)
    cache.get("a", lambda: 0)  # a is now the most recent
    cache.get("c", lambda: 3)
    assert cache.keys() == ["a", "c"]
    assert (cache.hits, cache.misses) == (1, 3)


def test_bytes_bound_evicts_until_the_cache_fits():
    cache = BoundedCache("test", max_bytes=3 * MB)
    for key in "abcd":
        cache.get(key, lambda: np.zeros(MB, dtype=np.uint8))
    assert cache.keys() == ["b", "c", "d"]
    assert cache.nbytes == 3 * MB


def test_a_value_larger_than_the_bound_is_returned_not_kept():
    cache = BoundedCache("test", max_bytes=MB)
    big = cache.get("big", lambda: np.zeros(2 * MB, dtype=np.uint8))
    assert big.nbytes == 2 * MB and len(cache) == 0 and cache.nbytes == 0


def test_two_threads_asking_for_one_key_compute_it_once():
    cache, calls = BoundedCache("test", max_items=4), []

    def slow():
        calls.append(1)
        time.sleep(0.2)
        return object()

    results = []
    threads = [threading.Thread(target=lambda: results.append(cache.get("k", slow))) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(calls) == 1 and len({id(r) for r in results}) == 1


def test_a_failed_computation_is_not_cached_and_can_be_retried():
    cache = BoundedCache("test", max_items=2)
    with pytest.raises(RuntimeError):
        cache.get("k", lambda: (_ for _ in ()).throw(RuntimeError("boom")))
    assert cache.get("k", lambda: 5) == 5


def test_nbytes_counts_buffers_once_through_containers():
    tensor = torch.zeros(1000, dtype=torch.float32)
    array = np.zeros((10, 10), dtype=np.float64)
    picture = Image.new("RGB", (20, 10))
    assert nbytes(tensor) == 4000
    assert nbytes([tensor, tensor[:10]]) >= 4000 and nbytes([tensor, tensor[:10]]) < 8000  # a view shares storage
    assert nbytes(array) == 800
    assert nbytes(picture) == 600
    assert nbytes({"t": tensor, "a": array, "p": picture}) >= 5400


def test_every_cache_says_what_it_holds():
    cache = BoundedCache("pictures for a test", max_items=3, max_bytes=MB)
    cache.get(1, lambda: np.zeros(1000, dtype=np.uint8))
    stats = [s for s in live_caches() if s.name == "pictures for a test"]
    assert stats and stats[0].items == 1 and stats[0].bytes == 1000
    assert "pictures for a test: 1/3 entries" in stats[0].line()


def test_a_failed_computation_lets_one_waiter_retry_at_a_time():
    cache, running, peak, lock = BoundedCache("test", max_items=4), [0], [0], threading.Lock()

    def flaky(fail: bool):
        def compute():
            with lock:
                running[0] += 1
                peak[0] = max(peak[0], running[0])
            time.sleep(0.1)
            with lock:
                running[0] -= 1
            if fail:
                raise RuntimeError("boom")
            return "ok"
        return compute

    results = []

    def ask(fail):
        try:
            results.append(cache.get("k", flaky(fail)))
        except RuntimeError:
            results.append("failed")

    threads = [threading.Thread(target=ask, args=(i == 0,)) for i in range(4)]
    threads[0].start()
    time.sleep(0.02)
    for thread in threads[1:]:
        thread.start()
    for thread in threads:
        thread.join()
    assert peak[0] == 1 and sorted(results) == ["failed", "ok", "ok", "ok"]
    assert not cache._computing


def test_a_computation_that_asks_for_its_own_key_raises_instead_of_hanging():
    cache = BoundedCache("test", max_items=2)
    with pytest.raises(RuntimeError, match="asked for"):
        cache.get("k", lambda: cache.get("k", lambda: 1))
    assert cache.get("k", lambda: 2) == 2  # the cache still works


def test_an_oversized_model_is_kept_alone_when_the_cache_says_so():
    cache = BoundedCache("models", max_items=2, max_bytes=MB, keep_oversized=True)
    cache.get("small", lambda: np.zeros(1000, dtype=np.uint8))
    cache.get("big", lambda: np.zeros(2 * MB, dtype=np.uint8))
    assert cache.keys() == ["big"]
    cache.get("small", lambda: np.zeros(1000, dtype=np.uint8))
    assert cache.keys() == ["small"]  # the big one goes as soon as anything else is kept


def test_nbytes_of_what_it_cannot_walk_is_its_python_size():
    sparse = torch.zeros(10, 10).to_sparse()
    assert nbytes(sparse) > 0


def test_a_key_forgotten_from_a_finalizer_goes_without_taking_the_lock():
    """``forget`` may run inside the cache's own locked code (a finalizer during garbage collection):
    it must not wait for the lock, and the key is gone at the next operation."""
    cache = BoundedCache("test", max_items=4)
    cache.get("a", lambda: np.zeros(1000, dtype=np.uint8))
    cache.get("b", lambda: np.zeros(1000, dtype=np.uint8))
    with cache._lock:  # as if garbage collection ran the finalizer inside put()
        cache.forget("a")
    assert cache.keys() == ["b"] and cache.nbytes == 1000
