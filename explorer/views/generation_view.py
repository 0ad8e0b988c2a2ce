"""What the Generation tab and ``explorer generate`` show: the grid, the token budgets, the match table.

Rendering only: the pictures, the caption analysis and the scores come from
``explorer.generation``; this module lays them out.
"""

from __future__ import annotations

from PIL import Image, ImageDraw, ImageFont

from explorer.grounding.budget import analyse_caption
from explorer.models.nn.positional import LONG_CONTEXT, SHORT_CONTEXT

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


MATCH_HEADERS_FIXED = ["#", "sentence", "past stock's 77"]


def match_table(match, seed: int) -> tuple[list[str], list[list]]:
    """Headers and rows: per sentence, each column's score for this seed's pictures, and the best."""
    columns = [column for column, s in match.keys if s == seed]
    index = {key: i for i, key in enumerate(match.keys)}
    best = match.best_picture(seed)
    headers = [*MATCH_HEADERS_FIXED, *(column_title(c) for c in columns), "best"]
    rows = [["all", "(whole caption)", "", *(round(match.whole[index[(c, seed)]], 4) for c in columns), ""]]
    for j, sentence in enumerate(match.sentences):
        scores = [round(match.per_sentence[index[(c, seed)]][j], 4) for c in columns]
        rows.append([j + 1, sentence, "yes" if match.past_stock_cut[j] else "", *scores, best[j]])
    return headers, rows
