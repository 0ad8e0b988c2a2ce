"""Sentence maps on the page: the maps board (a row per sentence, a column per model), Otsu masks,
scores against ground truth, export.

"Draw maps" runs the models (cached per model, picture, sentences and kind). Every other
control re-renders the stored result: colour map, opacity, mask style, threshold, colour
scale and page never run a model. Above the board, the focus view shows one sentence's maps
large for every model (``views.focus_view``): picked by its row in the table, its panel on the
board, or its number. A change to any input marks the board out of date and forgets the result
(nothing stale is exported or focused). Every pick is checked on the server: a visitor may send
any value.
"""

from __future__ import annotations

import gradio as gr

from explorer.core.errors import InputError
from explorer.grounding.sentence_maps import MapCache
from explorer.ui import maps_board, swap_panel
from explorer.ui.examples import truth_dir
from explorer.serve.messages import explain
from explorer.serve.budget import HEAVY, STORED
from explorer.ui.view_controls import (Inputs, as_list, base_settings, checked_slider, export_row, export_view,
                                       loading_first)
from explorer.views.focus_view import check_sentence, focus_figure
from explorer.views.maps_view import SAME_MAP_NOTE, MapsView, compute_maps
from explorer.views.render import COLORMAPS
from explorer.views.settings import MASK_MODES, NATIVE, SCALES, ViewSettings
from explorer.zoo import Zoo

SCORE_COLUMNS = ["model", "#", "sentence", "threshold", "mask %", "tokens cut", "IoU", "pointing"]
POINTING_HEADER = "pointing: hit when the map's peak pixel lies inside the truth mask"
SCORE_WIDTHS = ["14%", "5%", "28%", "13%", "9%", "11%", "8%", "12%"]  # every column readable at 1280 px


PER_PAGE = (1, 12)  # sentences per page the slider offers


def display_settings(cmap, opacity, mask, otsu, threshold, scale, page, per_page) -> dict:
    """The display controls as settings; a value typed past a slider's ends is refused here in one line
    (``checked_slider``), the opacity and threshold by ``ViewSettings``."""
    if per_page not in (None, "") and not PER_PAGE[0] <= float(per_page) <= PER_PAGE[1]:
        raise InputError(f"sentences per page is {PER_PAGE[0]} to {PER_PAGE[1]}, not {float(per_page):g}")
    return {"cmap": cmap, "opacity": float(opacity), "mask": mask,
            "threshold": None if otsu else float(threshold), "scale": scale,
            "page": max(0, int(page or 1) - 1), "per_page": int(per_page or 8)}


def score_rows(view: MapsView, settings: ViewSettings) -> list[list]:
    rows = []
    for row in view.scores(settings.threshold):
        iou, hit = row.get("IoU"), row.get("pointing")
        flat = view.models[row["row"]].flat(row["#"] - 1)
        rows.append([row["model"], row["#"], row["sentence"], round(row["threshold"], 4),
                     "flat" if flat else round(row["mask %"], 1),
                     row["tokens cut"] or "", "" if iou is None else round(iou, 3),
                     "" if hit is None else ("hit" if hit else "miss")])
    return rows


def status_text(view: MapsView, settings: ViewSettings) -> str:
    names = ", ".join(f"**{m.name}** ({m.kind})" for m in view.models)
    pages = view.pages(settings.per_page)
    formats = {m.precision for m in view.models}  # one for all, or each model's ("bf16, head fp32" has a comma)
    computed = formats.pop() if len(formats) == 1 else "; ".join(f"{m.name} {m.precision}" for m in view.models)
    spans = f" · {len(view.span_of)} span row(s)" if view.span_of else ""  # rows of their own, not sentences
    lines = [f"{names} · {view.n_sentences} sentence(s){spans}" + (f" · {pages} pages" if pages > 1 else "")
             + f" · computed in {computed}"]
    threshold = "Otsu" if settings.threshold is None else f"{settings.threshold:.2f} of each map's range"
    lines.append(f"Mask threshold: {threshold} (each map's value is in the table).")
    if view.truth is not None:
        summary = "; ".join(f"{s['model']}: mIoU {s['miou']:.3f}" + (
            "" if s["pointing"] is None else f", pointing {100 * s['pointing']:.0f}%")
            for s in view.summary(settings.threshold) if s["miou"] is not None)
        lines.append(f"Ground truth from {view.truth.source} ({view.summary(settings.threshold)[0]['n']} sentence(s)): "
                     f"{summary}")
    warning = view.synthetic_warning()
    if warning:
        lines.append(f"- **Warning:** {warning}")
    lines += [f"- **Default map:** {note}" for note in view.default_notes(settings.threshold)]
    lines += [f"- {note}" for note in view.notes]
    lines += [f"- **{m.name}** ({m.kind}): {SAME_MAP_NOTE}: every sentence gets the same map"
              for m in view.models if m.same_for_every_sentence]
    head = [line for line in lines if not line.startswith("- ")]  # one line each (a Markdown hard break)
    notes = [line for line in lines if line.startswith("- ")]
    return "  \n".join(head) + ("\n\n" + "\n".join(notes) if notes else "")


