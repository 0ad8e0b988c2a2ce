"""The learning-rate schedule: linear warm-up, then cosine decay to a floor.

For optimizer step ``s`` (0-based, the s-th update) of ``total`` with ``warmup``
warm-up steps, every group's rate is its base rate times

    factor(s) = (s + 1) / warmup                                    for s < warmup
    factor(s) = floor + (1 - floor) * (1 + cos(pi * p)) / 2,        p = (s - warmup) / (total - warmup)

so the first update already moves (1 / warmup of the rate, not zero), the first
update after warm-up runs at the full rate, and the curve reaches ``floor`` at
s = total (the last update, s = total - 1, is one step short of it). This is
open_clip's schedule with a floor (``min_ratio``) added.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from explorer.core.errors import ConfigError


@dataclass
class WarmupCosine:
    """``factor(step)`` as above; a picklable callable, so LambdaLR can save and restore it."""

    total_steps: int
    warmup_steps: int = 0
    min_ratio: float = 0.0

    def __post_init__(self):
        if self.total_steps < 1:
            raise ConfigError(f"the schedule needs at least one step, got total_steps={self.total_steps}")
        if not 0 <= self.warmup_steps <= self.total_steps:
            raise ConfigError(f"warmup_steps must be in 0..{self.total_steps}, got {self.warmup_steps}")
        if not 0.0 <= self.min_ratio <= 1.0:
            raise ConfigError(f"min_ratio must be in [0, 1], got {self.min_ratio}")

    def __call__(self, step: int) -> float:
        if step < self.warmup_steps:
            return (step + 1) / self.warmup_steps
        decay_steps = self.total_steps - self.warmup_steps
        progress = min(1.0, (step - self.warmup_steps) / decay_steps) if decay_steps > 0 else 1.0
        return self.min_ratio + (1.0 - self.min_ratio) * 0.5 * (1.0 + math.cos(math.pi * progress))


def warmup_steps_for(total_steps: int, warmup: float | int) -> int:
    """``warmup`` as a step count: an int is steps, a float in [0, 1) a share of ``total_steps``."""
    if isinstance(warmup, float) and 0.0 <= warmup < 1.0:
        return int(round(warmup * total_steps))
    steps = int(warmup)
    if steps != warmup or steps < 0:
        raise ConfigError(f"warmup is a step count (int >= 0) or a share of the run (float in [0, 1)), not {warmup!r}")
    return min(steps, total_steps)


def build_scheduler(optimizer: torch.optim.Optimizer, schedule: WarmupCosine) -> torch.optim.lr_scheduler.LambdaLR:
    """LambdaLR over every group (their ``initial_lr`` is the base rate); step it once per optimizer step."""
    return torch.optim.lr_scheduler.LambdaLR(optimizer, schedule)
