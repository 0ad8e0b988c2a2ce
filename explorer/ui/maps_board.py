"""The maps board: the page's side-by-side sentence maps, as an HTML grid people can read.

One row per sentence (its number, its text and the tokens a model's context cut, beside its maps), one
column per model headed by its name and map kind, the plain picture once in the corner. Every label is
page text at the page's font size; each panel's picture is the view's own overlay (``render_maps``),
encoded once per display setting and kept in the view's bounded memo.

The DOM is a contract for tests and people's scripts: ``data-map-panel="<model>|<n>"`` on each panel
(its box is the map picture), ``data-sentence="<n>"`` on each sentence's text, ``data-map-model`` on
each column header, and ``data-stale`` on the board (``true`` once the inputs changed after a Draw).
"""

from __future__ import annotations

import base64
import io

import numpy as np
from PIL import Image

from explorer.core.markup import escape
from explorer.views.maps_view import FLAT_NOTE, SAME_MAP_NOTE, MapsView, render_maps
from explorer.views.panels import fit_size
from explorer.views.settings import ViewSettings

BOARD_SIDE = 320  # pixels per panel picture: crisp at the 240-400 CSS px a column gets
WEBP_QUALITY = 90  # lossy, but the 1-px mask outline stays sharp at this quality
WEBP_METHOD = 2  # the encoder's effort: 4 took 2.7x as long for 5 % fewer bytes
ELEM_ID = "maps-board"

POINTING_NOTE = ("hit / miss is the pointing game: whether the map's peak pixel lies inside the truth mask. A map "
                 "whose hot blob covers a ring can still miss when its peak falls in the ring's hole.")
STALE_NOTE = "Out of date: the inputs changed since these maps were drawn. Draw maps again to update them."
STALE_LINE = f'<div class="mb-line mb-stale-line" data-stale-line>{STALE_NOTE}</div>'
EMPTY_NOTE = "Pick an image, a caption and up to 4 models, then <b>Draw maps</b>: a row per sentence, a column per model."

# Scoped to the component by Gradio (css_template). Columns: the sentence, then one per model, at least
# 240 px each (four models fit a 1400 px window); a panel never grows past 400 px.
CSS = """
.mb { font-size: 14px; line-height: 1.35; color: var(--body-text-color); }
.mb-lines { margin: 0 0 8px 0; }
.mb-line { margin: 2px 0; padding: 4px 8px; border-radius: 4px; font-size: 14px; }
.mb-stale-line { background: #fff4d6; color: #6b4a00; font-weight: 600; }
.mb-warning { background: #fde8e8; color: #8a1c1c; }
.mb-note { background: var(--background-fill-secondary); font-size: 13px; }
.mb[data-stale="true"] .mb-grid { opacity: 0.45; filter: grayscale(0.6); }
.mb-grid { display: grid; gap: 10px 8px; align-items: start; }
.mb-corner { font-size: 13px; }
.mb-corner img { width: 100%; max-width: 128px; display: block; border-radius: 3px; }
.mb-head { font-size: 14px; border-bottom: 2px solid var(--border-color-primary); padding-bottom: 4px;
  align-self: end; overflow-wrap: anywhere; }
.mb-head b { font-size: 15px; display: block; }
.mb-head span { display: block; font-size: 13px; }
.mb-head .mb-bad { color: #b42318; font-weight: 600; }
.mb-sentence { font-size: 14px; padding-top: 4px; overflow-wrap: break-word; }
.mb-num { display: inline-block; min-width: 1.6em; font-weight: 700; font-size: 16px; }
.mb-span .mb-text { font-style: italic; }
.mb-span-of { display: block; margin-top: 4px; font-size: 13px; color: var(--body-text-color-subdued); }
.mb-cut { display: block; margin-top: 4px; font-size: 13px; color: #b42318; }
.mb-panel { margin: 0; cursor: zoom-in; border-radius: 4px; outline-offset: 2px; }
.mb-panel:hover img, .mb-panel:focus img { box-shadow: 0 0 0 3px var(--color-accent); }
.mb-panel img { width: 100%; display: block; border-radius: 3px; image-rendering: auto; }
.mb-panel figcaption { font-size: 13px; margin-top: 3px; }
.mb-hit { color: #067647; font-weight: 600; }
.mb-miss { color: #b42318; font-weight: 600; }
.mb-flat { color: #b54708; font-weight: 600; }
.mb-outside { color: #8a3b00; font-weight: 600; }
.mb-empty { font-size: 13px; color: var(--body-text-color-subdued); padding: 20px 0; }
.mb-panel-model { display: none; }
/* A phone (390 px): no sentence column beside the maps. The picture and each sentence take a row of their own
   across the board, the maps of that sentence under it: one a row, two where both get at least 160 px. The
   model headers leave (they would sit rows away from the maps): each panel names its model instead. */
@media (max-width: 640px) {
  .mb-grid { grid-template-columns: repeat(auto-fit, minmax(160px, 1fr)) !important; gap: 6px 6px; }
  .mb-corner, .mb-sentence, .mb-head { grid-column: 1 / -1; }
  .mb-head { align-self: start; }
  .mb-head b, .mb-head span { display: inline; margin-right: 6px; }
  .mb-corner img { max-width: 96px; }
  .mb-sentence { padding-top: 8px; }
  .mb-panel-model { display: block; font-weight: 600; }
}
"""