def draw(load, cache: MapCache, *values, budget=None):
    """The "Draw maps" button: (view, settings, board, status, scores, page slider). A failure leaves
    only its message (the stored result is cleared, so nothing stale is exported)."""
    common, display = values[:6], values[6:]
    try:
        settings = ViewSettings(**base_settings("maps", *common, budget=budget), **display_settings(*display))
        view = compute_maps(load, settings, cache, truth_dir=truth_dir())  # the examples' scene truth
        settings.precision = view.models[0].precision  # what ran, in an export's settings file
        settings.page = min(settings.page, view.pages(settings.per_page) - 1)
        board = maps_board.board_html(view, settings)
    except Exception as error:  # noqa: BLE001 - the page shows it and keeps serving
        return None, None, maps_board.empty_board(), explain(error), [], gr.update()
    return view, settings, board, status_text(view, settings), score_rows(view, settings), page_slider(view, settings)


def page_slider(view: MapsView, settings: ViewSettings):
    """The page control: shown when there is more than one page (Gradio needs minimum < maximum)."""
    pages = view.pages(settings.per_page)
    return gr.update(maximum=max(2, pages), value=settings.page + 1, visible=pages > 1)


def rerender(view: MapsView | None, settings: ViewSettings | None, *display):
    """Any display control: (settings, board, status, scores, page slider) from the stored maps; no
    model runs."""
    if view is None or settings is None:
        return settings, gr.update(), gr.update(), gr.update(), gr.update()
    try:
        values = {**vars(settings), **display_settings(*display)}
        updated = ViewSettings(**values)
        updated.page = min(updated.page, view.pages(updated.per_page) - 1)
        board = maps_board.board_html(view, updated)
    except Exception as error:  # noqa: BLE001
        return settings, gr.update(), explain(error), gr.update(), gr.update()
    return updated, board, status_text(view, updated), score_rows(view, updated), page_slider(view, updated)


def drawn_from(settings: ViewSettings, image, caption, models, kind, dense_caption, truth) -> bool:
    """Whether the inputs as the page holds them now are those the stored maps were drawn from. A change
    event can arrive after a Draw that already used its value (the queue runs them in turn), so the board is
    marked by what differs, not by the event's arrival."""
    try:
        now = (str(image) if image else "", caption or "", as_list(models), kind or NATIVE, dense_caption or "",
               str(truth) if truth else "")
    except TypeError:  # a value no page sends (anyone may call the endpoint): treat it as a change
        return False
    drawn = (settings.image, settings.caption, settings.models, settings.kind, settings.dense_caption,
             settings.truth)
    return now == drawn


