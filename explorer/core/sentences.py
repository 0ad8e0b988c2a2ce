"""Splitting a long caption into its sentences (sub-captions).

Below the models: CAFT's chunking and the grounding views both read captions sentence by sentence.

A sentence ends at . ! ? before white space and a capital or digit (English), unless the word before the
period is an abbreviation (e.g., i.e., etc., vs., Mr., Mrs., Dr., St., No.); at the CJK stops 。！？ (and the
full-width ．) whatever follows them (CJK text puts no space after them); or at a blank line (a paragraph
always ends its sentence). A piece with no letter or digit in it ("....", "!!!", emoji only) is not a
sentence: ``split_pieces`` keeps it, ``split_sentences`` leaves it out.

A visitor's caption reaches this on a shared page, and a regular expression that backtracks holds the
interpreter lock (every route stalls), so every step is linear in the caption's length: each pattern starts
at a sentence mark or a line break, its runs (white space, closers) are possessive (``*+``: never read twice),
abbreviations are fixed-width look-behinds, and each character is copied into a piece once
(tests/test_sentences_linear.py times long white-space runs, repeated abbreviations and 200,000 characters).
"""

from __future__ import annotations

import re

_CLOSERS = "\"')\\]」』）】〕》〉”’"  # closing quotes and brackets stay with their sentence
_CJK_STOPS = "。！？｡．"
# An abbreviation is a whole word: "forest." and "piano." end sentences, "St." does not. The word starts the
# caption or follows white space, an opening mark, a closer or a CJK stop (where a piece starts).
_WORD_START = rf"[\s(\"'{_CJK_STOPS}{_CLOSERS}]"
_NOT_ABBREVIATION = "".join(rf"(?<!{before}(?i:{words})\.)" for before in ("^", _WORD_START)
                            for words in ("st|dr|mr|vs|no", r"mrs|etc|e\.g|i\.e"))
# Every alternative starts with a character class, so the engine skips to the next candidate fast.
# English: . ! ? (optionally followed by closing quotes/brackets) before white space and a capital
# or digit; decimal numbers ("2.5 m") are not ends. CJK: a run of 。！？｡ (or ．, unless a digit
# follows: "２．５") with its closing quotes, before anything. Or a blank line. Group 1 or 2: the closers
# that stay with the sentence before.
_BOUNDARY = re.compile(
    rf"[.!?]{_NOT_ABBREVIATION}([\"')\]]*+)\s++(?=[\"'(\[]?[A-Z0-9])"
    r"|\n[^\S\n]*+\n\s*+"
    rf"|(?:[。！？｡]|．(?![0-9０-９]))(?![{_CJK_STOPS}])([{_CLOSERS}]*+)\s*+(?=\S)")
_ENDS = re.compile(r"[.!?。！？｡．]")  # sentence punctuation of any script
# Line breaks and semicolons, for captions without . ! ?; the pieces are stripped after the split (a pattern
# with white space on both sides, ``\s*\n\s*``, backtracks over a whole white-space run at each of its positions).
_FALLBACK = re.compile(r"[\n;；]")


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
        closers = match.lastindex  # the group of closers that matched, if any (not on a blank line)
        pieces.append(caption[start:match.end(closers) if closers else match.start()].strip())
        start = match.end()
    pieces.append(caption[start:].strip())
    return [p for p in pieces if p]


def split_sentences(caption: str) -> list[str]:
    """Sentences of a caption, in order, stripped: the pieces that hold at least one word."""
    return [piece for piece in split_pieces(caption) if has_words(piece)]
