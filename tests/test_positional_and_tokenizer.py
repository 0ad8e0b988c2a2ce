"""Long-CLIP's position stretch, the released two-table merge, and honest truncation."""

from __future__ import annotations

import pytest
import torch

from explorer.models.nn.positional import LONG_CONTEXT, merge_longclip_tables, stretch_positions
from explorer.models.tokenizer import EOT_ID, SOT_ID, budget, count_tokens, tokenize
from explorer.core.errors import ExplorerError

# ---- stretch ----------------------------------------------------------------------------------


def ramp(rows: int = 77, width: int = 8) -> torch.Tensor:
    """pe[i] = i * ones: every row's value is its index, so interpolation is readable."""
    return torch.arange(rows, dtype=torch.float64)[:, None].expand(rows, width).clone()


def test_stretch_on_a_ramp():
    out = stretch_positions(ramp())
    assert out.shape == (248, 8) and LONG_CONTEXT == 248
    values = out[:, 0]
    assert torch.equal(out, values[:, None].expand_as(out)), "rows stay constant across the width"
    for i in range(20):
        assert values[i] == i
    for i in range(56):
        for j in range(4):
            assert values[20 + 4 * i + j] == pytest.approx(20 + i + j / 4), (i, j)
    for k in range(4):
        assert values[244 + k] == pytest.approx(76 + k / 4), k


