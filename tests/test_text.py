"""Splitting captions into sentences, including captions without sentence punctuation."""

from __future__ import annotations

from explorer.core.sentences import has_words, split_pieces
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


def test_cjk_full_stops_split_sentences_without_a_space_after_them():
    assert split_sentences("左边有一个红色的立方体。上面有一个蓝色的球！它大吗？是的。") == [
        "左边有一个红色的立方体。", "上面有一个蓝色的球！",
        "它大吗？", "是的。"]
    assert split_sentences("赤い立方体がある。青い球もある") == ["赤い立方体がある。", "青い球もある"]


def test_cjk_stops_keep_their_run_and_closing_quotes_together():
    assert split_sentences("真的吗？！他说：“好。”然后走了。。。") == [
        "真的吗？！", "他说：“好。”", "然后走了。。。"]
    assert split_sentences("A cube。 A ball.") == ["A cube。", "A ball."]


def test_a_full_width_full_stop_splits_but_not_inside_a_number():
    assert split_sentences("価格は２．５円．安い．") == ["価格は２．５円．", "安い．"]


def test_pieces_without_a_word_are_not_sentences():
    assert split_sentences("....") == [] and split_sentences("😀😀") == []
    assert split_pieces("!!! A cat.\n\n🐱🐱\n\nA dog.") == ["!!!", "A cat.", "🐱🐱", "A dog."]
    assert split_sentences("!!! A cat.\n\n🐱🐱\n\nA dog.") == ["A cat.", "A dog."]
    assert split_sentences("a cat\n😀\na dog") == ["a cat", "a dog"]  # the line-break fallback too
    assert split_sentences("A cat. 2.") == ["A cat.", "2."]  # digits are words
    assert has_words("猫") and has_words("2") and not has_words("。！？…😀 --")


def test_words_ending_like_an_abbreviation_still_end_a_sentence():
    """ "forest." ends in "st." and "piano." in "no.": only the abbreviation as a whole word holds a sentence."""
    assert split_sentences("A deer stands in the forest. A river flows past it.") == [
        "A deer stands in the forest.", "A river flows past it."]
    assert split_sentences("A piano. A drum.") == ["A piano.", "A drum."]
    assert split_sentences("The St. Louis arch is tall. It shines.") == ["The St. Louis arch is tall.", "It shines."]
    assert split_sentences("Dr. Smith waves. He smiles.") == ["Dr. Smith waves.", "He smiles."]
