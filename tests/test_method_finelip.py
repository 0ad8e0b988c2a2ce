"""FineLIP: refinement, late interaction, FineLIP*, hinge loss, maps and the released layout.

Expectations are derived by hand on crafted tokens (unit vectors e_i of the
embedding space), so a wrong sum, a mask that lets padding in or a swapped
direction changes the numbers.
"""

from __future__ import annotations

import math

import pytest
import torch
from PIL import Image
from torch import nn

import explorer
from explorer.models.batch import example_batch
from explorer.models.features import ImageFeatures, TextFeatures
from explorer.models.io.loading import save_released
from explorer.models.methods.finelip import FineLipMethod, eot_positions, word_mask
from explorer.models.nn.losses import hinge_hardest
from explorer.core.errors import ExplorerError

D = 32  # the tiny example's embedding width
IMAGE_REFINER = {"dim": D, "hidden": 4, "n_out": 2}
TEXT_REFINER = {"dim": D, "hidden": 4, "n_out": 3}
R2 = 1 / math.sqrt(2)


def e(i: int, scale: float = 1.0) -> torch.Tensor:
    v = torch.zeros(D)
    v[i] = scale
    return v


@pytest.fixture(scope="module")
def model() -> FineLipMethod:
    return FineLipMethod.example("tiny", seed=0, image_refiner=IMAGE_REFINER, text_refiner=TEXT_REFINER).eval()


def uniform_refiners(model: FineLipMethod) -> FineLipMethod:
    """A copy whose refiners weigh every valid input token equally (W = 1 / N): refined = mean."""
    clone = FineLipMethod(model.arch, image_refiner=IMAGE_REFINER, text_refiner=TEXT_REFINER).eval()
    clone.load_state_dict(model.state_dict())
    with torch.no_grad():
        for refiner in (clone.cross_net.aggr_net, clone.cross_net.cap_aggr_net):
            refiner.weight[3].weight.zero_()
            refiner.weight[3].bias.zero_()
    return clone


def text_features(rows: list[tuple[list[torch.Tensor], int]], context: int = 8) -> TextFeatures:
    """Each row: (its real tokens SOT..EOT, how many there are); padding is a large distractor."""
    tokens = torch.stack([torch.stack(real + [e(D - 1, 50.0)] * (context - n)) for real, n in rows])
    mask = torch.zeros(len(rows), context, dtype=torch.bool)
    for r, (_, n) in enumerate(rows):
        mask[r, :n] = True
    eot = tokens[torch.arange(len(rows)), mask.sum(1) - 1]
    return TextFeatures(eot=eot, tokens=tokens, mask=mask)


def image_features(cls: list[torch.Tensor], patches: list[torch.Tensor], grid=(2, 2)) -> ImageFeatures:
    return ImageFeatures(cls=torch.stack(cls), patches=torch.stack(patches), grid_hw=grid)


# ---- refinement ---------------------------------------------------------------------------------


def test_refinement_weights_are_a_softmax_over_patches(model):
    torch.manual_seed(1)
    image = image_features([torch.randn(D)], [torch.randn(4, D)])
    maps = model.refinement_weights(image)
    assert maps.shape == (2, 2, 2)  # [N', rows, cols]
    torch.testing.assert_close(maps.sum(dim=(1, 2)), torch.ones(2))
    # by hand: W = softmax_over_P(scale * MLP(X)^T), laid out row-major over the grid
    mlp = model.cross_net.aggr_net.weight
    x = mlp[0](image.patches[0])
    logits = (mlp[3](nn.functional.gelu(mlp[1](x))) * model.cross_net.aggr_net.scale.reshape(())).T  # [N', P]
    expected = torch.exp(logits) / torch.exp(logits).sum(dim=1, keepdim=True)
    torch.testing.assert_close(maps, expected.reshape(2, 2, 2))
    assert maps[1, 1, 0].item() == pytest.approx(expected[1, 2].item())  # patch 2 = row 1, col 0


