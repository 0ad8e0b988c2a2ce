"""Grounding tab: a picture, a long caption and up to 4 models, seen three ways.

The left column holds the inputs; the token budget updates as you type (no model involved).
The right column has one tab per view (sentence maps, FLISM regions, PCA maps), each in its
own module; they share the inputs and the model-result cache.
"""

from __future__ import annotations

import gradio as gr

from explorer.core.errors import ExplorerError
from explorer.grounding.budget import CONTEXTS, CaptionAnalysis, analyse_caption
from explorer.grounding.sentence_maps import MapCache, describe_picture
from explorer.models.map_kinds import GENERIC_MAP
from explorer.models.methods import discover_methods, get_method, imported_method
from explorer.ui import grounding_dataset_panel, maps_tab, pca_tab, regions_tab
from explorer.serve.budget import HEAVY, TEXT
from explorer.serve.access import Access
from explorer.ui.examples import PHOTO_NOTE, page_examples
from explorer.ui.kind_notes import kind_note
from explorer.serve.messages import explain
from explorer.serve.request_rules import scrub_paths
from explorer.ui.view_controls import Inputs, as_list, keep_value
from explorer.views.settings import MAX_MODELS, NATIVE
from explorer.zoo import Zoo

SENTENCE_COLUMNS = ["#", "sentence", "tok", "77", "248"]  # tokens; kept by CLIP (77), by Long-CLIP (248)
SENTENCE_WIDTHS = ["9%", "49%", "14%", "13%", "15%"]
PAST = {77: "past 77: CLIP cuts this", 248: "past 248: Long-CLIP cuts this too"}
RECOUNTING = "Counting the tokens of the caption as typed…"
UPDATING = "Updating for the models chosen…"


def budget_spans(analysis: CaptionAnalysis) -> list[tuple[str, str | None]]:
    """The caption in pieces, labelled by which context truncates them."""
    text, spans, start = analysis.caption, [], 0
    for context in CONTEXTS:
        cut = analysis.cut_at_char[context]
        if cut is None:
            continue
        if cut > start:
            spans.append((text[start:cut], None if not spans else PAST[CONTEXTS[0]]))
        start = max(start, cut)
    labels = [PAST[c] for c in CONTEXTS if analysis.cut_at_char[c] is not None]
    spans.append((text[start:], labels[-1] if labels else None))
    return [(piece, label) for piece, label in spans if piece]


def budget_summary(analysis: CaptionAnalysis) -> str:
    parts = [f"**{analysis.n_tokens} tokens** in {len(analysis.sentences)} sentence(s)."]
    parts += [f"({note})" for note in analysis.notes]
    for context in CONTEXTS:
        cut = analysis.cut_at_char[context]
        if cut is None:
            parts.append(f"Fits {context}.")
        else:
            words = analysis.caption[cut:cut + 40].split()
            parts.append(f"{context} cuts {analysis.n_tokens - context} token(s), from \"{' '.join(words[:5])}…\".")
    return " ".join(parts)


def sentence_rows(analysis: CaptionAnalysis) -> list[list]:
    return [[i + 1, s.text, s.n_tokens, "yes" if s.fits_whole_caption(77) else "CUT",
             "yes" if s.fits_whole_caption(248) else "CUT"] for i, s in enumerate(analysis.sentences)]


def update_budget(caption: str):
    if not caption or not caption.strip():
        return [], "Type or paste a caption.", []
    analysis = analyse_caption(caption)
    return budget_spans(analysis), budget_summary(analysis), sentence_rows(analysis)


def model_summary(zoo: Zoo, name: str | None) -> str:
    if name is None:
        return "No model in the zoo: add one in the Models tab."
    manifest = zoo.get(name)
    text = f"{manifest.method} · {manifest.architecture} · {manifest.context_length} tokens"
    if not manifest.trained:
        text += " · **UNTRAINED (random weights): maps are meaningless**"
    return text


