"""MulCLIP: calibration (Eq. 4), the carried-back sub-caption map, the three sigmoid objectives
(Eqs. 3, 5-8, 9-10) against hand values, gradients, the Model surface and the save/load round trip."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from PIL import Image

import explorer
from explorer.models.batch import example_batch
from explorer.models.features import ImageFeatures, TextFeatures
from explorer.models.io.loading import save_method, save_released
from explorer.models.methods import get_method
from explorer.models.methods.base import cosine_matrix
from explorer.models.methods.mulclip import SUBCAPTION_ALPHA, MulClipMethod
from explorer.models.model import Model
from explorer.core.errors import ExplorerError

CAPTIONS = ["A red cube sits on the left. A blue ball sits at the top of the table.", "A cone.", ""]


def softplus_neg(x: float) -> float:
    """-log sigmoid(x), by hand."""
    return math.log1p(math.exp(-x))


def tiny(seed: int = 0) -> MulClipMethod:
    return MulClipMethod.example("tiny", seed=seed).eval()


def picture(seed: int) -> Image.Image:
    rng = np.random.default_rng(seed)
    return Image.fromarray(rng.integers(0, 256, (48, 80, 3), dtype=np.uint8), "RGB")


def test_registered_under_its_name():
    cls = get_method("mulclip")
    assert cls is MulClipMethod and cls.title == "MulCLIP"
    model = tiny()
    assert model.context_length == 248
    assert model.map_kinds == ("generic", SUBCAPTION_ALPHA, "gradcam", "legrad", "clearclip", "naclip")


def test_calibration_weights_are_distributions_over_valid_tokens_and_halve_n():
    model = tiny()
    ids = model.tokenize(CAPTIONS).ids
    text = model.encode_text(ids)
    refined, weights = model.calibrate_text(text)
    assert weights.shape == (3, (248 - 1) // 2, text.tokens.shape[1]) and refined.shape == (3, 123, 32)
    torch.testing.assert_close(weights.sum(-1), torch.ones(3, 123))
    lengths = (ids != 0).sum(1)  # SOT + words + EOT
    for row, n in enumerate(lengths.tolist()):
        if n > 2:
            assert (weights[row, :, 1: n - 1] > 0).all()  # every word feeds every refined token
            assert (weights[row, :, 0] == 0).all()  # SOT
        else:
            assert (weights[row, :, 0] == 1).all()  # an empty caption falls back to SOT
        assert (weights[row, :, n - 1:] == 0).all()  # EOT and padding get exactly zero weight
    torch.testing.assert_close(refined, weights @ text.tokens)

    image = model.encode_image(torch.randn(2, 3, 64, 64))
    patches, image_weights = model.calibrate_image(image)
    assert image_weights.shape == (2, 16 // 2, 16) and patches.shape == (2, 8, 32)
    torch.testing.assert_close(image_weights.sum(-1), torch.ones(2, 8))
    torch.testing.assert_close(patches, image_weights @ image.patches)

    # Hand value: W_k = 0 makes GELU(X W_k) = 0, so each row is uniform over the valid words only.
    with torch.no_grad():
        model.calibration.text.key.weight.zero_()
    _, uniform = model.calibrate_text(text)
    n_words = lengths[0].item() - 2
    expected = torch.zeros(text.tokens.shape[1])  # padding past the last EOT is dropped
    expected[1: n_words + 1] = 1 / n_words
    torch.testing.assert_close(uniform[0], expected[None].expand(123, -1))


def crafted_calibration(model: MulClipMethod) -> ImageFeatures:
    """Patches p = 2j, 2j+1 both equal e_j + e_{8+j}; the calibration maps refined token j onto that pair."""
    patches = torch.zeros(1, 16, 32)
    for p in range(16):
        patches[0, p, p // 2] = 1.0
        patches[0, p, 8 + p // 2] = 1.0
    with torch.no_grad():
        calibration = model.calibration.image
        calibration.key.weight.zero_()
        calibration.key.weight[:8, :8] = torch.eye(8)  # X W_k = the pair one-hot
        calibration.query.weight.zero_()
        calibration.query.weight[:, :8] = 100 * torch.eye(8)  # logits 100 * GELU(1) = 84.1 on the pair
        calibration.log_tau.zero_()
    return ImageFeatures(cls=torch.zeros(1, 32), patches=patches, grid_hw=(4, 4))


def test_subcaption_alpha_carried_back_through_the_calibration_weights_matches_hand_values():
    model = tiny()
    image = crafted_calibration(model)
    eot = torch.zeros(2, 32)
    eot[0, 8 + 3] = math.sqrt(32) * math.log(7)  # t . v'_j / sqrt d = ln 7 at j = 3, 0 elsewhere
    eot[1, 31] = 1.0  # orthogonal to every refined patch: alpha uniform
    text = TextFeatures(eot=eot, tokens=torch.zeros(2, 4, 32), mask=torch.ones(2, 4, dtype=torch.bool))
    maps = model.sentence_maps(image, text, SUBCAPTION_ALPHA)
    assert maps.shape == (2, 4, 4)
    torch.testing.assert_close(maps.sum(dim=(1, 2)), torch.ones(2))
    # alpha_0 = 7/14 on token 3, 1/14 elsewhere; W puts 1/2 on each patch of a pair.
    expected = torch.full((16,), 0.5 / 14)
    expected[6] = expected[7] = 0.25
    torch.testing.assert_close(maps[0], expected.reshape(4, 4))
    torch.testing.assert_close(maps[1], torch.full((4, 4), 1 / 16))
    # Rows of W themselves: refined token 3 is fed by patches 6 and 7 only.
    weights = model.calibration_maps(image)
    assert weights.shape == (8, 4, 4)
    torch.testing.assert_close(weights[3].flatten()[6:8], torch.tensor([0.5, 0.5]))


def test_global_sigmoid_loss_matches_hand_value():
    model = tiny()  # SigLIP's initialisation: t = 10, b = -10
    assert math.isclose(model.logit_scale.exp().item(), 10.0, rel_tol=1e-6)
    assert model.logit_bias.item() == -10.0
    image = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    long = torch.tensor([[1.0, 0.0], [1.0, 1.0]])  # cosines [[1, 1/sqrt2], [0, 1/sqrt2]]
    terms = model.global_loss(image, long, short_eot=image)  # summary cosines = identity
    a = 10 / math.sqrt(2) - 10
    by_hand = (softplus_neg(0.0) + softplus_neg(-a) + softplus_neg(10.0) + softplus_neg(a)) / 2
    assert math.isclose(terms["global_long"].item(), by_hand, rel_tol=1e-5)
    short = 0.5 * (2 * softplus_neg(0.0) + 2 * softplus_neg(10.0)) / 2
    assert math.isclose(terms["global_short"].item(), short, rel_tol=1e-5)


def test_word_patch_reconstruction_loss_matches_hand_value():
    model = tiny()
    patches = torch.tensor([[[10.0, 0.0], [0.0, 10.0]]])
    words = torch.tensor([[[10.0, 0.0], [0.0, 10.0], [0.0, -10.0]]])
    # A_vt ~ [[1,0,0],[0,1,0]] so V' = v' and cos(v'_i, V'_j) = I.
    image_part = (2 * softplus_neg(0.0) + 2 * softplus_neg(10.0)) / 2
    # A_tv picks v'_0, v'_1, v'_0, so T' ~ (e0, e1, e0) against t' = (e0, e1, -e1):
    # cos rows [1, 0, 1], [0, 1, 0], [0, -1, 0]; positives on the diagonal.
    text_part = (softplus_neg(0.0) + softplus_neg(10.0) + softplus_neg(0.0)  # row 0: +, -, -
                 + softplus_neg(10.0) + softplus_neg(0.0) + softplus_neg(10.0)  # row 1: -, +, -
                 + softplus_neg(10.0) + softplus_neg(20.0) + softplus_neg(-10.0)) / 3  # row 2: -, -, + (cos 0)
    assert math.isclose(model.word_loss(patches, words).item(), image_part + text_part, rel_tol=1e-5)


def test_subcaption_aggregated_patch_loss_matches_hand_value():
    model = tiny()
    e0, e1 = torch.tensor([1.0, 0.0]), torch.tensor([0.0, 1.0])
    patches = torch.stack([torch.stack([4 * e0, 4 * e1]), torch.stack([4 * e1, -4 * e0])])  # [B=2, N'=2, 2]
    sentences = torch.stack([e0, e1, e0])
    owner = torch.tensor([0, 1, 1])
    p = 1 / (1 + math.exp(-4 / math.sqrt(2)))  # the larger alpha: sigmoid of the logit gap 4 / sqrt 2
    norm = math.sqrt(p ** 2 + (1 - p) ** 2)
    c1, c2 = p / norm, -(1 - p) / norm  # cos(vbar, t) when the match is in front / behind a flipped patch
    scores = [[c1, c2], [c1, c1], [c1, c2]]  # [sentence, image]

    def ell(row, positive):
        return sum(softplus_neg((1 if b == positive else -1) * (10 * s - 10)) for b, s in enumerate(row))

    by_hand = (ell(scores[0], 0) + (ell(scores[1], 1) + ell(scores[2], 1)) / 2) / 2
    assert math.isclose(model.sub_loss(patches, sentences, owner).item(), by_hand, rel_tol=1e-5)


def test_losses_are_named_weighted_and_reach_every_parameter():
    model = MulClipMethod.example("tiny", seed=0).train()
    batch = example_batch(model.arch.image_size, batch_size=4)
    terms = model.losses(batch)
    assert set(terms) == {"global_long", "global_short", "word", "sub"}
    no_sentences = example_batch(model.arch.image_size, batch_size=2)
    no_sentences.sentences = None
    with pytest.raises(ExplorerError, match="sentences"):
        model.losses(no_sentences)
    assert all(t.ndim == 0 and torch.isfinite(t) for t in terms.values())
    sum(terms.values()).backward()
    silent = [name for name, p in model.named_parameters() if p.grad is None or not p.grad.abs().sum() > 0]
    assert silent == []
    groups = model.parameter_groups()
    new = {id(p) for p in groups["new"]}
    named = dict(model.named_parameters())
    assert {n for n, p in named.items() if id(p) in new} == {
        "logit_bias", *(f"calibration.{side}.{k}" for side in ("image", "text")
                        for k in ("key.weight", "query.weight", "log_tau"))}


def test_similarity_is_the_global_cosine_and_maps_have_the_grid_shape():
    model = Model(tiny(), device="cpu")
    images = [picture(0), picture(1)]
    sims = model.similarity(images, CAPTIONS[:2])
    image, text = model.encode_image(images), model.encode_text(CAPTIONS[:2])
    torch.testing.assert_close(sims, cosine_matrix(image.cls, text.eot))
    sentences = ["A red cube sits on the left.", "A blue ball.", "A cone at the top."]
    out = model.sentence_maps(picture(2), sentences, kind=SUBCAPTION_ALPHA)
    assert out.grid.shape == (3, 4, 4) and out.maps.shape == (3, 48, 80)
    np.testing.assert_allclose(out.grid.sum(axis=(1, 2)), np.ones(3), rtol=1e-5)


def _perturbed(seed: int) -> MulClipMethod:
    model = tiny(seed)
    with torch.no_grad():  # values that differ from the initialisation, so a load must restore them
        model.calibration.image.log_tau.fill_(0.3)
        model.calibration.text.log_tau.fill_(-0.2)
        model.logit_bias.fill_(-7.0)
    return model


@pytest.mark.parametrize("writer", ["save_method", "save_released"])
def test_round_trip_gives_clean_report_and_identical_outputs(tmp_path, writer):
    original = Model(_perturbed(3), device="cpu")
    if writer == "save_method":
        path = save_method(original.method, tmp_path / "mulclip.safetensors")
    else:  # our own layout is the release: a plain torch.save of the state dict, detected by its keys
        path = save_released(original.method, tmp_path / "mulclip.pt")
    loaded = explorer.load(str(path), device="cpu")
    assert loaded.method_name == "mulclip"
    assert loaded.key_report.ok and not loaded.key_report.missing and not loaded.key_report.unexpected
    assert loaded.method.config() == original.method.config()
    for key, value in original.method.state_dict().items():
        assert torch.equal(value, loaded.method.state_dict()[key]), key
    images, sentences = [picture(4), picture(5)], ["A red cube.", "A blue ball sits at the top."]
    assert torch.equal(loaded.similarity(images, sentences), original.similarity(images, sentences))
    for kind in loaded.map_kinds:
        np.testing.assert_array_equal(loaded.sentence_maps(images[0], sentences, kind).grid,
                                      original.sentence_maps(images[0], sentences, kind).grid)


def _pooled_setup(shared: bool):
    """Image 0 described by sentences t0 = e0 and t1 = e1, image 1 by t2 = e2, in 32 dimensions.

    shared: every refined patch of image 0 is u = (e0 + e1) / sqrt 2, so both sentences pool u (one scene
    vector for both). Not shared: image 0 holds a0 = (e0 + e3) / sqrt 2 and a1 = (e1 + e4) / sqrt 2 (times
    200, so each sentence's softmax picks its own patch), so sentence 0 pools a0 and sentence 1 pools a1.
    Each sentence's pooled vector has cosine 1/sqrt 2 with its own sentence in both setups, and image 1
    (all patches e5) pools e5 for everyone: the image-side (paper) scores are the same in both.
    """
    e = torch.eye(32)
    r2 = math.sqrt(2.0)
    if shared:
        image0 = ((e[0] + e[1]) / r2).repeat(2, 1) * 200
    else:
        image0 = torch.stack([(e[0] + e[3]) / r2, (e[1] + e[4]) / r2]) * 200
    image1 = e[5].repeat(2, 1) * 200
    patches = torch.stack([image0, image1])  # [B=2, N'=2, d=32]
    sentences = torch.stack([e[0], e[1], e[2]])
    owner = torch.tensor([0, 0, 1])
    return patches, sentences, owner


def test_sentence_negatives_penalise_two_sentences_sharing_one_pooled_vector():
    paper = MulClipMethod.example("tiny", seed=0)
    variant = MulClipMethod.example("tiny", seed=0, sub_loss="sentences")
    assert paper.sub_loss_form == "paper" and variant.config()["sub_loss"] == "sentences"
    shared, distinct = _pooled_setup(True), _pooled_setup(False)
    # the paper-literal loss cannot tell them apart: its negatives are other images only
    assert math.isclose(paper.sub_loss(*shared).item(), paper.sub_loss(*distinct).item(), rel_tol=1e-6)
    # with the same image's other sentences as negatives, sharing one vector costs more: rows 0 and 1 of
    # the sentence side each hold a negative at cosine 1/sqrt 2 instead of 0 (t = 10, b = -10)
    c = 1 / math.sqrt(2.0)
    extra = softplus_neg(-(10 * c - 10)) - softplus_neg(10.0)
    gap = variant.sub_loss(*shared).item() - variant.sub_loss(*distinct).item()
    assert gap > 0 and math.isclose(gap, (2 * extra / 3) / 2, rel_tol=1e-4)
    # and the variant's image side is the paper's loss
    assert math.isclose(variant.sub_loss_images(*shared).item(), paper.sub_loss(*shared).item(), rel_tol=1e-6)


def test_sentence_side_by_hand():
    variant = MulClipMethod.example("tiny", seed=0, sub_loss="sentences")
    patches, sentences, owner = _pooled_setup(True)
    c = 1 / math.sqrt(2.0)  # cos(u, e0) = cos(u, e1); u is orthogonal to e2; e5 is orthogonal to all

    def ell(row, positive):
        return sum(softplus_neg((1 if j == positive else -1) * (10 * s - 10)) for j, s in enumerate(row))

    # rows: sentence i pooled on its own image vs sentences (t0, t1, t2); sentence 2 pools e5
    by_hand = (ell([c, c, 0.0], 0) + ell([c, c, 0.0], 1) + ell([0.0, 0.0, 0.0], 2)) / 3
    assert math.isclose(variant.sub_loss_sentences(patches, sentences, owner).item(), by_hand, rel_tol=1e-5)
    with pytest.raises(ExplorerError, match="sub_loss"):
        MulClipMethod.example("tiny", sub_loss="captions")
