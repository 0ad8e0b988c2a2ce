"""What a method's map kinds measured on the project's held-out evaluation, declared on its class.

A method without its own sentence map (CLIP, Long-CLIP, GOAL) opens on the map kind that grounded best
when it was measured, not on one kind for every model: GOAL's Grad-CAM is its worst. The class says the
figures and the command that measured them (``Method.measured_grounding``), so the page's kind note can
show them and a test can check the default against the results file the figures came from.

"Best" is one rule for every method: the highest mean of mIoU and pointing game (both grounding scores the
page shows; AUROC is left out, it ranks pixels, not a mask), ties to the higher pointing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping


@dataclass(frozen=True)
class MeasuredGrounding:
    """A method's grounding per map kind on a held-out evaluation.

    Attributes:
        figures: {map kind: (mIoU, pointing)} in percent, as the results file has them (one decimal).
        model: The model that was measured (a demo-zoo name).
        command: The command that measured them.
        results: Where the figures are kept (a path in the repository, or a URL).
    """

    figures: Mapping[str, tuple[float, float]]
    model: str
    command: str
    results: str

    @staticmethod
    def rank(figures: tuple[float, float]) -> tuple[float, float]:
        miou, pointing = figures
        return ((miou + pointing) / 2, pointing)

    def best(self, offered=None) -> str | None:
        """The kind with the best grounding among ``offered`` (None: every measured kind)."""
        kinds = [k for k in self.figures if offered is None or k in offered]
        return max(kinds, key=lambda k: self.rank(self.figures[k]), default=None)

    def describe(self, kind: str) -> str:
        """'mIoU 10.7, pointing 30.2 % on demo-goal' for a measured kind ('' for one not measured)."""
        if kind not in self.figures:
            return ""
        miou, pointing = self.figures[kind]
        return f"mIoU {miou:.1f} %, pointing {pointing:.1f} % for {self.model}"


# The held-out world the built-in methods were measured on (docs/explainers.md): 80 test scenes, 318 object
# sentences of a world seed the demo zoo never trained on.
HELD_OUT_COMMAND = ("explorer data synth DIR --n 1000 --seed 3 --size 64 && explorer eval --zoo demo --data DIR "
                    "--limit 100 --grounding-limit 80")
HELD_OUT_RESULTS = "zoo_research/results/demo-eval-seed3.json"


def held_out(model: str, figures: Mapping[str, tuple[float, float]]) -> MeasuredGrounding:
    """Figures of a demo model on the held-out world of ``HELD_OUT_COMMAND``."""
    return MeasuredGrounding(figures=dict(figures), model=model, command=HELD_OUT_COMMAND, results=HELD_OUT_RESULTS)


__all__ = ["HELD_OUT_COMMAND", "HELD_OUT_RESULTS", "MeasuredGrounding", "held_out"]
