"""GOAL / FAST-GOAL (explorer/models/methods/goal.py) and ClipBackbone.image_attention.

Expected values are worked out by hand (patch indices from the floor/ceil
rule, token positions from word counts) or computed along an independent
path (PyTorch's own attention, the public encoders, hooks in the test only).
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from PIL import Image

import explorer
from explorer.models.architecture import ClipArchitecture
from explorer.models.batch import TrainingBatch, example_batch
from explorer.models.io.loading import save_released
from explorer.models.methods.goal import (GoalImageFeatures, GoalMethod, box_patch_mask, sentence_token_span,
                                          span_weights)
from explorer.models.model import Model
from explorer.models.nn.losses import info_nce
from explorer.models.tokenizer import tokenize
from explorer.core.errors import ExplorerError

S, P = 64, 16  # the tiny example: 64 px input, 16 px patches, a 4 x 4 grid


def arch(vision_layers=1, vision_width=128, heads=2, context=248):
    return ClipArchitecture(embed_dim=32, image_size=S, patch_size=P, vision_width=vision_width,
                            vision_layers=vision_layers, vision_heads=heads, vision_mlp_ratio=4.0,
                            context_length=context, vocab_size=49408, text_width=64, text_layers=1, text_heads=1,
                            text_mlp_ratio=4.0)


def jitter(model, seed=0, scale=0.05):
    """Move every weight off its initial value (LayerNorms too), so transposes and mix-ups show."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for param in model.parameters():
            param.add_(torch.randn(param.shape, generator=gen) * scale)
    return model


@pytest.fixture(scope="module")
def tiny():
    return jitter(GoalMethod.example("tiny")).eval()


def pixels(n=1, seed=1):
    return torch.randn(n, 3, S, S, generator=torch.Generator().manual_seed(seed))


def pre_ln_tokens(model, x):
    """The vision tower by hand: patch conv, class token, positions, ln_pre, blocks (no ln_post)."""
    v = model.visual
    patches = v.conv1(x).flatten(2).transpose(1, 2)
    cls = v.class_embedding.expand(x.shape[0], 1, -1)
    tokens = v.ln_pre(torch.cat([cls, patches], dim=1) + v.positional_embedding)
    for block in v.transformer.resblocks:
        tokens = block(tokens)
    return tokens


# ---- image_attention ------------------------------------------------------------------------------


