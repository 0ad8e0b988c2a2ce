"""`explorer eval-grounding`: models' sentence maps scored on real annotated pictures (DCI, PNG, Flickr30k
Entities, IIW-400, RefCOCO/RefCOCO+/RefCOCOg as the refer toolkit lays them out, with box grounding);
JSON out, a CSV table optionally; resumable through `<out>.work.jsonl`. Its options are the grounding task's
(``explorer.evaluation.tasks.grounding``)."""

from __future__ import annotations

from explorer.cli.common import add_evaluation_command, evaluation_models, evaluation_work_path, write_outputs
from explorer.core.errors import ExplorerError


def add_commands(commands) -> None:
    from explorer.evaluation.tasks.grounding import OPTIONS

    parser = commands.add_parser("eval-grounding", help="score sentence maps on a real grounding dataset "
                                                        "(DCI, PNG, Flickr30k Entities, IIW-400, RefCOCO); "
                                                        "write JSON")
    parser.set_defaults(run=_run)
    add_evaluation_command(parser, OPTIONS, data_help="the dataset folder (layout detected)")


def _run(args) -> int:
    from explorer.cli.task_options import task_values
    from explorer.data.grounding_sets import read_grounding_set
    from explorer.evaluation.real_grounding import csv_rows, evaluate_grounding, table
    from explorer.evaluation.tasks.grounding import BOX, OPTIONS, REFER, TASK

    values = task_values(args, OPTIONS)  # checked before any model loads
    if not args.data.exists():
        raise ExplorerError(f"no dataset at {args.data}: the path does not exist")
    dataset = read_grounding_set(args.data, split=values["split"], units=values["units"], limit=values["limit"],
                                 layout=values["layout"], options=TASK.given(values, *(o.name for o in REFER)))
    print(dataset.summary())
    models = evaluation_models(args)
    result = evaluate_grounding(models, dataset, kinds=values["kinds"], work_file=evaluation_work_path(args.out),
                                progress=not args.no_progress, **TASK.given(values, *(o.name for o in BOX)))
    write_outputs(result, models, args, csv_rows(result), table(result), result["skipped_units"], "units",
                  notes=result["notes"])
    return 0