# A click (or Enter) on a panel picks its sentence for the focus view: Gradio's select event with the
# panel's "<model>|<n>", checked on the server like anything a visitor sends.
JS_ON_LOAD = """
const pick = (event) => {
  const panel = event.target.closest('[data-map-panel]');
  if (!panel) return;
  if (event.type === 'keydown' && event.key !== 'Enter' && event.key !== ' ') return;
  event.preventDefault();
  trigger('select', {index: Number(panel.dataset.number), value: panel.dataset.mapPanel});
  const focus = document.getElementById('maps-focus-note');
  if (focus) focus.scrollIntoView({behavior: 'smooth', block: 'start'});
};
element.addEventListener('click', pick);
element.addEventListener('keydown', pick);
"""


def empty_board(message: str = EMPTY_NOTE, stale: bool = False) -> str:
    """The board with no maps: ``message`` (HTML: give it only the module's own notes); ``stale``: out of date,
    under the out-of-date line, as the contract's ``data-stale`` says."""
    if stale:
        return (f'<div class="mb" id="{ELEM_ID}-view" data-stale="true"><div class="mb-lines">{STALE_LINE}</div>'
                f'<div class="mb-empty">{message}</div></div>')
    return f'<div class="mb" id="{ELEM_ID}-view" data-stale="false"><div class="mb-empty">{message}</div></div>'


def board_html(view: MapsView, settings: ViewSettings, stale: bool = False) -> str:
    """The current page of sentences as the board (``stale``: dimmed, under the out-of-date line). The
    fresh board is kept in the view's bounded memo, so marking it out of date encodes no picture again."""
    key = ("board", settings.cmap, settings.opacity, settings.mask, settings.threshold, settings.scale,
           settings.page, settings.per_page)
    fresh = view._memo.get(key, lambda: _render(view, settings))
    if not stale:
        return fresh
    return fresh.replace('data-stale="false"', 'data-stale="true"', 1).replace(
        '<div class="mb-lines">', f'<div class="mb-lines">{STALE_LINE}', 1)


def _render(view: MapsView, settings: ViewSettings) -> str:
    grid = render_maps(view, settings, BOARD_SIDE)
    panels = _panels_by_sentence(grid)
    indices = list(view.page_indices(settings.page, settings.per_page))
    columns = f"minmax(180px, 1fr) repeat({len(view.models)}, minmax(240px, 400px))"
    scores = {(row["row"], row["#"] - 1): row for row in view.scores(settings.threshold)}
    cells = [_corner(view)]
    cells += [_header(view, settings, m) for m in range(len(view.models))]
    for i in indices:
        cells.append(_sentence_cell(view, i))
        cells += [_panel(view, m, i, panels.get((m, i), []), scores.get((m, i)), settings)
                  for m in range(len(view.models))]
    return (f'<div class="mb" id="{ELEM_ID}-view" data-stale="false" '
            f'data-models="{len(view.models)}" data-sentences="{len(indices)}">'
            f'{_lines(view, settings)}<div class="mb-grid" '
            f'style="--mb-models: {len(view.models)}; grid-template-columns: {columns}">'
            f'{"".join(cells)}</div></div>')


def _lines(view: MapsView, settings: ViewSettings) -> str:
    """The lines above the grid: the synthetic-world warning, a measured default map that does not hold on
    this picture, what hit / miss means (``board_html`` puts the out-of-date line first when it applies)."""
    lines = []
    warning = view.synthetic_warning()
    if warning:
        lines.append(f'<div class="mb-line mb-warning" data-warning="synthetic">{escape(warning)}</div>')
    lines += [f'<div class="mb-line mb-warning" data-warning="default-map">{escape(note)}</div>'
              for note in view.default_notes(settings.threshold)]
    if view.truth is not None:
        lines.append(f'<div class="mb-line mb-note" data-pointing-note>{escape(POINTING_NOTE)}</div>')
    return f'<div class="mb-lines">{"".join(lines)}</div>'


def _panels_by_sentence(grid) -> dict[tuple[int, int], list]:
    """(model row, sentence) -> the panels ``render_maps`` drew for it (two in the "both" mask mode)."""
    found: dict[tuple[int, int], list] = {}
    for m, row in enumerate(grid.rows):
        for panel in row:
            if panel.sentence is not None:
                found.setdefault((m, panel.sentence), []).append(panel)
    return found