def test_text_refinement_ignores_padding_and_eot(model):
    torch.manual_seed(2)
    words = [torch.randn(D) for _ in range(4)]  # SOT, w1, w2, EOT
    text = text_features([(words, 4)])
    refined = model.refined_text_tokens(text)
    assert refined.shape == (1, 3 + 1, D)
    assert torch.equal(refined[0, -1], words[3]), "EOT is kept beside the refined tokens"
    # masked tokens get weight 0: changing padding or EOT leaves the refined tokens unchanged
    changed = TextFeatures(eot=text.eot, tokens=text.tokens.clone(), mask=text.mask)
    changed.tokens[0, 4:] = torch.randn(4, D) * 9
    changed.tokens[0, 3] = torch.randn(D) * 9
    torch.testing.assert_close(model.refined_text_tokens(changed)[0, :-1], refined[0, :-1])
    changed.tokens[0, 1] += 1.0  # a word token does feed them
    assert not torch.allclose(model.refined_text_tokens(changed)[0, :-1], refined[0, :-1])
    # and the weights over SOT + words sum to 1: equal tokens refine to themselves
    same = text_features([([words[0]] * 3 + [words[3]], 4)])
    torch.testing.assert_close(model.refined_text_tokens(same)[0, :-1], words[0].expand(3, D))


def test_eot_is_the_last_real_token():
    mask = torch.tensor([[1, 1, 0, 1, 1, 0, 0], [1, 1, 1, 0, 0, 0, 0]], dtype=torch.bool)  # row 0: an id 0 inside
    text = TextFeatures(eot=torch.zeros(2, D), tokens=torch.zeros(2, 7, D), mask=mask)
    assert eot_positions(text).tolist() == [4, 2]
    assert word_mask(text).tolist() == [[False, True, True, True, False, False, False],
                                        [False, True, False, False, False, False, False]]


# ---- late interaction, FineLIP* -----------------------------------------------------------------


def crafted_pair():
    """Two images and two captions with hand-known refined tokens (uniform refiners: refined = mean).

    I1: cls e0, patches all e1        -> V' = {e0, e1, e1}
    I2: cls -e1, patches all e2       -> V' = {-e1, e2, e2}
    T1: SOT + words all u=(e0+e1)/√2, EOT -e0 -> T' = {u, u, u, -e0}
    T2: SOT + words all e2, EOT e1             -> T' = {e2, e2, e2, e1}
    """
    u = (e(0) + e(1)) * R2
    image = image_features([e(0), -e(1)], [e(1).expand(4, D), e(2).expand(4, D)])
    text = text_features([([u, u, u, -e(0)], 4), ([e(2), e(2), e(2), e(2), e(1)], 5)])
    return image, text


def test_fine_score_is_the_hand_computed_late_interaction(model):
    uniform = uniform_refiners(model)
    image, text = crafted_pair()
    # s = leaky_relu(cos, 0.1); R = mean_t max_v s + mean_v max_t s
    # I1,T1: t->v: u->.7071 (x3), -e0->max(-.1, 0)=0 -> 3*.7071/4; v->t: e0->.7071, e1->.7071 -> .7071
    # I1,T2: t->v: e2->0 (x3), e1->1 -> 1/4;              v->t: e0->0, e1->1 (x2) -> 2/3
    # I2,T1: t->v: u->max(-.0707, 0)=0, -e0->0 -> 0;      v->t: -e1->max(-.0707, 0)=0, e2->0 -> 0
    # I2,T2: t->v: e2->1 (x3), e1->max(-.1, 0)=0 -> 3/4;  v->t: -e1->max(0, -.1)=0, e2->1 (x2) -> 2/3
    expected = torch.tensor([[0.75 * R2 + R2, 0.25 + 2 / 3], [0.0, 0.75 + 2 / 3]])
    torch.testing.assert_close(uniform.fine_scores(image, text), expected)


