"""The Swap panel under the maps board: one word of a drawn sentence swapped, each model's own score and map.

Pick a sentence ("Swap in sentence"), click one of its marked words, then type replacements and **Swap**, or
**Swap every <type>** (every other word of the word's type). Each model on the board scores the original
sentence and every swapped one against the picture from the features the board stored (text forwards only);
the table has a row per swap and a column per model, each cell the margin (original minus swapped), green
when the original wins by more than the margin setting ("noticed"), red otherwise; a click on a header sorts
by that model, a click on a row draws that swap's map pair per model (the board's map kinds) with the mask IoU
and the peak's shift. The export writes the same figure as ``explorer figure swaps``.

DOM contract (``explorer.views.swap_view`` renders it): the panel is ``#swap-panel``; each swappable word
carries ``data-swap-word`` and ``data-swap-type``; rows ``data-swap-row="<replacement>"``; cells
``data-swap-cell="<model>|<replacement>"`` holding the signed margin; the map pair's container
``data-swap-maps``. Anything a visitor sends is checked here: bad input is one line under the controls and
nothing else changes.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import gradio as gr

from explorer.core.errors import ExplorerError
from explorer.probe import MAX_SWAPS, SwapError, swap_scores, swappable
from explorer.probe.swaps import with_margin
from explorer.serve.budget import HEAVY
from explorer.serve.messages import explain
from explorer.ui.view_controls import export_folder
from explorer.views.swap_view import (SwapSettings, SwapView, map_pairs, named_mask, pairs_html, table_html,
                                      words_html, write_swap_figure)

HINT = "Draw the maps, pick a sentence, then click one of its marked words to swap it."
WORD_JS = """
element.addEventListener('click', (event) => {
  const word = event.target.closest('[data-swap-word]');
  if (word) trigger('select', {index: 0, value: word.dataset.swapWord});
});
"""
TABLE_JS = """
element.addEventListener('click', (event) => {
  const sort = event.target.closest('[data-swap-sort]');
  if (sort) { trigger('select', {index: 1, value: sort.dataset.swapSort}); return; }
  const row = event.target.closest('[data-swap-row]');
  if (row) trigger('select', {index: 0, value: row.dataset.swapRow});
});
"""
CSS = """
.swap-sentence { font-size: 16px; line-height: 2.1; }
.swap-word { border: 1px solid var(--border-color-primary); border-radius: 6px; padding: 1px 6px; margin: 0 2px;
  background: var(--background-fill-secondary); cursor: pointer; font-size: 16px; }
.swap-word small { font-size: 12px; margin-left: 4px; opacity: 0.8; }
.swap-word[aria-pressed=true] { outline: 2px solid var(--color-accent); }
.swap-table { border-collapse: collapse; font-size: 14px; margin: 6px 0; }
.swap-table th, .swap-table td { border: 1px solid var(--border-color-primary); padding: 3px 10px; text-align: right; }
.swap-table th button { font-weight: 600; background: none; border: none; cursor: pointer; font-size: 14px;
  color: var(--body-text-color); }
.swap-table tbody tr { cursor: pointer; }
.swap-table td button, .swap-table th[scope=row] button { background: none; border: none; color: inherit;
  font: inherit; cursor: pointer; padding: 0; width: 100%; text-align: inherit; }
.swap-table button:focus-visible { outline: 2px solid var(--color-accent); outline-offset: 2px; }
.swap-scroll { max-width: 100%; overflow-x: auto; }
.swap-table th:first-child { position: sticky; left: 0; z-index: 1; background: var(--background-fill-primary);
  text-align: left; }