def mark_stale(view: MapsView | None, settings: ViewSettings | None, *inputs):
    """An input changed (picture, caption, models, kind, dense caption, truth): the board is dimmed under an
    out-of-date line and the result is forgotten, so nothing stale is focused or exported; the focus number
    resets (a new caption may have fewer sentences). ``inputs``: the page's inputs now (none: always out of
    date). (view, settings, board, status, scores, focus #, focus plot, note)."""
    unchanged = gr.update()
    if view is None or settings is None:  # nothing drawn, or already marked (a Draw running now: ``recheck``)
        return unchanged, unchanged, unchanged, unchanged, unchanged, None, hidden_plot(), FOCUS_HINT
    if inputs and drawn_from(settings, *inputs):  # a late event for what was drawn: the board is current
        # nothing written, not even the states read: a Draw that finished meanwhile keeps its result
        return (unchanged,) * 8
    try:
        board = maps_board.board_html(view, settings, stale=True)
    except Exception:  # noqa: BLE001 - an out-of-date board is cleared rather than shown wrong
        board = maps_board.empty_board(maps_board.STALE_NOTE, stale=True)
    return None, None, board, STALE_STATUS, [], None, hidden_plot(), FOCUS_HINT


STALE_STATUS = f"**Out of date:** the inputs changed since the last Draw. {maps_board.STALE_NOTE.split('. ', 1)[1]}"


def recheck(view: MapsView | None, settings: ViewSettings | None, *inputs):
    """Chained after every Draw and re-render, with the inputs as the page holds them then: a change event that
    ran meanwhile found nothing to mark (the Draw's result was not stored yet), or its marking was undone by the
    result (a re-render stores its settings and a fresh board after the view was forgotten). Outputs as
    ``mark_stale``'s; nothing changes while the board is current."""
    unchanged = gr.update()
    if settings is None:  # nothing drawn (a Draw that failed says so itself)
        return (unchanged,) * 8
    if view is None:  # forgotten while a re-render ran: its fresh board shows maps of the old inputs
        return (None, None, maps_board.empty_board(maps_board.STALE_NOTE, stale=True), STALE_STATUS, [], None,
                hidden_plot(), FOCUS_HINT)
    return mark_stale(view, settings, *inputs)


def settle(view: MapsView | None, settings: ViewSettings | None, number, *inputs):
    """Chained after every Draw and re-render, as one event: ``recheck``'s marking when the inputs changed while it
    ran; else, the board current, the focused sentence (``number``) drawn again from the stored maps. Outputs as
    ``mark_stale``'s. (Two chained events before: each one a round of the browser's status updates.)"""
    marked = recheck(view, settings, *inputs)
    if any(not _unchanged(value) for value in marked):
        return marked
    return (*marked[:6], *focus_by_number(view, settings, number))


def _unchanged(value) -> bool:
    return isinstance(value, dict) and value == gr.update()


FOCUS_HINT = ("**Focus**: pick a sentence (click its map on the board below, its row in the table, or type its "
              "number) to see it large for every model; hover to read the map's value, drag to zoom all of them.")


def show_focus(view: MapsView | None, settings: ViewSettings | None, sentence):
    """(plot, note) for ``sentence`` (0-based; anything a visitor sends is checked by ``check_sentence``).
    The plot is shown only while it holds a sentence's maps."""
    if view is None or settings is None:
        return hidden_plot(), "Draw the maps first, then pick a sentence."
    try:
        i = check_sentence(view, sentence)
        figure = focus_figure(view, settings, i)
    except Exception as error:  # noqa: BLE001 - the page says what is wrong and keeps serving
        return hidden_plot(), explain(error)
    name = view.row_name(i).split(" ", 1)  # "S3 of 6", or "span 7 (of sentence 3)": what the focus shows
    return gr.update(value=figure, visible=True), f"**{name[0]}** {name[1]}: {view.sentences[i]}"


def hidden_plot():
    return gr.update(value=None, visible=False)


def focus_by_number(view, settings, number):
    """The Sentence box: a number from 1 (the box sends a float, or anything at all); empty: the hint."""
    if number in (None, 0) and view is not None:  # an empty box (the page sends 0 for it): nothing picked yet
        return hidden_plot(), FOCUS_HINT
    if isinstance(number, (int, float)) and not isinstance(number, bool):
        number = number - 1
    return show_focus(view, settings, number)


def _event_index(event) -> list | None:
    index = getattr(event, "index", None)
    return list(index) if isinstance(index, (list, tuple)) and len(index) == 2 else None


