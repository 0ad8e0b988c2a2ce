"""FLAIR: the text-conditioned pooling, its maps and zero slot, its sigmoid losses, its released layout.

The attention is recomputed by hand from the pooling's own weights
(LayerNorm -> in-projection -> per-head softmax over the patches plus a
zero key), and the zero slot is driven with a crafted in-projection, so a
map that keeps the zero slot, mixes up heads or renormalises is caught.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from PIL import Image

import explorer
from explorer.models.batch import TrainingBatch, example_batch
from explorer.models.features import ImageFeatures, TextFeatures
from explorer.models.io.loading import save_released
from explorer.models.methods.flair import FlairMethod
from explorer.models.nn.attention_pool import TextConditionedPool
from explorer.core.errors import ExplorerError

D, HEADS, GRID = 32, 8, (4, 4)  # the tiny example: d = 32, 8 pooling heads (head width 4), 4 x 4 patches
P = GRID[0] * GRID[1]


@pytest.fixture(scope="module")
def model() -> FlairMethod:
    return FlairMethod.example("tiny", seed=0).eval()


def features(patches: torch.Tensor, queries: torch.Tensor) -> tuple[ImageFeatures, TextFeatures]:
    """One image with the given patches [P, d]; one 'sentence' per query [M, d] (its EOT embedding)."""
    image = ImageFeatures(cls=patches.mean(0, keepdim=True), patches=patches[None], grid_hw=GRID)
    m = queries.shape[0]
    text = TextFeatures(eot=queries, tokens=queries[:, None].expand(m, 3, D).clone(),
                        mask=torch.ones(m, 3, dtype=torch.bool))
    return image, text


def hand_attention(pool: TextConditionedPool, queries: torch.Tensor, patches: torch.Tensor) -> torch.Tensor:
    """[heads, M, P + 1]: softmax(q_h . k_h / sqrt(d_h)) over the patches and a zero key (last)."""
    wq, wk, _ = pool.attn.in_proj_weight.chunk(3)
    bq, bk, _ = pool.attn.in_proj_bias.chunk(3)
    q = F.layer_norm(queries, (D,), pool.ln_q.weight, pool.ln_q.bias) @ wq.T + bq  # [M, d]
    k = F.layer_norm(patches, (D,), pool.ln_k.weight, pool.ln_k.bias) @ wk.T + bk  # [P, d]
    width = D // HEADS
    q, k = q.reshape(-1, HEADS, width).transpose(0, 1), k.reshape(-1, HEADS, width).transpose(0, 1)
    logits = q @ k.transpose(1, 2) / math.sqrt(width)  # [heads, M, P]
    logits = torch.cat([logits, torch.zeros(HEADS, logits.shape[1], 1)], dim=2)  # the zero key: logit 0
    return logits.softmax(dim=2)


# ---- the pooling and its maps -------------------------------------------------------------------


def test_pool_keeps_its_signature(model):
    pool = model.visual_proj
    pooled, weights = pool(torch.randn(2, 3, D), torch.randn(2, P, D))
    assert pooled.shape == (2, 3, D) and weights.shape == (2, 3, P + 1)
    _, per_head = pool(torch.randn(2, 3, D), torch.randn(2, P, D), average_heads=False)
    assert per_head.shape == (2, HEADS, 3, P + 1)


def test_attention_maps_by_hand(model):
    torch.manual_seed(1)
    patches, queries = torch.randn(P, D), torch.randn(3, D)
    image, text = features(patches, queries)
    expected = hand_attention(model.visual_proj, queries, patches).detach()  # [heads, M, P + 1]
    maps = model.sentence_maps(image, text, "attention-pool")
    assert maps.shape == (3, *GRID)
    torch.testing.assert_close(maps, expected.mean(0)[:, :-1].reshape(3, *GRID))  # zero slot dropped
    torch.testing.assert_close(model.zero_slot_weight(image, text), expected.mean(0)[:, -1])
    # not renormalised: each map holds what the zero slot did not take
    torch.testing.assert_close(maps.sum(dim=(1, 2)) + model.zero_slot_weight(image, text), torch.ones(3))
    for head in (0, 5):
        torch.testing.assert_close(model.sentence_maps(image, text, f"attention-pool/head-{head}"),
                                   expected[head, :, :-1].reshape(3, *GRID))


def test_head_maps_average_to_the_head_averaged_map(model):
    torch.manual_seed(2)
    image, text = features(torch.randn(P, D), torch.randn(4, D))
    heads = [k for k in model.map_kinds if k.startswith("attention-pool/head-")]
    assert heads == [f"attention-pool/head-{k}" for k in range(HEADS)]
    per_head = torch.stack([model.sentence_maps(image, text, k) for k in heads])
    assert per_head.shape == (HEADS, 4, *GRID)
    assert not torch.allclose(per_head[0], per_head[1]), "heads differ on random weights"
    torch.testing.assert_close(per_head.mean(0), model.sentence_maps(image, text, "attention-pool"))
    for bad in ("attention-pool/head-8", "attention-pool/head-x", "late-interaction"):
        with pytest.raises(ExplorerError, match="attention-pool/head-7"):
            model.sentence_maps(image, text, bad)


def crafted_pool(scale: float) -> TextConditionedPool:
    """q = scale * LN(query), k = LN(token): each head's logit is scale * <LN(q)_h, LN(k)_h> / 2."""
    pool = TextConditionedPool(D, HEADS)
    with torch.no_grad():
        pool.attn.in_proj_weight.copy_(torch.cat([scale * torch.eye(D), torch.eye(D), torch.eye(D)]))
        pool.attn.in_proj_bias.zero_()
    return pool


