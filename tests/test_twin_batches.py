"""Twin batches: each scene followed by counterfactual twins, the same batches on a resumed epoch."""

from __future__ import annotations

import pytest

from explorer.data.counterfactual import ATTRIBUTES
from explorer.data.synthetic import generate_scene
from explorer.models.preprocess import Preprocess
from explorer.training.samples import TrainingSample
from explorer.training.twin_batches import TwinBatches
from explorer.core.errors import ExplorerError

N_OBJECTS = (2, 6)


@pytest.fixture(scope="module")
def scenes():
    return [generate_scene(seed=(0, 0, i), image_size=32, n_objects=N_OBJECTS) for i in range(12)]


def _samples(scenes):
    return [TrainingSample(image=s.image, caption=s.long_caption, short_caption=s.id) for s in scenes]


def _source(scenes, **options):
    options = {"batch_size": 8, "twins": 1, "n_objects": N_OBJECTS, **options}
    return TwinBatches(scenes, _samples, Preprocess(image_size=32), **options)


def test_each_scene_is_followed_by_its_twins_that_change_one_attribute_of_one_object(scenes):
    source = _source(scenes, twins=3)
    by_id = {s.id: s for s in scenes}
    picked = source.batch_scenes(epoch=0, b=0)
    assert len(picked) == 8 and picked[0].id in by_id
    groups = []  # [scene, twins...] as the batch lists them
    for scene in picked:
        if scene.id in by_id:
            groups.append([scene])
        else:
            groups[-1].append(scene)
    assert len(groups[0]) == 4  # a scene and its three twins
    for scene, *twins in groups:
        assert len({t.long_caption for t in [scene, *twins]}) == 1 + len(twins)
        changed = []
        for twin in twins:
            assert twin.id.startswith(scene.id + "-")
            differing = {(o.index, a) for o, p in zip(scene.objects, twin.objects)
                         for a in ATTRIBUTES if o.attributes()[a] != p.attributes()[a]}
            assert len(differing) == 1
            changed.append(next(iter(differing))[1])
        assert len(set(changed)) == len(changed)  # each twin changes another attribute


def test_a_resumed_epoch_sees_the_batches_an_uninterrupted_one_would(scenes):
    source = _source(scenes)
    assert len(source) == len(scenes) // 4  # 4 scenes (and 4 twins) a batch
    whole = [b.short_captions for b in source.batches(epoch=1)]
    assert [b.short_captions for b in source.batches(epoch=1, start=1)] == whole[1:]
    other = [b.short_captions for b in source.batches(epoch=2)]
    assert [ids[0] for ids in whole] != [ids[0] for ids in other]  # another epoch, the scenes in another order
    assert all(len(ids) == 8 for ids in whole)


def test_a_twin_the_model_cannot_tell_from_its_scene_is_left_out(scenes):
    # a model that reads nothing of the caption: every twin reads as its scene, so batches hold scenes only
    source = _source(scenes, reads=lambda scene: "")
    picked = source.batch_scenes(epoch=0, b=0)
    assert len(picked) == 8 and {s.id for s in picked} <= {s.id for s in scenes}


def test_a_batch_with_no_room_for_a_twin_is_refused(scenes):
    with pytest.raises(ExplorerError):
        _source(scenes, batch_size=1)
