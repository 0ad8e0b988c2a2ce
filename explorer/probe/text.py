"""Words in a sentence: where a word or phrase is, which words a swap can change, the swapped text, spans.

Everything here is one pass over the sentence's words (a regular expression without backtracking over
letters, then at most ``LONGEST_PHRASE`` lookups per word), and a sentence is refused past ``MAX_CHARS``:
the work is linear in the sentence and bounded whatever a visitor sends.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from explorer.core.errors import InputError
from explorer.probe.vocabulary import LONGEST_PHRASE, word_type

MAX_CHARS = 4000  # a sentence longer than this is not a sentence; the page's caption cap is larger
MAX_WORD_CHARS = 60  # a word or replacement (a phrase of a few words at most)
_WORD = re.compile(r"[^\W\d_]+(?:['-][^\W\d_]+)*|\d+")  # letters (with inner ' or -), or a number


class SwapError(InputError):
    """A swap the probe cannot make: a word not in the sentence, an empty replacement, one equal to the word,
    a sentence number past the caption, too many swaps."""


@dataclass(frozen=True)
class Word:
    text: str  # as written in the sentence
    start: int  # characters into the sentence
    end: int
    type: str | None = None  # its swap type, or None

    @property
    def key(self) -> str:
        return " ".join(self.text.casefold().split())


def words(sentence: str) -> list[Word]:
    """The sentence's words, in order, with their character spans."""
    _check_length(sentence)
    return [Word(m.group(), m.start(), m.end()) for m in _WORD.finditer(sentence)]


def swappable(sentence: str) -> list[Word]:
    """The words (and two-word phrases, "top left") a swap can change, each with its type, left to right; a
    phrase is taken whole before its words."""
    found, tokens, i = [], words(sentence), 0
    while i < len(tokens):
        for length in range(min(LONGEST_PHRASE, len(tokens) - i), 0, -1):
            first, last = tokens[i], tokens[i + length - 1]
            if length > 1 and sentence[first.end:last.start].strip():  # only spaces between a phrase's words
                continue
            kind = word_type(sentence[first.start:last.end])
            if kind is not None:
                found.append(Word(sentence[first.start:last.end], first.start, last.end, kind))
                i += length
                break
        else:
            i += 1
    return found


def find_word(sentence: str, word: str) -> Word:
    """The first place ``word`` (one word or a phrase, any case) stands whole in ``sentence``, or ``SwapError``."""
    wanted = _clean(word, "word")
    parts = [w.key for w in words(wanted)]
    tokens = words(sentence)
    for i in range(len(tokens) - len(parts) + 1):
        window = tokens[i:i + len(parts)]
        if [w.key for w in window] == parts:
            start, end = window[0].start, window[-1].end
            return Word(sentence[start:end], start, end, word_type(sentence[start:end]))
    raise SwapError(f"{word.strip()!r} is not a word of the sentence: {_short(sentence)}")


def swap_text(sentence: str, word: Word, replacement: str, fix_article: bool = True) -> str:
    """The sentence with ``word`` replaced: the replacement takes the word's capital, and a preceding "a"/"an"
    follows the new word's first letter (``fix_article``)."""
    new = _clean(replacement, "replacement")
    if " ".join(new.casefold().split()) == word.key:
        raise SwapError(f"the replacement {replacement.strip()!r} is the word itself: nothing would change")
    if word.text[:1].isupper():
        new = new[:1].upper() + new[1:]
    before = sentence[:word.start]
    if fix_article:
        before = _article(before, new)
    return before + new + sentence[word.end:]


def pick_sentence(caption: str, number) -> str:
    """Sentence ``number`` (from 1) of a caption as the board splits it, or ``SwapError``."""
    from explorer.core.sentences import split_sentences

    sentences = split_sentences(caption or "")
    if not sentences:
        raise SwapError("the caption has no sentence")
    if isinstance(number, float) and number.is_integer():
        number = int(number)
    if not isinstance(number, int) or isinstance(number, bool) or not 1 <= number <= len(sentences):
        raise SwapError(f"sentence {number!r} is past the caption: it has {len(sentences)} "
                        f"sentence{'s' if len(sentences) > 1 else ''} (number them from 1)")
    return sentences[number - 1]


def span_text(sentence: str, first: int, last: int) -> str:
    """Words ``first`` .. ``last`` (0-based, inclusive) of the sentence, as written: a phrase to map."""
    tokens = words(sentence)
    if not tokens:
        raise SwapError("the sentence has no words")
    if not (isinstance(first, int) and isinstance(last, int)) or not 0 <= first <= last < len(tokens):
        raise SwapError(f"a span is words 1 to {len(tokens)} of the sentence, first before last; not "
                        f"{_number(first)}-{_number(last)}")
    return sentence[tokens[first].start:tokens[last].end]


_ARTICLE = re.compile(r"(?<![^\W\d_])(an?)(\s+)$", re.IGNORECASE)


def _article(before: str, new: str) -> str:
    match = _ARTICLE.search(before)
    if not match:
        return before
    wanted = "an" if new[:1].casefold() in "aeiou" else "a"
    if match.group(1)[:1].isupper():
        wanted = wanted.capitalize()
    return before[:match.start()] + wanted + match.group(2)


def _clean(text, what: str) -> str:
    if not isinstance(text, str) or not text.strip():
        raise SwapError(f"the {what} is empty")
    text = " ".join(text.split())
    if len(text) > MAX_WORD_CHARS:
        raise SwapError(f"the {what} is {len(text)} characters; at most {MAX_WORD_CHARS}")
    return text


def _check_length(sentence) -> None:
    if not isinstance(sentence, str):
        raise SwapError("the sentence is not text")
    if len(sentence) > MAX_CHARS:
        raise SwapError(f"the sentence is {len(sentence)} characters; at most {MAX_CHARS}")


def _short(text: str, limit: int = 80) -> str:
    return text if len(text) <= limit else text[:limit - 1] + "…"


def _number(value) -> str:
    return str(value + 1) if isinstance(value, int) else repr(value)


__all__ = ["MAX_CHARS", "SwapError", "Word", "find_word", "pick_sentence", "span_text", "swap_text", "swappable", "words"]
