"""`explorer probe` (what one word changes: each model's score and map) and `explorer figure swaps`.

    explorer probe --image P --caption-file F --sentence N --word W [--replacements a,b,c | --every] \\
        --model M [--model M2 ...] --out swaps.json
    explorer probe --data WORLD [--model M ...] [--limit N]            # noticed rates per model and type
    explorer probe --data WORLD --as-eval                              # explorer eval's hard negatives
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from explorer.cli.common import add_precision_argument, model_loader, read_text, zoo_from_args
from explorer.core.errors import ExplorerError


def add_commands(commands) -> None:
    probe = commands.add_parser("probe", help="swap one word of a sentence: each model's own score and map, "
                                              "original against swapped (or a synthetic world's noticed rates)")
    add_swap_arguments(probe)
    probe.add_argument("--every", action="store_true", help="every other word of the word's type (the default "
                                                            "when no --replacements are given)")
    probe.add_argument("--no-maps", dest="maps", action="store_false", help="scores only (no map IoU, no shift)")
    probe.add_argument("--data", type=Path, help="a synthetic world (`explorer data synth`): every scene through "
                                                 "every swap type, noticed rates per model and type")
    probe.add_argument("--split", default="test", choices=("train", "val", "test"))
    probe.add_argument("--limit", type=int, help="the world's first N scenes (default 300, as explorer eval)")
    probe.add_argument("--as-eval", action="store_true", help="with --data: exactly explorer eval's hard "
                                                              "negatives (one swap per attribute), its accuracy "
                                                              "per attribute")
    probe.add_argument("--seed", type=int, default=0, help="with --as-eval: eval's seed (default 0)")
    probe.add_argument("--out", type=Path, help="write the record as JSON")
    add_precision_argument(probe, "fp32")
    probe.set_defaults(run=_run_probe)


def add_swap_arguments(parser: argparse.ArgumentParser) -> None:
    """The flags a swap is made of: shared by `explorer probe` and `explorer figure swaps`."""
    parser.add_argument("--image", help="the picture")
    text = parser.add_mutually_exclusive_group()
    text.add_argument("--caption")
    text.add_argument("--caption-file", type=Path)
    parser.add_argument("--sentence", type=int, default=None, help="which sentence of the caption (from 1)")
    parser.add_argument("--word", help="the word (or phrase: 'top left') to swap")
    parser.add_argument("--replacements", help="comma-separated words to swap in (default: every other word "
                                               "of the word's type)")
    parser.add_argument("--model", action="append", dest="models", metavar="MODEL",
                        help="zoo name, manifest .json or weights file; repeat to compare (at most 4)")
    parser.add_argument("--kind", default="generic", help="the map kind compared (default generic: the "
                                                          "sentence-patch cosine every model has)")
    parser.add_argument("--margin", type=float, default=0.0, help="noticed: the original wins by more than this")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--allow-pickle", action="store_true")


def replacement_list(text: str | None) -> list[str] | None:
    if text is None:
        return None
    words = [w.strip() for w in text.split(",")]
    if not any(words):
        raise ExplorerError("--replacements holds no word")
    return words  # an empty one among them is refused by the probe, with the others


def _caption(args) -> str:
    if args.caption_file:
        return read_text(args.caption_file)
    return args.caption or ""


def _models(args, default_all: bool = False) -> list:
    zoo = zoo_from_args(args)
    load = model_loader(args, zoo)
    names = args.models or ([m.name for m in zoo.manifests()] if default_all else [])
    if not names:
        default = zoo.default_name()
        if default is None:
            raise ExplorerError(f"no models in {zoo.root}; pass --model")
        names = [default]
    if len(names) > 4 and not default_all:
        raise ExplorerError(f"compare at most 4 models at once, not {len(names)}")
    return [load(name) for name in names]


def _run_probe(args) -> int:
    if args.data:
        return _run_world(args)
    if args.as_eval:
        raise ExplorerError("--as-eval runs over a synthetic world: give --data WORLD")
    from explorer.probe import pick_sentence, swap_scores

    missing = [flag for flag, value in (("--image", args.image), ("--caption or --caption-file",
                                        args.caption or args.caption_file), ("--sentence", args.sentence),
                                        ("--word", args.word)) if value is None or value == ""]
    if missing:
        raise ExplorerError(f"give {', '.join(missing)} (or --data WORLD for a synthetic world)")
    if args.every and args.replacements:
        raise ExplorerError("give --replacements or --every, not both")
    sentence = pick_sentence(_caption(args), args.sentence)
    record = swap_scores(_models(args), args.image, sentence, args.word, replacement_list(args.replacements),
                         margin=args.margin, kind=args.kind if args.maps else None, limit=None)
    for model in record.models:
        print(f"{model.name}: {model.original_score:.4f} ({model.score_label}); noticed "
              f"{sum(s.noticed for s in model.swaps)} of {len(model.swaps)}")
        for swap in model.swaps:
            moved = "" if swap.map_iou is None else f"  map IoU {swap.map_iou:.3f}, peak {swap.peak_shift_px:.1f} px"
            print(f"  {swap.replacement:>14} {swap.margin:+.4f} {'noticed' if swap.noticed else 'missed'}{moved}")
    if args.out:
        args.out.write_text(json.dumps(record.to_json(), indent=2) + "\n")
        print(f"wrote {args.out}")
    return 0


def _run_world(args) -> int:
    from explorer.data import read_dataset
    from explorer.evaluation.results import DEFAULT_LIMIT
    from explorer.probe.world import eval_negatives, world_rates

    scenes = read_dataset(args.data, args.split)[:args.limit or DEFAULT_LIMIT]
    if not scenes:
        raise ExplorerError(f"the {args.split!r} split of {args.data} has no scenes")
    models = _models(args, default_all=True)
    if args.as_eval:
        result = {model.name: eval_negatives(model, scenes, seed=args.seed) for model in models}
        attributes = sorted({key for values in result.values() for key in values})
        print("| model | " + " | ".join(a.split("/")[1] for a in attributes) + " |")
        print("|---|" + "---|" * len(attributes))
        for name, values in result.items():
            print(f"| {name} | " + " | ".join("–" if values.get(a) is None else f"{100 * values[a]:.1f}%"
                                              for a in attributes) + " |")
        payload = {"as_eval": True, "scenes": len(scenes), "split": args.split, "seed": args.seed, "models": result}
    else:
        rates = world_rates(models, scenes, margin=args.margin)
        print(rates.table(), end="")
        payload = {"as_eval": False, "scenes": len(scenes), "split": args.split, "margin": args.margin,
                   "rates": rates.to_json()}
    if args.out:
        args.out.write_text(json.dumps(payload, indent=2) + "\n")
        print(f"wrote {args.out}")
    return 0


# ---- explorer figure swaps ------------------------------------------------------------------------------


def add_figure_command(figure) -> None:
    """`explorer figure swaps`: the margins table and the map pairs as one figure, settings JSON beside it."""
    from explorer.views.figure_style import FONTS, PRESETS

    parser = figure.add_parser("swaps", help="one word swapped: each model's margins (a row per swap) and the "
                                             "map pair of one swap, per model")
    add_swap_arguments(parser)
    parser.add_argument("--pair", help="the swap whose maps are shown (default: the first)")
    parser.add_argument("--out", type=Path, default=Path("swaps.pdf"),
                        help=".pdf, .svg or .png (300 dpi; default: swaps.pdf in the current folder)")
    parser.add_argument("--preset", choices=list(PRESETS), default="column")
    parser.add_argument("--width", type=float)
    parser.add_argument("--font", choices=FONTS, default="sans")
    parser.add_argument("--font-size", type=float)
    parser.add_argument("--dpi", type=int, default=300)
    add_precision_argument(parser, None)
    parser.set_defaults(run=_run_figure_swaps)


def _run_figure_swaps(args) -> int:
    from explorer.views.swap_view import SwapSettings

    if not args.image or not args.word or args.sentence is None:
        raise ExplorerError("give --image, --sentence and --word (and --caption or --caption-file)")
    settings = SwapSettings(image=str(Path(args.image).expanduser().resolve()), caption=_caption(args),
                            sentence=args.sentence, word=args.word,
                            replacements=replacement_list(args.replacements) or [], models=args.models or [],
                            kind=args.kind, margin=args.margin, pair=args.pair or "", preset=args.preset,
                            width=args.width, font=args.font, font_size=args.font_size, dpi=args.dpi,
                            precision=args.precision or "auto")
    return write_swaps(args, settings, args.out)


def write_swaps(args, settings, out: Path) -> int:
    """Compute and write a swap figure (the command, and `explorer figure replay` of its settings)."""
    from explorer.views.swap_view import compute_swaps, write_swap_figure

    args.precision = getattr(args, "precision", None) or settings.precision
    load = model_loader(args, zoo_from_args(args))
    view = compute_swaps(load, settings)
    settings.precision = load(settings.models[0]).precision
    figure, settings_file = write_swap_figure(view, settings, out)
    print(f"wrote {figure} and {settings_file}", file=sys.stdout)
    return 0


def replay_swaps(args, path: Path) -> int | None:
    """`explorer figure replay` of a swap figure's settings (None: the file holds another view)."""
    from explorer.views.swap_view import SWAPS_VIEW, SwapSettings

    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None  # the figure replay says what is wrong with the file
    if not isinstance(data, dict) or data.get("view") != SWAPS_VIEW:
        return None
    settings = SwapSettings.from_dict(data, path.resolve().parent)
    for name in ("preset", "width", "font", "font_size", "dpi"):
        if getattr(args, name, None) is not None:
            setattr(settings, name, getattr(args, name))
    return write_swaps(args, settings, args.out or path.with_suffix(""))