def test_unrelated_query_puts_its_mass_on_the_zero_slot(model):
    # every patch is x = (1, -1, 1, -1, ...), so LN(x) = x / sqrt(1 + eps) and each 4-wide head has |x_h|^2 = 4
    x = torch.tensor([1.0, -1.0] * (D // 2))
    scale, ln2 = 5.0, 1 / (1 + 1e-5)
    crafted = FlairMethod(model.arch).eval()
    crafted.load_state_dict(model.state_dict())
    crafted.visual_proj.load_state_dict(crafted_pool(scale).state_dict())
    image, text = features(x.expand(P, D).clone(), torch.stack([-x, x]))  # the opposite of x, then x itself
    logit = scale * 4 * ln2 / 2  # per head and patch: -logit for -x, +logit for x
    zero = crafted.zero_slot_weight(image, text)
    assert zero[0].item() == pytest.approx(1 / (1 + P * math.exp(-logit)), abs=1e-6)  # ~0.9993
    assert zero[1].item() == pytest.approx(1 / (1 + P * math.exp(logit)), abs=1e-6)  # ~3e-6
    maps = crafted.sentence_maps(image, text, "attention-pool")
    torch.testing.assert_close(maps[0], torch.full(GRID, math.exp(-logit) / (1 + P * math.exp(-logit))))
    torch.testing.assert_close(maps[1], torch.full(GRID, 1 / (P + math.exp(-logit))))


# ---- scores and losses --------------------------------------------------------------------------


def test_similarity_is_the_cosine_of_the_pooled_image_with_its_caption(model):
    torch.manual_seed(3)
    patches = torch.randn(2, P, D)
    image = ImageFeatures(cls=torch.randn(2, D), patches=patches, grid_hw=GRID)
    queries = torch.randn(3, D)
    text = TextFeatures(eot=queries, tokens=torch.zeros(3, 2, D), mask=torch.ones(3, 2, dtype=torch.bool))
    scores = model.similarity(image, text)
    assert scores.shape == (2, 3)
    pooled, _ = model.visual_proj(queries[None], patches[1:2])  # image 1 pooled by every caption
    torch.testing.assert_close(scores[1], F.cosine_similarity(pooled[0], queries, dim=-1))


def nll(z: float) -> float:
    return math.log1p(math.exp(-z))  # -log sigmoid(z)


def crafted_losses(model, monkeypatch, batch, eot, conditioned, cls):
    monkeypatch.setattr(model, "encode_image", lambda pixels: ImageFeatures(
        cls=cls, patches=torch.zeros(len(cls), P, D), grid_hw=GRID))
    seen = []

    def encode_captions(texts):
        seen.extend(texts)
        return TextFeatures(eot=eot, tokens=eot[:, None], mask=torch.ones(len(eot), 1, dtype=torch.bool))

    monkeypatch.setattr(model, "encode_captions", encode_captions)
    monkeypatch.setattr(model, "conditioned_scores", lambda image, text: conditioned)
    with torch.no_grad():
        model.logit_scale.fill_(math.log(2.0))
        model.logit_bias.fill_(-1.0)
    return model.losses(batch), seen


def test_sigmoid_losses_by_hand(monkeypatch):
    model = FlairMethod.example("tiny", seed=0)
    assert model.logit_scale.item() == pytest.approx(math.log(10)) and model.logit_bias.item() == -10
    batch = TrainingBatch(pixels=torch.zeros(2, 3, 64, 64), captions=["a cat.", "a dog."])
    conditioned = torch.tensor([[0.5, -0.5], [0.0, 1.0]])
    terms, seen = crafted_losses(model, monkeypatch, batch, eot=torch.stack([torch.eye(D)[0], -torch.eye(D)[1]]),
                                 conditioned=conditioned, cls=torch.eye(D)[:2])
    assert seen == ["a cat.", "a dog."]
    # logits = 2 s - 1, label +1 on the diagonal and -1 elsewhere, summed, divided by the 2 images
    tc = (nll(2 * 0.5 - 1) + nll(-(2 * -0.5 - 1)) + nll(-(2 * 0.0 - 1)) + nll(2 * 1.0 - 1)) / 2
    # global: cos(cls_i, eot_j) = [[1, 0], [0, -1]]
    mp = (nll(2 * 1 - 1) + nll(-(2 * 0 - 1)) + nll(-(2 * 0 - 1)) + nll(2 * -1 - 1)) / 2
    assert set(terms) == {"text-conditioned", "multi-positive"}
    assert terms["text-conditioned"].item() == pytest.approx(tc, rel=1e-5)
    assert terms["multi-positive"].item() == pytest.approx(mp, rel=1e-5)


def test_sub_captions_are_positives_of_their_image(monkeypatch):
    model = FlairMethod.example("tiny", seed=0, loss_texts="sub-captions")
    batch = TrainingBatch(pixels=torch.zeros(2, 3, 64, 64), captions=["A cat. A mat.", "A dog."],
                          sentences=[["A cat.", "A mat."], ["A dog."]])
    eye = torch.eye(D)
    conditioned = torch.tensor([[0.2, 0.4, -0.3], [0.1, 0.0, 0.6]])
    terms, seen = crafted_losses(model, monkeypatch, batch, eot=torch.stack([eye[0], eye[0], eye[1]]),
                                 conditioned=conditioned, cls=eye[:2])
    assert seen == ["A cat.", "A mat.", "A dog."]
    labels = [[1, 1, -1], [-1, -1, 1]]  # image 0 owns the first two sub-captions
    tc = sum(nll(y * (2 * s - 1)) for row, ys in zip(conditioned.tolist(), labels) for s, y in zip(row, ys)) / 2
    glob = [[1.0, 1.0, 0.0], [0.0, 0.0, 1.0]]
    mp = sum(nll(y * (2 * s - 1)) for row, ys in zip(glob, labels) for s, y in zip(row, ys)) / 2
    assert terms["text-conditioned"].item() == pytest.approx(tc, rel=1e-5)
    assert terms["multi-positive"].item() == pytest.approx(mp, rel=1e-5)
    with pytest.raises(ExplorerError, match="sentences"):
        model.losses(TrainingBatch(pixels=torch.zeros(2, 3, 64, 64), captions=["a", "b"]))


@pytest.mark.parametrize("loss_texts", ["captions", "sub-captions"])
def test_every_parameter_gets_a_gradient(loss_texts):
    model = FlairMethod.example("tiny", seed=0, loss_texts=loss_texts)
    terms = model.losses(example_batch(model.arch.image_size, batch_size=4))
    sum(terms.values()).backward()
    silent = [name for name, p in model.named_parameters()
              if p.requires_grad and (p.grad is None or not p.grad.abs().sum() > 0)]
    assert not silent, f"no gradient reaches {silent}"
    new = {id(p) for p in model.parameter_groups()["new"]}
    assert new == {id(p) for p in model.visual_proj.parameters()}


# ---- released layout ----------------------------------------------------------------------------


def test_released_round_trip(tmp_path, model):
    path = save_released(model, tmp_path / "flair-tiny.pt")
    stored = torch.load(path, weights_only=True)
    assert stored["epoch"] == 1 and isinstance(stored["name"], str)
    keys = set(stored["state_dict"])
    assert all(k.startswith("module.") for k in keys)
    assert {"module.image_post.proj", "module.text_post.proj", "module.logit_scale", "module.logit_bias",
            "module.visual_proj.attn.in_proj_weight", "module.visual_proj.ln_q.weight"} <= keys
    assert not keys & {"module.visual.proj", "module.text_projection"}
    assert torch.equal(stored["state_dict"]["module.image_post.proj"], model.visual.proj.detach())

    loaded = explorer.load(path, device="cpu")
    report = loaded.key_report
    assert loaded.method_name == "flair" and report.format == "flair"
    assert report.ok and not report.ignored, report.summary()
    assert loaded.context_length == 77 and loaded.method.config() == model.config()
    a, b = model.state_dict(), loaded.method.state_dict()
    assert set(a) == set(b) and all(torch.equal(a[k], b[k]) for k in a)

    pixels = torch.randn(2, 3, 64, 64, generator=torch.Generator().manual_seed(5))
    ids = model.tokenize(["a red cube sits on the left.", "a blue ball.", "grey."]).ids
    with torch.no_grad():
        out = [(m.encode_image(pixels), m.encode_text(ids)) for m in (model, loaded.method)]
        assert torch.equal(model.similarity(*out[0]), loaded.method.similarity(*out[1]))
        assert torch.equal(model.zero_slot_weight(out[0][0][0], out[0][1]),
                           loaded.method.zero_slot_weight(out[1][0][0], out[1][1]))

    picture = Image.new("RGB", (50, 40), "teal")
    for kind in ("generic", "attention-pool", "attention-pool/head-3"):
        maps = loaded.sentence_maps(picture, ["A red cube.", "A blue ball."], kind=kind)
        assert maps.grid.shape == (2, *GRID) and maps.maps.shape == (2, 40, 50)


def test_score_modes_on_a_crafted_case(tmp_path):
    """cosine; exp(t) x cosine (FLAIR's retrieval evaluation); + logit_bias (its get_logits); sigmoid
    of the logits (what its loss reads), with a known scale and bias; rankings agree in every mode."""
    torch.manual_seed(7)
    method = FlairMethod.example("tiny", seed=0).eval()
    with torch.no_grad():
        method.logit_scale.fill_(math.log(20.0))
        method.logit_bias.fill_(-4.0)
    image = ImageFeatures(cls=torch.randn(3, D), patches=torch.randn(3, P, D), grid_hw=GRID)
    queries = torch.randn(4, D)
    text = TextFeatures(eot=queries, tokens=torch.zeros(4, 2, D), mask=torch.ones(4, 2, dtype=torch.bool))
    cosine = method.conditioned_scores(image, text)
    expected = {"cosine": cosine, "scaled": 20 * cosine, "logits": 20 * cosine - 4,
                "probability": 1 / (1 + torch.exp(-(20 * cosine - 4)))}
    for mode, want in expected.items():
        method.score = mode
        with torch.no_grad():
            got = method.similarity(image, text)
        torch.testing.assert_close(got.float(), want, rtol=1e-5, atol=1e-6)
        assert torch.equal(got.argsort(dim=0), cosine.argsort(dim=0))
    assert FlairMethod.score_description({"score": "logits"}) == "logits = exp(t) x cosine + b"
    # Past a logit of about 37 a probability is exactly 1 even in float64: matches tie, so it is for
    # reading, and the logits are what to rank by (their order is still the cosine's).
    with torch.no_grad():
        method.logit_scale.fill_(math.log(1e4))
        method.logit_bias.fill_(0.0)
    strong = TextFeatures(eot=image.patches[0, :4], tokens=torch.zeros(4, 2, D), mask=torch.ones(4, 2, dtype=torch.bool))
    method.score = "logits"
    logits = method.similarity(image, strong)
    method.score = "probability"
    probability = method.similarity(image, strong)
    assert probability.dtype == torch.float64 and (probability[logits > 40] == 1).all()
    assert "saturates" in FlairMethod.score_description({"score": "probability"})

    path = save_released(method, tmp_path / "flair.pt")  # a manifest's option picks the mode at load
    loaded = explorer.load(path, device="cpu", options={"score": "probability"})
    assert loaded.method.score == "probability" and loaded.score_label.startswith("sigmoid(")
    assert explorer.load(path, device="cpu").score_label == "cosine"
    with pytest.raises(ExplorerError, match="score must be one of"):
        FlairMethod.example("tiny", score="softmax")