def test_stretch_on_a_random_table():
    pe = torch.randn(77, 16, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    out = stretch_positions(pe)
    assert out.shape == (248, 16) and out.dtype == pe.dtype
    assert torch.equal(out[:20], pe[:20])
    for i in range(56):
        assert torch.equal(out[20 + 4 * i], pe[20 + i]), "j = 0 is the original row itself"
        for j in range(1, 4):
            want = pe[20 + i] * (1 - j / 4) + pe[21 + i] * (j / 4)
            torch.testing.assert_close(out[20 + 4 * i + j], want)
    step = pe[76] - pe[75]
    for k in range(4):
        torch.testing.assert_close(out[244 + k], pe[76] + k * step / 4)


def test_stretch_other_sizes_and_too_short():
    assert stretch_positions(ramp(30, 4)).shape == (4 * 30 - 3 * 20, 4)
    assert stretch_positions(ramp(10, 4), keep=2, ratio=2).shape == (2 * 10 - 2, 4)
    with pytest.raises(ExplorerError):
        stretch_positions(ramp(21, 4))


def test_stretch_to_long_context_on_a_model():
    from explorer.models.architecture import ClipArchitecture
    from explorer.models.methods.clip import ClipMethod

    arch = ClipArchitecture(embed_dim=32, image_size=32, patch_size=16, vision_width=64, vision_layers=1,
                            vision_heads=1, vision_mlp_ratio=4.0, context_length=77, vocab_size=1000,
                            text_width=64, text_layers=1, text_heads=1, text_mlp_ratio=4.0)
    model = ClipMethod(arch)
    original = model.positional_embedding.detach().clone()
    model.stretch_to_long_context()
    assert model.context_length == 248 and model.arch.context_length == 248
    assert torch.equal(model.positional_embedding.detach(), stretch_positions(original))
    ids = torch.zeros(1, 248, dtype=torch.long)
    ids[0, 0], ids[0, 1:247], ids[0, 247] = 998, 5, 999
    with torch.no_grad():
        assert model.encode_text(ids).eot.shape == (1, 32)


def test_merge_longclip_tables():
    gen = torch.Generator().manual_seed(1)
    pe, pe_res = torch.randn(248, 8, generator=gen), torch.randn(248, 8, generator=gen)
    merged = merge_longclip_tables(pe, pe_res)
    assert merged.shape == (248, 8)
    assert torch.equal(merged[:20], pe[:20]) and torch.equal(merged[20:], pe_res[20:])
    assert torch.equal(merged, torch.cat([pe[:20], pe_res[20:]]))
    with pytest.raises(ExplorerError):
        merge_longclip_tables(pe, pe_res[:77])


# ---- tokenizer --------------------------------------------------------------------------------

WORDS = ["cat", "dog", "red", "blue", "tree", "house", "car", "sky"]


def one_token_words(n: int) -> list[str]:
    return [WORDS[i % len(WORDS)] for i in range(n)]


def test_words_are_single_tokens():
    for word in WORDS:
        assert count_tokens(word) == 3, word  # SOT + word + EOT


def test_short_text_fits():
    batch = tokenize(["a photo of a cat"], 77)
    n = count_tokens("a photo of a cat")
    assert batch.ids.shape == (1, 77) and batch.ids.dtype == torch.long
    assert batch.n_tokens == [n] and batch.n_cut == [0] and not batch.any_cut
    row = batch.ids[0]
    assert row[0] == SOT_ID and row[n - 1] == EOT_ID
    assert (row[n:] == 0).all() and (row[1:n - 1] > 0).all() and (row[1:n - 1] < SOT_ID).all()
    fit = budget("a photo of a cat", 77)
    assert fit.fits and fit.cut_at_char is None and fit.n_cut == 0 and fit.n_tokens == n


def test_long_text_is_cut_with_eot_last():
    words = one_token_words(100)
    text = " ".join(words)
    batch = tokenize([text, "a dog"], 77)
    row = batch.ids[0]
    assert batch.n_tokens == [102, count_tokens("a dog")]
    assert batch.n_cut == [25, 0] and batch.any_cut
    assert row[0] == SOT_ID and row[76] == EOT_ID
    assert (row != 0).all(), "a cut row is full"
    assert (row[1:76] != EOT_ID).all()
    # the 75 kept ids are exactly the first 75 words
    expected = tokenize([" ".join(words[:75])], 77).ids[0]
    assert torch.equal(row, expected)
    # the same text at Long-CLIP's 248 tokens fits
    long = tokenize([text], 248)
    assert long.n_cut == [0] and long.ids[0, 101] == EOT_ID and (long.ids[0, 102:] == 0).all()


@pytest.mark.parametrize("n_words, n_cut", [(74, 0), (75, 0), (76, 1), (90, 15)])
def test_boundary(n_words, n_cut):
    text = " ".join(one_token_words(n_words))
    batch = tokenize([text], 77)
    assert batch.n_cut == [n_cut]
    assert batch.ids[0, 0] == SOT_ID and batch.ids[0, min(n_words + 1, 76)] == EOT_ID
    fit = budget(text, 77)
    assert fit.n_tokens == count_tokens(text) == n_words + 2
    assert fit.n_cut == n_cut and fit.fits == (n_cut == 0)
    if n_cut:
        assert fit.cut_at_char == len(" ".join(one_token_words(75))) + 1  # start of word 76
    else:
        assert fit.cut_at_char is None


def test_budget_points_at_first_word_that_does_not_fit():
    # 74 one-token words, then a word of several tokens that straddles the limit
    head = " ".join(one_token_words(74))
    long_word = "antidisestablishmentarianism"
    assert count_tokens(long_word) > 3
    text = f"{head}  {long_word}\nand more words after it."
    fit = budget(text, 77)
    assert fit.cut_at_char == text.index(long_word)
    assert text[fit.cut_at_char:].startswith(long_word)
    assert fit.n_tokens == count_tokens(text)
    assert fit.n_cut == tokenize([text], 77).n_cut[0] == fit.n_tokens - 77
    # what is kept before the cut fits, what includes the cut word does not
    assert count_tokens(text[:fit.cut_at_char]) <= 77
    assert count_tokens(text[:fit.cut_at_char + len(long_word)]) > 77


def test_budget_count_matches_on_punctuated_text():
    text = ("A red-brick house stands by the lake. Its roof, covered in moss, slopes gently; two chimneys "
            "(one broken) rise above it! In front: a garden with roses, tulips & daisies... "
            "\"Welcome\", says a sign. ") * 6
    for limit in (77, 248):
        fit = budget(text, limit)
        assert fit.n_tokens == count_tokens(text)
        assert fit.n_cut == tokenize([text], limit).n_cut[0]
        assert fit.fits == (fit.n_tokens <= limit)
        if not fit.fits:
            cut = fit.cut_at_char
            assert cut > 0 and not text[cut].isspace() and text[cut - 1].isspace()
            assert count_tokens(text[:cut]) <= limit < count_tokens(text[:text.find(" ", cut)])


def test_word_counts_are_remembered_for_short_words_only():
    """Captions repeat their words, so their counts are cached; a long run of characters (a visitor can type
    one) is counted the same but not kept, so the cache stays a few MB at most."""
    from explorer.models.tokenizer import CACHED_WORD_CHARS, CLIP_TOKENS, TokenCounter, _clip_word_tokens

    long_word = "x" * (CACHED_WORD_CHARS + 1)
    CLIP_TOKENS.count("warm")
    before = _clip_word_tokens.cache_info().currsize
    assert CLIP_TOKENS.word_tokens(long_word) == TokenCounter().word_tokens(long_word)
    assert _clip_word_tokens.cache_info().currsize == before
    CLIP_TOKENS.word_tokens("qzxv-never-counted-before")
    assert _clip_word_tokens.cache_info().currsize == before + 1