def test_modes_and_finelip_star_blend(model):
    uniform = uniform_refiners(model)
    image, text = crafted_pair()
    fine = torch.tensor([[0.75 * R2 + R2, 0.25 + 2 / 3], [0.0, 0.75 + 2 / 3]])
    glob = torch.tensor([[-1.0, 0.0], [0.0, -1.0]])  # cos(cls, eot)
    for mode, expected in (("fine", fine), ("global", glob), ("finelip*", 0.8 * glob + 0.2 * fine)):
        uniform.mode = mode
        torch.testing.assert_close(uniform.similarity(image, text), expected)


def test_fine_scores_match_the_pairwise_reference(model):
    """The batched score equals the one-pair-at-a-time late interaction on random features."""
    from explorer.models.nn.late_interaction import late_interaction_score

    torch.manual_seed(3)
    image = image_features([torch.randn(D) for _ in range(3)], [torch.randn(4, D) for _ in range(3)])
    text = text_features([([torch.randn(D) for _ in range(n)], n) for n in (3, 8, 5, 2)])
    v, t = model.refined_image_tokens(image), model.refined_text_tokens(text)
    reference = torch.stack([torch.stack([late_interaction_score(tt, vv) for tt in t]) for vv in v])
    torch.testing.assert_close(model.fine_scores(image, text), reference)


# ---- loss ---------------------------------------------------------------------------------------

CRAFTED = torch.tensor([[0.9, 0.8, 0.1], [0.3, 0.5, 0.6], [0.2, 0.1, 0.7]])
# margin 0.2, hardest negative. image -> text (rows): row0 max(.2+.8-.9, 0)=.1; row1 .2+.6-.5=.3; row2 0
# text -> image (columns): col0 0; col1 .2+.8-.5=.5; col2 .2+.6-.7=.1.  Total 1.0
CRAFTED_HINGE = 1.0


def test_hinge_on_a_crafted_matrix():
    assert hinge_hardest(CRAFTED, margin=0.2).item() == pytest.approx(CRAFTED_HINGE)


def test_loss_is_the_hinge_on_the_fine_score_in_every_mode(model, monkeypatch):
    batch = example_batch(model.arch.image_size, batch_size=3)
    monkeypatch.setattr(model, "fine_scores", lambda image, text: CRAFTED.clone())
    for mode in ("finelip*", "global", "fine"):
        monkeypatch.setattr(model, "mode", mode)
        terms = model.losses(batch)
        assert set(terms) == {"hinge"}
        assert terms["hinge"].item() == pytest.approx(CRAFTED_HINGE)


def test_every_trainable_parameter_gets_a_gradient():
    model = FineLipMethod.example("tiny", seed=0, image_refiner=IMAGE_REFINER, text_refiner=TEXT_REFINER)
    terms = model.losses(example_batch(model.arch.image_size, batch_size=4))
    total = sum(terms.values())
    assert total.item() > 0
    total.backward()
    silent = [name for name, p in model.named_parameters()
              if p.requires_grad and (p.grad is None or not p.grad.abs().sum() > 0)]
    assert not silent, f"no gradient reaches {silent}"
    assert not model.logit_scale.requires_grad, "FineLIP's objective has no temperature"
    groups = model.parameter_groups()
    new = {id(p) for p in groups["new"]}
    assert new == {id(p) for p in model.cross_net.parameters()}
    assert len(groups["backbone"]) == sum(1 for n, p in model.named_parameters()
                                          if p.requires_grad and not n.startswith("cross_net."))


# ---- maps ---------------------------------------------------------------------------------------


