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
    add_examples_command(results)


def add_examples_command(results) -> None:
    """`explorer results examples`: a cell's units listed (``--list``, ``--out x.json``) or drawn as a figure."""
    from explorer.cli.figures import add_style_arguments
    from explorer.views.result_cells import FILTERS  # not result_units: it imports pandas

    examples = results.add_parser("examples", help="a results cell's worst (best, winning) units as a figure grid "
                                                   "or a JSON list, from the work files as they are")
    examples.add_argument("--results", help="a results JSON of eval, eval-grounding, eval-negatives, eval-zeroshot "
                                            "or eval-retrieval, or an evaluation / sweep id of the run store")
    examples.add_argument("--model", help="the model whose units are picked (A)")
    examples.add_argument("--versus", metavar="B", help="a second model: drawn beside A; --wins sorts by A minus B")
    examples.add_argument("--kind", help="grounding: the map kind; negatives: the split; retrieval: t2i or i2t")
    examples.add_argument("--metric", help="the unit metric (grounding: iou, pointing, auroc, box_iou; negatives: "
                                           "margin; zero-shot and retrieval: rank)")
    examples.add_argument("--column", help="the table column instead of --kind/--metric (as the Results tab names "
                                           "it: '<dataset> <metric>')")
    pick = examples.add_mutually_exclusive_group()
    pick.add_argument("--worst", type=int, metavar="N", help="the N worst units (default 8), ties by unit id")
    pick.add_argument("--best", type=int, metavar="N", help="the N best units")
    pick.add_argument("--wins", type=int, metavar="N", help="the N units where A beats --versus B by most")
    examples.add_argument("--keep", choices=FILTERS, default="all", help="with --versus: all, a_right_b_wrong, "
                                                                         "both_wrong")
    examples.add_argument("--data", metavar="DIR", help="the dataset's folder, when it moved since the evaluation")
    examples.add_argument("--list", action="store_true", help="print the picked units as JSON (no figure)")
    examples.add_argument("--out", type=Path, help="examples.pdf|.png|.svg (the figure, settings beside it as "
                                                   "<out>.json), or x.json: the picked units' list")
    examples.add_argument("--replay", type=Path, metavar="SETTINGS", help="draw again from a figure's <out>.json")
    add_style_arguments(examples)
    examples.add_argument("--device", default="auto")
    examples.add_argument("--allow-pickle", action="store_true")
    examples.set_defaults(run=_run_examples)


def _run_examples(args) -> int:
    import json

    from explorer.cli.common import model_loader, zoo_from_args
    from explorer.core.files import write_text_atomic
    from explorer.views import result_figure as rf
    from explorer.views.result_units import units_document

    settings = _examples_settings(args)
    results = _open(args, settings.results)
    if args.list or (args.out is not None and args.out.suffix.lower() == ".json"):
        results, cell, picked = rf.picked_units(settings, results)
        text = json.dumps(units_document(results, cell, picked, settings.versus), indent=2, ensure_ascii=False) + "\n"
        if args.out is None:
            print(text, end="")
        else:
            write_text_atomic(args.out, text)
            print(f"wrote {args.out} ({len(picked)} units)")
        return 0
    out = args.out or (Path(str(args.replay)[:-5]) if args.replay and str(args.replay).endswith(".json") else None)
    if out is None:
        raise ExplorerError("give --out examples.pdf (or .png, .svg; x.json for the list), or --list")
    load = model_loader(args, zoo_from_args(args))
    for path in rf.write_examples(settings, load, out, results):
        print(f"wrote {path}")
    return 0


def _examples_settings(args):
    from explorer.cli.figures import preset_resets
    from explorer.views import result_figure as rf

    if args.replay:
        settings = rf.ExamplesSettings.load(args.replay)
        style = {name: getattr(args, name) for name in ("preset", "width", "font", "font_size", "annotate", "dpi")
                 if getattr(args, name, None) is not None}
        return rf.ExamplesSettings(**{**vars(settings), **style, **preset_resets(args)})
    if not args.results or not args.model:
        raise ExplorerError("give --results R.json and --model A (or --replay SETTINGS.json)")
    order, n = "worst", args.worst or rf.DEFAULT_N
    if args.best:
        order, n = "best", args.best
    if args.wins:
        order, n = "wins", args.wins
    if order == "wins" and not args.versus:
        raise ExplorerError("--wins N compares two models: give --versus B")
    style = {name: getattr(args, name) for name in ("preset", "width", "font", "font_size", "annotate", "dpi")
             if getattr(args, name, None) is not None}
    return rf.ExamplesSettings(results=str(args.results), model=args.model, versus=args.versus, column=args.column,
                               kind=args.kind, metric=args.metric, order=order, n=n, keep=args.keep,
                               data=args.data, **style)


def _open(args, source: str):
    """The results of a file, or of an evaluation or sweep id of the run store."""
    from explorer.views.result_units import open_results

    if Path(source).is_file() or Path(source).suffix == ".json":
        return open_results(source)
    from explorer.jobs import JobManager
    from explorer.views.result_plots import run_documents

    documents = run_documents(JobManager(zoo_root=args.checkpoints, subreaper=False), source)
    return open_results(documents[0][0], documents)


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
