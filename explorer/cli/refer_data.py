"""`explorer data refer-twin`: the synthetic world written as the refer toolkit's RefCOCO folder, so that
`explorer eval-grounding --layout refcoco` runs offline (``explorer.data.grounding_sets.refer_twin``)."""

from __future__ import annotations

from explorer.cli.common import add_twin_arguments


def add_data_commands(data) -> None:
    """Add the refer twin's command to the `explorer data` group (``data``: its subparsers)."""
    twin = data.add_parser("refer-twin", help="write a RefCOCO/RefCOCO+/RefCOCOg-style folder of synthetic scenes "
                                              "(instances.json, refs pickles, train2014 pictures)")
    twin.add_argument("--n", type=int, default=60, help="number of scenes (default 60), one ref per object")
    add_twin_arguments(twin, "picture size in pixels", "replace a refer twin written there before")
    twin.set_defaults(run=_run_refer_twin)


def _run_refer_twin(args) -> int:
    from explorer.data.grounding_sets.refer_twin import write_refer_twin

    counts = write_refer_twin(args.out, n_scenes=args.n, seed=args.seed, image_size=args.size,
                              overwrite=args.overwrite)
    print(f"wrote {args.n} scenes to {args.out}: " + ", ".join(f"{n} refs in {name}" for name, n in counts.items()))
    print(f"try: explorer eval-grounding --data {args.out} --layout refcoco --dataset refcoco --split testA "
          f"--model demo-clip-base --out refcoco.json")
    return 0


__all__ = ["add_data_commands"]