def focus_from_table(view, settings, event: gr.SelectData = None):
    """A click on a row of the scores table: that row's sentence."""
    index = _event_index(event)
    if view is None or settings is None:
        return gr.update(), *show_focus(None, None, 0)
    rows = view.scores(settings.threshold)
    row = index[0] if index else None
    if not isinstance(row, int) or isinstance(row, bool) or not 0 <= row < len(rows):
        return gr.update(), hidden_plot(), "Pick a row of the table."
    sentence = rows[row]["#"] - 1
    return sentence + 1, *show_focus(view, settings, sentence)


def focus_from_board(view, settings, event: gr.SelectData = None):
    """A click on a panel of the board: its sentence. The page sends the panel's number (``index``) and
    "<model>|<n>" (``value``); a visitor may send anything, so only a whole number the view has is taken."""
    if view is None or settings is None:
        return gr.update(), *show_focus(None, None, 0)
    index = getattr(event, "index", None)
    if isinstance(index, float) and index.is_integer():
        index = int(index)
    if not isinstance(index, int) or isinstance(index, bool):
        return gr.update(), hidden_plot(), "Click a sentence's map on the board."
    figure, note = show_focus(view, settings, index - 1)
    return (index if 1 <= index <= len(view.sentences) else gr.update()), figure, note


