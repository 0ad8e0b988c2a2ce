"""The page's theme: Gradio's default, with every text at least 4.5:1 against what it is drawn on (WCAG AA).

Gradio's default draws subdued text (slider ends, info lines, the empty board's message, the footer) in
#bbbbc2 on white, 1.91:1, and white on its orange accent (the primary buttons, the Stop button's red) at
2.8:1 and 3.8:1. Here the subdued text is the neutral 600 and the accent one step darker; the ratios are
measured by ``contrast_ratio`` (tests/test_page_readability.py) and by axe-core in a browser
(tests/test_browser_access.py). System fonts: the default theme would fetch Google Fonts.
"""

from __future__ import annotations

import gradio as gr

SUBDUED = "#52525b"  # neutral 600: 7.7:1 on white (was neutral 400, #bbbbc2: 1.91:1)
ACCENT = "#c2410c"  # orange 700: white on it 5.2:1 (was orange 500, #f97316: 2.8:1)
ACCENT_HOVER = "#9a3412"  # orange 800
STOP = "#b91c1c"  # red 700: white on it 6.5:1 (was #ef4444: 3.8:1)
STOP_HOVER = "#991b1b"


def page_theme() -> gr.themes.Base:
    theme = gr.themes.Default(font=["ui-sans-serif", "system-ui", "sans-serif"],
                              font_mono=["ui-monospace", "SFMono-Regular", "monospace"])
    return theme.set(
        body_text_color_subdued=SUBDUED,
        block_label_text_color=SUBDUED, block_title_text_color=SUBDUED,
        color_accent=ACCENT,
        button_primary_background_fill=ACCENT, button_primary_background_fill_dark=ACCENT,
        button_primary_background_fill_hover=ACCENT_HOVER, button_primary_background_fill_hover_dark=ACCENT_HOVER,
        button_primary_border_color=ACCENT, button_primary_border_color_dark=ACCENT,
        button_cancel_background_fill=STOP, button_cancel_background_fill_dark=STOP,
        button_cancel_background_fill_hover=STOP_HOVER, button_cancel_background_fill_hover_dark=STOP_HOVER,
        button_cancel_border_color=STOP, button_cancel_border_color_dark=STOP,
    )


NAMED = {"white": "ffffff", "black": "000000"}


def luminance(colour: str) -> float:
    """WCAG's relative luminance of a "#rrggbb" (or "#rgb", "white", "black") colour."""
    digits = NAMED.get(colour.strip().lower(), colour.strip().lstrip("#"))
    if len(digits) == 3:
        digits = "".join(d * 2 for d in digits)
    channels = [int(digits[i:i + 2], 16) / 255 for i in (0, 2, 4)]
    linear = [c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4 for c in channels]
    return 0.2126 * linear[0] + 0.7152 * linear[1] + 0.0722 * linear[2]


def contrast_ratio(foreground: str, background: str) -> float:
    """WCAG's contrast ratio of two "#rrggbb" colours (1 to 21; AA asks 4.5 for body text)."""
    high, low = sorted((luminance(foreground), luminance(background)), reverse=True)
    return (high + 0.05) / (low + 0.05)


__all__ = ["contrast_ratio", "page_theme"]