.swap-table tr.swap-picked { outline: 2px solid var(--color-accent); }
.swap-noticed { color: #fff; background: #1a7f37; }
.swap-missed { color: #fff; background: #b42318; }
.swap-maps { display: flex; flex-wrap: wrap; gap: 12px; }
.swap-pair { border: 1px solid var(--border-color-primary); border-radius: 6px; padding: 6px; }
.swap-pair h4 { margin: 0 0 4px 0; font-size: 14px; }
.swap-pair figure { display: inline-block; margin: 0 4px 0 0; }
.swap-pair img { width: 128px; height: auto; display: block; }
.swap-pair figcaption, .swap-pair p, .swap-note { font-size: 13px; margin: 2px 0; }
"""


@dataclass
class SwapState:
    """One visitor's probe: the sentence, the picked word, the last swaps and the map pair shown."""

    number: int
    sentence: str
    word: str = ""
    word_type: str | None = None
    record: object | None = None  # SwapScores
    order: str = "swap"
    shown: str | None = None
    pairs: SwapView | None = None
    margin: float = 0.0


def _check_view(view):
    if view is None or not getattr(view, "models", None):
        raise ExplorerError("draw the maps first (the probe swaps words of the drawn caption)")


def _sentences(view) -> int:
    """The caption's sentences of a drawn view (its span rows left out: ``MapsView.span_of``)."""
    return len(view.sentences) - len(getattr(view, "span_of", ()))


def _number(value) -> int:
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if not isinstance(value, int) or isinstance(value, bool):
        raise SwapError(f"the sentence is a whole number from 1, not {str(value)[:20]!r}")
    return value


def _margin(value) -> float:
    if value in (None, ""):
        return 0.0
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not -10 <= float(value) <= 10:
        raise SwapError("the margin is a number between -10 and 10")
    return float(value)


def choose_sentence(view, settings, number):
    """The sentence box: (state, words, every button, note, table, maps) for sentence ``number``."""
    try:
        _check_view(view)
        count = _sentences(view)  # the caption's sentences: a span row is swapped in its own sentence
        if _number(number) < 1:
            raise SwapError(f"there is no sentence {_number(number)}: the caption's {count} sentence(s) are "
                            "numbered from 1")
        if _number(number) > count:
            raise SwapError(f"sentence {_number(number)} is past the caption: it has {count} sentence(s), "
                            "numbered from 1")
        sentence = view.sentences[_number(number) - 1]
    except Exception as error:  # noqa: BLE001 - one line next to the control, nothing else changes
        return gr.update(), gr.update(), gr.update(), explain(error), gr.update(), gr.update()
    state = SwapState(number=_number(number), sentence=sentence)
    found = swappable(sentence)
    note = (f"Sentence {state.number}: click a marked word ({len(found)} found)." if found else
            f"Sentence {state.number} has no word of a known type; click none, or pick another sentence.")
    return state, words_html(sentence, found), gr.update(visible=False), note, "", ""


def pick_word(state: SwapState | None, event: gr.SelectData = None):
    """A click on a marked word: (state, words, every button, note)."""
    value = getattr(event, "value", None)
    if state is None:
        return gr.update(), gr.update(), gr.update(), HINT
    found = {w.text: w for w in swappable(state.sentence)}
    if not isinstance(value, str) or value not in found:
        return gr.update(), gr.update(), gr.update(), "**Cannot do that:** click one of the sentence's marked words."
    word = found[value]
    state = replace(state, word=word.text, word_type=word.type, record=None, shown=None, pairs=None)
    return (state, words_html(state.sentence, found.values(), word.text), gr.update(value=f"Swap every {word.type}", visible=True),
            f"**{word.text}** ({word.type}): type replacements and **Swap**, or **Swap every {word.type}**.")


def run_swaps(load, view, state: SwapState | None, replacements, margin, every: bool, limit: int = MAX_SWAPS):
    """**Swap** / **Swap every <type>**: (state, note, table, maps), at most ``limit`` swaps (the budget's).
    Scores only: the map pair waits for a row."""
    try:
        _check_view(view)
        if state is None or not state.word:
            raise SwapError("click a marked word of the sentence first")
        wanted = None
        if not every:
            if not isinstance(replacements, str) or not replacements.strip():
                raise SwapError("the replacement is empty: type a word (or several, separated by commas)")
            wanted = [w.strip() for w in replacements.split(",")]
        models = [load(m.name) for m in view.models]
        record = swap_scores(models, view.picture, state.sentence, state.word, wanted, margin=_margin(margin),
                             kind=None, limit=limit)
    except Exception as error:  # noqa: BLE001
        return gr.update(), explain(error), gr.update(), gr.update()
    state = replace(state, record=record, shown=None, pairs=None, margin=record.margin, order="swap")
    shares = "; ".join(f"{m.name} {100 * m.noticed_share:.0f}%" for m in record.models)
    note = (f"{len(record.replacements)} swap(s) of **{record.word}** ({record.word_type or 'word'}): noticed "
            f"{shares}. Click a row for its maps.")
    return state, note, table_html(record, state.order), ""


def judge_again(state: SwapState | None, margin):
    """The margin setting changed: the stored scores judged again, no model runs. (state, note, table)."""
    if state is None or state.record is None:
        return gr.update(), gr.update(), gr.update()
    try:
        record = with_margin(state.record, _margin(margin))
    except Exception as error:  # noqa: BLE001
        return gr.update(), explain(error), gr.update()
    state = replace(state, record=record, margin=record.margin)
    return state, f"Noticed now means a margin over {record.margin:g}.", table_html(record, state.order, state.shown)


def table_event(load, view, board_settings, state: SwapState | None, event: gr.SelectData = None):
    """A click in the table: a header sorts (index 1), a row shows its map pair (index 0). (state, note, table,
    maps)."""
    index, value = getattr(event, "index", None), getattr(event, "value", None)
    if state is None or state.record is None or view is None:
        return gr.update(), "Run a swap first.", gr.update(), gr.update()
    record = state.record
    if index == 1:
        if value not in ("swap", *(m.name for m in record.models)):
            return gr.update(), "**Cannot do that:** sort by a model's column.", gr.update(), gr.update()
        state = replace(state, order=value)
        return state, gr.update(), table_html(record, value, state.shown), gr.update()
    if not isinstance(value, str) or value not in record.replacements:
        return gr.update(), "**Cannot do that:** click a row of the table.", gr.update(), gr.update()
    try:
        shown = compute_pair(load, view, state, value)
    except Exception as error:  # noqa: BLE001
        return gr.update(), explain(error), gr.update(), gr.update()
    state = replace(state, shown=value, pairs=shown)
    settings = swap_settings(view, board_settings, state)
    return (state, f"Maps of **{record.sentence}** and of it with **{value}**, per model.",
            table_html(record, state.order, value), pairs_html(shown, settings))


def compute_pair(load, view, state: SwapState, replacement: str) -> SwapView:
    """The shown swap's map pair per model (the board's kinds), and the new word's object where truth exists."""
    record = state.record
    models = [load(m.name) for m in view.models]
    kinds = {m.name: m.kind for m in view.models}
    settings = SwapSettings(models=[m.name for m in view.models], kinds=kinds)
    drawn = {m.name: m.maps[state.number - 1] for m in view.models  # the board's own map of the sentence
             if state.number - 1 < len(m.maps) and view.sentences[state.number - 1] == record.sentence}
    pairs = map_pairs(models, view.picture, record, replacement, settings, originals=drawn)
    target = named_mask(view.sentences, getattr(view, "truth", None), record, replacement, state.number)
    return SwapView(picture=view.picture, record=record, pairs=pairs, shown=replacement, target=target)


def swap_settings(view, board_settings, state: SwapState) -> SwapSettings:
    """The settings that replay the panel's figure (``explorer figure replay``)."""
    record = state.record
    caption = " ".join(view.sentences[:_sentences(view)])  # the span rows are not the caption
    return SwapSettings(image=getattr(board_settings, "image", ""), caption=caption,
                        sentence=state.number, word=record.word, replacements=record.replacements,
                        models=[m.name for m in view.models], kinds={m.name: m.kind for m in view.models},
                        margin=record.margin, pair=state.shown or "", cmap=getattr(board_settings, "cmap", "turbo"),
                        precision=view.models[0].precision.split(",")[0])


def export(view, board_settings, state: SwapState | None, fmt, budget=None, public: bool = False):
    """The panel's figure (the same as ``explorer figure swaps``), its settings and its picture: (files, note)."""
    if state is None or state.pairs is None or view is None:
        return None, "**Cannot do that:** run a swap and click a row first: the figure shows its map pair."
    if fmt not in ("pdf", "svg", "png"):
        return None, "**Cannot do that:** a figure is pdf, svg or png."
    try:
        with export_folder(budget) as folder:
            picture = folder / "inputs" / "picture.png"
            picture.parent.mkdir(parents=True, exist_ok=True)
            state.pairs.picture.save(picture)  # the working picture the maps were drawn on
            settings = replace(swap_settings(view, board_settings, state), image=str(picture.resolve()))
            figure, settings_file = write_swap_figure(state.pairs, settings, folder / f"swaps.{fmt}")
    except Exception as error:  # noqa: BLE001
        return None, explain(error)
    where = "" if public else f" in {figure.parent}"
    return [str(figure), str(settings_file)], (f"Wrote **{figure.name}** and **{settings_file.name}**{where}: "
                                               f"`explorer figure replay {settings_file.name}` writes it again.")


def add_span(load, view, board_settings, state: SwapState | None, span, render):
    """**Add the span to the board**: the words ``span`` of the panel's sentence as a span row of the board
    (every model's map of them, scored against the sentence's truth; the per-model figures keep counting the
    sentences only). The board's settings record the span, so an export replays the page's rows.
    ``render``: (view, settings) -> (board, status, scores). (view, settings, board, status, scores, note)."""
    from explorer.views.span_view import span_entries, with_span_row

    try:
        _check_view(view)
        if state is None:
            raise SwapError("pick a sentence first (Swap in sentence)")
        if not isinstance(span, str) or not span.strip():
            raise SwapError("the span is empty: type some consecutive words of the sentence")
        dense = getattr(board_settings, "dense_caption", "")
        extended = with_span_row(view, load, state.number, span, dense)
        settings = replace(board_settings, spans=span_entries(extended))
        board, status, scores = render(extended, settings)
    except Exception as error:  # noqa: BLE001
        return gr.update(), gr.update(), gr.update(), gr.update(), gr.update(), explain(error)
    return (extended, settings, board, status, scores,
            f"Row {len(extended.sentences)} of the board: **{extended.sentences[-1]}**, a span of sentence "
            f"{state.number} with its own scores beside it (scored against that sentence's truth where known).")


def build(view_state, settings_state, drawn, zoo, access=None, board=None, scores=None, render=None,
          status=None) -> None:
    """The panel, wired to the board's stored result; refreshed after every Draw (``drawn``). With ``board``,
    ``scores``, ``status`` and ``render`` (view, settings -> board HTML, status, score rows), a span of a sentence can join the
    board as an extra row."""
    budget, public = (access.budget, access.public) if access is not None else (None, False)
    limit = budget.swaps_per_request if budget is not None else MAX_SWAPS  # each request is HEAVY: counted too
    with gr.Column(elem_id="swap-panel"):
        gr.Markdown("## Swap: what one word changes\nEach model's own score of a sentence against the picture, "
                    "with one word swapped; the margin is original minus swapped.", elem_id="swap-title")
        with gr.Row(equal_height=True):
            # No minimum: Gradio would refuse 0 or -1 with a toast (and a traceback in the log); the handler's
            # one-line note beside the control says what is wrong instead.
            number = gr.Number(value=1, precision=0, label="Swap in sentence", scale=0, min_width=160,
                               elem_id="swap-sentence")
            replacements = gr.Textbox(label="Replacement(s), comma-separated", scale=2, elem_id="swap-replacements")
            margin = gr.Number(value=0.0, label="Noticed when the margin is over", scale=0, min_width=200,
                               elem_id="swap-margin")
            run = gr.Button("Swap", elem_id="swap-run", scale=0, min_width=90)
            every = gr.Button("Swap every word of its type", visible=False, elem_id="swap-every", scale=0,
                              min_width=180)
        with gr.Row(equal_height=True, visible=board is not None):
            span = gr.Textbox(label="Span to map: consecutive words of the sentence (e.g. medium dotted blue cross)",
                              scale=3, elem_id="swap-span")
            add = gr.Button("Add the span to the board", elem_id="swap-span-add", scale=1)
        note = gr.Markdown(HINT, elem_id="swap-note")
        words = gr.HTML("", elem_id="swap-words", css_template=CSS, js_on_load=WORD_JS, apply_default_css=False)
        table = gr.HTML("", elem_id="swap-table", css_template=CSS, js_on_load=TABLE_JS, apply_default_css=False)
        maps = gr.HTML("", elem_id="swap-maps", css_template=CSS, apply_default_css=False)
        with gr.Row():
            fmt = gr.Radio(["pdf", "svg", "png"], value="pdf", label="Figure format", elem_id="swap-format", scale=1)
            export_button = gr.Button("Export the swap figure", elem_id="swap-export", scale=1)
        files = gr.File(label="Swap figure and settings", file_count="multiple", interactive=False,
                        elem_id="swap-export-files")
    state = gr.State(None)
    chosen = dict(fn=choose_sentence, inputs=[view_state, settings_state, number],
                  outputs=[state, words, every, note, table, maps], show_progress="hidden")
    drawn.then(**chosen)
    # On "input" only (typing, the arrows): with "submit" too, a number typed and Enter chose the sentence twice,
    # and a word clicked between the two answers was undone by the second (the panel drawn afresh, the word's
    # button gone: CI, two loaded cores).
    number.input(**chosen, trigger_mode="always_last", api_name="swap_sentence")
    margin.input(judge_again, inputs=[state, margin], outputs=[state, note, table], trigger_mode="always_last",
                 show_progress="hidden")
    words.select(pick_word, inputs=[state], outputs=[state, words, every, note], api_name="swap_word")
    results = [state, note, table, maps]
    run.click(lambda view, st, text, m: run_swaps(zoo.load, view, st, text, m, False, limit),
              inputs=[view_state, state, replacements, margin], outputs=results, api_name="swap_run", **HEAVY)
    every.click(lambda view, st, m: run_swaps(zoo.load, view, st, "", m, True, limit),
                inputs=[view_state, state, margin], outputs=results, api_name="swap_every", **HEAVY)
    def on_table(view, board_settings, current, event: gr.SelectData = None):
        return table_event(zoo.load, view, board_settings, current, event)

    table.select(on_table, inputs=[view_state, settings_state, state], outputs=results, api_name="swap_table", **HEAVY)
    if board is not None:
        add.click(lambda view, s, st, text: add_span(zoo.load, view, s, st, text, render),
                  inputs=[view_state, settings_state, state, span],
                  outputs=[view_state, settings_state, board, status, scores, note],
                  api_name="swap_span", **HEAVY)
    export_button.click(lambda view, s, st, f: export(view, s, st, f, budget=budget, public=public),
                        inputs=[view_state, settings_state, state, fmt], outputs=[files, note],
                        api_name="swap_export", **HEAVY)


__all__ = ["HINT", "SwapState", "add_span", "build", "choose_sentence", "export", "judge_again", "pick_word", "run_swaps", "table_event"]
