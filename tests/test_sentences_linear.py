"""Text a visitor sends cannot stall the server (issue 57.1): the sentence splitter, the caption checks and the
path scrubbing read an adversarial caption in time linear in its length. A regular expression that backtracks
holds the interpreter lock, so one quadratic caption used to freeze every route ("a" + 19,998 spaces + "b": 2.9 s;
"St. A " * 3333: 2.7 s). Each case is timed at 50,000 and 200,000 characters (the owner's cap): the larger must
finish under 0.1 s and take about four times the smaller, not sixteen. Times are the thread's CPU time (best of
three): the work itself, not the wait for a core on a machine shared with other test workers."""

from __future__ import annotations

import time

import pytest

from explorer.core.sentences import split_pieces, split_sentences

N = 200_000
LIMIT_S = 0.1
QUADRATIC = 16  # what four times the text costs a quadratic reader; a linear one pays about 4


def _spaces(n):
    return "a" + " " * (n - 2) + "b"


def _abbreviations(n):
    return "St. A " * (n // 6)


CASES = {
    "white space": _spaces,
    "abbreviations": _abbreviations,
    "abbreviations with a blank line": lambda n: "Dr. " + "e.g. B " * (n // 7) + "\n\nNext.",
    "sentences": lambda n: "The dog sat. " * (n // 13),
    "white space after a period": lambda n: "a." + " " * (n - 3) + "b",
    "closing quotes": lambda n: "a." + '"' * (n - 4) + " x",
    "blank-line spaces": lambda n: "a.\n" + " " * (n - 4) + "x",
    "line breaks and spaces": lambda n: "a. " + " \n" * (n // 2),
    "CJK stop then spaces": lambda n: "。" + " " * (n - 1),
    "periods": lambda n: "." * (n - 2) + " a",
    "semicolons": lambda n: "a ;" * (n // 3),
    "spaces without punctuation": lambda n: "x" + " " * (n - 2) + ";",
}


def best_time(fn, text, repeats=3) -> float:
    best = float("inf")
    for _ in range(repeats):
        start = time.thread_time()
        fn(text)
        best = min(best, time.thread_time() - start)
    return best


def assert_linear(fn, make, what):
    small, large = best_time(fn, make(N // 4)), best_time(fn, make(N))
    assert large < LIMIT_S, f"{what}: {N:,} characters took {large:.3f} s (at most {LIMIT_S} s)"
    # Below a millisecond the ratio is timer noise; a quadratic reader is far above it at this size anyway.
    ratio = large / max(small, 1e-3)
    assert ratio < QUADRATIC / 2, f"{what}: 4x the text took {ratio:.1f}x the time (linear: ~4x)"


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_splitter_is_linear_on_adversarial_captions(case):
    assert_linear(split_pieces, CASES[case], case)


def test_the_issues_own_captions_finish_at_once():
    for text in (_spaces(20_000), _abbreviations(20_000), _spaces(40_000)):
        assert best_time(split_sentences, text, repeats=1) < LIMIT_S


def test_the_linear_splitter_still_splits_as_before():
    """The rewrite keeps the rules: abbreviations as whole words, blank lines, CJK stops, the fallback."""
    assert split_pieces("Dr. Smith came. He sat.") == ["Dr. Smith came.", "He sat."]
    assert split_pieces("A forest. A st. B") == ["A forest.", "A st. B"]
    assert split_pieces("It was in the forest. Then it left.") == ["It was in the forest.", "Then it left."]
    assert split_pieces("(e.g. A dog) sat. Then") == ["(e.g. A dog) sat.", "Then"]
    assert split_pieces("a cat;  a dog \n\n a bird") == ["a cat", "a dog", "a bird"]
    assert split_pieces("猫がいる。犬もいる。") == ["猫がいる。", "犬もいる。"]
    assert split_pieces("It is 2.5 m. Big") == ["It is 2.5 m.", "Big"]
    assert split_pieces("St. " + " " * 100 + "\n\nA") == ["St.", "A"]  # a long gap before a blank line ends it


def test_path_scrubbing_and_long_words_are_linear():
    """What else reads a visitor's text before or after a handler: the public page's path scrubbing of every
    text it sends back, and the tokenizer's cutting of long runs without a space."""
    from explorer.models.tokenizer import LONG_RUN
    from explorer.serve.request_rules import scrub_paths

    cases = {"slashes": lambda n: "/a" * (n // 2), "spaced slashes": lambda n: " /" * (n // 2),
             "data URIs": lambda n: "data:" * (n // 5), "one long segment": lambda n: "/aaaa/" + "a" * n}
    for what, make in cases.items():
        assert_linear(scrub_paths, make, what)
    from explorer.models import tokenizer

    cutter = getattr(tokenizer, "_pieces")  # the long-run cutter runs before any BPE
    assert_linear(cutter, lambda n: "x" * n, "one long run")
    assert max(len(piece) for piece in cutter("x" * 1000).split()) == LONG_RUN
