"""The documentation's picture of the comparison board (docs/compare-board.png, in docs/jobs.md): a real
sweep (3 demo models x 2 synthetic worlds, each child's worker run in this process as the queue would start
it), drawn with matplotlib from the same pivot and long frame the Jobs tab's Compare view shows (kaleido,
which would export the plotly charts themselves, is not a dependency).

    python scripts/board_picture.py [--out docs/compare-board.png]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
MODELS = ["demo-clip-base", "demo-longclip", "demo-finelip"]


def sweep_frame(work: Path):
    """The results frame of a finished sweep over two fresh worlds (an empty store under ``work``)."""
    os.environ["EXPLORER_HOME"] = str(work / "home")
    from explorer.data import write_dataset
    from explorer.jobs import JobManager
    from explorer.jobs.queue import claim_runs
    from explorer.jobs.worker import run_job
    from explorer.views.results_table import results_frame

    worlds = []
    for name, seed in (("world-a", 8), ("world-b", 3)):
        write_dataset(work / name, 80, seed=seed, image_size=64)
        worlds.append(work / name)
    jobs = JobManager(zoo_root=REPO / "checkpoints", gpu_ids=[], max_running=1, subreaper=False)
    sweep = jobs.submit_eval(MODELS, worlds, options={"split": "train"}, start=False)
    while claimed := claim_runs(jobs.store):
        for run in claimed:
            run_job(run.id, jobs.root, start_next=False)
    return results_frame(jobs.store.results([sweep.id]))


def draw(frame, out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from explorer.views.compare_view import RECALL, pivot_rows
    from explorer.views.results_table import pivot

    metrics = ["t2i_R@1", "i2t_R@1", "rsum"]
    headers, rows = pivot_rows(pivot(frame, metrics))
    sets = list(dict.fromkeys(frame["dataset"]))
    figure = plt.figure(figsize=(13, 7.5))
    grid = figure.add_gridspec(2, len(sets) + 1, height_ratios=[1, 1.5])
    table_axes = figure.add_subplot(grid[0, :])
    table_axes.axis("off")
    table_axes.set_title("Pivot: models x (dataset, metric); R@K in %", loc="left")
    table = table_axes.table(cellText=rows, colLabels=[h.replace(" ", "\n") for h in headers], loc="center")
    table.scale(1, 1.8)
    colours = {model: f"C{i}" for i, model in enumerate(dict.fromkeys(frame["model"]))}
    for n, dataset in enumerate(sets):
        axes = figure.add_subplot(grid[1, n])
        part = frame[(frame["dataset"] == dataset) & frame["metric"].str.match(RECALL.pattern)]
        for (model, direction), group in part.groupby([part["model"], part["metric"].str.slice(0, 3)], sort=False):
            points = sorted((int(RECALL.match(m).group(2)), v) for m, v in zip(group["metric"], group["value"]))
            axes.plot(*zip(*points), marker="o", color=colours[model], linestyle="-" if direction == "t2i" else "--",
                      label=f"{model} {direction}")
        axes.set_xscale("log")
        axes.set(title=f"Recall@K, {dataset}", xlabel="K", ylabel="R@K (%)", ylim=(0, 102))
    axes = figure.add_subplot(grid[1, len(sets)])
    part = frame[frame["metric"] == "t2i_R@1"]
    width = 0.8 / len(colours)
    for i, (model, group) in enumerate(part.groupby("model", sort=False)):
        axes.bar([sets.index(d) + i * width for d in group["dataset"]], group["value"], width, color=colours[model],
                 label=model)
    axes.set_xticks([i + width * (len(colours) - 1) / 2 for i in range(len(sets))], sets)
    axes.set(title="t2i_R@1 across models", ylabel="%")
    figure.axes[1].legend(fontsize=7, loc="lower right")
    figure.suptitle("Compare: a sweep of 3 demo models x 2 synthetic worlds (explorer jobs submit-eval)")
    figure.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(out, dpi=100)
    print(f"wrote {out}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=REPO / "docs" / "compare-board.png")
    args = parser.parse_args()
    draw(sweep_frame(Path(tempfile.mkdtemp(prefix="board-"))), args.out)


if __name__ == "__main__":
    main()
