"""`explorer export`: a model written as a transformers or an open_clip folder.

    explorer export --model NAME --format transformers|open_clip --out DIR [--backbone-only] [--accept-disagreement]

It prints the files written. A model that cannot go out whole (its pooling or score is its own)
is refused with what would be left out; with ``--backbone-only`` its CLIP backbone is written and
the command says what was left out (``explorer.models.export``). Then the folder is read back with its
library and its ranking compared with explorer's own score on a probe set made in code
(``explorer.evaluation.export_agreement``): the agreement goes into the folder's README.md and
explorer_export.json, and below 90 % of caption pairs in the same order the command warns and exits 3
unless ``--accept-disagreement``.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from explorer.cli.common import model_loader, zoo_from_args
from explorer.core.errors import ExportError
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
    export.add_argument("--accept-disagreement", action="store_true",
                        help="exit 0 even when the exported scores rank captions unlike the method (below 90 %% of "
                             "pairs in the same order on the probe set; a backbone whose method pools its own way)")
    export.add_argument("--device", default="cpu")
    export.add_argument("--allow-pickle", action="store_true", help="trust a file that needs unpickling")
    export.set_defaults(run=_run_export)


def _run_export(args) -> int:
    from explorer.models.export import export_model

    started = time.perf_counter()
    model = model_loader(args, zoo_from_args(args))(args.model)
    loaded = time.perf_counter()
    try:
        result = export_model(model.method, args.format, args.out, backbone_only=args.backbone_only,
                              name=model.name)
    except ExportError as error:
        if args.backbone_only or "--backbone-only" not in str(error):
            raise
        raise ExportError(f"{error} The command that writes it: {succeeding_command(args, model)}") from error
    for path in result.files:
        print(path)
    if result.left_out:
        print(f"backbone only: left out {result.left_out}", file=sys.stderr)
    for note in result.notes:
        print(f"note: {note}", file=sys.stderr)
    what = "whole" if result.whole else "its CLIP backbone"
    print(f"exported {model.name} ({model.title}, context {model.context_length}) as {args.format}: {what} "
          f"(loaded in {loaded - started:.1f} s, written in {time.perf_counter() - loaded:.1f} s)", file=sys.stderr)
    return _check_agreement(args, model, result)


def _check_agreement(args, model, result) -> int:
    """Measure, record and judge how far the folder keeps the method's ranking; the exit code."""
    from explorer.evaluation.export_agreement import AGREEMENT_FLOOR, measure_agreement
    from explorer.models.export import record_agreement

    agreement = measure_agreement(model, result.out, args.format)
    for path in record_agreement(result, agreement.to_dict(), agreement.line()):
        print(path)
    print(agreement.line(), file=sys.stderr)
    if agreement.keeps_ranking:
        return 0
    print(f"warning: {model.name}'s export does not keep its ranking (under {100 * AGREEMENT_FLOOR:.0f} % of caption "
          f"pairs in the same order): the folder's scores are not the method's; its README says so. "
          + ("Accepted (--accept-disagreement)." if args.accept_disagreement else
             f"Exit 3; keep it as a backbone anyway with {succeeding_command(args, model, disagreeing=True)}"),
          file=sys.stderr)
    return 0 if args.accept_disagreement else 3


def succeeding_command(args, model, disagreeing: bool | None = None) -> str:
    """The export command that will succeed (exit 0) for ``model``: its backbone alone, and, where the method's
    own score is not the backbone's cosine (``disagreeing`` None: judged by ``global_score``), accepting that the
    backbone ranks captions otherwise (the agreement check would exit 3)."""
    import shlex

    if disagreeing is None:
        disagreeing = not getattr(model.method, "global_score", True)
    words = ["explorer", "export", "--model", args.model, "--format", args.format, "--out", str(args.out),
             "--backbone-only"] + (["--accept-disagreement"] if disagreeing else [])
    if getattr(args, "checkpoints", None):
        words[1:1] = ["--checkpoints", str(args.checkpoints)]  # an option before the command
    return shlex.join(words) + (" (its backbone's cosine is not the method's own score, so the two may rank "
                                "captions apart: the agreement check would exit 3 without --accept-disagreement)"
                                if disagreeing else "")
