"""Every registered method keeps the contract the views and the trainer rely on.

For each method, on its tiny example: losses train every learnable part,
every map kind is a [M, rows, cols] grid, scores have the right shape, and
the model survives a round trip through our own format and through its
official release layout.
"""

from __future__ import annotations

import pytest
import torch

import explorer
from explorer.models.batch import example_batch
from explorer.models.io.loading import save_method, save_released
from explorer.models.methods import METHODS, discover_methods
from explorer.models.model import Model

discover_methods()
NAMES = sorted(METHODS)
SENTENCES = ["A red cube sits on the left.", "A blue ball sits at the top.", "The floor is grey."]


@pytest.fixture(scope="module", params=NAMES)
def method(request):
    return METHODS[request.param].example("tiny", seed=0).eval()


def images(method, n=2):
    size = method.preprocess.image_size
    generator = torch.Generator().manual_seed(1)
    return torch.randn(n, 3, size, size, generator=generator)


def test_every_learnable_part_gets_gradient(method):
    method.train()
    batch = example_batch(method.preprocess.image_size, batch_size=4)
    terms = method.losses(batch)
    assert terms and all(t.ndim == 0 and torch.isfinite(t) for t in terms.values()), terms
    method.zero_grad()
    sum(terms.values()).backward()
    exempt = getattr(method, "parameters_without_gradient", ())
    silent = [name for name, p in method.named_parameters()
              if p.requires_grad and not name.startswith(tuple(exempt))
              and (p.grad is None or not torch.any(p.grad != 0))]
    method.eval()
    assert silent == [], f"{method.name}: no gradient reaches {silent[:10]}"


def test_scores_and_every_map_kind(method):
    """Every kind a method lists draws one finite map per sentence: the explainers (which need the tower
    itself) through ``explainer_maps``, the others from the features."""
    with torch.no_grad():
        pixels = images(method, 2)
        image = method.encode_image(pixels)
        text = method.encode_text(method.tokenize(SENTENCES).ids)
        scores = method.similarity(image, text)
        assert scores.shape == (2, len(SENTENCES))
        rows, cols = image.grid_hw
        for kind in method.map_kinds:
            if kind in method.explainer_kinds:
                maps = method.explainer_maps(pixels[:1], text, kind)
            else:
                maps = method.sentence_maps(image[0], text, kind)
            assert maps.shape == (len(SENTENCES), rows, cols), kind
            assert torch.isfinite(maps).all(), kind


def _same_outputs(a, b):
    pixels = images(a, 2)
    with torch.no_grad():
        ids_a, ids_b = a.tokenize(SENTENCES).ids, b.tokenize(SENTENCES).ids
        score_a = a.similarity(a.encode_image(pixels), a.encode_text(ids_a))
        score_b = b.similarity(b.encode_image(pixels), b.encode_text(ids_b))
    torch.testing.assert_close(score_a, score_b)


def test_round_trip_through_our_format(method, tmp_path):
    path = save_method(method, tmp_path / f"{method.name}.safetensors")
    loaded = explorer.load(path, device="cpu")
    assert loaded.key_report.ok and loaded.method_name == method.name
    _same_outputs(method, loaded.method)


def test_round_trip_through_the_release_layout(method, tmp_path):
    path = save_released(method, tmp_path / f"{method.name}-release.pt")
    options = getattr(method, "release_load_options", lambda: {})()
    loaded = explorer.load(path, device="cpu", allow_pickle=True, options=options or None)
    assert loaded.key_report.ok, loaded.key_report.summary()
    assert loaded.method_name == method.name
    _same_outputs(method, loaded.method)


def test_the_public_model_draws_every_kind(method):
    from PIL import Image

    model = Model(method, name=method.name, device="cpu")
    picture = Image.new("RGB", (50, 40), (120, 80, 40))
    for kind in model.map_kinds:
        out = model.sentence_maps(picture, SENTENCES[:2], kind=kind)
        assert out.maps.shape == (2, 40, 50) and out.kind == kind


def test_batches_of_features_concatenate_without_losing_method_fields(method):
    from explorer.models.features import concat_features

    pixels = images(method, 3)
    with torch.no_grad():
        whole = method.encode_image(pixels)
        joined = concat_features([method.encode_image(pixels[:2]), method.encode_image(pixels[2:])])
        text = method.encode_text(method.tokenize(SENTENCES).ids)
        assert type(joined) is type(whole)
        torch.testing.assert_close(method.similarity(joined, text), method.similarity(whole, text))