def export_kinds(load, cache: MapCache, view, settings, sentence, *style, zoo_root=None, budget=None, public=False):
    """The map kinds figure of the drawn picture and models (Grad-CAM, LeGrad, ClearCLIP, NACLIP, each model's
    own map): the focused sentence, else the first two of the page shown; written as the maps' export is."""
    from explorer.views.kinds_view import compute_kinds

    if view is None or settings is None:
        return None, "**Cannot do that:** draw the maps first, then export their kinds."
    try:
        picked = sentence not in (None, 0) and not isinstance(sentence, bool)
        number = sentence - 1 if isinstance(sentence, (int, float)) else sentence
        first = check_sentence(view, number) if picked else settings.page * settings.per_page
        page, per_page = (first, 1) if picked else (first // 2, 2)
        chosen = ViewSettings(**{**vars(settings), "view": "kinds", "kinds": [], "page": page, "per_page": per_page})
        kinds = compute_kinds(load, chosen, cache, truth_dir=truth_dir())
    except Exception as error:  # noqa: BLE001
        return None, explain(error)
    return export_view(kinds, chosen, *style, zoo_root=zoo_root, budget=budget, public=public)


def build(inputs: Inputs, zoo: Zoo, cache: MapCache, access=None) -> None:
    with gr.Row(equal_height=True):
        run = gr.Button("Draw maps", variant="primary", elem_id="grounding-run", scale=1)
        per_page = checked_slider(*PER_PAGE, value=8, step=1, label="Sentences per page", elem_id="maps-per-page",
                                 scale=1)
        page = checked_slider(1, 2, value=1, step=1, label="Page", visible=False, elem_id="maps-page", scale=1)
    status = gr.Markdown("Pick an image, a caption and up to 4 models, then **Draw maps**.", elem_id="grounding-status")
    # Display controls re-render the stored maps (no model runs); folded so the board starts high on the page.
    with gr.Accordion("Display: colour map, opacity, mask, threshold, colour scale", open=False,
                      elem_id="maps-display"):
        with gr.Row():
            cmap = gr.Radio(list(COLORMAPS), value=COLORMAPS[0], label="Colour map", elem_id="maps-cmap")
            opacity = checked_slider(0.0, 1.0, value=0.55, step=0.05, label="Opacity", elem_id="maps-opacity")
            scale = gr.Radio(list(SCALES), value="map", label="Colour scale (per map, per model, shared)",
                             elem_id="maps-scale")
        with gr.Row():
            mask = gr.Radio(list(MASK_MODES), value="contour", label="Mask", elem_id="maps-mask")
            otsu = gr.Checkbox(value=True, label="Otsu threshold", elem_id="maps-otsu")
            threshold = checked_slider(0.0, 1.0, value=0.5, step=0.01,
                                  label="Manual threshold (fraction of each map's range)", elem_id="maps-threshold")
    # The focus view above the board: a click on a panel opens it here (the page scrolls to it).
    with gr.Row(equal_height=True):
        focus_note = gr.Markdown(FOCUS_HINT, elem_id="maps-focus-note")
        focus_sentence = gr.Number(value=None, precision=0, label="Sentence # (0: none; Enter)", scale=0,
                                   min_width=160, elem_id="maps-focus-sentence")
    focus = gr.Plot(elem_id="maps-focus", show_label=False, visible=False)
    board = gr.HTML(maps_board.empty_board(), elem_id=maps_board.ELEM_ID, css_template=maps_board.CSS,
                    js_on_load=maps_board.JS_ON_LOAD, apply_default_css=False)
    scores = gr.Dataframe(headers=SCORE_COLUMNS, interactive=False, wrap=True, elem_id="maps-scores",
                          max_height=320, column_widths=SCORE_WIDTHS, label=POINTING_HEADER, show_label=True)
    view_state, settings_state = gr.State(None), gr.State(None)
    row = export_row("maps", view_state, settings_state, zoo, access)
    budget, public = (access.budget, access.public) if access is not None else (None, False)
    kinds_button = gr.Button("Export the map kinds figure (the focused sentence, or the page's first two: a row per "
                             "model, a column per explainer and each model's own map)", elem_id="maps-export-kinds")
    kinds_button.click(lambda *values: export_kinds(zoo.load, cache, *values, zoo_root=zoo.root, budget=budget,
                                                    public=public),
                       inputs=[view_state, settings_state, focus_sentence, *row.style_inputs()],
                       outputs=[row.files, row.note], api_name="export_kinds", **HEAVY)

    display = [cmap, opacity, mask, otsu, threshold, scale, page, per_page]
    drawn = run.click(loading_first(zoo, lambda load, *values: draw(load, cache, *values, budget=budget), status_at=3,
                                    n_outputs=6),
                      inputs=inputs.components() + display,
                      outputs=[view_state, settings_state, board, status, scores, page], api_name="draw_maps",
                      **HEAVY)
    # The focused sentence drawn again from the stored maps (the Sentence box's Enter; and ``settle``'s).
    focus_again = dict(fn=focus_by_number, inputs=[view_state, settings_state, focus_sentence],
                       outputs=[focus, focus_note], show_progress="hidden", **STORED)  # stored maps: no model
    # After a Draw or a re-render, one event (``settle``): inputs changed while it ran mark its result out of
    # date at once, else the focused sentence (if one is picked) is drawn again from the new maps.
    stale_outputs = [view_state, settings_state, board, status, scores, focus_sentence, focus, focus_note]
    settle_after = dict(fn=settle, inputs=[view_state, settings_state, focus_sentence, *inputs.components()],
                        outputs=stale_outputs, show_progress="hidden", **STORED)
    drawn.then(**settle_after)
    swap_panel.build(view_state, settings_state, drawn, zoo, access, board=board, scores=scores,  # one word
                     render=lambda view, settings: (maps_board.board_html(view, settings), status_text(view, settings),
                                                    score_rows(view, settings)), status=status)
    scores.select(focus_from_table, inputs=[view_state, settings_state], outputs=[focus_sentence, focus, focus_note],
                  api_name="focus_table", **STORED)
    board.select(focus_from_board, inputs=[view_state, settings_state],
                 outputs=[focus_sentence, focus, focus_note], api_name="focus_board", **STORED)
    focus_sentence.submit(**focus_again, api_name="focus_sentence")
    for control in display:
        # A slider re-renders on "input" (a drag, or a number typed in its box and Enter) with only
        # the latest value kept while one is running; other controls on "change".
        event = control.input if isinstance(control, gr.Slider) else control.change
        event(rerender, inputs=[view_state, settings_state, *display],
              outputs=[settings_state, board, status, scores, page], api_name=f"rerender_maps_{control.elem_id}",
              trigger_mode="always_last", **HEAVY).then(**settle_after)
    # Any input that changes what a Draw would compute makes the board out of date until the next Draw.
    for component in inputs.components():
        # Not in the HEAVY group: it encodes nothing (the board is memoised), so a keystroke never waits
        # behind a Draw, nor counts against the visitor's heavy requests.
        component.change(mark_stale, inputs=[view_state, settings_state, *inputs.components()],
                         outputs=stale_outputs, show_progress="hidden", trigger_mode="always_last")
