"""Learning curves of the demo base per attribute, for the recipe kept and the ones dropped (issue 34).

    python zoo_research/plot_binding_curves.py [--out docs/base-learning-curves.png]

Reads ``zoo_research/results/binding_curves/*.jsonl`` (one file per run; rows with "samples", "measure" and one
value per attribute); ``build-clip-see`` and ``build-clip-base`` are copies of the build's own
``<work>/runs/<run>/curves.jsonl`` (the recipe kept: the attention-pooled base on 24,000 scenes, a
4,000-step seeing stage, a 2,400-step binding stage with the patch heads on); ``see4000-patchheads-bind-1200``
that binding stage's 1,200-step schedule (the zoo before); ``see2000-*`` the same with the 2,000-step seeing stage of the zoo before;
``scenes6k-*`` that on the 6,000-scene world of the zoo before it; ``*-gpu`` runs of the same code on a GPU
(``px128-see4000``: 128 px pictures, 8 px patches; ``deep6-see4000``: a 6-layer image tower;
``seebind-see2000``: the patch heads kept through the binding stage); ``see4000-negclip-bind-1200`` the
binding stage without the patch heads, from the 4,000-step seeing stage (dropped); ``meanpool-*`` the mean-pooled
zoo's stages; ``cellhead-*`` the seeing stage with a per-cell attribute head (dropped);
``wide256-*`` the seeing stage with a 256-d embedding (a scratch run); ``place-background-600`` the place
stage after the build's binding stage (parts 10 and 11, dropped; drawn from where binding ended). Top row: the seeing stage (share of
object patches each head gets right; under position, the share of the 9 cells whose occupancy the pooled
embedding's head gets right); bottom row: the base's CLIP stages (the fair one-attribute hard-negative
accuracy, chance 50 %). One panel per attribute.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

ATTRIBUTES = ("colour", "shape", "size", "texture", "position")
HERE = Path(__file__).resolve().parent
KEPT = {"build-clip-see", "build-clip-base"}
# A stage that continues another starts where that one ended: the mean-pooled zoo's binding stage (NegCLIP)
# its reading stage (1,500 steps), the place stage the build's binding stage (2,400 steps; batch 32).
STARTS = {("meanpool-bind", "bind-"): 1500 * 32, ("place-background",): 2400 * 32}
SEEING_POSITION = "occupancy"  # the seeing stage has no position head; its occupancy head stands there


def read_curves(folder: Path) -> dict[str, list[dict]]:
    return {path.stem: _rows(path) for path in sorted(folder.glob("*.jsonl"))}


def _rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def plot(curves: dict[str, list[dict]], out: Path) -> None:
    figure, axes = plt.subplots(2, len(ATTRIBUTES), figsize=(3.2 * len(ATTRIBUTES), 6.4), sharex="row")
    for row, measure in enumerate(("patch accuracy", "fair hard-negative accuracy")):
        for column, attribute in enumerate(ATTRIBUTES):
            ax = axes[row, column]
            for name, rows in curves.items():
                start = next((samples for names, samples in STARTS.items() if name.startswith(names)), 0)
                key = SEEING_POSITION if row == 0 and attribute == "position" else attribute
                points = [((start + r["samples"]) / 1000, 100 * r[key]) for r in rows
                          if r.get("measure") == measure and r.get(key) is not None]
                if points:
                    xs, ys = zip(*points)
                    ax.plot(xs, ys, marker="o", markersize=3, linewidth=2.2 if name in KEPT else 1.0,
                            label=name, color="black" if name in KEPT else None)
            if row == 1:
                ax.axhline(50, color="grey", linestyle=":", linewidth=0.8)
            what = "hard negatives" if row else ("cell occupancy" if attribute == "position" else "patches")
            ax.set_title(f"{attribute}: {what}", fontsize=9)
            ax.set_xlabel("samples seen (thousands)", fontsize=8)
            ax.set_ylim(0, 100)
            ax.tick_params(labelsize=7)
    for row, last in ((0, -1), (1, -1)):
        handles, labels = axes[row, 1].get_legend_handles_labels()
        if handles:
            axes[row, last].legend(handles, labels, fontsize=6, loc="lower right")
    figure.suptitle("Demo base, per attribute: seeing stage (top); CLIP stages (bottom; the mean-pooled zoo's "
                    "binding stage from 48k); bold: the build's recipe (attention pool, 24,000 scenes, seeing 4,000 "
                    "steps, binding 2,400)",
                    fontsize=10)
    figure.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(out, dpi=130)
    print(f"wrote {out}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--curves", type=Path, default=HERE / "results" / "binding_curves")
    parser.add_argument("--out", type=Path, default=HERE.parent / "docs" / "base-learning-curves.png")
    args = parser.parse_args()
    plot(read_curves(args.curves), args.out)


if __name__ == "__main__":
    main()
