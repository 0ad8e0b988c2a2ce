"""How many forwards an evaluation will make, and how long it will take on this machine (issue 63, part 3).

Before a run, each evaluation says the forwards it will make (pictures and texts through the towers, counted
from what is left to score); after its first batches it says how long those took and the time left at that
pace, so the estimate is this machine's, under its present load, for this model, not a constant measured
elsewhere. One ``Pace`` per model and pass.
"""

from __future__ import annotations

import time
from typing import Callable

FIRST_BATCHES = 2  # batches timed before the estimate is said: the first alone carries warm-up costs


class Pace:
    """Says ``what``'s forwards at ``start`` and, after ``FIRST_BATCHES`` batches, the time left at their pace.

    ``say``: where the lines go (None: nowhere); ``clock``: seconds, ``time.perf_counter`` unless a test
    gives its own; ``unit``: what is counted ("map passes" where one step is an explainer's forward and
    backward, not a bare forward)."""

    def __init__(self, what: str, say: Callable[[str], None] | None, clock: Callable[[], float] = time.perf_counter,
                 first: int = FIRST_BATCHES, unit: str = "forwards"):
        self.name = self.what = what
        self.say, self.clock, self.first, self.unit = say, clock, first, unit
        self._phase, self._done = None, 0
        self.forwards = self.made = self.batches = 0
        self.started = 0.0
        self.estimate: float | None = None  # seconds left when it was said

    def start(self, forwards: int, detail: str = "") -> None:
        """``forwards`` to make from now (``detail``: what they are, e.g. "12 pictures, 40 texts")."""
        self.forwards, self.made, self.batches, self.estimate = forwards, 0, 0, None
        self.started = self.clock()
        self._say(f"{self.what}: {forwards} {self.unit} to make" + (f" ({detail})" if detail else ""))

    def batch_done(self, forwards: int) -> None:
        """One batch of ``forwards`` made; the estimate is said once ``first`` batches are timed."""
        self.made += forwards
        self.batches += 1
        if self.batches != self.first or self.made >= self.forwards:
            return
        elapsed = self.clock() - self.started
        self.estimate = elapsed / self.made * (self.forwards - self.made)
        self._say(f"{self.what}: ~{self.forwards} {self.unit}, first batches {elapsed / self.batches:.2f} s each: "
                  f"{_duration(self.estimate)} left")

    def over(self, batches, forwards_of: Callable = len, detail: str = ""):
        """Each of ``batches`` (a list), timed: ``forwards_of(batch)`` forwards each."""
        batches = list(batches)
        self.start(sum(forwards_of(batch) for batch in batches), detail)
        for batch in batches:
            yield batch
            self.batch_done(forwards_of(batch))

    def progress(self, done: int, total: int, phase: str) -> None:
        """An ``EmbeddingStore`` progress callback: the first call of a phase starts it, each next one is a
        batch of the units made since the last."""
        if phase != self._phase:
            self._phase, self._done = phase, done
            self.what = f"{self.name}: {phase}"
            self.start(total - done)
            return
        made, self._done = done - self._done, done
        self.batch_done(made)

    def _say(self, line: str) -> None:
        if self.say is not None:
            self.say(line)


def _duration(seconds: float) -> str:
    if seconds < 90:
        return f"about {seconds:.0f} s"
    if seconds < 5400:
        return f"about {seconds / 60:.0f} min"
    return f"about {seconds / 3600:.1f} h"


__all__ = ["FIRST_BATCHES", "Pace"]