def test_late_interaction_map_by_hand(model):
    # patches on a 2x2 grid: e0, e1, -e0, e2; sentence 1: SOT=e2 (excluded), words e0 and u, EOT=-e0 (excluded)
    u = (e(0) + e(1)) * R2
    image = image_features([e(3)], [torch.stack([e(0), e(1), -e(0), e(2)])])
    text = text_features([([e(2), e(0), u, -e(0)], 4), ([e(0), e(1)], 2)])  # sentence 2: no words, EOT = e1
    maps = model.sentence_maps(image, text, "late-interaction")
    assert maps.shape == (2, 2, 2)
    # per patch, max over the words of leaky_relu(cos): e0 -> 1; e1 -> .7071; -e0 -> max(-.1, -.0707); e2 -> 0
    torch.testing.assert_close(maps[0], torch.tensor([[1.0, R2], [-0.1 * R2, 0.0]]))
    torch.testing.assert_close(maps[1], torch.tensor([[0.0, 1.0], [0.0, 0.0]]))  # falls back to EOT
    with pytest.raises(ExplorerError, match="one image"):
        model.sentence_maps(image_features([e(0), e(1)], [torch.randn(4, D)] * 2), text, "late-interaction")


def test_refinement_map_follows_the_best_matching_refined_token(model):
    torch.manual_seed(4)
    image = image_features([torch.randn(D)], [torch.randn(4, D)])
    refined = model.refined_image_tokens(image)[0, 1:]  # [N', d], class token dropped
    # sentence EOTs that ARE refined token 1, then refined token 0 (scaled: cosine ignores length)
    text = TextFeatures(eot=torch.stack([refined[1] * 3, refined[0]]), tokens=torch.zeros(2, 4, D),
                        mask=torch.ones(2, 4, dtype=torch.bool))
    assert model.best_refined_token(image, text).tolist() == [1, 0]
    maps = model.sentence_maps(image, text, "refinement-weights")
    weights = model.refinement_weights(image)
    assert maps.shape == (2, 2, 2)
    assert torch.equal(maps[0], weights[1]) and torch.equal(maps[1], weights[0])
    assert not torch.allclose(weights[0], weights[1])


def test_unknown_kind_is_refused(model):
    image, text = crafted_pair()
    with pytest.raises(ExplorerError, match="late-interaction"):
        model.sentence_maps(image[0], text, "attention-pool")


# ---- released layout ----------------------------------------------------------------------------


def test_released_round_trip(tmp_path, model):
    path = save_released(model, tmp_path / "finelip-tiny.pt")
    stored = torch.load(path, weights_only=True)
    assert torch.equal(stored["positional_embedding_res"], stored["positional_embedding"])
    assert stored["positional_embedding"].shape == (248, 64)
    for prefix in ("cross_net.aggr_net.", "cross_net.cap_aggr_net."):
        assert {f"{prefix}weight.{i}.{k}" for i in (0, 1, 3) for k in ("weight", "bias")} | {prefix + "scale"} \
            <= set(stored)
    assert set(stored) == set(model.state_dict()) | {"positional_embedding_res"}

    loaded = explorer.load(path, device="cpu")
    report = loaded.key_report
    assert loaded.method_name == "finelip" and report.format == "finelip"
    assert report.ok and not report.ignored, report.summary()
    assert loaded.context_length == 248
    assert loaded.method.config() == model.config()
    a, b = model.state_dict(), loaded.method.state_dict()
    assert set(a) == set(b) and all(torch.equal(a[k], b[k]) for k in a)

    pixels = torch.randn(2, 3, 64, 64, generator=torch.Generator().manual_seed(5))
    ids = model.tokenize(["a red cube sits on the left.", "A blue ball. " * 40]).ids
    with torch.no_grad():
        out = [(m.encode_image(pixels), m.encode_text(ids)) for m in (model, loaded.method)]
        assert torch.equal(out[0][0].patches, out[1][0].patches) and torch.equal(out[0][1].tokens, out[1][1].tokens)
        assert torch.equal(model.similarity(*out[0]), loaded.method.similarity(*out[1]))

    picture = Image.new("RGB", (50, 40), "orange")
    sentences = ["A red cube.", "A blue ball on the left."]
    for kind in loaded.map_kinds:
        maps = loaded.sentence_maps(picture, sentences, kind=kind)
        assert maps.grid.shape == (2, 4, 4) and maps.maps.shape == (2, 40, 50)
