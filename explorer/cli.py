"""The same operations as the app, from the shell: `explorer --help`."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from explorer.core.errors import ExplorerError
from explorer.core.runtime import prepare_process
from explorer.views.render import COLORMAPS
from explorer.views.settings import MASK_MODES, PCA_FITS, PCA_SOURCES, SCALES


def main(argv: list[str] | None = None) -> int:
    prepare_process()  # offline, no telemetry, torchvision importable: before any heavy import
    parser = _parser()
    args = parser.parse_args(argv)
    if not hasattr(args, "run"):
        parser.print_help()
        return 0
    try:
        return args.run(args) or 0
    except (ExplorerError, ValueError) as error:  # bad input, said plainly (as the app says it)
        print(f"error: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="explorer", description="See what long-text CLIP models see.")
    parser.add_argument("--checkpoints", help="zoo folder of manifests (default: the repo's checkpoints/)")
    commands = parser.add_subparsers(title="commands")

    app = commands.add_parser("app", help="open the web app")
    app.add_argument("--host", default="127.0.0.1", help="address to bind (default: localhost only)")
    app.add_argument("--port", type=int, default=7860)
    app.add_argument("--share", action="store_true", help="make a public Gradio share link (explicit opt-in)")
    app.add_argument("--auth", help="USER:PASSWORD required to open the page")
    app.add_argument("--device", default="auto", help="auto, cpu, cuda, cuda:1 ...")
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

    zoo = commands.add_parser("zoo", help="the demo zoo").add_subparsers(title="zoo")
    demo = zoo.add_parser("build-demo", help="retrain checkpoints/demo/ from scratch on the synthetic world")
    demo.add_argument("--out", type=Path, help="default: the repository's checkpoints/demo")
    demo.add_argument("--work", type=Path, help="data and run folders (default: $EXPLORER_HOME/demo-build, ~/.cache/explorer/demo-build)")
    demo.add_argument("--scenes", type=int, default=6000)
    demo.add_argument("--scale", type=float, default=1.0, help="multiply every run's steps (e.g. 0.1 for a quick try)")
    demo.add_argument("--only", nargs="*", help="train only these runs (clip-base, longclip, finelip, ...)")
    demo.set_defaults(run=_run_build_demo)

    figure = commands.add_parser("figure", help="a grounding view as a paper figure (PDF, SVG, PNG at 300 dpi), "
                                                 "with its settings saved beside it").add_subparsers(title="views")
    for view, text in FIGURE_VIEWS.items():
        _add_figure_arguments(figure.add_parser(view, help=text), view)
    replay = figure.add_parser("replay", help="write a figure again from its saved settings JSON")
    replay.add_argument("settings", type=Path, help="the .json written beside a figure (by the CLI or the app)")
    replay.add_argument("--out", type=Path, help="default: the settings file's name without .json")
    replay.add_argument("--width", type=float, help="figure width in inches (default: as saved)")
    replay.add_argument("--dpi", type=int, help="default: as saved")
    replay.add_argument("--device", default="auto")
    replay.add_argument("--allow-pickle", action="store_true")
    replay.set_defaults(run=_run_figure_replay)
    # The first command of the project, kept: the same as `explorer figure maps`.
    _add_figure_arguments(commands.add_parser("maps", help="same as `explorer figure maps`"), "maps")

    evaluate = commands.add_parser("eval", help="benchmark the zoo's models on the synthetic world; write JSON "
                                                "(and the README table)")
    evaluate.add_argument("--zoo", help="zoo folder of manifests, or 'demo' for checkpoints/demo (default: "
                                        "--checkpoints, else the repo's checkpoints/)")
    evaluate.add_argument("--data", type=Path, help="dataset folder written by `explorer data synth` (default: the "
                                                    "demo world, regenerated from its seed if absent)")
    evaluate.add_argument("--split", default="test", choices=("train", "val", "test"))
    evaluate.add_argument("--limit", type=int, help="scenes for retrieval and hard negatives (default 300)")
    evaluate.add_argument("--grounding-limit", type=int, default=100,
                          help="the first scenes used for grounding and FLISM (default 100)")
    evaluate.add_argument("--model", action="append", dest="models", metavar="NAME",
                          help="evaluate only this zoo model (repeat for several; default: all)")
    evaluate.add_argument("--seed", type=int, default=0)
    evaluate.add_argument("--device", default="auto")
    evaluate.add_argument("--out", type=Path, default=Path("results.json"), help="results JSON (default results.json)")
    evaluate.add_argument("--readme", type=Path, help="also write the table between <!-- eval-table:start --> and "
                                                      "<!-- eval-table:end --> of this file")
    evaluate.add_argument("--no-progress", action="store_true", help="no progress bars")
    evaluate.set_defaults(run=_run_eval)
    return parser


def _zoo(args):
    from explorer.zoo import Zoo

    return Zoo(args.checkpoints, device=getattr(args, "device", "auto"))


def _run_app(args) -> int:
    from explorer.ui.app import launch

    auth = None
    if args.auth:
        user, _, password = args.auth.partition(":")
        if not password:
            raise ExplorerError("--auth takes USER:PASSWORD")
        auth = (user, password)
    print(f"explorer: serving on http://{args.host}:{args.port} (Ctrl+C to stop)")
    launch(host=args.host, port=args.port, share=args.share, auth=auth, zoo_root=args.checkpoints,
           device=args.device)
    return 0


def _run_models_list(args) -> int:
    zoo = _zoo(args)
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
    manifest = _zoo(args).add(args.path, name=args.name, source=args.source, method=args.method,
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
        from explorer.training.demo_zoo import write_samples

        path = write_samples(args.out, split="train")
        print(f"wrote {path} for `explorer train --data {args.out}`")
    return 0


def _run_build_demo(args) -> int:
    from explorer.core import paths
    from explorer.training.demo_zoo import build_demo

    written = build_demo(out=args.out or paths.demo_zoo_root(), work=args.work or paths.demo_build_dir(), n_scenes=args.scenes,
                         scale=args.scale, only=args.only)
    print(f"demo zoo: {len(written)} model(s) written")
    return 0


FIGURE_VIEWS = {
    "maps": "per-sentence maps of a caption over an image, with Otsu masks, for up to 4 models",
    "regions": "FLISM regions (detector, quadrants, centre) and the sentence x region similarity",
    "pca": "top 3 principal components of the patch features as RGB, for images x models",
}


def _add_figure_arguments(parser: argparse.ArgumentParser, view: str) -> None:
    parser.add_argument("image", nargs="?", help="the picture (may come from --settings instead)")
    text = parser.add_mutually_exclusive_group()
    text.add_argument("--caption")
    text.add_argument("--caption-file", type=Path)
    parser.add_argument("--settings", type=Path, help="start from a saved settings JSON; flags given here win")
    parser.add_argument("--model", action="append", dest="models", metavar="MODEL",
                        help="zoo name, manifest .json or weights file; repeat to compare (at most 4)")
    parser.add_argument("--out", type=Path, default=Path(f"{view}.png"), help=".png (300 dpi), .pdf or .svg")
    parser.add_argument("--width", type=float, help="figure width in inches (default 7)")
    parser.add_argument("--dpi", type=int, help="PNG resolution (default 300)")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--allow-pickle", action="store_true")
    if view == "maps":
        parser.add_argument("--kind", help="map kind: native (each model's own; default), generic, or a named kind")
        parser.add_argument("--dense-caption", help="for methods that read one (SEPS)")
        parser.add_argument("--cmap", choices=COLORMAPS)
        parser.add_argument("--opacity", type=float)
        parser.add_argument("--mask", choices=MASK_MODES, help="how the Otsu mask is drawn (default contour)")
        parser.add_argument("--threshold", type=float, help="manual threshold, a fraction of each map's range "
                                                            "(default: Otsu's)")
        parser.add_argument("--scale", choices=SCALES, help="colour range per map (default), per model, or shared")
        parser.add_argument("--page", type=int, help="which page of sentences (from 1)")
        parser.add_argument("--per-page", type=int, help="sentences per page (default 8)")
        parser.add_argument("--truth", help="a label mask: value k marks sentence k (255: every sentence)")
        parser.add_argument("--save-maps", type=Path, help="also write the raw maps as .npz ([M, H, W] per model)")
    if view == "regions":
        parser.add_argument("--detector", help="local YOLOS directory (default: $EXPLORER_DETECTOR, else "
                                               "Felzenszwalb segments from scikit-image)")
    if view == "pca":
        parser.add_argument("--images", nargs="*", help="more pictures beside IMAGE")
        parser.add_argument("--source", dest="pca_source", choices=PCA_SOURCES)
        parser.add_argument("--fit", dest="pca_fit", choices=PCA_FITS,
                            help="one PCA for everything on the figure (joint, default) or one per panel")
    parser.set_defaults(run=_run_figure, view=view)


def _figure_settings(args):
    """Settings from --settings (if any), then the flags given on the command line."""
    from explorer.views.settings import ViewSettings

    data = {}
    if args.settings:
        base = ViewSettings.load(args.settings)
        if base.view != args.view:
            raise ExplorerError(f"{args.settings} holds a {base.view!r} figure, not {args.view!r}")
        data = {k: v for k, v in vars(base).items()}
    data["view"] = args.view
    caption = args.caption if args.caption is not None else (
        _read_text(args.caption_file) if args.caption_file else None)
    flags = {"image": args.image, "caption": caption, "models": args.models}
    for name in ("kind", "dense_caption", "cmap", "opacity", "mask", "threshold", "scale", "per_page", "truth",
                 "detector", "images", "pca_source", "pca_fit", "width", "dpi"):
        flags[name] = getattr(args, name, None)
    if getattr(args, "page", None) is not None:
        if args.page < 1:
            raise ExplorerError(f"pages count from 1, not {args.page}")
        flags["page"] = args.page - 1
    data.update({k: v for k, v in flags.items() if v is not None})
    # Paths are saved absolute, so the settings regenerate the figure from any folder.
    for name in ("image", "truth"):
        if data.get(name):
            data[name] = str(Path(data[name]).expanduser().resolve())
    data["images"] = [str(Path(p).expanduser().resolve()) for p in data.get("images") or []]
    if args.view == "regions":  # record the detector actually used, not "whatever $EXPLORER_DETECTOR says"
        from explorer.grounding.detectors import detector_setting

        data["detector"] = detector_setting(data.get("detector"))
    if not data.get("image"):
        raise ExplorerError("give the picture: explorer figure VIEW IMAGE ... (or --settings FILE)")
    if args.view != "pca" and not (data.get("caption") or "").strip():
        raise ExplorerError("give a caption: --caption TEXT or --caption-file FILE")
    return ViewSettings.from_dict(data)


def _model_loader(args, zoo):
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


def _run_figure(args) -> int:
    return _write_figure(args, _figure_settings(args), args.out)


def _run_figure_replay(args) -> int:
    from explorer.views.settings import ViewSettings

    settings = ViewSettings.load(args.settings)
    overrides = {k: v for k, v in (("width", args.width), ("dpi", args.dpi)) if v is not None}
    if overrides:
        settings = ViewSettings(**{**vars(settings), **overrides})
    # fig.pdf.json -> fig.pdf; a settings file named otherwise needs --out
    out = args.out or args.settings.with_suffix("")
    return _write_figure(args, settings, out)


def _write_figure(args, settings, out: Path) -> int:
    from explorer.views.figures import check_format
    from explorer.views.pipeline import compute_view, write_figure

    check_format(out)
    zoo = _zoo(args)
    if not settings.models:
        default = zoo.default_name()
        if default is None:
            raise ExplorerError(f"no models in {zoo.root}; pass --model")
        settings.models = [default]
    view = compute_view(_model_loader(args, zoo), settings)
    figure, settings_file = write_figure(view, settings, out)
    if getattr(args, "save_maps", None):
        import numpy as np

        np.savez_compressed(args.save_maps, **{m.name: m.maps for m in view.models})
    for note in view.notes:
        print(f"note: {note}")
    print(f"wrote {figure} and {settings_file}")
    return 0


def _run_eval(args) -> int:
    from explorer.core import paths
    from explorer.evaluation.report import results_markdown, results_table, update_readme
    from explorer.evaluation.results import write_results
    from explorer.evaluation.runner import evaluate_zoo
    from explorer.training.demo_zoo import write_world

    zoo = paths.demo_zoo_root() if args.zoo == "demo" else (args.zoo or args.checkpoints)
    data = args.data or write_world(paths.demo_build_dir(), print)
    results = evaluate_zoo(zoo, data, split=args.split, limit=args.limit,
                           seed=args.seed, progress=not args.no_progress, models=args.models,
                           grounding_limit=args.grounding_limit, device=args.device)
    write_results(results, args.out)
    for name, message in results["errors"].items():
        print(f"warning: {name}: {message}", file=sys.stderr)
    if not results["models"]:
        raise ExplorerError(f"no model was evaluated (zoo: {results['zoo']}); results written to {args.out}")
    print(results_table(results), end="")
    print(f"wrote {args.out}")
    if args.readme:
        changed = update_readme(args.readme, results_markdown(results))
        print(f"{'updated' if changed else 'unchanged'}: {args.readme}")
    return 0


def _read_text(path: Path) -> str:
    try:
        return path.read_text()
    except OSError as error:
        raise ExplorerError(f"cannot read the caption file {path}: {error}") from error


if __name__ == "__main__":
    raise SystemExit(main())
