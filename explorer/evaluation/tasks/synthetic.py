"""The ``synthetic`` task: the zoo benchmarked on the synthetic world (``explorer eval``: retrieval, hard
negatives, grounding and FLISM on held-out scenes). It runs over the whole zoo from its command only (no
sweep child), so it declares its options and no runner."""

from __future__ import annotations

from explorer.evaluation.tasks.base import Task, register
from explorer.evaluation.tasks.options import Option

OPTIONS = (Option("split", "the world's split scored (default test)", choices=("train", "val", "test"), default="test"),
           Option("limit", "scenes for retrieval and hard negatives (default 300)", kind="int", minimum=1),
           Option("grounding_limit", "the first scenes used for grounding and FLISM (default 80; 0: no grounding)",
                  kind="int", minimum=0),
           Option("quick", "a first look: the first 60 scenes for retrieval and hard negatives and the first 6 for "
                           "grounding (unless --limit / --grounding-limit say otherwise); under 2 minutes for two "
                           "demo-size models on 2 CPU cores", kind="flag"),
           Option("seed", "seeds torch and numpy inside each model's run, so a run is repeatable (default 0)",
                  kind="int", default=0))

TASK = register(Task("synthetic", "the zoo on the synthetic world (explorer eval)", OPTIONS))

__all__ = ["OPTIONS", "TASK"]
