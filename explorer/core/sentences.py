"""Splitting a long caption into its sentences (sub-captions).

Below the models: CAFT's chunking and the grounding views both read captions sentence by sentence.

A sentence ends at . ! ? before white space and a capital or digit (English), at the CJK
stops 。！？ (and the full-width ．) whatever follows them (CJK text puts no space after
them), or at a blank line. A piece with no letter or digit in it ("....", "!!!", emoji
only) is not a sentence: ``split_pieces`` keeps it, ``split_sentences`` leaves it out.
"""

from __future__ import annotations

import re

_CLOSERS = "\"')\\]」』）】〕》〉”’"  # closing quotes and brackets stay with their sentence
# English: . ! ? (optionally followed by closing quotes/brackets) before white space and a capital
# or digit; decimal numbers ("2.5 m") are not ends. CJK: a run of 。！？｡ (or ．, unless a digit
# follows: "２．５") with its closing quotes, before anything. Or a blank line.
_BOUNDARY = re.compile(
    r"(?<=[.!?])([\"')\]]*)\s+(?=[\"'(\[]?[A-Z0-9])"
    r"|\n\s*\n"
    rf"|(?:(?<=[。！？｡])|(?<=．)(?![0-9０-９]))(?![。！？｡．])([{_CLOSERS}]*)\s*(?=\S)")
_ENDS = re.compile(r"[.!?。！？｡．]")  # sentence punctuation of any script
# An abbreviation ends the piece as a whole word: "forest." and "piano." end sentences, "St." does not.
_ABBREVIATION = re.compile(r"(?:^|[\s(\"'])(?:e\.g|i\.e|etc|vs|mrs?|dr|st|no)\.$", re.IGNORECASE)


_FALLBACK = re.compile(r"\s*(?:\n|;|；)\s*")  # line breaks and semicolons, for captions without . ! ?


def has_words(text: str) -> bool:
    """Whether the text holds a letter or a digit (of any script): punctuation and emoji alone do not count."""
    return any(character.isalnum() for character in text)


def split_pieces(caption: str) -> list[str]:
    """Every piece of the caption between sentence ends, in order, stripped; empty pieces dropped.

    Pieces without a word ("...", emoji) are kept here; ``split_sentences`` leaves them out.
    A caption with no sentence punctuation at all (a list of phrases, one per line, or joined
    by semicolons) is split at its line breaks and semicolons instead.
    """
    if not _ENDS.search(caption):
        return [piece for piece in (p.strip() for p in _FALLBACK.split(caption)) if piece]
    pieces, start = [], 0
    for match in _BOUNDARY.finditer(caption):
        closers = next((i for i in (1, 2) if match.group(i) is not None), None)
        end = match.end(closers) if closers is not None else match.start()
        candidate = caption[start:end].strip()
        if _ABBREVIATION.search(candidate):
            continue  # "e.g. A ..." is not a sentence end
        pieces.append(candidate)
        start = match.end()
    pieces.append(caption[start:].strip())
    return [p for p in pieces if p]


def split_sentences(caption: str) -> list[str]:
    """Sentences of a caption, in order, stripped: the pieces that hold at least one word."""
    return [piece for piece in split_pieces(caption) if has_words(piece)]