def model_choices(zoo: Zoo) -> list[tuple[str, str]]:
    """(label, name) for the model list, real checkpoints first (``Zoo.choice_order``): each model with its
    method and the map kinds it offers (its method's name alone on a page built before the method modules
    are imported)."""
    choices = []
    for manifest in zoo.choice_order():
        try:
            cls = imported_method(manifest.method)
            if cls is None:
                label = f"{manifest.name} · {manifest.method}"
            else:
                kinds = ", ".join((GENERIC_MAP, *cls.native_map_kinds, *cls.explainer_kinds))
                label = f"{manifest.name} · {cls.title} · maps: {kinds}"
        except ExplorerError:
            label = f"{manifest.name} · unknown method {manifest.method!r}"
        if not manifest.trained:
            label = f"{manifest.name} · UNTRAINED (random weights) · " + label.split(" · ", 1)[1]
        choices.append((label, manifest.name))
    return choices


def refresh_models(zoo: Zoo, current):
    """The model list as the zoo is now (models added or removed since the page was built); the
    chosen models that are still there stay chosen."""
    discover_methods()
    choices = model_choices(zoo)
    names = {name for _, name in choices}
    return keep_value(gr.update(choices=choices, value=[name for name in as_list(current) if name in names]), current)


def kind_choices(zoo: Zoo, names, method=get_method) -> list[str]:
    """"native" (each model's own first map), "generic", then every named kind of the chosen models.
    ``method``: name -> class, or None for a method not known yet (``imported_method`` on a page being built)."""
    classes = []
    for name in as_list(names):
        try:
            cls = method(zoo.get(name).method)
        except ExplorerError:
            continue
        if cls is not None:
            classes.append(cls)
    kinds = [NATIVE, GENERIC_MAP]
    for cls in classes:
        kinds += [k for k in cls.native_map_kinds if k not in kinds]
    for cls in classes:  # the explainers last: every CLIP ViT offers them
        kinds += [k for k in cls.explainer_kinds if k not in kinds]
    return kinds


def models_summary(zoo: Zoo, names) -> str:
    names = as_list(names)
    if not names:
        return "Pick up to 4 models to compare."
    return "\n".join(f"- **{name}**: {model_summary(zoo, name)}" for name in names)


