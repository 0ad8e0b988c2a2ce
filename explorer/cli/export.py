"""`explorer export`: a model written as a transformers or an open_clip folder.

    explorer export --model NAME --format transformers|open_clip --out DIR [--backbone-only]

It prints the files written. A model that cannot go out whole (its pooling or score is its own)
is refused with what would be left out; with ``--backbone-only`` its CLIP backbone is written and
the command says what was left out (``explorer.models.export``).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from explorer.cli.common import model_loader, zoo_from_args
from explorer.models.export import FORMATS


def add_commands(commands) -> None:
    export = commands.add_parser("export", help="write a model as a transformers CLIPModel or open_clip folder")
    export.add_argument("--model", required=True, help="zoo name, manifest or weights file")
    export.add_argument("--format", required=True, choices=FORMATS, help="transformers: CLIPModel / CLIPProcessor "
                                                                         "folder; open_clip: a local-dir: folder")
    export.add_argument("--out", type=Path, required=True, help="the folder to write (new, empty or an earlier export)")
    export.add_argument("--backbone-only", action="store_true",
                        help="export the CLIP backbone of a method whose pooling or score neither library expresses "
                             "(says what is left out)")
    export.add_argument("--device", default="cpu")
    export.add_argument("--allow-pickle", action="store_true", help="trust a file that needs unpickling")
    export.set_defaults(run=_run_export)


def _run_export(args) -> int:
    from explorer.models.export import export_model

    started = time.perf_counter()
    model = model_loader(args, zoo_from_args(args))(args.model)
    loaded = time.perf_counter()
    result = export_model(model.method, args.format, args.out, backbone_only=args.backbone_only, name=model.name)
    for path in result.files:
        print(path)
    if result.left_out:
        print(f"backbone only: left out {result.left_out}", file=sys.stderr)
    for note in result.notes:
        print(f"note: {note}", file=sys.stderr)
    what = "whole" if result.whole else "its CLIP backbone"
    print(f"exported {model.name} ({model.title}, context {model.context_length}) as {args.format}: {what} "
          f"(loaded in {loaded - started:.1f} s, written in {time.perf_counter() - loaded:.1f} s)", file=sys.stderr)
    return 0
