"""Splitting a long caption into its sentences (sub-captions).

Below the models: CAFT's chunking and the grounding views both read captions sentence by sentence.
"""

from __future__ import annotations

import re

# A sentence ends at . ! ? (optionally followed by closing quotes/brackets) before white space,
# or at a blank line. Decimal numbers ("2.5 m") are not ends; closing quotes stay with their sentence.
_BOUNDARY = re.compile(r"(?<=[.!?])([\"')\]]*)\s+(?=[\"'(\[]?[A-Z0-9])|\n\s*\n")
_ABBREVIATIONS = ("e.g.", "i.e.", "etc.", "vs.", "mr.", "mrs.", "dr.", "st.", "no.")


_FALLBACK = re.compile(r"\s*(?:\n|;)\s*")  # line breaks and semicolons, for captions without . ! ?


def split_sentences(caption: str) -> list[str]:
    """Sentences of a caption, in order, stripped; empty pieces dropped.

    A caption with no sentence punctuation at all (a list of phrases, one per line, or joined
    by semicolons) is split at its line breaks and semicolons instead.
    """
    if not re.search(r"[.!?]", caption):
        return [piece for piece in (p.strip() for p in _FALLBACK.split(caption)) if piece]
    pieces, start = [], 0
    for match in _BOUNDARY.finditer(caption):
        end = match.end(1) if match.group(1) is not None else match.start()
        candidate = caption[start:end].strip()
        if candidate.lower().endswith(_ABBREVIATIONS):
            continue  # "e.g. A ..." is not a sentence end
        pieces.append(candidate)
        start = match.end()
    pieces.append(caption[start:].strip())
    return [p for p in pieces if p]
