"""The swap probe as a view: its settings (what replays a figure), the computed record and map pairs, the
figure (the margins table and a map pair per model), and the page's HTML (words, table, map pair).

``SwapSettings`` is saved beside a figure (``swaps.pdf.json``, ``"view": "swaps"``) and replays it with
``explorer figure replay``. The figure is laid out for its preset: the table (a row per swap, a column per
model, margins coloured by sign) above the map pairs (a column per model: the original sentence's map over
the swapped one's), inside the column preset's 3.3 x 4.5 in.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Callable

import numpy as np
from PIL import Image

from explorer.core.errors import ExplorerError
from explorer.core.markup import escape
from explorer.grounding.sentence_maps import working_picture
from explorer.models.map_kinds import GENERIC_MAP
from explorer.models.precision import AUTO, PRECISION_CHOICES
from explorer.probe import MAX_SWAPS, SwapScores, compare_maps, named_object, pick_sentence, swap_scores
from explorer.probe.swaps import MapShift, sentence_maps
from explorer.views.figure_style import DEFAULT_PRESET, FONTS, PRESETS, resolve_style
from explorer.views.render import COLORMAPS, overlay

SWAPS_VIEW = "swaps"
NOTICED_RGB, MISSED_RGB = "#1a7f37", "#b42318"  # a margin the original wins by / loses by (green / red)


class SwapSettingsError(ExplorerError):
    """A swap figure's settings the view cannot use."""


@dataclass
class SwapSettings:
    view: str = SWAPS_VIEW
    image: str = ""
    caption: str = ""
    sentence: int = 1  # from 1, as the caption's sentences are numbered on the page
    word: str = ""
    replacements: list[str] = field(default_factory=list)  # empty: every other word of the word's type
    models: list[str] = field(default_factory=list)
    kind: str = GENERIC_MAP  # the map kind compared (one for every model, or "native" each model's own)
    kinds: dict = field(default_factory=dict)  # per model, when they differ (the page's board)
    margin: float = 0.0
    pair: str = ""  # the swap whose maps the figure shows (empty: the first)
    precision: str = AUTO
    cmap: str = "turbo"
    opacity: float = 0.55
    preset: str = "column"
    width: float | None = None
    font: str = "sans"
    font_size: float | None = None
    dpi: int = 300

    def __post_init__(self):
        if self.view != SWAPS_VIEW:
            raise SwapSettingsError(f"a swap figure's view is {SWAPS_VIEW!r}, not {self.view!r}")
        for name, allowed in (("precision", PRECISION_CHOICES), ("cmap", COLORMAPS), ("preset", PRESETS),
                              ("font", FONTS)):
            if getattr(self, name) not in allowed:
                raise SwapSettingsError(f"{name} is one of {', '.join(allowed)}, not {getattr(self, name)!r}")
        if not isinstance(self.replacements, list) or not all(isinstance(r, str) for r in self.replacements):
            raise SwapSettingsError("replacements is a list of words")
        if not 1 <= len(self.models) <= 4:
            raise SwapSettingsError(f"a swap figure compares 1 to 4 models, not {len(self.models)}")
        if not 30 <= int(self.dpi) <= 1200:
            raise SwapSettingsError(f"dpi is 30 to 1200, not {self.dpi}")

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2) + "\n"

    @classmethod
    def from_dict(cls, data: dict, folder: Path) -> "SwapSettings":
        """Settings read back from a figure's JSON; a relative picture path is read from ``folder`` (the
        settings file's)."""
        from explorer.views.settings import relative_to

        unknown = sorted(set(data) - {f.name for f in fields(cls)})
        if unknown:
            raise SwapSettingsError(f"unknown settings {', '.join(unknown)}")
        return cls(**relative_to(data, folder))


@dataclass
class MapPair:
    model: str
    kind: str
    original: np.ndarray  # [H, W] at the working picture's size
    swapped: np.ndarray
    shift: MapShift


@dataclass
class SwapView:
    picture: Image.Image  # the working picture
    record: SwapScores
    pairs: list[MapPair]  # the shown swap's maps, a pair per model
    shown: str  # the replacement whose maps ``pairs`` hold
    target: np.ndarray | None = None  # the new word's object (truth), where the picture has truth


Loader = Callable[[str], object]


