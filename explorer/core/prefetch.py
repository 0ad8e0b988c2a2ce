"""Decoding overlapped with compute (issue 63, part 3): the next batch's pictures are read in a background
thread while the model runs on the current one.

PIL's decoders and resizes release the GIL, so on 2 cores the read of batch i + 1 runs beside the forward of
batch i instead of before it. At most ``AHEAD`` batches are read ahead: the decoded pictures of a batch are
the memory it costs. ``read`` must turn a picture that does not open into its skip record (the evaluations'
skipped-with-reason path), not raise; anything it raises reaches the caller at that batch.
"""

from __future__ import annotations

from collections import deque
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Iterable, Iterator

AHEAD = 1  # batches decoded ahead of the one being scored


def prefetched(batches: Iterable, read: Callable, ahead: int = AHEAD) -> Iterator[tuple]:
    """(batch, read(batch)) for each of ``batches``, in order; ``ahead`` (0: no thread) batches read ahead."""
    if ahead < 1:
        for batch in batches:
            yield batch, read(batch)
        return
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="decode") as pool:
        queued: deque = deque()
        for batch in batches:
            queued.append((batch, pool.submit(read, batch)))
            if len(queued) > ahead:
                head, future = queued.popleft()
                yield head, future.result()
        while queued:
            head, future = queued.popleft()
            yield head, future.result()


__all__ = ["AHEAD", "prefetched"]
