"""`explorer eval-zeroshot`: zero-shot top-1 and top-5 on CIFAR-10/100, ImageNet-V2, ImageNet-O or a folder of
classes; JSON out, a CSV optionally; resumable through `<out>.work.jsonl`."""

from __future__ import annotations

from explorer.cli.common import (add_evaluation_command, add_twin_arguments, evaluation_models,
                                 evaluation_work_path, write_outputs)


def add_commands(commands) -> None:
    from explorer.evaluation.tasks.zeroshot import OPTIONS

    parser = commands.add_parser("eval-zeroshot", help="zero-shot classification top-1/top-5 (CIFAR-10/100, "
                                                       "ImageNet-V2/O, a folder of classes); write JSON")
    parser.set_defaults(run=_run)
    add_evaluation_command(parser, OPTIONS)


def _run(args) -> int:
    from explorer.cli.task_options import task_values
    from explorer.data.class_sets import read_class_set
    from explorer.evaluation.tasks.zeroshot import OPTIONS
    from explorer.evaluation.zeroshot import csv_rows, evaluate_zeroshot, table

    values = task_values(args, OPTIONS)  # checked before any dataset or model work
    dataset = read_class_set(args.data, values["layout"], limit=values["limit"], allow_pickle=values["allow_pickle"],
                             classnames=values["classnames"], class_set=values["class_set"])
    print(dataset.summary())
    models = evaluation_models(args)
    result = evaluate_zeroshot(models, dataset, templates=values["templates"],
                               work_file=evaluation_work_path(args.out), progress=not args.no_progress)
    print(f"templates: {result['dataset']['templates_from']}")
    write_outputs(result, models, args, csv_rows(result), table(result), result["skipped_pictures"], "pictures")
    return 0


def add_data_commands(data) -> None:
    """`explorer data classes-twin`: a class folder per (colour, shape) pair (``class_sets.synthetic``)."""
    twin = data.add_parser("classes-twin", help="write a folder of class folders from the synthetic world, one per "
                                                "colour and shape (red_circle/, ...)")
    twin.add_argument("--per-class", type=int, default=10, help="pictures per class (default 10; 80 classes)")
    add_twin_arguments(twin, "scene size in pixels (each picture is one object's cell)",
                       "write into a folder that holds files")
    twin.set_defaults(run=_run_twin)


def _run_twin(args) -> int:
    from explorer.data.class_sets.synthetic import write_classes_twin

    counts = write_classes_twin(args.out, per_class=args.per_class, seed=args.seed, image_size=args.size,
                                overwrite=args.overwrite)
    short = {name: n for name, n in counts.items() if n < args.per_class}
    print(f"wrote {sum(counts.values())} pictures in {len(counts)} class folders to {args.out}"
          + (f" ({len(short)} classes short of {args.per_class})" if short else ""))
    print(f"try: explorer eval-zeroshot --data {args.out} --layout folder --model demo-clip-base --out zeroshot.json")
    return 0
