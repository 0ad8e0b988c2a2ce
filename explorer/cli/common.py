"""What the commands share: the zoo and model loading from the common flags, reading a text file."""

from __future__ import annotations

from pathlib import Path

from explorer.core.errors import ExplorerError


PRECISION_HELP = ("auto (bf16 on GPUs with bf16 and on a CPU where bf16 is measured faster than fp32, fp16 on other "
                  "GPUs, else fp32), "
                  "fp32, bf16 or fp16")


def add_precision_argument(parser, default: str | None) -> None:
    """``--precision``: the figures and the page default to auto; tables for papers (eval, index) to fp32.
    None: the figure commands' (auto, or what a replayed settings file ran in)."""
    from explorer.models.precision import PRECISION_CHOICES

    said = default or "auto, or what the settings file ran in"
    parser.add_argument("--precision", choices=PRECISION_CHOICES, default=default, help=f"{PRECISION_HELP} "
                                                                                          f"(default {said})")


def zoo_from_args(args):
    from explorer.zoo import Zoo

    return Zoo(args.checkpoints, device=getattr(args, "device", "auto"),
               precision=getattr(args, "precision", None) or "fp32")


def model_loader(args, zoo):
    """Zoo names load from the zoo; paths (manifest or weights) load directly. Cached per run."""
    import explorer

    loaded = {}

    names = {m.name for m in zoo.manifests()}

    def load(name: str):
        if name not in loaded:
            if name in names:  # a zoo name wins over a file of the same name in the current folder
                loaded[name] = zoo.load(name)
            else:
                loaded[name] = explorer.load(name, device=args.device, allow_pickle=args.allow_pickle,
                                             precision=getattr(args, "precision", None) or "fp32")
        return loaded[name]

    return load


def read_text(path: Path) -> str:
    try:
        return path.read_text()
    except OSError as error:
        raise ExplorerError(f"cannot read the caption file {path}: {error}") from error


def add_evaluation_command(parser, options, data_help: str = "the dataset folder", resumable: bool = True) -> None:
    """What every dataset evaluation command takes (``eval-retrieval``, ``eval-grounding``, ``eval-negatives``,
    ``eval-zeroshot``): the models, the dataset, where the results go, the device and precision; then its task's
    declared ``options`` (``explorer.evaluation.tasks``)."""
    from explorer.cli.task_options import add_task_options

    parser.add_argument("--model", action="append", dest="models", required=True, metavar="NAME",
                        help="zoo name, manifest .json or weights file; repeat for several")
    parser.add_argument("--data", type=Path, required=True, help=data_help)
    parser.add_argument("--out", type=Path, required=True, help="results JSON" + (
        " (per-item work: <out>.work.jsonl, read again to resume)" if resumable else ""))
    parser.add_argument("--csv", type=Path, help="also write the results as CSV rows")
    parser.add_argument("--device", default="auto")
    add_precision_argument(parser, "fp32")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    add_task_options(parser, options)


def add_twin_arguments(parser, size_help: str, overwrite_help: str) -> None:
    """What every ``explorer data *-twin`` command takes: the folder, the world's seed, the picture size and
    ``--overwrite``."""
    parser.add_argument("out", type=Path)
    parser.add_argument("--seed", type=int, default=1, help="the world's seed (default 1: no demo model trained on it)")
    parser.add_argument("--size", type=int, default=224, help=size_help)
    parser.add_argument("--overwrite", action="store_true", help=overwrite_help)


def evaluation_models(args) -> dict:
    """{name: loaded model} of ``--model``; an unknown zoo name fails before any dataset work."""
    zoo = zoo_from_args(args)
    for name in args.models:
        if not Path(name).expanduser().exists():
            zoo.get(name)  # "No model named ...; known: ..."
    load = model_loader(args, zoo)
    return {name: load(name) for name in dict.fromkeys(args.models)}


def evaluation_work_path(out: Path) -> Path:
    """Where a run writing ``out`` keeps its per-item results (to resume after a kill)."""
    return out.with_name(out.name + ".work.jsonl")


def write_outputs(result: dict, models: dict, args, rows: list[list], table: str, skipped: dict, unit: str,
                  notes: list[str] = ()) -> None:
    """The results JSON (with what each model computed in), with ``--csv`` also ``rows``; then on the terminal
    ``table``, what scoring ``skipped`` ({reason: count} of ``unit``s), the result's ``notes`` and where it all went."""
    import csv
    import sys

    from explorer.evaluation.results import write_results

    result["precision"] = {name: model.precision for name, model in models.items()}
    write_results(result, args.out)
    if args.csv:
        with open(args.csv, "w", newline="", encoding="utf-8") as out:
            csv.writer(out).writerows(rows)
    print(table, end="")
    for reason, n in skipped.items():
        print(f"skipped at scoring: {n} {unit} ({reason})", file=sys.stderr)
    print("".join(f"note: {note}\n" for note in notes), end="")
    print(f"wrote {Path(args.out).absolute()}" + (f" and {Path(args.csv).absolute()}" if args.csv else ""))