def compute_swaps(load: Loader, settings: SwapSettings, truth_dir: Path | None = None) -> SwapView:
    """Scores of every swap for every model of ``settings``, the map pair of the shown swap, and the new word's
    object where the picture is a known scene (looked up in ``truth_dir``, default the examples' truth)."""
    working = working_picture(settings.image)
    sentence = pick_sentence(settings.caption, settings.sentence)
    models = [load(name) for name in settings.models]
    record = swap_scores(models, working, sentence, settings.word, settings.replacements or None,
                         margin=settings.margin, kind=None, limit=MAX_SWAPS)
    shown = settings.pair or record.replacements[0]
    if shown not in record.replacements:
        raise SwapSettingsError(f"the map pair shows one of the swaps ({', '.join(record.replacements)}), "
                                f"not {shown!r}")
    pairs = map_pairs(models, working.image, record, shown, settings)
    target = new_word_object(working.image, settings, record, shown, truth_dir)
    return SwapView(picture=working.image, record=record, pairs=pairs, shown=shown, target=target)


def new_word_object(picture: Image.Image, settings: SwapSettings, record: SwapScores, replacement: str,
                    truth_dir: Path | None) -> np.ndarray | None:
    """The truth mask of the object the swapped sentence names, or None (no truth, or no such object)."""
    from explorer.core import paths
    from explorer.core.sentences import split_sentences
    from explorer.grounding.truth import find_truth

    sentences = split_sentences(settings.caption)
    truth = find_truth(picture, sentences, truth_dir or paths.example_truth_dir())
    return named_mask(sentences, truth, record, replacement, settings.sentence)


def named_mask(sentences, truth, record: SwapScores, replacement: str, number: int) -> np.ndarray | None:
    """The mask in ``truth`` (or None) of the object sentence ``number`` (from 1) names once ``replacement`` is
    swapped in: what the figure and the page outline on the swapped map."""
    if truth is None:
        return None
    index = named_object(sentences, truth.masks, replacement, record.swapped_text(replacement), skip=number - 1)
    return None if index is None else truth.masks[index]


def map_pairs(models, picture: Image.Image, record: SwapScores, shown: str, settings: SwapSettings,
              originals: dict | None = None) -> list[MapPair]:
    """The original sentence's map and the shown swap's, per model (its kind from ``settings``). ``originals``:
    {model name: the original sentence's map as the board drew it}, so only the swapped sentence is computed."""
    text = record.swapped_text(shown)
    pairs = []
    for model in models:
        kind = settings.kinds.get(model.name, settings.kind)
        if kind not in model.map_kinds:
            raise SwapSettingsError(f"{model.name} offers the maps {', '.join(model.map_kinds)}, not {kind!r}")
        if originals is not None and model.name in originals:
            original, swapped = originals[model.name], sentence_maps(model, picture, [text], kind)[0]
        else:
            original, swapped = sentence_maps(model, picture, [record.sentence, text], kind)
        pairs.append(MapPair(model.name, kind, original, swapped, compare_maps(original, swapped)))
    return pairs


def margins(record: SwapScores) -> np.ndarray:
    """[swaps, models] margins."""
    return np.array([[s.margin for s in m.swaps] for m in record.models], dtype=float).T


def signed(value: float) -> str:
    """A margin as the table shows it: a signed decimal ("+0.415", "-0.068")."""
    return f"{value:+.3f}"


# ---- the figure ---------------------------------------------------------------------------------------


def write_swap_figure(view: SwapView, settings: SwapSettings, out: str | Path) -> tuple[Path, Path]:
    """The figure (``out``'s suffix picks PDF, SVG or PNG) and its settings beside it (``out``.json)."""
    from explorer.views.figure_style import figure_style
    from explorer.views.figures import METADATA, check_format
    from explorer.views.pdf_images import compress_pdf_images

    out = check_format(out)
    style = resolve_style(settings.preset, settings.width, settings.font, settings.font_size)
    with figure_style(style):
        fig = build_swap_figure(view, settings, style)
        out.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(out, dpi=settings.dpi, metadata=METADATA[out.suffix.lower()])
    if out.suffix.lower() == ".pdf":
        compress_pdf_images(out)  # heat maps as JPEG, as every other figure's PDF
    settings_file = out.with_name(out.name + ".json")
    settings_file.write_text(settings.to_json())
    return out, settings_file


