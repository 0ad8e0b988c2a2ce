"""Counterfactual twins: one attribute of one object changed, everything else as the scene had it."""

import numpy as np
import pytest

from explorer.data.counterfactual import ATTRIBUTES, counterfactual_twin
from explorer.data.synthetic import generate_scene
from explorer.data.vocabulary import POSITION_PHRASES
from explorer.core.errors import ExplorerError


@pytest.mark.parametrize("attribute", ATTRIBUTES)
def test_twin_changes_one_attribute_of_one_object(attribute):
    scene = generate_scene(seed=(0, 0, 3), image_size=64, n_objects=(2, 6))
    twin = counterfactual_twin(scene, attribute, 0, np.random.default_rng(1), (2, 6))
    assert twin is not None
    before, after = scene.objects[0].attributes(), twin.objects[0].attributes()
    assert [a for a in ATTRIBUTES if before[a] != after[a]] == [attribute]
    assert [o.attributes() for o in twin.objects[1:]] == [o.attributes() for o in scene.objects[1:]]
    assert twin.background == scene.background
    assert twin.long_caption != scene.long_caption
    assert np.any(np.asarray(twin.image) != np.asarray(scene.image))
    # the caption writer saw the twin: its sentence for object 0 names the new value
    value = POSITION_PHRASES[after[attribute]] if attribute == "position" else after[attribute]
    assert value in twin.object_sentence(0).text.lower()


def test_twin_of_a_wrong_object_range_is_refused():
    scene = generate_scene(seed=(0, 0, 3), image_size=64, n_objects=(2, 6))
    with pytest.raises(ExplorerError):
        counterfactual_twin(scene, "shape", 0, np.random.default_rng(1), (2, 2))
