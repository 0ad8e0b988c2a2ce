"""Grounding tab: an image, a long caption, one map per sentence.

The token budget updates as you type (no model involved). "Draw maps" runs
the model once; colour map and opacity changes re-render the cached maps.
"""

from __future__ import annotations

import gradio as gr

from ..grounding import GroundingResult, MapCache, ground, prepare_image
from ..errors import ExplorerError
from ..models.methods import get_method
from ..models.methods.base import GENERIC_MAP
from ..models.zoo import Zoo
from ..render import COLORMAPS, overlay
from ..text import CONTEXTS, CaptionAnalysis, analyse_caption
from .common import explain
from .examples import example_images

SENTENCE_COLUMNS = ["#", "sentence", "tokens", "kept by CLIP (77)", "kept by Long-CLIP (248)"]
PAST = {77: "past 77: CLIP cuts this", 248: "past 248: Long-CLIP cuts this too"}


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


def render_gallery(result: GroundingResult | None, cmap: str, opacity: float) -> list:
    if result is None:
        return []
    maps = result.maps
    return [(overlay(result.image, values, cmap=cmap, opacity=opacity), f"{i + 1}. {sentence}")
            for i, (sentence, values) in enumerate(zip(maps.sentences, maps.maps))]


def model_summary(zoo: Zoo, name: str | None) -> str:
    if name is None:
        return "No model in the zoo: add one in the Models tab."
    manifest = zoo.get(name)
    text = f"{manifest.method} · {manifest.architecture} · {manifest.context_length} tokens"
    if not manifest.trained:
        text += " · **UNTRAINED (random weights): maps are meaningless**"
    return text


def status_text(result: GroundingResult) -> str:
    lines = [f"**{result.model_name}** · {result.maps.kind} map · {len(result.maps)} sentence(s)"]
    lines += [f"- {note}" for note in result.notes]
    return "\n".join(lines)


def draw_maps(zoo: Zoo, cache: MapCache, image_path, text, name, kind, cmap, opacity, dense_caption=""):
    """The "Draw maps" button: (result, gallery, status, sentence table). Failures become a message."""
    if not image_path:
        return None, [], "**Cannot do that:** pick or upload an image first.", gr.update()
    try:
        result = ground(zoo.load(name), image_path, text, kind=kind, cache=cache, dense_caption=dense_caption)
    except Exception as error:  # noqa: BLE001 - the page shows it; nothing else changes
        return None, [], explain(error), gr.update()
    return result, render_gallery(result, cmap, opacity), status_text(result), sentence_rows(result.analysis)


def model_choices(zoo: Zoo) -> list[tuple[str, str]]:
    """(label, name) for the model list: each model with its method and the map kinds it offers."""
    choices = []
    for manifest in zoo.manifests():
        try:
            cls = get_method(manifest.method)
            kinds = ", ".join((GENERIC_MAP, *cls.native_map_kinds))
            label = f"{manifest.name} · {cls.title} · maps: {kinds}"
        except ExplorerError:
            label = f"{manifest.name} · unknown method {manifest.method!r}"
        choices.append((label, manifest.name))
    return choices


# The model the page opens on: a trained demo model with a native grounding map, if there is one.
PREFERRED_DEFAULTS = ("demo-caft", "demo-flair", "demo-finelip", "demo-longclip", "demo-mulclip")


def default_model(zoo: Zoo) -> str | None:
    manifests = zoo.manifests()
    names = [m.name for m in manifests]
    for name in PREFERRED_DEFAULTS:
        if name in names:
            return name
    trained = [m.name for m in manifests if m.trained]
    return (trained or names or [None])[0]


def initial_kinds(zoo: Zoo, name: str | None) -> list[str]:
    """The map kinds a model's method offers, known without loading it (native ones first)."""
    try:
        cls = get_method(zoo.get(name).method)
    except ExplorerError:
        return [GENERIC_MAP]
    return [*cls.native_map_kinds, GENERIC_MAP]