def _corner(view: MapsView) -> str:
    width, height = view.picture.size
    picture = np.asarray(view.picture_at(fit_size(view.picture.size, BOARD_SIDE)).convert("RGB"))
    return (f'<div class="mb-corner" data-picture><img alt="the picture" src="{_data_uri(picture)}">'
            f'<div>Picture, {width}x{height} px as the models saw it</div></div>')


def _header(view: MapsView, settings: ViewSettings, m: int) -> str:
    model = view.models[m]
    lines = [f"<b>{escape(model.name)}</b>", f"<span>{escape(model.kind)} · {escape(model.precision)}</span>"]
    summary = next((s for s in view.summary(settings.threshold) if s["row"] == m and s["miou"] is not None), None)
    if summary is not None:
        pointing = "" if summary["pointing"] is None else f" · pointing {100 * summary['pointing']:.0f}%"
        lines.append(f"<span>mIoU {summary['miou']:.2f}{pointing}</span>")
    if not model.trained:
        lines.append('<span class="mb-bad">UNTRAINED: random weights</span>')
    if model.same_for_every_sentence:
        lines.append(f'<span class="mb-bad">{SAME_MAP_NOTE}</span>')
    return f'<div class="mb-head" data-map-model="{escape(model.name)}">{"".join(lines)}</div>'


def _sentence_cell(view: MapsView, i: int) -> str:
    cuts = [f"{escape(m.name)} cuts {m.result.maps.n_cut[i]} token(s)" for m in view.models if m.result.maps.n_cut[i]]
    cut = f'<span class="mb-cut">{"; ".join(cuts)}</span>' if cuts else ""
    source = view.span_source(i)
    if source is not None:  # a span row: its scores are its own, the headers' figures leave it out
        return (f'<div class="mb-sentence mb-span" data-sentence="{i + 1}" data-span="{source}">'
                f'<span class="mb-num">{i + 1}</span><span class="mb-text">{escape(view.sentences[i])}</span>'
                f'<span class="mb-span-of">span of sentence {source}: its own scores, not in the '
                f'figures above</span>{cut}</div>')
    return (f'<div class="mb-sentence" data-sentence="{i + 1}"><span class="mb-num">{i + 1}</span>'
            f'<span class="mb-text">{escape(view.sentences[i])}</span>{cut}</div>')


def _panel(view: MapsView, m: int, i: int, panels: list, row: dict | None, settings: ViewSettings) -> str:
    model = view.models[m]
    side = model.mask_sides(settings.threshold)[i] if settings.mask != "none" else None
    pictures = "".join(f'<img alt="{escape(model.name)}, sentence {i + 1}" src="{_data_uri(p.pixels)}">'
                       for p in panels if p.pixels is not None)
    return (f'<figure class="mb-panel" data-map-panel="{escape(model.name)}|{i + 1}" data-number="{i + 1}" '
            f'role="button" tabindex="0" title="Open sentence {i + 1} large for every model">{pictures}'
            f'<figcaption><span class="mb-panel-model">{escape(model.name)}</span>'
            f'{_panel_label(model.flat(i), row, side)}</figcaption></figure>')


def _panel_label(flat: bool, row: dict | None, side=None) -> str:
    """IoU and hit / miss where truth exists, the mask's share (and side: ``MaskSide``) and threshold, a flat
    map named as such."""
    if flat:
        return f'<span class="mb-flat" data-flat>{FLAT_NOTE}</span>'
    parts = []
    if row is not None and row.get("IoU") is not None:
        parts.append(f"IoU {row['IoU']:.2f}")
        if row.get("pointing") is not None:
            hit = "hit" if row["pointing"] else "miss"
            parts.append(f'<span class="mb-{hit}" title="{escape(POINTING_NOTE)}">{hit}</span>')
    if side is not None and side.outside:
        parts.append(f'<span class="mb-outside" data-mask-side="outside">{escape(side.label)}</span>')
    elif row is not None:
        parts.append(f"mask {row['mask %']:.0f}%")
    if row is not None:
        parts.append(f"t={row['threshold']:.3g}")
    return " · ".join(parts)


def _data_uri(pixels) -> str:
    buffer = io.BytesIO()
    # WebP's effort 2 (of 0-6): 3.5 ms a 320 px panel against 9.5 ms at 4, 5 % more bytes, the same quality; a
    # Draw of four models and eight sentences encodes 32 of them
    Image.fromarray(pixels).save(buffer, format="WEBP", quality=WEBP_QUALITY, method=WEBP_METHOD)
    return "data:image/webp;base64," + base64.b64encode(buffer.getvalue()).decode("ascii")


__all__ = ["BOARD_SIDE", "CSS", "ELEM_ID", "JS_ON_LOAD", "board_html", "empty_board"]
