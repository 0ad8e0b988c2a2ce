"""`explorer eval-negatives`: hard negatives on FG-OVD, SugarCrepe or the synthetic twin; JSON out,
a CSV optionally; resumable through `<out>.work.jsonl`."""

from __future__ import annotations

from pathlib import Path

from explorer.cli.common import (add_evaluation_arguments, add_twin_arguments, evaluation_models,
                                 evaluation_work_path, write_outputs)


def add_commands(commands) -> None:
    from explorer.data.negatives_sets import LAYOUTS

    parser = commands.add_parser("eval-negatives", help="does each picture's or region's true caption beat its hard "
                                                        "negatives (FG-OVD, SugarCrepe, synthetic); write JSON")
    parser.set_defaults(run=_run)
    add_evaluation_arguments(parser, tuple(LAYOUTS), "only the first N items of each split")
    parser.add_argument("--split", action="append", dest="splits", metavar="NAME",
                        help="FG-OVD: hard, medium, easy, trivial, color, material, pattern, transparency; "
                             "SugarCrepe: replace_obj, swap_att, add_obj, ...; repeat for several (default: every "
                             "file present)")
    parser.add_argument("--images", type=Path, help="where the pictures are (FG-OVD: the COCO root holding val2017/; "
                                                    "SugarCrepe: COCO's val2017/; default: under --data)")
    parser.add_argument("--region", default="roi", help="how a box is read: roi (FG-CLIP's, the default: the whole "
                                                        "picture, the box's patch features pooled with RoIAlign) or "
                                                        "crop (Bianchi et al.'s CLIP baseline: the box cut out)")
    parser.add_argument("--ties", default="hit", help="a positive that ties the best negative: hit (both official "
                                                      "codes, the default) or miss (explorer eval's rule)")


def _run(args) -> int:
    from explorer.data.negatives_sets import read_negatives_set
    from explorer.evaluation.negatives import REGIONS, check_protocol, csv_rows, evaluate_negatives, table

    check_protocol(args.region, args.ties)  # before any dataset or model work
    dataset = read_negatives_set(args.data, layout=args.layout, splits=args.splits, images=args.images,
                                 limit=args.limit)
    print(dataset.summary())
    if any(item.box is not None for item in dataset.items):
        print(f"regions: --region {args.region}, {REGIONS[args.region]}; ties: {args.ties}")
    models = evaluation_models(args)
    result = evaluate_negatives(models, dataset, work_file=evaluation_work_path(args.out),
                                progress=not args.no_progress, region=args.region, ties=args.ties)
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
