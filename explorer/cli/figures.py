"""`explorer figure maps|regions|pca|replay` (and `explorer maps`): grounding views as paper figures."""

from __future__ import annotations

import argparse
from pathlib import Path

from explorer.cli.common import model_loader, read_text, zoo_from_args
from explorer.core.errors import ExplorerError
from explorer.views.render import COLORMAPS
from explorer.views.settings import MASK_MODES, PCA_FITS, PCA_SOURCES, SCALES


def add_commands(commands) -> None:
    figure = commands.add_parser("figure", help="a grounding view as a paper figure (PDF, SVG, PNG at 300 dpi), "
                                                 "with its settings saved beside it").add_subparsers(title="views")
    for view, text in FIGURE_VIEWS.items():
        add_figure_arguments(figure.add_parser(view, help=text), view)
    replay = figure.add_parser("replay", help="write a figure again from its saved settings JSON")
    replay.add_argument("settings", type=Path, help="the .json written beside a figure (by the CLI or the app)")
    replay.add_argument("--out", type=Path, help="default: the settings file's name without .json")
    replay.add_argument("--width", type=float, help="figure width in inches (default: as saved)")
    replay.add_argument("--dpi", type=int, help="default: as saved")
    replay.add_argument("--device", default="auto")
    replay.add_argument("--allow-pickle", action="store_true")
    replay.set_defaults(run=_run_figure_replay)
    # The first command of the project, kept: the same as `explorer figure maps`.
    add_figure_arguments(commands.add_parser("maps", help="same as `explorer figure maps`"), "maps")


FIGURE_VIEWS = {
    "maps": "per-sentence maps of a caption over an image, with Otsu masks, for up to 4 models",
    "regions": "FLISM regions (detector, quadrants, centre) and the sentence x region similarity",
    "pca": "top 3 principal components of the patch features as RGB, for images x models",
}


def add_figure_arguments(parser: argparse.ArgumentParser, view: str) -> None:
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
        read_text(args.caption_file) if args.caption_file else None)
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
    zoo = zoo_from_args(args)
    if not settings.models:
        default = zoo.default_name()
        if default is None:
            raise ExplorerError(f"no models in {zoo.root}; pass --model")
        settings.models = [default]
    view = compute_view(model_loader(args, zoo), settings)
    figure, settings_file = write_figure(view, settings, out)
    if getattr(args, "save_maps", None):
        import numpy as np

        np.savez_compressed(args.save_maps, **{m.name: m.maps for m in view.models})
    for note in view.notes:
        print(f"note: {note}")
    print(f"wrote {figure} and {settings_file}")
    return 0
