"""The same operations as the app, from the shell: `explorer --help`.

One module per group of commands: this one (app, models, train, data, zoo, assets, eval), figures
(`explorer figure ...`), retrieval (`explorer index | search | eval-retrieval`),
grounding (`explorer eval-grounding`), jobs (`explorer jobs ...`),
generation (`explorer generate | export-text-encoder`), methods (`explorer methods | check-method |
new-method`); common holds what they share.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from explorer.cli import export, figures, generation, grounding, jobs, methods, probe, results, retrieval
from explorer.cli import refer_data  # `explorer data refer-twin`
from explorer.cli import negatives, zeroshot  # `explorer eval-negatives | eval-zeroshot`, their data twins
from explorer.cli.common import add_precision_argument, zoo_from_args
from explorer.cli.task_options import add_task_options, task_values
from explorer.core.errors import ExplorerError
from explorer.core.runtime import prepare_process
from explorer.evaluation.tasks.synthetic import OPTIONS as SYNTHETIC_OPTIONS


def main(argv: list[str] | None = None) -> int:
    prepare_process()  # offline, no telemetry, torchvision importable: before any heavy import
    parser = _parser()
    args = parser.parse_args(argv)
    if not hasattr(args, "run"):
        parser.print_help()
        return 0
    try:
        return args.run(args) or 0
    except ExplorerError as error:  # bad input, said plainly (as the app says it)
        print(f"error: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except Exception:  # noqa: BLE001 - a bug, not the input: said as one, with its traceback
        print_internal_error()
        return 1


def print_internal_error() -> str:
    """The exception being handled, on stderr as a bug: its traceback, then one line with an id (the page's
    "Internal error (id ...)"); returns the id."""
    import secrets
    import traceback

    ident = secrets.token_hex(4)
    traceback.print_exc(file=sys.stderr)
    print(f"internal error (id {ident}): this is a bug in explorer, not your input; the traceback above has "
          "the details", file=sys.stderr)
    return ident


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="explorer", description="See what long-text CLIP models see.")
    parser.add_argument("--checkpoints", help="zoo folder of manifests (default: $EXPLORER_CHECKPOINTS, else the "
                                              "source checkout's checkpoints/, else ./checkpoints)")
    commands = parser.add_subparsers(title="commands")

    app = commands.add_parser("app", help="open the web app")
    app.add_argument("--host", help="address to bind (default: $GRADIO_SERVER_NAME, else 127.0.0.1, as Gradio "
                                    "reads them; an address others can reach implies --public unless --trusted)")
    app.add_argument("--port", type=int, default=7860)
    app.add_argument("--share", action="store_true", help="make a public Gradio share link (explicit opt-in; "
                                                          "implies --public unless --trusted)")
    app.add_argument("--auth", help="USER:PASSWORD required to open the page")
    app.add_argument("--public", action="store_true", help="a read-only demo for visitors: fixed zoo, listed "
                                                           "datasets, no jobs, no typed paths (implied by --share "
                                                           "and by a --host others can reach)")
    app.add_argument("--trusted", action="store_true", help="with --share or a non-loopback --host: give every "
                                                            "visitor the owner's page (needs --auth)")
    app.add_argument("--allow-root", action="append", default=[], metavar="DIR",
                     help="a folder whose files the page may read when typed (repeatable; also $EXPLORER_ALLOWED_ROOTS; "
                          "the zoo folder and $EXPLORER_HOME always are)")
    app.add_argument("--allow-host", action="append", default=[], metavar="NAME",
                     help="a name the owner's page also answers at, e.g. behind a proxy (repeatable; NAME or "
                          "NAME:PORT): it answers only localhost, 127.0.0.1 and [::1] otherwise")
    app.add_argument("--forwarded-allow-ips", metavar="IPS",
                     help="behind a reverse proxy: the proxy addresses (comma list, networks too, or *) whose "
                          "X-Forwarded-For names the visitor; the per-address caps count that address (default: "
                          "$FORWARDED_ALLOW_IPS, else nobody: the direct peer is the visitor)")
    app.add_argument("--sdxl", help="SDXL base for the Generation tab (default $EXPLORER_SDXL; the only one a "
                                    "public page uses)")
    app.add_argument("--sdxl-config", help="SDXL's configs folder, for a single-file --sdxl")
    app.add_argument("--device", default="auto", help="auto, cpu, cuda, cuda:1 ...")
    add_precision_argument(app, "auto")
    app.add_argument("--max-caption-chars", type=int, metavar="N",
                     help="the longest text the page reads (default: 20,000 public, 200,000 owner)")
    # Also after the command (`python app.py --checkpoints DIR`), not only before it.
    app.add_argument("--checkpoints", default=argparse.SUPPRESS, help="zoo folder of manifests")
    app.set_defaults(run=_run_app)

    models = commands.add_parser("models", help="list, add and check models").add_subparsers(title="models")
    listing = models.add_parser("list", help="every model in the zoo and whether it loads")
    listing.set_defaults(run=_run_models_list)
    add = models.add_parser("add", help="check a weights file and write its manifest into the zoo")
    add.add_argument("path")
    add.add_argument("--name")
    add.add_argument("--source", default="")
    add.add_argument("--method", help="expected method (refuse if the file is something else)")
    add.add_argument("--allow-pickle", action="store_true", help="trust a file that needs unpickling")
    add.set_defaults(run=_run_models_add)
    check = models.add_parser("check", help="print the detected format and the key report of a weights file")
    check.add_argument("path")
    check.add_argument("--allow-pickle", action="store_true", help="trust a file that needs unpickling")
    check.add_argument("--json", action="store_true", help="print the report as JSON")
    check.set_defaults(run=_run_models_check)

    train = commands.add_parser("train", help="train a method on a data folder; the result joins the zoo")
    from explorer.training.launch import add_train_arguments

    add_train_arguments(train)
    train.set_defaults(run=_run_train)

    data = commands.add_parser("data", help="synthetic world and dataset layouts").add_subparsers(title="data")
    synth = data.add_parser("synth", help="write the synthetic long-caption world (seeded) to a folder")
    synth.add_argument("out", type=Path)
    synth.add_argument("--n", type=int, default=1000, help="number of scenes (split 80/10/10)")
    synth.add_argument("--seed", type=int, default=0)
    synth.add_argument("--size", type=int, default=224, help="image size in pixels")
    synth.add_argument("--samples", action="store_true", help="also write samples.jsonl for `explorer train`")
    synth.add_argument("--overwrite", action="store_true")
    synth.set_defaults(run=_run_data_synth)
    refer_data.add_data_commands(data)
    negatives.add_data_commands(data)
    zeroshot.add_data_commands(data)

    zoo = commands.add_parser("zoo", help="the demo zoo").add_subparsers(title="zoo")
    demo = zoo.add_parser("build-demo", help="retrain checkpoints/demo/ from scratch on the synthetic world")
    demo.add_argument("--out", type=Path, help="default: the repository's checkpoints/demo")
    demo.add_argument("--work", type=Path, help="data and run folders (default: $EXPLORER_HOME/demo-build, ~/.cache/explorer/demo-build)")
    demo.add_argument("--scenes", type=int, help="scenes in the training world (default: the recipe's, 24,000)")
    demo.add_argument("--scale", type=float, default=1.0, help="multiply every run's steps (e.g. 0.1 for a quick try)")
    demo.add_argument("--only", nargs="*", help="train only these runs (clip-base, longclip, finelip, ...)")
    demo.add_argument("--min-steps", type=int, default=10,
                      help="the fewest steps a scaled run trains (default 10; 1-2 checks the recipe's plumbing)")
    demo.add_argument("--max-batch", type=int,
                      help="cap every run's batch (a machine with little memory, or a quick try; the manifest "
                           "records the batch trained)")
    demo.add_argument("--device", choices=("cpu", "cuda", "auto"), default="cpu",
                      help="where the runs train: cpu (default; the recipe's recorded minutes are 2 CPU cores'), "
                           "cuda, or auto (cuda when there is one); the same recipe in fp32 either way")
    demo.add_argument("--background", action="store_true",
                      help="start the build as its own process and return; output goes to <work>/build.log. "
                           "Run the same command again to resume a stopped build")
    demo.add_argument("--status", action="store_true", help="say whether a background build runs, and its progress")
    demo.set_defaults(run=_run_build_demo)

    assets = commands.add_parser("assets", help="the example files the page opens on").add_subparsers(title="assets")
    write = assets.add_parser("write", help="write the examples (pictures, long captions, truth masks, manifest): "
                                            "the same files every time")
    write.add_argument("--out", type=Path, help="default: $EXPLORER_ASSETS, else the repository's assets/")
    write.set_defaults(run=_run_assets_write)

    figures.add_commands(commands)

    evaluate = commands.add_parser("eval", help="benchmark the zoo's models on the synthetic world; write JSON "
                                                "(and the demo zoo's table in docs/demo-zoo.md)")
    evaluate.add_argument("--zoo", help="zoo folder of manifests, or 'demo' for checkpoints/demo (default: "
                                        "--checkpoints, else the repo's checkpoints/)")
    evaluate.add_argument("--data", type=Path, help="dataset folder written by `explorer data synth` (default: the "
                                                    "held-out world of seed 1, which no demo model trained on, "
                                                    "regenerated if absent)")
    add_task_options(evaluate, SYNTHETIC_OPTIONS)  # split, limit, grounding-limit, quick, seed: declared once
    evaluate.add_argument("--model", action="append", dest="models", metavar="NAME",
                          help="evaluate only this zoo model (repeat for several; default: all)")
    evaluate.add_argument("--device", default="auto")
    add_precision_argument(evaluate, "fp32")
    evaluate.add_argument("--out", type=Path, default=Path("results.json"),
                          help="results JSON (default: results.json in the current folder)")
    evaluate.add_argument("--readme", type=Path, help="also write the table between <!-- eval-table:start --> and "
                                                      "<!-- eval-table:end --> of this file")
    evaluate.add_argument("--no-progress", action="store_true", help="no progress bars")
    evaluate.set_defaults(run=_run_eval)

    retrieval.add_commands(commands)
    grounding.add_commands(commands)
    jobs.add_commands(commands)
    results.add_commands(commands)
    generation.add_commands(commands)
    export.add_commands(commands)
    methods.add_commands(commands)
    probe.add_commands(commands)
    negatives.add_commands(commands)
    zeroshot.add_commands(commands)
    return parser


def _run_app(args) -> int:
    from explorer.serve.access import Access
    from explorer.ui.app import launch
    from explorer.serve.clients import proxy_list
    from explorer.serve.host_guard import answered_names, is_loopback, resolve_bind
    from explorer.zoo import Zoo

    auth = None
    if args.auth:
        user, _, password = args.auth.partition(":")
        if not password:
            raise ExplorerError("--auth takes USER:PASSWORD")
        auth = (user, password)
    if args.trusted and args.public:
        raise ExplorerError("--public and --trusted contradict each other: choose one")
    if args.trusted and auth is None:
        raise ExplorerError("--trusted gives every visitor the owner's page (adding models, training, reading the "
                            "allowed folders): it needs --auth USER:PASSWORD")
    proxies = proxy_list(args.forwarded_allow_ips) if args.forwarded_allow_ips is not None else None
    bind = resolve_bind(args.host)  # what Gradio will bind: the mode follows it, and Gradio is given it
    others = args.share or not is_loopback(bind)
    public = args.public or (others and not args.trusted)
    zoo = Zoo(args.checkpoints, device=args.device, precision=args.precision)  # the page's zoo, built once
    if args.max_caption_chars is not None and args.max_caption_chars < 1:
        raise ExplorerError("--max-caption-chars takes a positive number of characters")
    access = Access.for_app(zoo.root, allow_roots=args.allow_root, public=public, sdxl=args.sdxl,
                            sdxl_config=args.sdxl_config, allow_hosts=args.allow_host,
                            caption_chars=args.max_caption_chars)
    if public:
        why = "--public" if args.public else "--share" if args.share else f"listening on {bind}"
        print(f"explorer: public demo mode ({why}): read-only, no typed paths, no jobs; --trusted with --auth "
              "gives visitors the owner's page")
    else:
        answering = "" if others else f", answering at {answered_names(access.hosts)}"
        print(f"explorer: owner mode on {bind}{answering}; typed paths must be under: "
              f"{', '.join(map(str, access.roots))}")
    launch(host=bind, port=args.port, share=args.share, auth=auth, zoo=zoo, access=access, forwarded_allow_ips=proxies,
           announce=lambda url: print(f"explorer: serving on {url} (Ctrl+C to stop)", flush=True))
    return 0


def _run_models_list(args) -> int:
    zoo = zoo_from_args(args)
    entries = zoo.entries()
    if not entries:
        print(f"no manifests in {zoo.root}")
        return 0
    header = ("name", "method", "architecture", "context", "weights", "status")
    rows = [header]
    for entry in entries:
        m = entry.manifest
        if m is None:
            rows.append((entry.manifest_path.name, "?", "?", "?", "?", entry.status))
        else:
            status = entry.status + ("" if m.trained else ", UNTRAINED")
            rows.append((m.name, m.method, m.architecture, str(m.context_length or ""), m.display_weights(), status))
    widths = [max(len(str(row[i])) for row in rows) for i in range(len(header) - 1)]
    for row in rows:
        print("  ".join(str(cell).ljust(width) for cell, width in zip(row, widths)) + "  " + row[-1])
    return 0


def _run_models_add(args) -> int:
    manifest = zoo_from_args(args).add(args.path, name=args.name, source=args.source, method=args.method,
                              allow_pickle=args.allow_pickle)
    print(f"added {manifest.name}: {manifest.method} ({manifest.format}), {manifest.architecture}, "
          f"context {manifest.context_length} -> {manifest.path}")
    return 0


def _run_models_check(args) -> int:
    from explorer.models.io.loading import check

    result = check(args.path, allow_pickle=args.allow_pickle)
    if args.json:
        print(json.dumps({"method": result.method, "format": result.format, "wrapper": result.wrapper,
                          "architecture": result.architecture, "context_length": result.context_length,
                          "report": result.report.to_dict()}, indent=2))
    else:
        print(result.summary())
    return 0


def _run_train(args) -> int:
    from explorer.training.launch import run_train_command

    return run_train_command(args)


def _run_data_synth(args) -> int:
    from explorer.data import write_dataset

    counts = write_dataset(args.out, n_scenes=args.n, seed=args.seed, image_size=args.size, overwrite=args.overwrite)
    print(f"wrote {counts} scenes at {args.size} px to {args.out} (seed {args.seed}); layout: {args.out}/layout.md")
    if args.samples:
        from explorer.training.demo_world import write_samples

        path = write_samples(args.out, split="train")
        print(f"wrote {path} for `explorer train --data {args.out}`")
    return 0


def _run_build_demo(args) -> int:
    from explorer.core import paths
    from explorer.jobs import demo_build as background_build
    from explorer.training.demo_world import DEMO_SCENES
    from explorer.training.demo_zoo import build_demo

    out, work = args.out or paths.demo_zoo_root(), args.work or paths.demo_build_dir()
    scenes = DEMO_SCENES if args.scenes is None else args.scenes
    if args.min_steps < 1 or args.scale <= 0:
        raise ExplorerError("--min-steps takes a whole number of steps of at least 1, --scale a positive factor")
    if args.max_batch is not None and args.max_batch < 2:
        raise ExplorerError("--max-batch takes a whole number of at least 2 (a contrastive batch needs a negative)")
    if args.status:
        print(background_build.status(work))
        return 0
    if args.background:
        argv = ["--out", str(out), "--work", str(work), "--scenes", str(scenes), "--scale", str(args.scale),
                "--min-steps", str(args.min_steps), "--device", args.device]
        argv += ["--only", *args.only] if args.only else []
        argv += ["--max-batch", str(args.max_batch)] if args.max_batch is not None else []
        print(background_build.start(work, argv))
        return 0
    with background_build.holding(work):
        written = build_demo(out=out, work=work, n_scenes=scenes, scale=args.scale, only=args.only,
                             min_steps=args.min_steps, device=args.device, max_batch=args.max_batch)
    print(f"demo zoo: {len(written)} model(s) written")
    return 0


def _run_assets_write(args) -> int:
    from explorer.core import paths
    from explorer.data.examples import write_examples

    out = args.out or paths.assets_dir()
    written = write_examples(out)
    size = sum(path.stat().st_size for path in written)
    print(f"wrote {len(written)} files ({size / 1024:.0f} KiB) to {out}")
    return 0


def _eval_limits(args) -> tuple[int, int]:
    """(retrieval scenes, grounding scenes): as given, else --quick's share, else the full benchmark's."""
    from explorer.evaluation.estimate import QUICK_GROUNDING_LIMIT, QUICK_LIMIT
    from explorer.evaluation.results import DEFAULT_LIMIT

    limit = args.limit if args.limit is not None else (QUICK_LIMIT if args.quick else DEFAULT_LIMIT)
    grounding = args.grounding_limit if args.grounding_limit is not None else (
        QUICK_GROUNDING_LIMIT if args.quick else 80)
    return limit, grounding


def _run_eval(args) -> int:
    from explorer.core import paths
    from explorer.evaluation.report import (hard_negatives_table, results_markdown, results_table,
                                            shared_context_table, update_readme)
    from explorer.evaluation.estimate import plan_eval
    from explorer.evaluation.results import write_results
    from explorer.evaluation.runner import evaluate_zoo
    from explorer.training.demo_world import write_eval_world

    task_values(args, SYNTHETIC_OPTIONS)  # a split, a limit out of range: one line before any work
    zoo = paths.demo_zoo_root() if args.zoo == "demo" else (args.zoo or args.checkpoints)
    data = args.data or write_eval_world(paths.demo_build_dir(), print)
    limit, grounding_limit = _eval_limits(args)
    print(plan_eval(zoo, data, args.split, limit, grounding_limit, args.models,
                    args.quick).line(), flush=True)
    results = evaluate_zoo(zoo, data, split=args.split, limit=limit,
                           seed=args.seed, progress=not args.no_progress, models=args.models,
                           grounding_limit=grounding_limit, device=args.device, precision=args.precision)
    write_results(results, args.out)
    for name, message in results["errors"].items():
        print(f"warning: {name}: {message}", file=sys.stderr)
    if not results["models"]:
        raise ExplorerError(f"no model was evaluated (zoo: {results['zoo']}); results written to {args.out}")
    print(results_table(results), end="")
    print("\n" + hard_negatives_table(results), end="")  # the fair hard-negative test, per attribute
    print("\n" + shared_context_table(results), end="")  # the same, on the changes every model reads
    print(f"wrote {Path(args.out).absolute()}")  # the default lands in the current folder: say where that is
    if args.readme:
        changed = update_readme(args.readme, results_markdown(results))
        print(f"{'updated' if changed else 'unchanged'}: {args.readme}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