def build(zoo: Zoo, cache: MapCache) -> None:
    choices = model_choices(zoo)
    default = default_model(zoo)
    kinds = initial_kinds(zoo, default) if default else [GENERIC_MAP]
    examples = example_images()
    with gr.Row():
        with gr.Column(scale=1):
            # A File input, not gr.Image: Gradio would decode an Image upload itself, before our
            # checks (corrupt files, 16-bit, decompression bombs) could say what is wrong.
            image = gr.File(label="Image file (PNG, JPEG, WebP, TIFF...)", type="filepath", file_count="single",
                            elem_id="grounding-image", height=90)
            preview = gr.Image(label="Image", interactive=False, elem_id="grounding-preview", height=300)
            caption = gr.Textbox(label="Long caption", lines=6, elem_id="grounding-caption",
                                 value=examples[0][1] if examples else "")
            budget_view = gr.HighlightedText(label="Token budget", elem_id="token-budget", show_legend=True,
                                             combine_adjacent=True)
            budget_note = gr.Markdown(elem_id="token-summary")
            with gr.Accordion("Dense caption (read by SEPS; the long caption stands in when empty)", open=False):
                dense_caption = gr.Textbox(label="Dense caption", lines=3, elem_id="grounding-dense")
            with gr.Row():
                model = gr.Dropdown(choices, value=default, label="Model", elem_id="grounding-model")
                kind = gr.Dropdown(kinds, value=kinds[0], label="Map", elem_id="grounding-kind")
            model_note = gr.Markdown(lambda: model_summary(zoo, default), elem_id="model-note")
            with gr.Row():
                cmap = gr.Radio(list(COLORMAPS), value=COLORMAPS[0], label="Colour map")
                opacity = gr.Slider(0.0, 1.0, value=0.55, step=0.05, label="Opacity")
            run = gr.Button("Draw maps", variant="primary", elem_id="grounding-run")
            if examples:
                gr.Examples([[str(p), c] for p, c in examples], inputs=[image, caption], label="Examples")
        with gr.Column(scale=2):
            status = gr.Markdown("Pick an image and a caption, then **Draw maps**.", elem_id="grounding-status")
            table = gr.Dataframe(headers=SENTENCE_COLUMNS, interactive=False, wrap=True, elem_id="sentence-table")
            gallery = gr.Gallery(label="One map per sentence", columns=3, height="auto", elem_id="grounding-maps",
                                 object_fit="contain")
    state = gr.State(None)

    def on_caption(text):
        try:
            return update_budget(text)
        except Exception as error:  # noqa: BLE001
            return [], explain(error), []

    def on_model(name):
        try:
            kinds = list(zoo.load(name).map_kinds)
            native = [k for k in kinds if k != GENERIC_MAP]
            return gr.update(choices=kinds, value=(native or kinds)[0]), model_summary(zoo, name)
        except Exception as error:  # noqa: BLE001
            return gr.update(choices=[GENERIC_MAP], value=GENERIC_MAP), explain(error)

    def on_image(path):
        if not path:
            return None, "Pick an image and a caption, then **Draw maps**."
        try:
            picture, notes = prepare_image(path)
        except Exception as error:  # noqa: BLE001
            return None, explain(error)
        lines = [f"Image {picture.width}x{picture.height} ready."] + [f"- {note}" for note in notes]
        return picture, "\n".join(lines)

    caption.change(on_caption, inputs=caption, outputs=[budget_view, budget_note, table])
    model.change(on_model, inputs=model, outputs=[kind, model_note])
    image.change(on_image, inputs=image, outputs=[preview, status])
    run.click(lambda *values: draw_maps(zoo, cache, *values),
              inputs=[image, caption, model, kind, cmap, opacity, dense_caption],
              outputs=[state, gallery, status, table])
    for control in (cmap, opacity):
        control.change(render_gallery, inputs=[state, cmap, opacity], outputs=gallery)
