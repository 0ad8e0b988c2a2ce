"""The demo base's stages (explorer.training.demo_base): patch labels and cell occupancy from the world, the
seeing stage's heads (trained, then dropped), the reading stage's object-sentence loss, the binding stage's
NegCLIP term, and the build's learning curves."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from explorer.data import generate_scenes
from explorer.models.batch import TrainingBatch
from explorer.models.methods.clip import ClipMethod
from explorer.training.demo_base import (OBJECT_ATTRIBUTES, OCCUPANCY_TARGETS, PAIR_TARGETS, PATCH_ATTRIBUTES,
                                         PATCH_TARGETS, BindingClip, ReadingClip, SeeingClip, as_clip, as_stage,
                                         occupancy, patch_attributes)
from explorer.core.errors import ExplorerError


@pytest.fixture(scope="module")
def scenes():
    return list(generate_scenes(6, seed=5, image_size=64))


def test_patch_labels_follow_the_objects_pixels(scenes):
    for scene in scenes:
        targets = patch_attributes(scene, 16)
        assert targets.shape == (len(PATCH_ATTRIBUTES), 256)
        labels = scene.labels.reshape(16, 4, 16, 4).transpose(0, 2, 1, 3).reshape(256, 16)
        for patch in range(256):
            counts = np.bincount(labels[patch], minlength=len(scene.objects) + 1)[1:]
            if counts.max() < 4:  # under a quarter of the patch: no object
                assert (targets[:, patch] == 0).all()
                continue
            owner = scene.objects[int(counts.argmax())]
            for a, (attribute, values) in enumerate(PATCH_ATTRIBUTES.items()):
                assert targets[a, patch] == values.index(getattr(owner, attribute)) + 1
        # every object of a scene labels some patch (even a small one, 7-9 px over 4 px patches)
        shapes = {int(v) for v in targets[1] if v}
        assert shapes == {PATCH_ATTRIBUTES["shape"].index(o.shape) + 1 for o in scene.objects}


def _tiny():
    return ClipMethod.example("tiny", seed=0)


def test_the_occupancy_target_marks_the_cells_that_hold_an_object_and_the_seeing_stage_scores_it(scenes):
    """The seeing stage's place signal: which of the 9 cells hold an object, read by a head on the pooled
    embedding (binary cross-entropy), so an attention pool learns where things are."""
    import dataclasses

    import torch.nn.functional as F

    from explorer.data.vocabulary import POSITIONS
    from explorer.training.demo_zoo import collate_scenes

    for scene in scenes:
        cells = occupancy(scene)
        assert {POSITIONS[i] for i in torch.nonzero(cells).flatten().tolist()} == {o.position for o in scene.objects}
    torch.manual_seed(0)
    seeing = as_stage("see", ClipMethod(dataclasses.replace(_tiny().arch, patch_size=4, pool="attn")))
    batch = collate_scenes(scenes, seeing, stage="see")
    targets = batch.extras[OCCUPANCY_TARGETS]
    assert torch.equal(targets, torch.stack([occupancy(s) for s in scenes]))
    with torch.no_grad():
        expected = F.binary_cross_entropy_with_logits(seeing.occupancy_head(seeing.encode_image(batch.pixels).cls),
                                                      targets)
        assert torch.allclose(seeing.losses(batch)["occupancy"], expected)
        right = ((seeing.occupancy_head(seeing.encode_image(batch.pixels).cls) > 0) == targets.bool()).float().mean()
        accuracy = seeing.patch_accuracy(batch.pixels, batch.extras[PATCH_TARGETS], batch.extras[PAIR_TARGETS],
                                         targets)
        assert accuracy["occupancy"] == pytest.approx(float(right))
    plain = as_clip(seeing)
    assert plain.arch.pool == "attn" and not any(k.startswith("occupancy_head") for k in plain.state_dict())


def test_seeing_stage_learns_the_patches_and_saves_as_a_plain_clip(scenes):
    from explorer.training.demo_zoo import collate_scenes

    import dataclasses

    torch.manual_seed(0)
    clip = ClipMethod(dataclasses.replace(_tiny().arch, patch_size=4))  # the demo's 16 x 16 grid
    seeing = as_stage("see", clip)
    assert isinstance(seeing, SeeingClip)
    batch = collate_scenes(scenes, seeing, stage="see")
    assert batch.extras[PATCH_TARGETS].shape == (len(scenes), 4, 256)
    optimizer = torch.optim.AdamW(seeing.parameters(), lr=3e-3)
    before = sum(seeing.losses(batch).values()).item()
    for _ in range(30):
        optimizer.zero_grad()
        sum(seeing.losses(batch).values()).backward()
        optimizer.step()
    after = sum(seeing.losses(batch).values()).item()
    assert after < 0.7 * before
    accuracy = seeing.patch_accuracy(batch.pixels, batch.extras[PATCH_TARGETS], batch.extras[PAIR_TARGETS])
    assert set(accuracy) == {*PATCH_ATTRIBUTES, "pairs"} and accuracy["colour"] > 0.5
    plain = as_clip(seeing)
    assert type(plain) is ClipMethod and not any(k.startswith("attribute_heads") for k in plain.state_dict())
    for key, value in plain.state_dict().items():
        torch.testing.assert_close(value, seeing.state_dict()[key], rtol=0, atol=0)


def test_reading_stage_adds_every_object_sentence_against_every_picture():
    method = as_stage("read", _tiny())
    assert isinstance(method, ReadingClip)
    pixels = torch.randn(3, 3, 64, 64)
    batch = TrainingBatch(pixels=pixels, captions=["a red square. a blue ring.", "a green star.", "a pink heart."],
                          sentences=[["a red square.", "a blue ring."], ["a green star."], ["a pink heart."]])
    losses = method.losses(batch)
    assert set(losses) == {"contrastive", "object sentences"}
    assert all(torch.isfinite(v) for v in losses.values())
    # the sentence term is the multi-positive loss over the batch's sentences and their owners
    from explorer.models.methods.base import cosine_matrix
    from explorer.models.nn.losses import multi_positive_nce

    with torch.no_grad():
        image = method.encode_image(pixels).cls
        texts = method.encode_captions([t for group in batch.sentences for t in group]).eot
        expected = multi_positive_nce(method.logit_scale.exp() * cosine_matrix(image, texts), torch.tensor([0, 0, 1, 2]))
    torch.testing.assert_close(losses["object sentences"].detach(), expected)


def test_binding_stage_puts_each_captions_negatives_in_the_image_softmax():
    from explorer.models.nn.losses import image_to_text_with_negatives

    method = as_stage("bind", _tiny())
    assert isinstance(method, BindingClip)
    pixels = torch.randn(2, 3, 64, 64)
    captions = ["a red square. a blue ring.", "a green star."]
    negatives = [["a red circle. a blue ring.", "a red square. a blue cross."], ["a green heart."]]
    batch = TrainingBatch(pixels=pixels, captions=captions, sentences=[c.split(". ") for c in captions],
                          negative_captions=negatives)
    losses = method.losses(batch)
    assert set(losses) == {"contrastive", "object sentences", "hard negatives"}
    with torch.no_grad():
        image = torch.nn.functional.normalize(method.encode_image(pixels).cls, dim=-1)
        texts = torch.nn.functional.normalize(method.encode_captions(captions + negatives[0] + negatives[1]).eot, dim=-1)
        logits = method.logit_scale.exp() * image @ texts.T
        # image i against both captions and all three negatives of the batch; its own caption is the target
        expected = torch.nn.functional.cross_entropy(logits, torch.tensor([0, 1]))
    torch.testing.assert_close(losses["hard negatives"].detach(), expected)
    torch.testing.assert_close(image_to_text_with_negatives(logits[:, :2], logits[:, 2:]), expected)
    # a negative the model reads as its caption (the change past the context's cut) is left out, not a
    # "negative" equal to the positive
    cut = method.context_length
    long = " ".join(["a red square."] * cut)
    assert method.read_apart(long, [long + " a blue ring.", "a red circle."]) == ["a red circle."]
    batch.require("negative_captions")
    with pytest.raises(ExplorerError, match="negative_captions"):
        method.losses(TrainingBatch(pixels=pixels, captions=captions, sentences=batch.sentences))


def test_binding_stage_keeps_the_seeing_stages_patch_heads_on_and_saves_as_a_plain_clip(scenes):
    """With the patches' labels in the batch, the binding stage adds the seeing stage's cross-entropy per
    attribute (fresh heads), so the tower keeps what it saw; the heads are training-only."""
    import dataclasses

    import torch.nn.functional as F

    from explorer.training.demo_zoo import collate_scenes

    torch.manual_seed(0)
    binding = as_stage("bind", ClipMethod(dataclasses.replace(_tiny().arch, patch_size=4)))
    batch = collate_scenes(scenes[:3], binding, stage="bind")
    batch = dataclasses.replace(batch, captions=[s.long_caption for s in scenes[:3]],
                                sentences=[[t.text for t in s.sentences if t.kind == "object"] for s in scenes[:3]])
    assert batch.extras[PATCH_TARGETS].shape == (3, 4, 256)
    losses = binding.losses(batch)
    assert set(losses) == {"contrastive", "object sentences", "hard negatives",
                           *(f"patch {a}" for a in PATCH_ATTRIBUTES)}
    with torch.no_grad():
        patches = binding.encode_image(batch.pixels).patches
        targets = batch.extras[PATCH_TARGETS]
        on_shape = targets[:, 1] > 0
        expected = F.cross_entropy(binding.attribute_heads[1](patches)[on_shape], targets[:, 1][on_shape])
    torch.testing.assert_close(losses["patch shape"].detach(), expected)
    plain = as_clip(binding)
    assert type(plain) is ClipMethod and not any(k.startswith("attribute_heads") for k in plain.state_dict())


def test_placing_stage_teaches_each_object_patch_the_cell_of_its_object(scenes):
    """Stage "place" is the binding stage with one more patch head: the cell (of 9) of the object a patch
    shows, so that the patch features, not only the pooled embedding, say where things are."""
    import dataclasses

    import torch.nn.functional as F

    from explorer.training.demo_zoo import collate_scenes, training_samples

    torch.manual_seed(0)
    placing = as_stage("place", ClipMethod(dataclasses.replace(_tiny().arch, patch_size=4)))
    batch = collate_scenes(scenes[:3], placing, stage="place")
    batch = dataclasses.replace(batch, captions=[s.long_caption for s in scenes[:3]],
                                sentences=[[t.text for t in s.sentences if t.kind == "object"] for s in scenes[:3]])
    targets = batch.extras[PATCH_TARGETS]
    assert targets.shape == (3, 5, 256) and list(OBJECT_ATTRIBUTES)[4] == "position"
    for scene, labels in zip(scenes[:3], targets):
        on_object = labels[0] > 0
        assert ((labels[4] > 0) == on_object).all()  # the same patches as the other heads
        seen = {(int(c), int(p)) for c, p in zip(labels[0][on_object], labels[4][on_object])}
        truth = {(OBJECT_ATTRIBUTES["colour"].index(o.colour) + 1, OBJECT_ATTRIBUTES["position"].index(o.position) + 1)
                 for o in scene.objects}
        assert {p for _, p in truth} == {p for _, p in seen} and seen <= truth  # each patch: its own object's cell
    losses = placing.losses(batch)
    assert set(losses) == {"contrastive", "object sentences", "hard negatives",
                           *(f"patch {a}" for a in OBJECT_ATTRIBUTES)}
    with torch.no_grad():
        patches = placing.encode_image(batch.pixels).patches
        on_object = targets[:, 4] > 0
        expected = F.cross_entropy(placing.attribute_heads[4](patches)[on_object], targets[:, 4][on_object])
    torch.testing.assert_close(losses["patch position"].detach(), expected)
    assert all(s.negative_captions for s in training_samples(scenes, "long", stage="place"))
    plain = as_clip(placing)
    assert type(plain) is ClipMethod and not any(k.startswith("attribute_heads") for k in plain.state_dict())


def test_place_background_scores_the_place_head_on_every_patch(scenes):
    """"place-background": the place head learns "no object" on the background too; the other heads and the
    plain "place" stage score only the patches an object covers."""
    import dataclasses

    import torch.nn.functional as F

    from explorer.training.demo_zoo import collate_scenes

    torch.manual_seed(0)
    arch = dataclasses.replace(_tiny().arch, patch_size=4)
    placing = as_stage("place-background", ClipMethod(arch))
    batch = collate_scenes(scenes[:3], placing, stage="place-background")
    batch = dataclasses.replace(batch, captions=[s.long_caption for s in scenes[:3]],
                                sentences=[[t.text for t in s.sentences if t.kind == "object"] for s in scenes[:3]])
    targets = batch.extras[PATCH_TARGETS]
    assert (targets[:, 4] == 0).any()  # background patches are in the batch
    with torch.no_grad():
        losses = placing.losses(batch)
        logits = placing.attribute_heads[4](placing.encode_image(batch.pixels).patches)
        everywhere = F.cross_entropy(logits.flatten(0, 1), targets[:, 4].flatten())
        on_object = targets[:, 1] > 0
        shape = F.cross_entropy(placing.attribute_heads[1](placing.encode_image(batch.pixels).patches)[on_object],
                                targets[:, 1][on_object])
        plain = as_stage("place", ClipMethod(arch))
        plain.load_state_dict(placing.state_dict())
        object_only = plain.losses(batch)["patch position"]
    torch.testing.assert_close(losses["patch position"], everywhere)
    torch.testing.assert_close(losses["patch shape"], shape)
    assert not torch.isclose(object_only, everywhere)
    # "place-balanced": half the object patches' mean, half the background's, the other heads unchanged
    balanced = as_stage("place-balanced", ClipMethod(arch))
    balanced.load_state_dict(placing.state_dict())
    with torch.no_grad():
        halves = balanced.losses(batch)
        background = F.cross_entropy(logits[targets[:, 4] == 0], targets[:, 4][targets[:, 4] == 0])
    torch.testing.assert_close(halves["patch position"], 0.5 * (object_only + background))
    torch.testing.assert_close(halves["patch shape"], shape)
    assert not torch.isclose(halves["patch position"], everywhere)


def test_binding_samples_carry_the_worlds_negatives(scenes):
    from explorer.training.demo_zoo import collate_scenes, training_samples

    samples = training_samples(scenes, "long", stage="bind")
    for sample, scene in zip(samples, scenes):
        assert sample.negative_captions == [n.caption for n in scene.hard_negatives] and len(sample.negative_captions) == 5
        assert all(n != scene.long_caption for n in sample.negative_captions)
        assert sample.sentences == [s.text for s in scene.sentences if s.kind == "object"]
    assert all(s.negative_captions is None for s in training_samples(scenes, "long", stage="read"))
    batch = collate_scenes(scenes, as_stage("bind", _tiny()), stage="bind")
    assert batch.negative_captions == [[n.caption for n in s.hard_negatives] for s in scenes]


def test_a_negative_one_word_away_costs_more_the_closer_it_scores():
    from explorer.models.nn.losses import image_to_text_with_negatives

    logits = torch.tensor([[5.0, 0.0], [0.0, 5.0]])
    far = image_to_text_with_negatives(logits, torch.full((2, 1), -5.0))
    near = image_to_text_with_negatives(logits, torch.full((2, 1), 4.9))
    assert near > far + 0.5 and far == pytest.approx(torch.nn.functional.cross_entropy(logits, torch.arange(2)).item(),
                                                     abs=1e-3)


def test_multi_positive_nce_is_lowest_when_each_text_points_at_its_owner():
    from explorer.models.nn.losses import multi_positive_nce

    owner = torch.tensor([0, 0, 1])
    right = torch.tensor([[9.0, 9.0, 0.0], [0.0, 0.0, 9.0]])
    wrong = torch.tensor([[0.0, 0.0, 9.0], [9.0, 9.0, 0.0]])
    # image 0 owns two equally likely texts: each is a target of its own, so its floor is log 2 (not 0)
    assert multi_positive_nce(right, owner).item() == pytest.approx(np.log(2) / 4, abs=1e-3)
    assert multi_positive_nce(wrong, owner) > 5


def test_stage_curves_are_written_against_samples_seen(tmp_path, scenes, monkeypatch):
    import explorer.training.demo_zoo as demo_zoo

    monkeypatch.setattr(demo_zoo, "CURVE_EVERY", 2)
    run = demo_zoo.DemoRun("clip-base", "clip", steps=4, stage="read", batch_size=8)
    method = as_stage("read", _tiny())
    hook = demo_zoo.stage_curve(method, run, scenes, tmp_path)
    hook({"step": 1})
    hook({"step": 2})
    rows = [json.loads(line) for line in (tmp_path / demo_zoo.CURVES_FILE).read_text().splitlines()]
    assert len(rows) == 1 and rows[0]["samples"] == 16 and rows[0]["measure"] == "fair hard-negative accuracy"
    assert {"colour", "shape", "size", "texture", "position"} <= set(rows[0])
    assert method.training  # the hook gives the method back in training mode


def test_a_resumed_stage_replaces_the_curve_points_logged_past_its_checkpoint(tmp_path, scenes, monkeypatch):
    """A run killed at step 3 and resumed from its checkpoint at step 1 logs step 2 again: one point a step."""
    import explorer.training.demo_zoo as demo_zoo

    monkeypatch.setattr(demo_zoo, "CURVE_EVERY", 1)
    run = demo_zoo.DemoRun("clip-base", "clip", steps=4, stage="read", batch_size=8)
    method = as_stage("read", _tiny())
    killed = demo_zoo.stage_curve(method, run, scenes, tmp_path)
    for step in (1, 2, 3):
        killed({"step": step})
    resumed = demo_zoo.stage_curve(method, run, scenes, tmp_path)
    for step in (2, 3, 4):
        resumed({"step": step})
    rows = [json.loads(line) for line in (tmp_path / demo_zoo.CURVES_FILE).read_text().splitlines()]
    assert [row["step"] for row in rows] == [1, 2, 3, 4]


def test_attribute_pairs_name_each_objects_pairs_and_nothing_else(scenes):
    from explorer.training.demo_base import ATTRIBUTE_PAIRS, OBJECT_ATTRIBUTES, PAIR_OFFSETS, attribute_pairs

    assert len(ATTRIBUTE_PAIRS) == 10  # every pair of colour, shape, size, texture, position
    for scene in scenes:
        pairs = attribute_pairs(scene)
        expected = set()
        for obj in scene.objects:
            for offset, (a, b) in zip(PAIR_OFFSETS, ATTRIBUTE_PAIRS):
                expected.add(int(offset) + OBJECT_ATTRIBUTES[a].index(getattr(obj, a)) * len(OBJECT_ATTRIBUTES[b])
                             + OBJECT_ATTRIBUTES[b].index(getattr(obj, b)))
        assert set(torch.nonzero(pairs).flatten().tolist()) == expected
    # a shape twin changes the shape pairs of one object and nothing else
    from explorer.data.counterfactual import counterfactual_twin

    scene = scenes[0]
    twin = counterfactual_twin(scene, "shape", 0, np.random.default_rng(0), (2, 6))
    changed = torch.nonzero(attribute_pairs(scene) != attribute_pairs(twin)).flatten().tolist()
    shape_blocks = [i for i, pair in enumerate(ATTRIBUTE_PAIRS) if "shape" in pair]
    assert changed and all(any(PAIR_OFFSETS[k] <= c < PAIR_OFFSETS[k + 1] for k in shape_blocks) for c in changed)


def test_the_seeing_curve_labels_its_held_out_scenes_once(tmp_path, scenes, monkeypatch):
    import dataclasses

    import explorer.training.demo_zoo as demo_zoo

    monkeypatch.setattr(demo_zoo, "CURVE_EVERY", 1)
    calls = []
    real = demo_zoo.collate_scenes
    monkeypatch.setattr(demo_zoo, "collate_scenes", lambda *a, **k: calls.append(1) or real(*a, **k))
    method = as_stage("see", ClipMethod(dataclasses.replace(_tiny().arch, patch_size=4)))
    hook = demo_zoo.stage_curve(method, demo_zoo.DemoRun("clip-see", "clip", steps=3, stage="see"), scenes, tmp_path)
    for step in (1, 2, 3):
        hook({"step": step})
    rows = [json.loads(line) for line in (tmp_path / demo_zoo.CURVES_FILE).read_text().splitlines()]
    assert len(rows) == 3 and len(calls) == 1 and {"shape", "pairs"} <= set(rows[0])