def test_image_attention_matches_a_hand_computation_on_one_layer():
    torch.manual_seed(0)
    model = jitter(GoalMethod(arch(vision_layers=1, vision_width=128, heads=2)), seed=3).eval()
    x = pixels(2)
    with torch.no_grad():
        weights = model.image_attention(x)
        v = model.visual
        tokens = v.ln_pre(torch.cat([v.class_embedding.expand(2, 1, -1), v.conv1(x).flatten(2).transpose(1, 2)], 1)
                          + v.positional_embedding)
        block = v.transformer.resblocks[0]
        h = block.ln_1(tokens)
        w, b = block.attn.in_proj_weight, block.attn.in_proj_bias
        q = (h @ w[:128].T + b[:128]).reshape(2, 17, 2, 64).transpose(1, 2)
        k = (h @ w[128:256].T + b[128:256]).reshape(2, 17, 2, 64).transpose(1, 2)
        by_hand = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(64), dim=-1)
        # scaled_dot_product_attention with the identity as values returns the weights themselves
        sdpa = F.scaled_dot_product_attention(q, k, torch.eye(17).expand(2, 2, 17, 17))
    assert weights.shape == (2, 2, 17, 17)  # [B, heads, 1 + P, 1 + P]
    torch.testing.assert_close(weights.sum(dim=-1), torch.ones(2, 2, 17))
    torch.testing.assert_close(weights, by_hand, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(weights, sdpa, rtol=1e-5, atol=1e-6)
    assert not torch.allclose(weights[:, 0], weights[:, 1]), "the two heads must differ"


def test_image_attention_runs_the_earlier_blocks_and_leaves_the_forward_alone():
    model = jitter(GoalMethod(arch(vision_layers=3, vision_width=128, heads=2)), seed=4).eval()
    seen = {}
    last = model.visual.transformer.resblocks[-1]
    handle = last.register_forward_pre_hook(lambda module, args: seen.setdefault("x", args[0].detach()))
    x = pixels(1, seed=5)
    with torch.no_grad():
        before = model.encode_image(x).cls
        h = last.ln_1(seen["x"])
        _, reference = last.attn(h, h, h, need_weights=True, average_attn_weights=False)  # PyTorch's own
        weights = model.image_attention(x)
        after = model.encode_image(x).cls
    handle.remove()
    torch.testing.assert_close(weights, reference, rtol=1e-5, atol=1e-6)
    assert torch.equal(before, after)
    features = model.encode_image(x)  # the features carry the class token's row over the patches
    torch.testing.assert_close(features.cls_attention, weights[:, :, 0, 1:])


def test_self_attention_maps_are_the_class_rows_on_the_grid(tiny):
    x = pixels(1, seed=2)
    with torch.no_grad():
        maps = tiny.self_attention_maps(x)
        full = tiny.image_attention(x)
    assert maps.shape == (1, 4, 4)  # one head in the tiny example
    torch.testing.assert_close(maps.flatten(1), full[0, :, 0, 1:])
    assert float(maps.sum()) < 1.0  # the class token keeps some attention for itself
    with pytest.raises(ExplorerError):
        tiny.self_attention_maps(pixels(2))


# ---- TSL box pooling --------------------------------------------------------------------------------


def grid_mask(cells, rows=4, cols=4):
    mask = torch.zeros(rows, cols, dtype=torch.bool)
    for r, c in cells:
        mask[r, c] = True
    return mask


def test_box_mask_follows_the_floor_ceil_rule(tiny):
    boxes = torch.tensor([
        [0.10, 0.30, 0.55, 0.50],  # px 6.4,19.2,35.2,32 -> cols 0..2 (floor 0, ceil 2.2=3), rows 1 (floor 1, ceil 2)
        [0.50, 0.50, 1.00, 1.00],  # on patch boundaries: cols 2..3, rows 2..3
        [0.30, 0.30, 0.31, 0.31],  # smaller than a patch: the one patch (1, 1)
        [0.25, 0.25, 0.75, 0.75],  # the centre box: rows and cols 1..2
    ])
    masks = tiny.box_masks(boxes)
    assert masks.shape == (4, 4, 4) and masks.dtype == torch.bool
    assert torch.equal(masks[0], grid_mask([(1, 0), (1, 1), (1, 2)]))
    assert torch.equal(masks[1], grid_mask([(2, 2), (2, 3), (3, 2), (3, 3)]))
    assert torch.equal(masks[2], grid_mask([(1, 1)]))
    assert torch.equal(masks[3], grid_mask([(1, 1), (1, 2), (2, 1), (2, 2)]))
    # float32 boxes carry noise: 9/14 and 5/7 of 224 px are 8.99999988 and 10.00000024 patches of 16 px;
    # they are patch edges 9 and 10, so the box is the single patch (9, 9), not rows/cols 8..10
    unit = torch.tensor([[9 / 14, 9 / 14, 5 / 7, 5 / 7]], dtype=torch.float32)
    noisy = box_patch_mask(unit.double() * 224, 16, (14, 14))
    assert noisy[0].nonzero().tolist() == [[9, 9]]


def test_box_pooled_embedding_pools_exactly_those_patches(tiny):
    x = pixels(2, seed=6)
    boxes = torch.tensor([[0.10, 0.30, 0.55, 0.50], [0.50, 0.50, 1.00, 1.00]])
    with torch.no_grad():
        pooled = tiny.box_pooled_embedding(x, boxes)
        tokens = pre_ln_tokens(tiny, x)[:, 1:]  # [2, 16, w]; patch (r, c) is index 4 r + c
        first = tokens[0, [4, 5, 6]].mean(dim=0)
        second = tokens[1, [10, 11, 14, 15]].mean(dim=0)
        by_hand = tiny.visual.ln_post(torch.stack([first, second])) @ tiny.visual.proj
    assert pooled.shape == (2, 32)
    torch.testing.assert_close(pooled, by_hand, rtol=1e-5, atol=1e-5)


def test_under_the_attention_pool_box_and_region_embeddings_live_where_the_global_one_does():
    """TSL's box and region pools are compared with sentences as the global embedding is: under an attention
    pool they go through the pool's values too. A pool whose values negate the patches negates them."""
    from pool_fixtures import negating_pool_twin

    plain = jitter(GoalMethod(arch())).eval()
    pooled = negating_pool_twin(plain)
    with torch.no_grad():
        x, boxes = pixels(2, seed=6), torch.tensor([[0.10, 0.30, 0.55, 0.50], [0.50, 0.50, 1.00, 1.00]])
        torch.testing.assert_close(pooled.box_pooled_embedding(x, boxes), -plain.box_pooled_embedding(x, boxes))
        torch.testing.assert_close(pooled.encode_image(x).region_embeddings, -plain.encode_image(x).region_embeddings)


def test_spatial_region_masks_are_the_quadrants_and_the_centre(tiny):
    masks = tiny.spatial_region_masks()
    expected = [grid_mask([(r, c) for r in rows for c in cols]) for rows, cols in [
        ((0, 1), (0, 1)), ((0, 1), (2, 3)), ((2, 3), (0, 1)), ((2, 3), (2, 3)), ((1, 2), (1, 2))]]
    assert torch.equal(masks, torch.stack(expected))


# ---- the sentence's token span inside its caption ---------------------------------------------------

CAPTION = "A red cube sits on the left. A blue ball sits at the top. A green cone sits in a corner."
# words (one BPE token each): "a red cube sits on the left ." = 8, so sentence 2 starts at 1 + 8 = 9


def test_sentence_span_in_a_crafted_caption():
    span = sentence_token_span(CAPTION, "A blue ball sits at the top.", 248)
    assert (span.start, span.full_stop, span.stop, span.n_cut) == (9, 17, 17, 0)
    ids = tokenize([CAPTION], 248).ids[0]
    assert ids[9:17].tolist() == tokenize(["a blue ball sits at the top."], 10).ids[0, 1:9].tolist()
    first = sentence_token_span(CAPTION, "A red cube sits on the left.", 248)
    assert (first.start, first.stop) == (1, 9)
    last = sentence_token_span(CAPTION, "A green cone sits in a corner.", 248)
    assert (last.start, last.stop) == (17, 25)


def test_sentence_span_past_the_context():
    # context 12: positions 1..10 hold words, 11 is EOT -> the second sentence keeps 9, 10
    cut = sentence_token_span(CAPTION, "A blue ball sits at the top.", 12)
    assert (cut.start, cut.stop, cut.n_kept, cut.n_cut, cut.wholly_cut) == (9, 11, 2, 6, False)
    gone = sentence_token_span(CAPTION, "A green cone sits in a corner.", 12)
    assert gone.wholly_cut and gone.n_cut == 8
    weights = span_weights([cut, gone], 12)
    assert torch.equal(weights[0], torch.tensor([0.0] * 9 + [0.5, 0.5, 0.0]))
    assert torch.equal(weights[1], torch.zeros(12))


def test_sentence_span_first_occurrence_and_missing_sentence():
    caption = "It is red. A cat. It is red."
    assert sentence_token_span(caption, "It is red.", 248).start == 1
    with pytest.raises(ExplorerError, match="not part of its caption"):
        sentence_token_span(CAPTION, "A purple star sits on the right.", 248)
    with pytest.raises(ExplorerError):
        sentence_token_span(CAPTION, "   ", 248)


# ---- losses -----------------------------------------------------------------------------------------


def test_every_parameter_gets_a_gradient():
    model = GoalMethod.example("tiny")
    batch = example_batch(S, 4)
    terms = model.losses(batch)
    assert set(terms) == {"global", "local", "tsl_image", "tsl_text"}
    assert all(torch.isfinite(t) and t.dim() == 0 for t in terms.values())
    sum(terms.values()).backward()
    dead = [name for name, p in model.named_parameters() if p.grad is None or not bool(p.grad.abs().sum() > 0)]
    assert not dead, f"no gradient reaches {dead}"


def test_loss_terms_match_the_formulas(tiny):
    batch = example_batch(S, 4, seed=3)
    n = len(batch)
    captured = {}
    with torch.no_grad():
        terms = tiny.losses(batch)
        scale = tiny.logit_scale.exp()
        image = tiny.encode_image(batch.pixels).cls
        local_image = tiny.encode_image(batch.local_pixels).cls
        captions = tokenize(batch.captions, 248).ids
        handle = tiny.transformer.register_forward_hook(lambda m, a, out: captured.setdefault("states", out))
        text = tiny.encode_text(captions).eot
        handle.remove()
        local_text = tiny.encode_text(tokenize(batch.local_sentences, 248).ids).eot

        def logits(a, b):
            return scale * F.normalize(a, dim=-1) @ F.normalize(b, dim=-1).T

        pooled_image = tiny.box_pooled_embedding(batch.pixels, batch.local_boxes)
        tsl_image = ((F.cosine_similarity(pooled_image, local_image) - 1) ** 2).mean()
        pooled_text = []
        for row, (caption, sentence) in enumerate(zip(batch.captions, batch.local_sentences)):
            span = sentence_token_span(caption, sentence, 248)  # the last sentence: its words, by position
            assert span.n_cut == 0 and span.n_tokens == len(tokenize([sentence], 77).ids[0].nonzero()) - 2
            mean = captured["states"][row, span.start:span.stop].mean(dim=0)
            pooled_text.append(tiny.ln_final(mean) @ tiny.text_projection)
        tsl_text = ((F.cosine_similarity(torch.stack(pooled_text), local_text) - 1) ** 2).mean()
    torch.testing.assert_close(terms["global"], info_nce(logits(image, text)), rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(terms["local"], 0.5 * info_nce(logits(local_image, local_text)), rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(terms["tsl_image"], tsl_image, rtol=1e-4, atol=1e-6)
    torch.testing.assert_close(terms["tsl_text"], tsl_text, rtol=1e-4, atol=1e-6)

    # the paper's Eq. (14) form: the n x n cosine matrix against the identity
    matrix = GoalMethod(tiny.arch, tsl_form="matrix")
    matrix.load_state_dict(tiny.state_dict())
    with torch.no_grad():
        paper = matrix.losses(batch)
        cos = F.normalize(pooled_image, dim=-1) @ F.normalize(local_image, dim=-1).T
    torch.testing.assert_close(paper["tsl_image"], ((cos - torch.eye(n)) ** 2).mean(), rtol=1e-4, atol=1e-6)
    torch.testing.assert_close(paper["global"], terms["global"])
    with pytest.raises(ExplorerError):
        GoalMethod(tiny.arch, tsl_form="rows")


def test_a_sentence_past_the_context_leaves_the_text_tsl():
    model = GoalMethod.example("tiny")
    batch = example_batch(S, 2, seed=4)
    filler = " ".join(["A grey wall stands behind everything in this very plain scene."] * 30)  # >> 248 tokens
    batch.captions = [f"{filler} {s}" for s in batch.local_sentences]
    with torch.no_grad():
        terms = model.losses(batch)
    assert float(terms["tsl_text"]) == 0.0  # no pair keeps a token of its sentence
    assert all(torch.isfinite(t) for t in terms.values()) and float(terms["tsl_image"]) > 0
    with pytest.raises(ExplorerError, match="local_boxes"):
        model.losses(TrainingBatch(pixels=batch.pixels, captions=batch.captions, local_pixels=batch.local_pixels,
                                   local_sentences=batch.local_sentences))


# ---- native maps --------------------------------------------------------------------------------------


def test_native_map_kinds_and_shapes(tiny):
    assert tiny.map_kinds == ("generic", "self-attention", "tsl-box", "self-attention/head-0", "gradcam", "legrad",
                              "clearclip", "naclip")
    two_heads = GoalMethod(arch(vision_layers=1, vision_width=128, heads=2))
    assert two_heads.head_map_kinds == ("self-attention/head-0", "self-attention/head-1")
    x = pixels(1, seed=7)
    sentences = ["A red cube sits on the left.", "A blue ball.", "Sky."]
    with torch.no_grad():
        image = tiny.encode_image(x)
        text = tiny.encode_text(tokenize(sentences, 248).ids)
        maps = {kind: tiny.sentence_maps(image, text, kind) for kind in tiny.map_kinds
                if kind not in tiny.explainer_kinds}  # those read the tower: tests/test_explainers.py
        attention = tiny.self_attention_maps(x)
    assert isinstance(image, GoalImageFeatures)
    for kind, value in maps.items():
        assert value.shape == (3, 4, 4), kind
    # self-attention is image-level: the same map for every sentence, the head average of the class row
    assert torch.equal(maps["self-attention"][0], maps["self-attention"][2])
    torch.testing.assert_close(maps["self-attention"][0], attention.mean(dim=0))
    torch.testing.assert_close(maps["self-attention/head-0"][1], attention[0])
    # tsl-box: each sentence's map is one of the 5 region masks, the one whose pooled embedding fits best
    regions = tiny.spatial_region_masks()
    with torch.no_grad():
        boxes = torch.tensor([[0, 0, .5, .5], [.5, 0, 1, .5], [0, .5, .5, 1], [.5, .5, 1, 1], [.25, .25, .75, .75]])
        pooled = tiny.box_pooled_embedding(x.expand(5, -1, -1, -1), boxes)
        best = (F.normalize(text.eot, dim=-1) @ F.normalize(pooled, dim=-1).T).argmax(dim=1)
    for i in range(3):
        assert torch.equal(maps["tsl-box"][i], regions[best[i]].float())
    with pytest.raises(ExplorerError, match="offers"):
        tiny.sentence_maps(image, text, "self-attention/head-1")  # the tiny model has one head
    with pytest.raises(ExplorerError, match="GoalMethod.encode_image"):
        plain = GoalImageFeatures(cls=image.cls, patches=image.patches, grid_hw=image.grid_hw)
        tiny.sentence_maps(plain, text, "tsl-box")


def test_tsl_box_picks_the_planted_region(tiny):
    d = 32
    regions = torch.eye(5, d)[None]  # region j's embedding is the j-th basis vector
    eot = torch.zeros(3, d)
    eot[0, 4], eot[1, 1], eot[2, [2, 3]] = 1.0, 2.0, torch.tensor([0.3, 0.9])  # centre, TR, BR
    image = GoalImageFeatures(cls=torch.zeros(1, d), patches=torch.zeros(1, 16, d), grid_hw=(4, 4),
                              cls_attention=torch.zeros(1, 1, 16), region_embeddings=regions)
    text = explorer.TextFeatures(eot=eot, tokens=eot[:, None], mask=torch.ones(3, 1, dtype=torch.bool))
    maps = tiny.sentence_maps(image, text, "tsl-box")
    assert torch.equal(maps[0], grid_mask([(1, 1), (1, 2), (2, 1), (2, 2)]).float())
    assert torch.equal(maps[1], grid_mask([(0, 2), (0, 3), (1, 2), (1, 3)]).float())
    assert torch.equal(maps[2], grid_mask([(2, 2), (2, 3), (3, 2), (3, 3)]).float())


def test_features_index_and_move_with_their_extras(tiny):
    with torch.no_grad():
        features = tiny.encode_image(pixels(3, seed=8))
    second = features[1]
    assert second.cls_attention.shape == (1, 1, 16) and second.region_embeddings.shape == (1, 5, 32)
    assert torch.equal(second.region_embeddings[0], features.region_embeddings[1])
    assert features.to(torch.float64).cls_attention.dtype == torch.float64


def test_maps_through_the_public_model():
    model = Model(GoalMethod.example("tiny"), device="cpu")
    picture = Image.new("RGB", (80, 48), (200, 30, 30))
    for kind in ("self-attention", "tsl-box", "self-attention/head-0"):
        out = model.sentence_maps(picture, ["A red wall.", "Nothing else."], kind=kind)
        assert out.maps.shape == (2, 48, 80) and out.grid.shape == (2, 4, 4) and out.kind == kind


# ---- released layout round trip ---------------------------------------------------------------------------


def test_example_is_a_248_token_model():
    assert GoalMethod.example("tiny").context_length == 248
    assert GoalMethod.example("tiny").config()["tsl_form"] == "pair"


def test_goal_round_trip_through_the_released_layout(tmp_path, tiny):
    path = save_released(tiny, tmp_path / "goal-tiny.pth")
    stored = torch.load(path, weights_only=True)
    assert "text_model.encoder.layers.0.self_attn.q_proj.weight" in stored and "visual.proj" not in stored
    torch.testing.assert_close(stored["visual_projection.weight"], tiny.visual.proj.detach().T)
    loaded = explorer.load(path, device="cpu")
    report = loaded.key_report
    assert loaded.method_name == "goal" and report.format == "goal-hf"
    assert report.ok and not report.ignored, report.summary()
    assert loaded.context_length == 248
    a, b = tiny.state_dict(), loaded.method.state_dict()
    assert set(a) == set(b) and all(torch.equal(a[k], b[k]) for k in a)
    x = pixels(2, seed=9)
    ids = tokenize(["A red cube sits on the left.", CAPTION], 248).ids
    with torch.no_grad():
        first, second = tiny.encode_image(x), loaded.method.encode_image(x)
        for field in ("cls", "patches", "cls_attention", "region_embeddings"):
            assert torch.equal(getattr(first, field), getattr(second, field)), field
        assert torch.equal(tiny.encode_text(ids).eot, loaded.method.encode_text(ids).eot)