def build(zoo: Zoo, cache: MapCache, access: Access) -> tuple[Inputs, list[dict]]:
    """The tab; returns its inputs (the app refreshes their model list when the zoo changes, and other
    tabs fill them: the Retrieval tab opens a query here) and the handlers to run on every page load."""
    # Built without the tokenizer and the method modules (open_clip, torchvision: seconds), so the page
    # serves at once; the page-load handlers fill in the caption's budget, the model labels and map kinds.
    choices = model_choices(zoo)
    defaults = zoo.default_names(2)
    examples = page_examples()
    first_picture, first_caption = (str(examples.first[0]), examples.first[1]) if examples.first else (None, "")
    # The inputs in one band across the page (picture | caption | models: the model picker above the fold),
    # and the views under it at the page's whole width: four models' maps side by side need it.
    # The caption is made first (the examples under the picture fill it) and set in its column below.
    caption = gr.Textbox(label="Long caption", lines=5, max_lines=12, elem_id="grounding-caption",
                         value=first_caption, info=access.budget.describe(), render=False)
    with gr.Row(equal_height=False, elem_id="grounding-inputs"):
        with gr.Column(scale=3, min_width=260):
            # A File input, not gr.Image: Gradio would decode an Image upload itself, before our
            # checks (corrupt files, 16-bit, decompression bombs) could say what is wrong.
            # The page opens on the first example (picture, caption, its token budget) and two models whose
            # maps differ, so the first click on Draw shows what the app is for.
            image = gr.File(value=first_picture, label="Image file (PNG, JPEG, WebP, TIFF...)", type="filepath",
                            file_count="single", elem_id="grounding-image", height=90,
                            file_types=access.picture_types)
            picture, picture_text = describe(first_picture)
            preview = gr.Image(value=picture, label="Image", interactive=False, elem_id="grounding-preview",
                               height=220, alt_text="The picture the models read, as uploaded or picked")
            picture_note = gr.Markdown(picture_text, elem_id="image-note")
        with gr.Column(scale=5, min_width=380):
            caption.render()
            budget_note = gr.Markdown("Counting tokens…", elem_id="token-summary")
            with gr.Accordion("Token budget: what CLIP (77) and Long-CLIP (248) read of each sentence", open=False,
                              elem_id="token-budget-panel"):
                budget_view = gr.HighlightedText(value=[], label="Token budget", elem_id="token-budget",
                                                 show_legend=True, combine_adjacent=True)
                table = gr.Dataframe(value=[], headers=SENTENCE_COLUMNS, interactive=False, wrap=True,
                                     elem_id="sentence-table", max_height=260, column_widths=SENTENCE_WIDTHS,
                                     label="Sentences: tok = its tokens; 77 / 248 = still read when CLIP / "
                                           "Long-CLIP reads the whole caption", show_label=True)
            if examples.scenes:
                gr.Examples([[str(p), c] for p, c in examples.scenes], inputs=[image, caption],
                            label="Examples: synthetic scenes (the demo models' world; each carries its truth)",
                            elem_id="scene-examples", example_labels=example_labels(examples.scenes),
                            examples_per_page=4)
            if examples.photos:
                gr.Examples([[str(p), c] for p, c in examples.photos], inputs=[image, caption],
                            label="Examples: photos (scikit-image)", elem_id="photo-examples",
                            example_labels=example_labels(examples.photos), examples_per_page=4)
                gr.Markdown(PHOTO_NOTE, elem_id="photo-note")
            if examples.problem:  # names the folder it looked in: on a public page, not the server's path
                gr.Markdown(scrub_paths(examples.problem) if access.public else examples.problem,
                            elem_id="examples-note")
        with gr.Column(scale=4, min_width=300):
            # No max_choices: the browser would drop a fifth pick without a word; the server trims it and says so.
            models = gr.Dropdown(choices, value=defaults, multiselect=True,
                                 label=f"Models (up to {MAX_MODELS}, compared side by side)",
                                 elem_id="grounding-model")
            model_limit = gr.Markdown("", elem_id="model-limit-note")
            kinds = kind_choices(zoo, defaults, imported_method)
            kind = gr.Dropdown(kinds, value=NATIVE, label="Map kind (native: each model's own)",
                               elem_id="grounding-kind")
            kind_line = gr.Markdown(kind_note(NATIVE, zoo, defaults, imported_method), elem_id="grounding-kind-note")
            model_note = gr.Markdown(models_summary(zoo, defaults), elem_id="model-note")
            with gr.Accordion("Dense caption (read by SEPS; the long caption stands in when empty)", open=False):
                dense_caption = gr.Textbox(label="Dense caption", lines=3, elem_id="grounding-dense")
            with gr.Accordion("Ground truth (optional): a label mask for mIoU and pointing game", open=False):
                gr.Markdown("A single-channel PNG the size of the picture: pixel value *k* marks sentence *k* "
                            "(1-based), 0 nothing; a plain 0/255 mask applies to every sentence. The synthetic "
                            "examples carry their own truth. Pointing game: a *hit* when a map's peak pixel lies "
                            "inside its sentence's truth mask.")
                truth = gr.File(label="Label mask (PNG)", type="filepath", file_count="single",
                                elem_id="grounding-truth", height=90, file_types=access.picture_types)
            inputs = Inputs(image=image, caption=caption, models=models, kind=kind, dense_caption=dense_caption,
                            truth=truth)
            grounding_dataset_panel.build(access, inputs)
    with gr.Tabs():
        with gr.Tab("Sentence maps", id="maps"):
            maps_tab.build(inputs, zoo, cache, access)
        with gr.Tab("FLISM regions", id="regions"):
            regions_tab.build(inputs, zoo, cache, access)
        with gr.Tab("PCA maps", id="pca"):
            pca_tab.build(inputs, zoo, cache, access)

    def on_models(names, current):
        kinds = kind_choices(zoo, names)
        value = current if current in kinds else NATIVE  # a kind no chosen model offers is not kept
        return gr.update(choices=kinds, value=value), models_summary(zoo, names), kind_note(value, zoo, names)

    # The summary and the kind note are marked in the browser at once, before the server's answer: they never
    # show the previous caption's or models' text as if it were this one's.
    caption.input(None, None, budget_note, js=f"() => {RECOUNTING!r}", show_progress="hidden")
    caption.change(safe_budget, inputs=caption, outputs=[budget_view, budget_note, table], **TEXT)
    models.input(None, models, [models, model_limit, kind_line], js=LIMIT_MODELS_JS, show_progress="hidden")
    models.change(on_models, inputs=[models, kind], outputs=[kind, model_note, kind_line])
    kind.change(lambda chosen, names: kind_note(chosen, zoo, names), inputs=[kind, models], outputs=kind_line,
                show_progress="hidden")
    image.change(describe, inputs=image, outputs=[preview, picture_note], **HEAVY)

    def models_load(chosen, current_kind):
        # The first load imports the method modules (seconds on a busy machine): the values it was sent may be
        # older than what the visitor picked since, so it sets only the lists, and a value only where the zoo
        # no longer has a chosen model (or a kind).
        kind_update, *notes = on_models(chosen, current_kind)
        return refresh_models(zoo, chosen), keep_value(kind_update, current_kind), *notes

    # On every page load: the caption's budget, and the zoo as it is now with what each model offers. The
    # page was built without the tokenizer and the method modules: the first load imports them (unless the
    # app's warm-up has), the budget in its own event so that it does not wait for every method module.
    loads = [dict(fn=safe_budget, inputs=caption, outputs=[budget_view, budget_note, table], **TEXT),
             dict(fn=models_load, inputs=[models, kind], outputs=[models, kind, model_note, kind_line])]
    return inputs, loads


