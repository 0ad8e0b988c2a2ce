"""Every registered method keeps the contract the views and the trainer rely on.

Each built-in passes the conformance kit (``explorer.testing.check_method``: shapes, scores, every
map kind, config / zoo / release-layout round trips, losses that reach every learnable part and
fall under a few optimizer steps); beyond it, the public ``Model`` draws every kind at the
picture's size, and features of several batches concatenate without losing a method's fields.
"""

from __future__ import annotations

import pytest
import torch

from explorer.models.methods import METHODS, discover_methods
from explorer.models.model import Model
from explorer.testing import CHECKS, check_method

discover_methods()
NAMES = sorted(name for name, cls in METHODS.items() if cls.__module__.startswith("explorer.models.methods"))
SENTENCES = ["A red cube sits on the left.", "A blue ball sits at the top.", "The floor is grey."]


@pytest.fixture(scope="module", params=NAMES)
def method(request):
    return METHODS[request.param].example("tiny", seed=0).eval()


def images(method, n=2):
    size = method.preprocess.image_size
    generator = torch.Generator().manual_seed(1)
    return torch.randn(n, 3, size, size, generator=generator)


@pytest.mark.parametrize("name", NAMES)
def test_every_built_in_method_passes_the_conformance_kit(name):
    results = check_method(METHODS[name])
    assert [r.name for r in results] == [name for name, _ in CHECKS]
    assert all(r.ok and not r.skipped for r in results), [r.line() for r in results]  # each has a release layout


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
