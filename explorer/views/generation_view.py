"""What the Generation tab and ``explorer generate`` show: the grid, the token budgets, the match table.

Rendering only: the pictures, the caption analysis and the scores come from
``explorer.generation``; this module lays them out.
"""

from __future__ import annotations

from dataclasses import dataclass

from PIL import Image, ImageDraw, ImageFont

from explorer.generation.settings import CUT_MARK
from explorer.grounding.budget import analyse_caption
from explorer.models.contexts import LONG_CONTEXT, SHORT_CONTEXT

LABEL_HEIGHT = 22
GAP = 4


def column_title(column: str) -> str:
    return f"stock SDXL ({SHORT_CONTEXT} tokens)" if column == "stock" else f"{column} ({LONG_CONTEXT} tokens)"


def picture_grid(result) -> Image.Image:
    """Rows: seeds; columns: stock, then each swapped model. Each column titled, each row its seed."""
    settings = result.settings
    columns, seeds = settings.columns, settings.seeds
    side = result.pictures[0].image.size[0]
    margin = 70  # the seed labels
    width = margin + len(columns) * (side + GAP)
    height = LABEL_HEIGHT + len(seeds) * (side + GAP)
    canvas = Image.new("RGB", (width, height), "white")
    draw = ImageDraw.Draw(canvas)
    font = ImageFont.load_default(size=max(10, min(18, side // 20)))
    for c, column in enumerate(columns):
        draw.text((margin + c * (side + GAP) + 4, 3), fit_text(column_title(column), font, side - 6), fill="black",
                  font=font)
    for r, seed in enumerate(seeds):
        top = LABEL_HEIGHT + r * (side + GAP)
        draw.text((4, top + side // 2 - 8), f"seed {seed}", fill="black", font=font)
        for c, column in enumerate(columns):
            canvas.paste(result.picture(column, seed).convert("RGB"), (margin + c * (side + GAP), top))
    return canvas


def fit_text(text: str, font, width: float) -> str:
    """``text``, shortened with an ellipsis until it fits ``width`` pixels."""
    if font.getlength(text) <= width:
        return text
    while text and font.getlength(text + "…") > width:
        text = text[:-1]
    return text + "…"


def budget_rows(prompt: str) -> list[list]:
    """Per sentence: its tokens, and whether stock SDXL (77) and the swap (248) read all of it."""
    analysis = analyse_caption(prompt)
    rows = []
    for i, sentence in enumerate(analysis.sentences, start=1):
        rows.append([i, sentence.text, sentence.n_tokens - 2, f"{sentence.start_token}–{sentence.end_token - 1}",
                     _reads(sentence, SHORT_CONTEXT), _reads(sentence, LONG_CONTEXT)])
    return rows


BUDGET_HEADERS = ["#", "sentence", "tokens", "positions", f"stock reads ({SHORT_CONTEXT})",
                  f"swapped reads ({LONG_CONTEXT})"]


def budget_line(prompt: str) -> str:
    analysis = analyse_caption(prompt)
    parts = [f"The prompt takes {analysis.n_tokens} tokens."]
    for context, who in ((SHORT_CONTEXT, "Stock SDXL"), (LONG_CONTEXT, "The long text tower")):
        unread = sum(1 for s in analysis.sentences if not s.fits_whole_caption(context))
        parts.append(f"{who} reads all of it." if analysis.fits(context) else
                     f"{who} ({context}) misses {unread} of {len(analysis.sentences)} sentences (in part or whole).")
    return " ".join(parts)


def _reads(sentence, context: int) -> str:
    if sentence.fits_whole_caption(context):
        return "yes"
    return "no" if sentence.start_token >= context - 1 else "in part"


MATCH_HEADERS_FIXED = ["#", "sentence", "past 77"]
BUDGET_WIDTHS = ["4%", "58%", "8%", "10%", "10%", "10%"]


def match_widths(n_columns: int) -> list[str]:
    """Column widths of the match table: the sentence wide, every score readable without scrolling."""
    share = 38 / (n_columns + 1)
    return ["4%", "50%", "8%", *[f"{share:.0f}%"] * (n_columns + 1)]


def match_table(match, seed: int) -> tuple[list[str], list[list]]:
    """Headers and rows: per sentence, each column's score for this seed's pictures, and the best."""
    columns = [column for column, s in match.keys if s == seed]
    index = {key: i for i, key in enumerate(match.keys)}
    best = match.best_picture(seed)
    headers = [*MATCH_HEADERS_FIXED, *columns, "best"]
    rows = [["all", "(whole caption)", "", *(round(match.whole[index[(c, seed)]], 4) for c in columns), ""]]
    for j, sentence in enumerate(match.sentences):
        scores = [round(match.per_sentence[index[(c, seed)]][j], 4) for c in columns]
        rows.append([j + 1, sentence, "yes" if match.past_stock_cut[j] else "", *scores, best[j]])
    return headers, rows


# ---- the tab's work: long-text models, submitting to the worker, what a finished task shows -----------

EXAMPLE_PROMPT = (
    "A quiet harbour town at dusk, seen from the end of a wooden pier. Three small fishing boats are tied to "
    "the pier, the nearest one painted red with a white stripe along its hull. Behind the boats, a row of "
    "narrow houses in yellow, blue and green climbs the hill, their windows already lit. A lighthouse stands "
    "on the rocks to the left, its beam just visible against the violet sky. On the pier, an old man in a "
    "grey coat sits on an upturned crate, mending a net spread across his knees. A black and white cat sleeps "
    "beside him on a coil of rope. Gulls circle above the masts, and a thin crescent moon hangs over the hill. "
    "In the far right corner, a small orange rowing boat drifts alone, its oars resting inside.")


def long_text_models(manifests, method=None) -> list[tuple[str, str]]:
    """(label, name) of the zoo models whose text tower can take SDXL's ``text_encoder`` slot (248 tokens,
    a CLIP text tower): the rest would only be refused. ``method``: name -> class (``get_method``), or
    None for a method not imported yet (then the context alone decides, and the method's name labels it)."""
    from explorer.models.methods import get_method

    method = method or get_method
    choices = []
    for manifest in manifests:
        try:
            cls = method(manifest.method)
        except Exception:  # noqa: BLE001 - an unknown method is simply not offered here
            continue
        has_tower = cls is None or _overrides_text_tower(cls)
        if manifest.context_length == LONG_CONTEXT and has_tower:
            label = f"{manifest.name} · {cls.title if cls else manifest.method}"
            choices.append((label if manifest.trained else f"{label} · UNTRAINED (random weights)", manifest.name))
    return choices


def _overrides_text_tower(cls) -> bool:
    from explorer.models.methods.base import Method  # imported already: ``cls``'s module imports it

    return cls.text_tower is not Method.text_tower


def parse_seeds(text) -> list[int]:
    from explorer.core.errors import ExplorerError

    try:
        seeds = [int(part) for part in str(text or "").replace(",", " ").split()]
    except ValueError as error:
        raise ExplorerError(f"seeds are whole numbers separated by commas or spaces, not {text!r}") from error
    return seeds


def sdxl_line(path, config="") -> str:
    """One line on where SDXL is, or how to point to it."""
    from explorer.generation.sdxl_source import SdxlError, check_source

    try:
        source = check_source(path, config or None)
    except SdxlError as error:
        return f"SDXL: {error}"
    stock = "" if source.has_stock_encoders else " (no text_encoder/: the stock column cannot run)"
    return f"SDXL base at `{source.path}`{stock}."


def generate_reason(path, config="") -> str:
    """Why Generate is off, in a line beside it ("" when SDXL base at ``path`` is usable). The full
    reason is the line under the SDXL field (``sdxl_line``); this one says where to look."""
    from explorer.generation.sdxl_source import SdxlError, check_source

    try:
        check_source(path, config or None)
    except SdxlError:
        if not path:
            return "Generate is off: no SDXL base is set (the SDXL field above, `--sdxl` or `$EXPLORER_SDXL`)."
        return "Generate is off: the SDXL base above cannot be used (its line says why)."
    return ""


def submit_generation(worker, generator, settings, score_with: str | None, new_folder):
    """Queue one generation on the shared worker; returns its task. Settings are checked first, so a bad
    request is refused at once, not after the queue. ``new_folder()`` makes the folder the result is
    saved in, once there is a result: a refused or failed generation leaves no folder behind."""
    import uuid

    from explorer.core.background import Task
    from explorer.core.disk_quota import remove
    from explorer.generation.sdxl_source import check_source

    settings.check()
    check_source(settings.sdxl, settings.sdxl_config or None)

    def job(task):
        result = generator.run(settings, progress=task.progress, should_stop=task.stop_requested.is_set)
        scorer = generator.load_model(score_with) if score_with else None
        folder = new_folder()
        try:
            return save_generation(result, folder / "generation.png", scorer)
        except BaseException:
            remove(folder)  # a failed save leaves no folder behind either
            raise

    return worker.submit(Task(key=f"generation-{uuid.uuid4().hex}", title="generation"), job)


@dataclass
class SavedGeneration:
    grid: Image.Image
    grid_path: object
    settings_path: object
    reads: dict
    notes: list
    stock_prompt: str
    match: object | None  # CaptionMatch
    seeds: list


def save_generation(result, png, scorer=None, extra: dict | None = None) -> SavedGeneration:
    """The picture (the grid when there are several) at ``png`` and, beside it (same name, .json), the settings
    with what each column read, timings, ``extra`` and, when a ``scorer`` model is given, the match."""
    from explorer.generation.caption_match import score_pictures

    grid = result.pictures[0].image if len(result.pictures) == 1 else picture_grid(result)
    png.parent.mkdir(parents=True, exist_ok=True)
    grid.save(png)
    record = {**result.record(), **(extra or {})}
    match = score_pictures(scorer, result) if scorer is not None else None
    if match is not None:
        record["match"] = match.to_json()
    settings_path = result.settings.save(png.with_suffix(".json"), extra={"explorer": record})
    return SavedGeneration(grid, png, settings_path, result.reads, result.notes, result.stock_prompt, match,
                           list(result.settings.seeds))


def reads_markdown(saved: SavedGeneration) -> str:
    lines = [f"- **{column_title(column)}**: {reads}" for column, reads in saved.reads.items()]
    if "stock" in saved.reads and CUT_MARK in saved.stock_prompt:
        lines.append(f"- Stock SDXL read the prompt up to ‖: _{saved.stock_prompt.split(CUT_MARK)[0][-80:]}_ ‖ …")
    lines += [f"- note: {note}" for note in saved.notes]
    return "\n".join(lines)
