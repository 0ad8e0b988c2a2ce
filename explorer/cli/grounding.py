"""`explorer eval-grounding`: models' sentence maps scored on real annotated pictures (DCI, PNG, Flickr30k
Entities, IIW-400, RefCOCO/RefCOCO+/RefCOCOg as the refer toolkit lays them out, with box grounding);
JSON out, a CSV table optionally; resumable through `<out>.work.jsonl`."""

from __future__ import annotations

import csv
import sys
from pathlib import Path

from explorer.cli.common import add_precision_argument, model_loader, zoo_from_args
from explorer.core.errors import ExplorerError


def add_commands(commands) -> None:
    parser = commands.add_parser("eval-grounding", help="score sentence maps on a real grounding dataset "
                                                        "(DCI, PNG, Flickr30k Entities, IIW-400, RefCOCO); "
                                                        "write JSON")
    parser.set_defaults(run=_run)
    parser.add_argument("--model", action="append", dest="models", required=True, metavar="NAME",
                        help="zoo name, manifest .json or weights file; repeat for several")
    parser.add_argument("--data", type=Path, required=True, help="the dataset folder (layout detected)")
    parser.add_argument("--split", help="default: the layout's (DCI: all, PNG: val, Flickr30k Entities: test, "
                                        "RefCOCO: val; testA, testB, test as its refs hold them)")
    parser.add_argument("--layout", help="read the folder in this layout (dci, png, flickr30k_entities, iiw, refcoco)")
    parser.add_argument("--dataset", choices=("refcoco", "refcoco+", "refcocog"),
                        help="refcoco layout: which of the root's folders (default: refcoco when present)")
    parser.add_argument("--split-by", choices=("unc", "umd", "google"),
                        help="refcoco layout: the refs file, refs(<split-by>).p (default: unc; refcocog: umd)")
    parser.add_argument("--images", type=Path, metavar="DIR",
                        help="refcoco layout: the COCO train2014 pictures (default: ROOT/images/mscoco/images/train2014)")
    parser.add_argument("--proposals", type=Path, metavar="FILE",
                        help="refcoco layout: box grounding picks among these detections ({\"dets\": [{\"box\": "
                             "[x, y, w, h], \"image_id\", \"score\"}]}) instead of the picture's COCO boxes")
    parser.add_argument("--kind", action="append", dest="kinds", metavar="K",
                        help="map kind to score (repeat; default: every kind each model offers)")
    parser.add_argument("--units", choices=("sentence", "phrase"), help="default: the layout's (PNG offers both)")
    parser.add_argument("--limit", type=int, metavar="N", help="only the first N pictures with units")
    parser.add_argument("--out", type=Path, required=True, help="results JSON (per-picture work: <out>.work.jsonl)")
    parser.add_argument("--csv", type=Path, help="also write one row per model and kind")
    parser.add_argument("--device", default="auto")
    add_precision_argument(parser, "fp32")
    parser.add_argument("--allow-pickle", action="store_true")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")


def work_path(out: Path) -> Path:
    """Where a run writing ``out`` keeps its per-picture results (to resume after a kill)."""
    return out.with_name(out.name + ".work.jsonl")


def _models(args) -> dict:
    zoo = zoo_from_args(args)
    for name in args.models:
        if not Path(name).expanduser().exists():
            zoo.get(name)  # an unknown name fails here, before any picture is read
    load = model_loader(args, zoo)
    return {name: load(name) for name in dict.fromkeys(args.models)}


def _run(args) -> int:
    from explorer.data.grounding_sets import read_grounding_set
    from explorer.evaluation.real_grounding import csv_rows, evaluate_grounding, table
    from explorer.evaluation.results import write_results

    if not args.data.exists():
        raise ExplorerError(f"no dataset at {args.data}: the path does not exist")
    options = {"dataset": args.dataset, "split_by": args.split_by, "images": args.images, "proposals": args.proposals}
    dataset = read_grounding_set(args.data, split=args.split, units=args.units, limit=args.limit, layout=args.layout,
                                 options=options)
    print(dataset.summary())
    models = _models(args)
    result = evaluate_grounding(models, dataset, kinds=args.kinds, work_file=work_path(args.out),
                                progress=not args.no_progress)
    result["precision"] = {name: model.precision for name, model in models.items()}  # what each computed in
    write_results(result, args.out)
    if args.csv:
        with open(args.csv, "w", newline="", encoding="utf-8") as out:
            csv.writer(out).writerows(csv_rows(result))
    print(table(result), end="")
    for reason, n in result["skipped_units"].items():
        print(f"skipped at scoring: {n} units ({reason})", file=sys.stderr)
    print("".join(f"note: {note}\n" for note in result["notes"]), end="")
    print(f"wrote {args.out}" + (f" and {args.csv}" if args.csv else ""))
    return 0
