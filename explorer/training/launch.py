"""``explorer train``: the command-line face of ``train``, kept thin.

    explorer train --method finelip --data data/synth --init checkpoints/longclip-B.pt --out checkpoints/finelip
    explorer train --method finelip --data data/synth --out checkpoints/finelip --resume

``train_from_args`` is the Python function behind it (also what a jobs tab
would call); ``add_train_arguments`` fills an argparse (sub)parser and
``run_train_command`` runs the parsed arguments. Without ``--out`` the run goes
to ``<zoo>/<method>-<data folder name>``, so its manifest joins the zoo.
Nothing heavy is imported until the command runs.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path
from typing import Callable, Sequence

# TrainConfig fields the command line sets, with their flags' types (defaults come from TrainConfig).
_CONFIG_FLAGS = {
    "epochs": int, "max_steps": int, "batch_size": int, "lr_backbone": float, "lr_new": float,
    "weight_decay": float, "warmup_steps": int, "warmup_ratio": float, "min_lr_ratio": float, "accumulate": int,
    "clip_grad_norm": float, "precision": str, "device": str, "seed": int, "checkpoint_every": int,
    "keep_checkpoints": int, "log_every": int, "workers": int, "name": str,
}


def add_train_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    parser.add_argument("--method", required=True, help="method to train (`explorer methods` lists them, plugins included)")
    parser.add_argument("--data", required=True, type=Path, help="training folder (samples.jsonl + images)")
    parser.add_argument("--init", type=Path, help="start from this checkpoint (any CLIP-family method; a 77-token "
                                                  "CLIP is stretched for a 248-token method); default: from scratch")
    parser.add_argument("--out", type=Path, help="run folder (default: <zoo>/<method>-<data folder name>)")
    parser.add_argument("--resume", action="store_true", help="continue the run in --out from its last checkpoint")
    parser.add_argument("--size", choices=("tiny", "base"), help="model size when training from scratch (default tiny)")
    parser.add_argument("--context-length", type=int, help="text tokens (default: the method's, or the init's)")
    parser.add_argument("--allow-pickle", action="store_true", help="trust an --init file that needs unpickling")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    group = parser.add_argument_group("training settings (defaults: explorer.training.TrainConfig)")
    for name, kind in _CONFIG_FLAGS.items():
        flag = "--" + name.replace("_", "-")
        if name == "precision":
            group.add_argument(flag, choices=("auto", "fp32", "bf16", "fp16"))
        else:
            group.add_argument(flag, type=kind)
    return parser


def run_train_command(args: argparse.Namespace, argv: Sequence[str] | None = None) -> int:
    """Run parsed ``explorer train`` arguments; prints where the result went. Returns the exit status."""
    settings = {name: getattr(args, name) for name in _CONFIG_FLAGS if getattr(args, name, None) is not None}
    words = list(sys.argv[1:] if argv is None else argv)
    command = "explorer " + " ".join(shlex.quote(w) for w in words) if words else "explorer train"
    result = train_from_args(
        method=args.method, data=args.data, out=args.out, init=args.init, size=args.size,
        context_length=args.context_length, resume=args.resume, allow_pickle=args.allow_pickle,
        progress=not args.no_progress, zoo_root=getattr(args, "checkpoints", None), command=command, **settings)
    last = result.last
    loss = f", last loss {last['loss']:.4f}" if last else ""
    print(f"trained {args.method}: {result.steps}/{result.total_steps} steps on {result.device} ({result.precision})"
          f"{loss}\n  zoo entry: {result.manifest}\n  weights:   {result.weights}\n  metrics:   {result.metrics_path}")
    for note in result.notes:
        print(f"  note: {note}")
    return 0


def train_from_args(method: str, data: str | Path, out: str | Path | None = None, init: str | Path | None = None,
                    size: str | None = None, context_length: int | None = None, resume: bool = False,
                    allow_pickle: bool = False, progress: bool = True, zoo_root: str | Path | None = None,
                    command: str = "", read_samples: Callable[[Path], Sequence] | None = None,
                    on_metrics: Callable[[dict], None] | None = None,
                    should_stop: Callable[[], bool] | None = None, **settings):
    """Build (or warm-start) ``method``, read the samples in ``data`` and train; returns the ``TrainResult``.

    ``settings`` are ``TrainConfig`` fields. ``read_samples(folder)`` turns the data folder into
    a sequence of samples (default: ``SampleFolder``, samples.jsonl). On ``resume`` the model is
    rebuilt from the run's last checkpoint (its metadata names the method and its sizes), so
    the init file is not read again. ``should_stop`` is the loop's stop request (``train``).
    """
    from explorer.core.paths import checkpoints_root
    from explorer.models.io.loading import load_method
    from explorer.training.checkpointing import WEIGHTS_FILE, latest_checkpoint
    from explorer.training.loop import TrainConfig, TrainingError, train
    from explorer.training.samples import SampleFolder
    from explorer.training.warm_start import init_from

    data = Path(data).expanduser()
    samples = (read_samples or SampleFolder)(data)
    if out is None:
        out = Path(zoo_root) if zoo_root is not None else checkpoints_root()
        out = out / f"{method}-{data.resolve().name}"
    config = TrainConfig(command=command or f"train_from_args(method={method!r}, data={str(data)!r})", **settings)
    out = Path(out).expanduser()
    folder = latest_checkpoint(out) if resume and out.exists() else None
    if folder is not None:  # the run's own weights say what the model is; the init file is not needed again
        built, _ = load_method(folder / WEIGHTS_FILE)
        if built.name != method:
            raise TrainingError(f"{out} is a {built.name} run, not {method}.")
        report = None
    else:
        built, report = init_from(method, init, size=size, seed=config.seed, context_length=context_length,
                                  allow_pickle=allow_pickle)
    return train(built, samples, config, out, init=report, resume=resume, progress=progress, on_metrics=on_metrics,
                 should_stop=should_stop)
