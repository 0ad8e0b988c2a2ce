"""Splitting captions into sentences, including captions without sentence punctuation."""

from __future__ import annotations

from explorer.grounding.budget import analyse_caption, split_sentences


def test_sentences_split_at_end_punctuation_but_not_decimals_or_abbreviations():
    caption = 'A cat sits 2.5 m away, e.g. On a mat. "Is it red?" It is! The end'
    assert split_sentences(caption) == ["A cat sits 2.5 m away, e.g. On a mat.", '"Is it red?"', "It is!", "The end"]


def test_a_caption_without_punctuation_splits_at_lines_and_semicolons():
    assert split_sentences("a red cube on the left\na blue ball on top; a green floor") == [
        "a red cube on the left", "a blue ball on top", "a green floor"]


def test_a_caption_without_any_boundary_is_one_sentence():
    caption = "a red cube on the left and a blue ball on top and a green floor under them"
    assert split_sentences(caption) == [caption]
    assert len(analyse_caption(caption).sentences) == 1


def test_semicolons_do_not_split_punctuated_captions():
    assert split_sentences("A cube; red. A ball.") == ["A cube; red.", "A ball."]
