"""`explorer eval-negatives`: hard negatives on FG-OVD, SugarCrepe or the synthetic twin; JSON out,
a CSV optionally; resumable through `<out>.work.jsonl`."""

from __future__ import annotations

from explorer.cli.common import (add_evaluation_command, add_twin_arguments, evaluation_models,
                                 evaluation_work_path, write_outputs)


def add_commands(commands) -> None:
    from explorer.evaluation.tasks.negatives import OPTIONS

    parser = commands.add_parser("eval-negatives", help="does each picture's or region's true caption beat its hard "
                                                        "negatives (FG-OVD, SugarCrepe, synthetic); write JSON")
    parser.set_defaults(run=_run)
    add_evaluation_command(parser, OPTIONS)


def _run(args) -> int:
    from explorer.cli.task_options import task_values
    from explorer.data.negatives_sets import read_negatives_set
    from explorer.evaluation.negatives import REGIONS, csv_rows, evaluate_negatives, table
    from explorer.evaluation.tasks.negatives import OPTIONS

    values = task_values(args, OPTIONS)  # checked before any dataset or model work
    dataset = read_negatives_set(args.data, layout=values["layout"], splits=values["splits"], images=values["images"],
                                 limit=values["limit"])
    print(dataset.summary())
    if any(item.box is not None for item in dataset.items):
        print(f"regions: --region {values['region']}, {REGIONS[values['region']]}; ties: {values['ties']}")
    models = evaluation_models(args)
    result = evaluate_negatives(models, dataset, work_file=evaluation_work_path(args.out),
                                progress=not args.no_progress, region=values["region"], ties=values["ties"])
    for entry in result["models"]:
        for note in entry["notes"]:
            print(note)
    write_outputs(result, models, args, csv_rows(result), table(result), result["skipped_items"], "items")
    return 0


def add_data_commands(data) -> None:
    """`explorer data negatives-twin`: FG-OVD's twin from the synthetic world (``negatives_sets.synthetic``)."""
    twin = data.add_parser("negatives-twin", help="write an FG-OVD-style folder of synthetic scenes (benchmarks/*.json "
                                                  "whose negatives change attribute words, val2017/ pictures)")
    twin.add_argument("--n", type=int, default=200, help="number of scenes (default 200; 2 to 6 regions each)")
    add_twin_arguments(twin, "picture size in pixels", "replace the benchmark files written there before")
    twin.set_defaults(run=_run_twin)


def _run_twin(args) -> int:
    from explorer.data.negatives_sets.synthetic import write_twin

    counts = write_twin(args.out, n_scenes=args.n, seed=args.seed, image_size=args.size, overwrite=args.overwrite)
    print(f"wrote {args.n} scenes to {args.out}: " + ", ".join(f"{split} {n} regions" for split, n in counts.items()))
    print(f"try: explorer eval-negatives --data {args.out} --layout fg-ovd --model demo-clip-base --out negatives.json")
    return 0
