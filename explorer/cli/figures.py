"""`explorer figure maps|regions|pca|replay` (and `explorer maps`): grounding views as paper figures."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from explorer.cli.common import add_precision_argument, model_loader, read_text, zoo_from_args
from explorer.cli.probe import add_figure_command, replay_swaps
from explorer.core.errors import ExplorerError
from explorer.views.figure_style import ANNOTATIONS, FONTS, HEADERS, PRESETS
from explorer.views.render import COLORMAPS
from explorer.views.settings import LAYOUTS, MASK_MODES, PCA_FITS, PCA_SOURCES, SCALES


def add_commands(commands) -> None:
    figure = commands.add_parser("figure", help="a grounding view as a paper figure (PDF, SVG, PNG at 300 dpi), "
                                                 "with its settings saved beside it").add_subparsers(title="views")
    for view, text in FIGURE_VIEWS.items():
        add_figure_arguments(figure.add_parser(view, help=text), view)
    replay = figure.add_parser("replay", help="write a figure again from its saved settings JSON")
    replay.add_argument("settings", type=Path, help="the .json written beside a figure (by the CLI or the app)")
    replay.add_argument("--out", type=Path, help="default: the settings file's name without .json")
    add_style_arguments(replay)  # default: as saved
    replay.add_argument("--device", default="auto")
    add_precision_argument(replay, None)
    replay.add_argument("--allow-pickle", action="store_true")
    replay.set_defaults(run=_run_figure_replay)
    add_figure_command(figure)  # `explorer figure swaps`: the swap probe's margins and map pairs
    gallery = figure.add_parser("gallery", help="one figure of each kind from the demo zoo, with settings that "
                                                 "replay from any clone (the docs' gallery, docs/figures.md)")
    gallery.add_argument("--out", type=Path, default=Path("docs/figures"),
                         help="default: docs/figures under the current folder")
    gallery.add_argument("--device", default="auto")
    add_precision_argument(gallery, "fp32")  # docs/figures was drawn in fp32, byte for byte
    gallery.add_argument("--allow-pickle", action="store_true")
    gallery.set_defaults(run=_run_gallery)
    # The first command of the project, kept: the same as `explorer figure maps`.
    add_figure_arguments(commands.add_parser("maps", help="same as `explorer figure maps`"), "maps")


STYLE_FLAGS = ("preset", "width", "font", "font_size", "header", "annotate", "dpi")


def add_style_arguments(parser: argparse.ArgumentParser) -> None:
    """How a figure looks: the same flags on every figure command (and on replay, to restyle one)."""
    parser.add_argument("--preset", choices=list(PRESETS),
                        help="column (3.3 in, at most 4.5 in tall a page: more sentences go to more pages), page "
                             "(6.9 in; default) or slide (13.3 x 7.5 in), with the font size meant for that width "
                             "(8 pt in print)")
    parser.add_argument("--width", type=float, help="figure width in inches (default: the preset's)")
    parser.add_argument("--font", choices=FONTS, help="sans (default), serif, or cm: Computer Modern, as LaTeX "
                                                      "sets it (no TeX needed)")
    parser.add_argument("--font-size", type=float, help="points (default: the preset's)")
    parser.add_argument("--header", choices=HEADERS, help="a map's column header: its sentence (default; wrapped, "
                                                          "cut with an ellipsis) or S1.. with a legend")
    parser.add_argument("--annotate", choices=ANNOTATIONS,
                        help="under each map: none; scores (default: IoU and hit when truth is known); all "
                             "(thresholds too)")
    parser.add_argument("--dpi", type=int, help="PNG resolution (default 300)")


def preset_resets(args) -> dict:
    """A preset named on the command line brings its own width and font size, unless those are given too."""
    if getattr(args, "preset", None) is None:
        return {}
    return {name: None for name in ("width", "font_size") if getattr(args, name) is None}


FIGURE_VIEWS = {
    "maps": "per-sentence maps of a caption over an image, with Otsu masks, for up to 4 models",
    "regions": "FLISM regions (detector, quadrants, centre) and the sentence x region similarity",
    "pca": "top 3 principal components of the patch features as RGB, for images x models",
    "kinds": "one picture, one or a few sentences: models as rows, map kinds as columns (Grad-CAM, LeGrad, "
             "ClearCLIP, NACLIP, each model's own map)",
    "retrieval": "queries of a retrieval dataset and each model's top k, the right answer framed",
}


def add_figure_arguments(parser: argparse.ArgumentParser, view: str) -> None:
    if view != "retrieval":
        parser.add_argument("image", nargs="?", help="the picture (may come from --settings instead)")
        text = parser.add_mutually_exclusive_group()
        text.add_argument("--caption")
        text.add_argument("--caption-file", type=Path)
    parser.add_argument("--settings", type=Path, help="start from a saved settings JSON; flags given here win")
    parser.add_argument("--model", action="append", dest="models", metavar="MODEL",
                        help="zoo name, manifest .json or weights file; repeat to compare (at most 4)")
    parser.add_argument("--out", type=Path, default=Path(f"{view}.png"),
                        help=f".png (300 dpi), .pdf or .svg (default: {view}.png in the current folder)")
    add_style_arguments(parser)
    parser.add_argument("--device", default="auto")
    add_precision_argument(parser, None)
    parser.add_argument("--allow-pickle", action="store_true")
    if view in ("maps", "kinds"):
        parser.add_argument("--dense-caption", help="for methods that read one (SEPS)")
        parser.add_argument("--cmap", choices=COLORMAPS)
        parser.add_argument("--opacity", type=float)
        parser.add_argument("--threshold", type=float, help="manual threshold, a fraction of each map's range "
                                                            "(default: Otsu's)")
        parser.add_argument("--page", type=int, help="which page of sentences (from 1)")
        parser.add_argument("--per-page", type=int, help="sentences per page (default 8; kinds: 2)")
        parser.add_argument("--truth", help="a label mask: value k marks sentence k (255: every sentence)")
    if view == "kinds":
        parser.add_argument("--kind", action="append", dest="kinds", metavar="KIND",
                            help="a column: an explainer (gradcam, legrad, clearclip, naclip), generic, a named "
                                 "kind, or native (each model's own map); repeat (default: the explainers and "
                                 "native)")
    if view == "retrieval":
        parser.add_argument("--data", help="the dataset: a folder (or index file) in one of the layouts")
        parser.add_argument("--split", help="default: the layout's")
        parser.add_argument("--limit", type=int, metavar="N", help="only the first N pictures, with their captions")
        parser.add_argument("--query", action="append", dest="queries", metavar="N|TEXT",
                            help="t2i: a caption by its number in the dataset, or a text; i2t: a picture by its "
                                 "number; repeat")
        parser.add_argument("--k", type=int, help="results per model (default 5)")
        parser.add_argument("--direction", choices=("t2i", "i2t"), help="t2i: a caption finds pictures "
                                                                        "(default); i2t: a picture finds captions")
    if view == "maps":
        parser.add_argument("--kind", help="map kind: native (each model's own; default), generic, or a named kind")
        parser.add_argument("--mask", choices=MASK_MODES, help="how the Otsu mask is drawn (default contour)")
        parser.add_argument("--scale", choices=SCALES, help="colour range per map (default), per model, or shared")
        parser.add_argument("--save-maps", type=Path, help="also write the raw maps as .npz ([M, H, W] per model)")
        parser.add_argument("--layout", choices=LAYOUTS, help="a row per sentence, its number and text beside it, a "
                                                              "column per model (default; the page's), or a row "
                                                              "per model and a column per sentence")
        parser.add_argument("--no-picture", dest="picture", action="store_false", default=None,
                            help="leave out the plain picture's column")
    if view == "regions":
        parser.add_argument("--detector", help="local YOLOS directory (default: $EXPLORER_DETECTOR, else "
                                               "Felzenszwalb segments from scikit-image)")
    if view == "pca":
        parser.add_argument("--images", nargs="*", help="more pictures beside IMAGE")
        parser.add_argument("--source", dest="pca_source", choices=PCA_SOURCES)
        parser.add_argument("--fit", dest="pca_fit", choices=PCA_FITS,
                            help="one PCA per model (per-model, default), one for everything on the figure "
                                 "(joint) or one per panel")
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
    caption_file = getattr(args, "caption_file", None)
    caption = getattr(args, "caption", None)
    caption = caption if caption is not None else (read_text(caption_file) if caption_file else None)
    flags = {"image": getattr(args, "image", None), "caption": caption, "models": args.models}
    for name in ("kind", "dense_caption", "cmap", "opacity", "mask", "threshold", "scale", "per_page", "truth",
                 "detector", "images", "pca_source", "pca_fit", "kinds", "data", "split", "limit", "queries", "k",
                 "direction", "layout", "picture", *STYLE_FLAGS):
        flags[name] = getattr(args, name, None)
    if args.view == "kinds" and flags["per_page"] is None and not args.settings:
        flags["per_page"] = 2  # a row per model and sentence: two sentences keep the figure on a page
    if getattr(args, "page", None) is not None:
        if args.page < 1:
            raise ExplorerError(f"pages count from 1, not {args.page}")
        flags["page"] = args.page - 1
    data.update({k: v for k, v in flags.items() if v is not None})
    data.update(preset_resets(args))
    # Paths are saved absolute, so the settings regenerate the figure from any folder.
    for name in ("image", "truth", "data"):
        if data.get(name):
            data[name] = str(Path(data[name]).expanduser().resolve())
    data["images"] = [str(Path(p).expanduser().resolve()) for p in data.get("images") or []]
    if args.view == "regions":  # record the detector actually used, not "whatever $EXPLORER_DETECTOR says"
        from explorer.grounding.detectors import detector_setting

        data["detector"] = detector_setting(data.get("detector"))
    if args.view == "retrieval":
        if not data.get("data") or not data.get("queries"):
            raise ExplorerError("give the dataset and the queries: explorer figure retrieval --data DIR --model M "
                                "--query N|TEXT (or --settings FILE)")
        return ViewSettings.from_dict(data)
    if not data.get("image"):
        raise ExplorerError("give the picture: explorer figure VIEW IMAGE ... (or --settings FILE)")
    if args.view != "pca" and not (data.get("caption") or "").strip():
        raise ExplorerError("give a caption: --caption TEXT or --caption-file FILE")
    return ViewSettings.from_dict(data)


def _run_figure(args) -> int:
    return _write_figure(args, _figure_settings(args), args.out)


def _run_figure_replay(args) -> int:
    from explorer.views.settings import ViewSettings

    swaps = replay_swaps(args, args.settings)  # a swap figure's settings replay through the probe
    if swaps is not None:
        return swaps
    settings = ViewSettings.load(args.settings)
    overrides = {k: getattr(args, k) for k in STYLE_FLAGS if getattr(args, k) is not None}
    overrides.update(preset_resets(args))
    if overrides:
        settings = ViewSettings(**{**vars(settings), **overrides})
    # fig.pdf.json -> fig.pdf; a settings file named otherwise needs --out
    out = args.out or args.settings.with_suffix("")
    return _write_figure(args, settings, out)


def _run_gallery(args) -> int:
    from explorer.views.gallery import write_gallery

    for figure in write_gallery(model_loader(args, zoo_from_args(args)), args.out):
        print(f"wrote {figure} and {figure.name}.json")
    return 0


def _write_figure(args, settings, out: Path) -> int:
    from explorer.views.figure_pages import write_figure_pages
    from explorer.views.figures import check_format
    from explorer.views.pipeline import compute_view

    check_format(out)
    # --precision, else what the settings file ran in (a replay), else auto
    args.precision = getattr(args, "precision", None) or settings.precision or "auto"
    zoo = zoo_from_args(args)
    if not settings.models:
        default = zoo.default_name()
        if default is None:
            raise ExplorerError(f"no models in {zoo.root}; pass --model")
        settings.models = [default]
    load = model_loader(args, zoo)
    view = compute_view(load, settings)
    settings.precision = load(settings.models[0]).precision  # the format that ran, in the settings file
    written = write_figure_pages(view, settings, out)
    if getattr(args, "save_maps", None):
        import numpy as np

        np.savez_compressed(args.save_maps, **{m.name: m.maps for m in view.models})
    for note in view.notes:
        print(f"note: {note}")
    warning = synthetic_warning(view, settings, load)
    for line in ([f"warning: {warning}"] if warning else []) + written.lines:
        print(line, file=sys.stderr)
    others = "".join(f", {file}" for file in written.files[1:])
    print(f"wrote {written.figure}{others} and {written.settings_file}")
    return 0


def synthetic_warning(view, settings, load) -> str | None:
    """The line for demo models drawn on a picture without truth (their maps mean nothing there), for the
    views that draw their maps: sentence maps, map kinds, regions."""
    from explorer.views.maps_view import MapsView, ModelMaps, find_view_truth, picture_in_world

    if isinstance(view, MapsView):
        return view.synthetic_warning()
    if settings.view not in ("kinds", "regions"):
        return None
    demo = [load(name).name for name in settings.models if getattr(load(name), "synthetic_only", False)]
    if not demo:
        return None
    truth = getattr(view, "truth", None)
    if settings.view == "regions":
        truth = find_view_truth(settings, view.picture, view.sentences, None)[0]
    # the maps view's own line, for these models and this truth
    maps = [ModelMaps(name=name, result=None, synthetic_only=True) for name in demo]
    return MapsView(picture=view.picture, sentences=view.sentences, models=maps, truth=truth,
                    in_world=picture_in_world(settings, view.picture)).synthetic_warning()
