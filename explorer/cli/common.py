"""What the commands share: the zoo and model loading from the common flags, reading a text file."""

from __future__ import annotations

from pathlib import Path

from explorer.core.errors import ExplorerError


PRECISION_HELP = ("auto (bf16 on a CPU with AMX/avx512_bf16 and on GPUs with bf16, fp16 on other GPUs, else fp32), "
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