def build_swap_figure(view: SwapView, settings: SwapSettings, style):
    """The margins table above a column of map pairs per model, as tall as it takes within the preset's page."""
    from matplotlib.figure import Figure

    record, n_models = view.record, len(view.pairs)
    line = style.font_size / 72 * 1.35  # inches per line of text
    small = max(5.0, style.font_size - 1)
    label = 0.75 if style.width < 5 else 1.1  # the row labels' column
    panel = min((style.width - label) / n_models, 1.6 if style.width < 5 else 2.4)
    aspect = view.picture.height / view.picture.width
    rows = len(record.replacements)
    title = 2.2 * line
    table = (rows + 2.5) * line * 0.9
    maps = 2 * panel * aspect + 3.5 * line
    height = title + table + maps + line
    limit = PRESETS[settings.preset].max_height
    if limit is not None and height > limit:  # a long list of swaps: the panels give way first
        panel = max(0.45, panel - (height - limit) / (2 * aspect))
        maps = 2 * panel * aspect + 3.5 * line
        height = title + table + maps + line
    height = PRESETS[settings.preset].height or height
    fig = Figure(figsize=(style.width, height))
    fig.patch.set_facecolor("white")
    top = height
    words = f"“{record.word}” ({record.word_type or 'word'}) swapped in: {record.sentence}"
    lines = style.measure().wrap(words, style.width - 0.1, 2)
    fig.text(0.01, 1 - 0.2 * line / height, "\n".join(lines), ha="left", va="top", fontsize=style.font_size)
    top -= title
    _draw_table(fig, view, style, top, height, label, small, line * 0.9)
    top -= table + 0.5 * line
    _draw_pairs(fig, view, settings, style, top, height, label, panel, aspect, small, line)
    return fig


def _draw_table(fig, view: SwapView, style, top: float, height: float, label: float, small: float, row: float):
    record, width = view.record, style.width
    columns = len(record.models)
    cell = (width - label) / columns
    for j, model in enumerate(record.models):
        share = 100 * model.noticed_share
        name = style.measure(small).fit(model.name, cell - 0.05)
        fig.text((label + j * cell + cell / 2) / width, top / height, f"{name}\n{share:.0f}%",
                 ha="center", va="top", fontsize=small)
    fig.text(0.01, (top - row) / height, "noticed", ha="left", va="top", fontsize=small, style="italic")
    top -= 2.3 * row
    values = margins(record)
    for i, replacement in enumerate(record.replacements):
        y = (top - i * row) / height
        fig.text(0.01, y, replacement, ha="left", va="top", fontsize=small,
                 fontweight="bold" if replacement == view.shown else "normal")
        for j, model in enumerate(record.models):
            swap = model.swaps[i]
            fig.text((label + j * cell + cell / 2) / width, y, signed(values[i, j]), ha="center", va="top",
                     fontsize=small, color=NOTICED_RGB if swap.noticed else MISSED_RGB)


def _draw_pairs(fig, view: SwapView, settings: SwapSettings, style, top: float, height: float, label: float,
                panel: float, aspect: float, small: float, line: float):
    width = style.width
    labels = ("original", f"“{view.shown}”")
    for r, which in enumerate(("original", "swapped")):
        y_top = top - r * (panel * aspect + 0.5 * line)
        fig.text(0.01, (y_top - panel * aspect / 2) / height, labels[r], ha="left", va="center", fontsize=small)
        for j, pair in enumerate(view.pairs):
            x = label + j * panel
            axis = fig.add_axes([x / width, (y_top - panel * aspect) / height, (panel - 0.04) / width,
                                 panel * aspect / height])
            values = getattr(pair, which)
            axis.imshow(np.asarray(overlay(view.picture, values, settings.cmap, settings.opacity)))
            if view.target is not None and which == "swapped":
                axis.contour(view.target.astype(float), levels=[0.5], colors="white", linewidths=0.8)
            x_peak, y_peak = pair.shift.original_peak if which == "original" else pair.shift.swapped_peak
            axis.plot([x_peak], [y_peak], marker="+", color="white", markersize=5, markeredgewidth=1.0)
            axis.set_axis_off()
            if which == "swapped":
                fig.text(x / width, (y_top - panel * aspect - 0.15 * line) / height,
                         f"IoU {pair.shift.iou:.2f}\npeak {pair.shift.peak_shift_px:.0f} px", ha="left", va="top",
                         fontsize=max(4.5, small - 1))


# ---- the page -----------------------------------------------------------------------------------------


def words_html(sentence: str, swappable, picked: str = "") -> str:
    """The sentence with each swappable word a button: ``data-swap-word`` and ``data-swap-type``; the picked
    one pressed."""
    parts, last = [], 0
    for word in swappable:
        parts.append(escape(sentence[last:word.start]))
        pressed = "true" if word.text == picked else "false"
        parts.append(f'<button type="button" class="swap-word" data-swap-word="{escape(word.text)}" '
                     f'data-swap-type="{escape(word.type)}" title="{escape(word.type)}" '
                     f'aria-pressed="{pressed}">{escape(word.text)}<small>{escape(word.type)}</small></button>')
        last = word.end
    parts.append(escape(sentence[last:]))
    return f'<p class="swap-sentence">{"".join(parts)}</p>'


