"""CAFT on a tiny model built here: hierarchy, CAFT++ score, AttnPool maps and zero slot, losses, files."""

from __future__ import annotations

import math

import pytest
import torch

import explorer
from explorer.models.batch import example_batch
from explorer.models.io.loading import check, save_method, save_released
from explorer.models.methods import get_method
from explorer.models.methods.caft import CaftImageFeatures, CaftMethod, CaftTextFeatures, ResidualAdapter
from explorer.core.errors import ExplorerError

D = 32  # the tiny example's embedding width
CAPTION_6 = "A red cube. A blue ball. A green cone. A grey floor. A white wall. A small lamp."


@pytest.fixture(scope="module")
def model():
    return CaftMethod.example("tiny", seed=0).eval()


def pixels(n=2, seed=1):
    return torch.randn(n, 3, 64, 64, generator=torch.Generator().manual_seed(seed))


def identity_pool(model, c_qk: float) -> CaftMethod:
    """AttnPool with q = c x, k = c x, v = x, out = identity, LayerNorms plain: every weight known by hand."""
    with torch.no_grad():
        attn = model.visual_proj.attn
        eye = torch.eye(D)
        attn.in_proj_weight.copy_(torch.cat([c_qk * eye, c_qk * eye, eye]))
        attn.in_proj_bias.zero_()
        attn.out_proj.weight.copy_(eye)
        attn.out_proj.bias.zero_()
        for ln in (model.visual_proj.ln_q, model.visual_proj.ln_k, model.visual_proj.ln_v):
            ln.weight.fill_(1.0)
            ln.bias.zero_()
    return model


def crafted_image(fine: torch.Tensor, cls: torch.Tensor | None = None) -> CaftImageFeatures:
    """Features with the given fine tokens [B, F, d]; a 4 x 4 grid, fine token j <- patches 2j, 2j + 1."""
    b, f, _ = fine.shape
    assign = torch.zeros(f, 16)
    for j in range(f):
        assign[j, 2 * j] = assign[j, 2 * j + 1] = 0.5
    return CaftImageFeatures(cls=torch.randn(b, D) if cls is None else cls, patches=torch.randn(b, 16, D),
                             grid_hw=(4, 4), fine=fine, assignments=(assign.expand(b, f, 16),))


def crafted_text(sub: torch.Tensor) -> CaftTextFeatures:
    m = sub.shape[0]
    return CaftTextFeatures(eot=torch.randn(m, D), tokens=torch.randn(m, 3, D), mask=torch.ones(m, 3, dtype=bool),
                            sub=sub)


