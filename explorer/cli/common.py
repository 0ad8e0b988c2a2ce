"""What the commands share: the zoo and model loading from the common flags, reading a text file."""

from __future__ import annotations

from pathlib import Path

from explorer.core.errors import ExplorerError


def zoo_from_args(args):
    from explorer.zoo import Zoo

    return Zoo(args.checkpoints, device=getattr(args, "device", "auto"))


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
                loaded[name] = explorer.load(name, device=args.device, allow_pickle=args.allow_pickle)
        return loaded[name]

    return load


def read_text(path: Path) -> str:
    try:
        return path.read_text()
    except OSError as error:
        raise ExplorerError(f"cannot read the caption file {path}: {error}") from error
