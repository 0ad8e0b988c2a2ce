"""How many torch threads a CPU training run uses: as many as the machine has, unless one is measured faster.

On a machine other work shares, torch's threads wait for each other at the end of every operation: a thread
the system set aside holds the others. Measured on a 2-core machine at a load average of 9-12 (issue 63): a
training step of the demo base (ViT width 128, 3 layers, 64 px, 248 tokens, batch 32) took 7.5-13 s of wall
time with torch's 2 threads and 3.2-5.7 s with 1 (the work itself, CPU time of one thread, is 1.1-1.4 s). On
an idle machine 2 threads are the faster. Neither can be told from the machine's description, so a background
run on the CPU that was not given ``cpu_threads`` times both, on a block shaped like a ViT's (attention and
MLP, forward and backward), and keeps the faster.

The choice changes no formula; float sums may round otherwise with another thread count, as between machines.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass

import torch

ROUNDS = 2  # alternated timings of each count: the load of a shared machine moves within seconds
PROBE_TOKENS, PROBE_WIDTH = 1024, 128  # 4 pictures of 256 patches at the demo base's width


@dataclass(frozen=True)
class ThreadChoice:
    threads: int
    seconds: dict[int, float]  # thread count -> median seconds of the probe

    def line(self) -> str:
        timed = ", ".join(f"{n} thread{'s' if n > 1 else ''} {s * 1000:.0f} ms" for n, s in self.seconds.items())
        return f"cpu threads: {self.threads} (measured on a ViT-sized block: {timed})"


def _probe(tokens: int = PROBE_TOKENS, width: int = PROBE_WIDTH):
    """A forward and backward of one pre-norm transformer block, the shape a training step is made of."""
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(tokens // 256, 256, width, generator=generator, requires_grad=True)
    block = torch.nn.TransformerEncoderLayer(width, 2, 4 * width, dropout=0.0, batch_first=True, norm_first=True)

    def run() -> None:
        block(x).square().mean().backward()

    return run


def measure_threads(candidates: tuple[int, ...] | None = None, rounds: int = ROUNDS) -> ThreadChoice:
    """Time the probe with each thread count (alternating, ``rounds`` times each) and keep the fastest; torch's
    thread count is left at the choice. ``candidates``: torch's current count and 1 by default."""
    if candidates is None:
        candidates = tuple(dict.fromkeys((torch.get_num_threads(), 1)))
    run = _probe()
    times: dict[int, list[float]] = {n: [] for n in candidates}
    for _ in range(rounds + 1):  # the first round warms the kernels and is not counted
        for n in candidates:
            torch.set_num_threads(n)
            start = time.perf_counter()
            run()
            times[n].append(time.perf_counter() - start)
    seconds = {n: statistics.median(t[1:] or t) for n, t in times.items()}
    best = min(seconds, key=seconds.get)
    torch.set_num_threads(best)
    return ThreadChoice(best, seconds)


__all__ = ["ThreadChoice", "measure_threads"]
