"""`explorer eval-grounding`: models' sentence maps scored on real annotated pictures (DCI, PNG, Flickr30k
Entities, IIW-400, RefCOCO/RefCOCO+/RefCOCOg as the refer toolkit lays them out, with box grounding);
JSON out, a CSV table optionally; resumable through `<out>.work.jsonl`."""

from __future__ import annotations

from pathlib import Path

from explorer.cli.common import add_precision_argument, evaluation_models, evaluation_work_path, write_outputs
from explorer.core.errors import ExplorerError
from explorer.evaluation.box_grounding import DEFAULT_ALPHA, DEFAULT_MIN_AREA, box_rule


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
                        help="refcoco layout: box grounding picks among these detections instead of the picture's "
                             "COCO boxes: MAttNet's released list, ReCLIP's {image_id: [boxes]} or {\"dets\": [...]} "
                             "(boxes [x, y, w, h]; a picture with none gets the whole picture, as ReCLIP)")
    parser.add_argument("--text", choices=("raw", "sent"),
                        help="refcoco layout: the sentence field read (default raw, as the RIS and ReCLIP codes; "
                             "sent: the toolkit's cleaned text)")
    parser.add_argument("--box-alpha", type=float, default=DEFAULT_ALPHA, metavar="A",
                        help="box grounding: a proposal scores its map sum / area**A (ReCLIP's; default its "
                             f"README's {DEFAULT_ALPHA}; 1 is the mean over the box), A in (0, 2]")
    parser.add_argument("--min-box-area", type=float, default=DEFAULT_MIN_AREA, metavar="S",
                        help="box grounding: only a box larger than this share of the picture may be the answer "
                             f"(default {DEFAULT_MIN_AREA}: every box; ReCLIP's method: 0.05), S in [0, 1)")
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


def _run(args) -> int:
    from explorer.data.grounding_sets import read_grounding_set
    from explorer.evaluation.real_grounding import csv_rows, evaluate_grounding, table

    box_rule(args.box_alpha, args.min_box_area)  # checked before any model loads
    if not args.data.exists():
        raise ExplorerError(f"no dataset at {args.data}: the path does not exist")
    options = {"dataset": args.dataset, "split_by": args.split_by, "images": args.images, "proposals": args.proposals,
               "text": args.text}
    dataset = read_grounding_set(args.data, split=args.split, units=args.units, limit=args.limit, layout=args.layout,
                                 options=options)
    print(dataset.summary())
    models = evaluation_models(args)
    result = evaluate_grounding(models, dataset, kinds=args.kinds, work_file=evaluation_work_path(args.out),
                                progress=not args.no_progress, box_alpha=args.box_alpha,
                                min_box_area=args.min_box_area)
    write_outputs(result, models, args, csv_rows(result), table(result), result["skipped_units"], "units",
                  notes=result["notes"])
    return 0