EXAMPLE_LABEL_CHARACTERS = 90  # a caption's start, readable in the picture column


def example_labels(pairs) -> list[str]:
    """What an example button reads: the file's name and its caption's start."""
    labels = []
    for path, caption in pairs:
        start = caption if len(caption) <= EXAMPLE_LABEL_CHARACTERS else \
            caption[:EXAMPLE_LABEL_CHARACTERS].rsplit(" ", 1)[0] + "…"
        name = path.stem.replace("synthetic-test-", "scene ")  # the held-out scenes' file names: scene 000000
        labels.append(f"{name}: {start}")
    return labels


# A pick past the limit is trimmed in the browser, where the box is: the first ``MAX_MODELS`` stay chosen and the
# page says what was left out (the server checks the count again on every Draw). Not a server event: each one
# costs the page's frontend a round of status updates over every component an event has touched (0.3-0.5 s of
# a 2-core machine's browser CPU), and a pick already makes two (the map kinds, the board marked out of date).
# The kind note is marked at once too: it never shows the previous models' text as if it were these ones'.
LIMIT_MODELS_JS = f"""(names) => {{
  const chosen = Array.isArray(names) ? names : [], same = {{"__type__": "update"}};
  if (chosen.length <= {MAX_MODELS}) return [same, "", {UPDATING!r}];
  const left_out = chosen.slice({MAX_MODELS}).join(", ");
  return [chosen.slice(0, {MAX_MODELS}), `**At most {MAX_MODELS} models** are compared at once: ${{left_out}} was not added.`
          + " Remove a model first.", {UPDATING!r}];
}}"""


def safe_budget(text):
    try:
        return update_budget(text)
    except Exception as error:  # noqa: BLE001 - the page says what is wrong and keeps serving
        return [], explain(error), []


def describe(path):
    """The picture preview and what happened to it (its size, and any conversion)."""
    if not path:
        return None, ""
    try:
        picture, lines = describe_picture(path)
    except Exception as error:  # noqa: BLE001
        return None, explain(error)
    return picture, "\n".join([lines[0], *(f"- {line}" for line in lines[1:])])
