"""`explorer results table`: the results of evaluation runs as a paper's table (CSV, LaTeX, Markdown).

    explorer results table --runs SWEEP_ID [ID ...] --format latex --metrics t2i_R@1 i2t_R@1 --out table.tex

``--runs`` takes sweeps (every evaluation of the sweep) and single evaluations; ``--metrics`` and
``--datasets`` choose the columns and their order (default: R@1/5/10 both ways where measured). The
rows come from the run store's results table (``explorer.jobs.run_store``); the formatting is
``explorer.views.results_table``'s, the same as the Jobs tab's Compare export.
"""

from __future__ import annotations

from pathlib import Path

from explorer.core.errors import ExplorerError


def add_commands(commands) -> None:
    results = commands.add_parser("results", help="evaluation results as tables").add_subparsers(title="results")
    table = results.add_parser("table", help="a pivot of models x (dataset, metric) as CSV, LaTeX or Markdown")
    table.add_argument("--runs", nargs="+", required=True, metavar="ID", help="sweep or evaluation ids")
    table.add_argument("--format", choices=("csv", "latex", "markdown"), default="markdown")
    table.add_argument("--metrics", nargs="+", help="the metric columns, in this order (default: R@1/5/10 both "
                                                    "ways; refcoco: miou, oiou, box_accuracy; 'all' for every "
                                                    "metric)")
    table.add_argument("--datasets", nargs="+", help="only these datasets, in this order")
    table.add_argument("--decimals", type=int, default=1)
    table.add_argument("--caption", help="the LaTeX table's caption (a line above the Markdown one)")
    table.add_argument("--out", type=Path, help="write it here (default: print it)")
    table.set_defaults(run=_run_table)


def _run_table(args) -> int:
    from explorer.core.files import write_text_atomic
    from explorer.jobs import JobManager
    from explorer.views import results_table as rt

    jobs = JobManager(zoo_root=args.checkpoints, subreaper=False)
    ids = [jobs.get(run_id).id for run_id in args.runs]  # an unknown id is said as such; prefixes resolved
    frame = rt.results_frame(jobs.store.results(ids))
    if frame.empty:
        raise ExplorerError(f"no results recorded for {', '.join(ids)} (still running, or every evaluation "
                            "failed: explorer jobs show ID)")
    metrics = None if args.metrics == ["all"] else args.metrics or rt.default_metrics(frame)
    unknown = sorted(set(metrics or []) - set(rt.choices(frame)[1]))
    if unknown:
        raise ExplorerError(f"no metric {', '.join(unknown)} in these results; known: {', '.join(rt.choices(frame)[1])}")
    text = rt.export(rt.pivot(frame, metrics, args.datasets), args.format, args.decimals, args.caption)
    if args.out:
        write_text_atomic(args.out, text)
        print(f"wrote {args.out}")
    else:
        print(text, end="")
    return 0


__all__ = ["add_commands"]