ALTERNATING = torch.tensor([1.0, -1.0] * (D // 2))  # mean 0, variance 1: LayerNorm leaves it (almost) as is
PAIRS = torch.tensor([1.0, 1.0, -1.0, -1.0] * (D // 4))


# ---- the registry and the sizes -----------------------------------------------------------------


def test_registered_and_sized_like_the_paper():
    assert get_method("caft") is CaftMethod and CaftMethod.title == "CAFT"
    with torch.device("meta"):
        base = CaftMethod.example("base")
    config = base.config()
    assert config["architecture"]["text_layers"] == 8 and config["whole_layers"] == 4  # L1 = 8, L2 = 4
    assert base.context_length == 77 and base.n_chunks == 4 and config["architecture"]["embed_dim"] == 512
    assert config["stages"][0][0] == 64 and [n for n, _ in config["stages"]] == [64, 32, 16]
    assert config["architecture"]["quick_gelu"] is False and base.pool_heads == 8 and base.alpha == 0.3
    assert (base.arch.image_size // base.arch.patch_size) ** 2 == 196


# ---- text ---------------------------------------------------------------------------------------


def test_long_captions_are_chunked_balanced_and_empty_chunks_masked(model):
    assert model.long_caption_chunks([CAPTION_6, "A cat. A dog."]) == [
        ["A red cube. A blue ball.", "A green cone. A grey floor.", "A white wall.", "A small lamp."],
        ["A cat.", "A dog.", "", ""]]
    with torch.no_grad():
        whole, parts, mask = model.encode_long_captions([CAPTION_6, "A cat. A dog."])
        assert whole.shape == (2, D) and parts.shape == (2, 4, D)
        assert mask.tolist() == [[True] * 4, [True, True, False, False]]
        assert torch.all(parts[1, 2:] == 0)
        # each part is the chunk's own sub-caption embedding
        _, sub = model.sub_caption_embeddings(model.tokenize(["A green cone. A grey floor.", "A dog."]).ids)
        torch.testing.assert_close(parts[0, 1], sub[0])
        torch.testing.assert_close(parts[1, 1], sub[1])
        # what sits in a masked slot cannot change the whole-caption embedding
        noisy = parts.clone()
        noisy[~mask] = 100 * torch.randn(int((~mask).sum()), D)
        torch.testing.assert_close(model.whole_caption(noisy, mask), whole)
        # ... but a real chunk does
        noisy = parts.clone()
        noisy[1, 1] += 1.0
        assert not torch.allclose(model.whole_caption(noisy, mask)[1], whole[1])


def test_an_id_row_is_a_one_chunk_caption(model):
    ids = model.tokenize(["A small red cube sits on the left."]).ids
    for mode in (torch.no_grad, torch.inference_mode):  # the second takes PyTorch's fast attention path
        with mode():
            text = model.encode_text(ids)
            whole, parts, mask = model.encode_long_captions(["A small red cube sits on the left."])
        # cut after the end token (start, 9 tokens, end), not padded to the 77-token context
        assert isinstance(text, CaftTextFeatures) and text.tokens.shape == (1, 11, D)
        torch.testing.assert_close(text.eot, whole, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(text.sub, parts[:, 0])
        assert mask.tolist() == [[True, False, False, False]]


def test_residual_adapter_formula():
    adapter = ResidualAdapter(4, 2, ratio=0.2)
    with torch.no_grad():
        adapter.fc1.weight.copy_(torch.tensor([[1.0, 0, 0, 0], [0, -1.0, 0, 0]]))
        adapter.fc2.weight.copy_(torch.tensor([[1.0, 0], [0, 1.0], [1.0, 1.0], [0, 0]]))
    x = torch.tensor([[2.0, 3.0, -1.0, 5.0]])
    hidden = torch.tensor([2.0, 0.0])  # ReLU(2), ReLU(-3)
    expected = 0.2 * torch.tensor([hidden[0], hidden[1], hidden[0] + hidden[1], 0.0]) + 0.8 * x
    torch.testing.assert_close(adapter(x), expected)


# ---- vision -------------------------------------------------------------------------------------


def test_fine_to_coarse_levels(model):
    with torch.no_grad():
        image = model.encode_image(pixels(2))
    assert image.cls.shape == (2, D) and image.patches.shape == (2, 16, D) and image.fine.shape == (2, 8, D)
    assert [tuple(a.shape) for a in image.assignments] == [(2, 8, 16), (2, 4, 8), (2, 2, 4)]
    for a in image.assignments:
        torch.testing.assert_close(a.sum(dim=-1), torch.ones(a.shape[:2]))
    first = image[1]  # indexing keeps every level
    assert isinstance(first, CaftImageFeatures) and torch.equal(first.fine[0], image.fine[1])
    assert torch.equal(first.fine_assignment[0], image.fine_assignment[1])


# ---- AttnPool: zero slot and maps ---------------------------------------------------------------


def test_zero_slot_takes_the_mass_of_an_unrelated_query():
    model = identity_pool(CaftMethod.example("tiny", seed=0).eval(), c_qk=2.0)
    fine = ALTERNATING.expand(1, 8, D)  # eight identical fine tokens u
    image = crafted_image(fine)
    text = crafted_text(torch.stack([-ALTERNATING, ALTERNATING]))  # unrelated (-u), related (+u)
    # per head (4 heads of 8): logit = c^2 <LN(q)_h, LN(u)_h> / sqrt(8) = -+ 4 * 8 / sqrt(8); the zero slot's is 0
    logit = 4 * 8 / math.sqrt(8)
    expected = torch.tensor([1 / (1 + 8 * math.exp(-logit)), 1 / (1 + 8 * math.exp(logit))])
    with torch.no_grad():
        zero = model.zero_slot_weight(image, text)
        maps = model.sentence_maps(image, text, "attention-pool")
    torch.testing.assert_close(zero, expected, atol=1e-4, rtol=1e-3)
    assert zero[0] > 0.999 and zero[1] < 1e-4
    # the unrelated sentence draws a flat, empty map; each map's mass is 1 - zero slot
    assert maps[0].abs().max() < 1e-4
    torch.testing.assert_close(maps.sum(dim=(1, 2)), 1 - zero, atol=1e-5, rtol=1e-5)


def test_maps_are_pool_weights_carried_through_the_grouping(model):
    fine = torch.randn(1, 8, D, generator=torch.Generator().manual_seed(2))
    image = crafted_image(fine)
    text = crafted_text(torch.randn(3, D, generator=torch.Generator().manual_seed(3)))
    with torch.no_grad():
        weights = model.attention_weights(image, text)  # [3, 9]
        maps = model.sentence_maps(image, text, "attention-pool")
        heads = torch.stack([model.sentence_maps(image, text, f"attention-pool/head-{k}") for k in range(4)])
    assert maps.shape == (3, 4, 4)
    # patch 2j and 2j + 1 each get half of fine token j's weight (the zero slot is dropped)
    expected = (weights[:, :-1] / 2).repeat_interleave(2, dim=1).reshape(3, 4, 4)
    torch.testing.assert_close(maps, expected)
    torch.testing.assert_close(heads.mean(dim=0), maps)
    assert not torch.allclose(heads[0], heads[1])
    assert model.map_kinds == ("generic", "attention-pool", *[f"attention-pool/head-{k}" for k in range(4)],
                               "gradcam", "legrad", "clearclip", "naclip")


def test_native_maps_on_a_real_image(model):
    with torch.no_grad():
        image = model.encode_image(pixels(1))
        text = model.encode_text(model.tokenize(["A red cube.", "A blue ball.", "The floor is grey."]).ids)
        maps = model.sentence_maps(image, text, "attention-pool")
        heads = torch.stack([model.sentence_maps(image, text, f"attention-pool/head-{k}") for k in range(4)])
        zero = model.zero_slot_weight(image, text)
    assert maps.shape == (3, 4, 4) and zero.shape == (3,)
    torch.testing.assert_close(heads.mean(dim=0), maps)
    torch.testing.assert_close(maps.sum(dim=(1, 2)) + zero, torch.ones(3))
    with pytest.raises(ExplorerError, match="no map kind"):
        model.sentence_maps(image, text, "attention-pool/head-4")


# ---- CAFT++ -------------------------------------------------------------------------------------


def test_caft_plus_plus_is_0_7_whole_plus_0_3_parts():
    model = identity_pool(CaftMethod.example("tiny", seed=0).eval(), c_qk=0.0)
    g = torch.Generator().manual_seed(4)
    fine = torch.stack([ALTERNATING.expand(8, D), PAIRS.expand(8, D)])  # image i: identical fine tokens u_i
    cls = torch.randn(2, D, generator=g)
    image = crafted_image(fine, cls)
    whole = torch.randn(3, D, generator=g)
    parts = torch.randn(3, 4, D, generator=g)
    mask = torch.tensor([[True, True, True, True], [True, True, False, False], [True, False, False, False]])
    parts[~mask] = ALTERNATING  # a masked part that would score cos = 1 with image 0 if it counted
    cos = torch.nn.functional.cosine_similarity
    # q = k = 0: every head spreads 1/9 over the 8 tokens and the zero slot, so AttnPool(t, u_i...) =
    # (8/9) LN(u_i) = (8/9) u_i in every head, and cos(pooled, t) = cos(u_i, t)
    expected = torch.zeros(2, 3)
    for i in range(2):
        for j in range(3):
            part = sum(cos(fine[i, 0], parts[j, k], dim=0) for k in range(4) if mask[j, k])
            expected[i, j] = 0.7 * cos(cls[i], whole[j], dim=0) + 0.3 * part
    with torch.no_grad():
        got = model.similarity_from_parts(image, whole, parts, mask)
        only_whole = model.similarity_from_parts(image, whole, parts, mask, alpha=0.0)
        only_parts = model.similarity_from_parts(image, whole, parts, mask, alpha=1.0)
    torch.testing.assert_close(got, expected, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(0.7 * only_whole + 0.3 * only_parts, got, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(only_whole, torch.stack([cos(cls[i][None], whole, dim=1) for i in range(2)]))


def test_similarity_long_and_plain_similarity(model):
    captions = [CAPTION_6, "A cat. A dog."]
    with torch.no_grad():
        image = model.encode_image(pixels(3))
        whole, parts, mask = model.encode_long_captions(captions)
        long = model.similarity_long(image, captions)
        plain = model.similarity_long(image, captions, alpha=0.0)
        text = model.encode_text(model.tokenize(captions).ids)
        assert model.similarity(image, text).shape == (3, 2)
    torch.testing.assert_close(long, model.similarity_from_parts(image, whole, parts, mask))
    cls, w = torch.nn.functional.normalize(image.cls, dim=-1), torch.nn.functional.normalize(whole, dim=-1)
    torch.testing.assert_close(plain, cls @ w.T)
    assert not torch.allclose(long, plain)


# ---- training -----------------------------------------------------------------------------------


def test_training_sub_captions_are_random_chunks_plus_the_short_caption(model):
    batch = example_batch(64, 4)
    batch.extras["chunk_generator"] = torch.Generator().manual_seed(7)
    rows, k = model.training_sub_captions(batch)
    batch.extras["chunk_generator"] = torch.Generator().manual_seed(7)
    again, _ = model.training_sub_captions(batch)
    assert k == 5 and rows == again
    for row, sentences, short in zip(rows, batch.sentences, batch.short_captions):
        assert len(row) == 5 and row[4] == short and all(row[:4])
        if len(sentences) >= 4:  # every sentence once, in order
            assert " ".join(row[:4]) == " ".join(sentences)
        else:  # the first chunks are the sentences, the rest resampled from them
            assert row[: len(sentences)] == sentences and set(row[len(sentences):4]) <= set(sentences)


def test_every_learnable_parameter_gets_gradient():
    model = CaftMethod.example("tiny", seed=0).train()
    batch = example_batch(64, 4)
    terms = model.losses(batch)
    assert set(terms) == {"part", "whole"} and all(t.ndim == 0 and torch.isfinite(t) for t in terms.values())
    sum(terms.values()).backward()
    silent = [name for name, p in model.named_parameters() if p.grad is None or not torch.any(p.grad != 0)]
    assert silent == []
    assert model.logit_bias.item() == -10.0 and model.whole_logit_bias.item() == -10.0
    assert math.isclose(model.whole_logit_scale.exp().item(), 1 / 0.07, rel_tol=1e-5)


# ---- files --------------------------------------------------------------------------------------


def _same(a: CaftMethod, b: CaftMethod):
    with torch.no_grad():
        ia, ib = a.encode_image(pixels(2)), b.encode_image(pixels(2))
        ids = a.tokenize(["A red cube.", "A blue ball sits on top."]).ids
        ta, tb = a.encode_text(ids), b.encode_text(ids)
        torch.testing.assert_close(a.similarity(ia, ta), b.similarity(ib, tb))
        torch.testing.assert_close(a.similarity_long(ia, [CAPTION_6]), b.similarity_long(ib, [CAPTION_6]))
        torch.testing.assert_close(a.sentence_maps(ia[0], ta, "attention-pool/head-1"),
                                   b.sentence_maps(ib[0], tb, "attention-pool/head-1"))


def test_round_trip_through_our_safetensors(model, tmp_path):
    keys = set(model.state_dict())
    for key in ("visual_proj.attn.in_proj_weight", "visual_proj.ln_q.weight", "logit_scale", "logit_bias",
                "whole_logit_scale", "whole_logit_bias", "text_whole.cls_token", "text_whole.positional_embedding",
                "text_whole.proj", "text_adapter.fc1.weight", "visual_group.stages.0.queries", "visual.proj",
                "text_projection", "positional_embedding"):
        assert key in keys, key
    path = save_method(model, tmp_path / "caft.safetensors")
    loaded = explorer.load(path, device="cpu")
    report = loaded.key_report
    assert report.ok and not report.ignored and report.format == "explorer (caft)"
    assert loaded.method_name == "caft" and loaded.method.config() == model.config()
    a, b = model.state_dict(), loaded.method.state_dict()
    assert set(a) == set(b) and all(torch.equal(a[k], b[k]) for k in a)
    _same(model, loaded.method)
    assert check(path).report.ok


def test_round_trip_through_a_plain_state_dict(model, tmp_path):
    path = save_released(model, tmp_path / "caft.pt")
    loaded = explorer.load(path, device="cpu", options=model.release_load_options())
    assert loaded.key_report.ok and loaded.key_report.format == "caft"
    assert loaded.method.config() == model.config()
    _same(model, loaded.method)