def table_html(record: SwapScores, order: str = "swap", shown: str | None = None) -> str:
    """Shares noticed (per model and per word type), then a row per swap (``data-swap-row``), a cell per model
    (``data-swap-cell="<model>|<replacement>"``, the signed margin), sorted by ``order``: "swap" (as asked),
    or a model's name (its margins, smallest first: the swaps it misses on top)."""
    models = record.models
    rows = list(range(len(record.replacements)))
    names = [m.name for m in models]
    if order in names:
        column = names.index(order)
        rows.sort(key=lambda i: models[column].swaps[i].margin)
    head = "".join(f'<th><button type="button" data-swap-sort="{escape(m.name)}">'
                   f'{escape(m.name)}</button></th>' for m in models)
    shares = "".join(f"<td>{100 * m.noticed_share:.0f}%</td>" for m in models)
    body = []
    for i in rows:
        replacement = record.replacements[i]
        cells = []
        for m in models:
            swap = m.swaps[i]
            sign = "noticed" if swap.noticed else "missed"
            # A button in every cell and row header: reachable with Tab, Enter or Space shows the row's maps.
            tip = (f"{m.name}: original sentence {m.original_score:.3f}, with “{replacement}” {swap.score:.3f}; "
                   f"margin {signed(swap.margin)}, {sign}")
            cells.append(f'<td class="swap-{sign}" data-swap-cell="{escape(m.name)}|'
                         f'{escape(replacement)}"><button type="button" '
                         f'title="{escape(tip)}">{signed(swap.margin)}</button></td>')
        picked = ' class="swap-picked"' if replacement == shown else ""
        body.append(f'<tr data-swap-row="{escape(replacement)}"{picked}>'
                    f'<th scope="row"><button type="button" title="show the maps of this swap">'
                    f'{escape(replacement)}</button></th>{"".join(cells)}</tr>')
    noticed = escape(record.word_type or "word")
    # In a box that scrolls sideways (a phone), its first column fixed: the region is named and focusable so the
    # keyboard can scroll it too.
    return (f'<div class="swap-scroll" role="region" aria-label="swap scores (scrolls sideways)" tabindex="0">'
            f'<table class="swap-table"><thead><tr><th><button type="button" data-swap-sort="swap">swap</button>'
            f'</th>{head}</tr><tr class="swap-shares"><th>noticed ({noticed}, margin &gt; {record.margin:g})</th>'
            f'{shares}</tr></thead><tbody>{"".join(body)}</tbody></table></div>')


def pairs_html(view: SwapView, settings: SwapSettings, side: int = 260) -> str:
    """The map pair per model (``data-swap-maps``): original over swapped, with mask IoU and peak shift."""
    from explorer.views.panels import outline, resize_masks

    cells = []
    for pair in view.pairs:
        images = []
        for which, label in (("original", "original"), ("swapped", f"“{view.shown}”")):
            shown = overlay(view.picture, getattr(pair, which), settings.cmap, settings.opacity)
            shown.thumbnail((side, side))
            pixels = np.asarray(shown).copy()
            if view.target is not None and which == "swapped":
                mask = resize_masks(view.target[None], shown.size)[0]
                inner, outer = outline(mask)
                pixels[outer], pixels[inner] = (0, 0, 0), (255, 255, 255)
            images.append(f'<figure><img alt="{escape(label)} map of {escape(pair.model)}" '
                          f'src="{_data_url(pixels)}"><figcaption>{escape(label)}</figcaption></figure>')
        cells.append(f'<div class="swap-pair" data-swap-pair="{escape(pair.model)}">'
                     f'<h4>{escape(pair.model)} <small>{escape(pair.kind)}</small></h4>{"".join(images)}'
                     f'<p>mask IoU {pair.shift.iou:.2f} · peak moved {pair.shift.peak_shift_px:.0f} px</p></div>')
    outlined = (" The new word's object is outlined (the scene's truth)." if view.target is not None else "")
    return (f'<div data-swap-maps="{escape(view.shown)}" class="swap-maps">{"".join(cells)}</div>'
            f'<p class="swap-note">Each map over its own colour range; the IoU is that of the two maps\' Otsu '
            f'masks, the shift that of their peaks, in pixels of the working picture.{outlined}</p>')


def _data_url(pixels: np.ndarray) -> str:
    import base64
    import io

    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buffer.getvalue()).decode()


__all__ = ["MapPair", "SWAPS_VIEW", "SwapSettings", "SwapSettingsError", "SwapView", "compute_swaps",
           "build_swap_figure", "margins", "named_mask", "pairs_html", "signed", "table_html", "words_html", "write_swap_figure"]
