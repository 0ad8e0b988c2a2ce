"""The synthetic long-caption world: seeded scenes whose pictures, masks and captions agree."""

from __future__ import annotations

import re

import cv2
import numpy as np
import pytest

from explorer.core.sentences import split_sentences
from explorer.data import generate_scene, generate_scenes
from explorer.data.captions import NEGATIVE_ATTRIBUTES
from explorer.data.drawing import texture_colour
from explorer.data.vocabulary import (BACKGROUND_COLOURS, COLOURS, COUNT_WORDS, POSITION_PHRASES, POSITIONS, SHAPES,
                                      SIZES, TEXTURES)
from explorer.models.tokenizer import count_tokens
from explorer.core.errors import ExplorerError

SIZE = 64


@pytest.fixture(scope="module")
def scenes():
    return list(generate_scenes(60, seed=11, image_size=SIZE))


def _words(text: str) -> list[str]:
    return re.findall(r"[a-z]+(?:-[a-z]+)?", text.lower())


def _has_phrase(text: str, phrase: str) -> bool:
    return re.search(rf"\b{re.escape(phrase)}\b", text.lower()) is not None


def _same(a, b) -> bool:
    return (np.array_equal(np.asarray(a.image), np.asarray(b.image)) and np.array_equal(a.labels, b.labels)
            and a.long_caption == b.long_caption and a.short_caption == b.short_caption
            and a.dense_caption == b.dense_caption and a.sentences == b.sentences
            and a.hard_negatives == b.hard_negatives and a.objects == b.objects and a.background == b.background)


def test_same_seed_gives_identical_pixels_masks_and_captions():
    assert _same(generate_scene(5, SIZE), generate_scene(5, SIZE))
    noisy = next(s for s in (generate_scene(i, SIZE) for i in range(40)) if s.background.kind == "noise")
    assert _same(noisy, generate_scene(noisy.seed, SIZE))  # pixel noise is seeded too


def test_different_seeds_give_different_scenes():
    a, b = generate_scene(5, SIZE), generate_scene(6, SIZE)
    assert not np.array_equal(np.asarray(a.image), np.asarray(b.image))
    assert a.long_caption != b.long_caption
    captions = {s.long_caption for s in (generate_scene(i, SIZE) for i in range(30))}
    assert len(captions) == 30


def test_a_scene_is_the_same_at_every_image_size():
    small, large = generate_scene(9, 64), generate_scene(9, 160)
    assert small.long_caption == large.long_caption and small.hard_negatives == large.hard_negatives
    assert [o.attributes() for o in small.objects] == [o.attributes() for o in large.objects]
    for a, b in zip(small.objects, large.objects):  # the same layout, scaled
        assert np.allclose(np.array(a.box) / 64, np.array(b.box) / 160, atol=3 / 64)
    assert large.image.size == (160, 160) and large.labels.shape == (160, 160)


def test_stream_scenes_do_not_depend_on_what_came_before():
    full = list(generate_scenes(4, seed=2, image_size=SIZE, split="test"))
    tail = list(generate_scenes(2, seed=2, image_size=SIZE, split="test", start=2))
    assert [s.id for s in full] == [f"test-{i:06d}" for i in range(4)]
    assert all(_same(a, b) for a, b in zip(full[2:], tail))
    train = next(generate_scenes(1, seed=2, image_size=SIZE, split="train"))
    assert train.long_caption != full[0].long_caption  # splits are separate streams


def test_bad_arguments_are_refused():
    with pytest.raises(ExplorerError):
        generate_scene(0, image_size=16)
    with pytest.raises(ExplorerError):
        generate_scene(-1)
    with pytest.raises(ExplorerError):
        generate_scene(0, n_objects=7)
    with pytest.raises(ExplorerError):
        next(generate_scenes(1, split="validation"))


def test_objects_have_vocabulary_attributes_and_distinct_cells(scenes):
    counts = set()
    for scene in scenes:
        counts.add(len(scene.objects))
        assert 2 <= len(scene.objects) <= 6
        assert len({o.position for o in scene.objects}) == len(scene.objects)
        assert len({o.name for o in scene.objects}) == len(scene.objects)  # 'the red triangle' is unique
        for k, o in enumerate(scene.objects):
            assert o.index == k
            assert (o.shape in SHAPES and o.colour in COLOURS and o.size in SIZES and o.texture in TEXTURES
                    and o.position in POSITIONS)
    assert counts == {2, 3, 4, 5, 6}
    assert generate_scene(1, SIZE, n_objects=4).objects.__len__() == 4


def test_masks_are_non_empty_inside_their_box_and_cell_and_disjoint(scenes):
    for scene in scenes:
        masks = scene.masks
        assert masks.shape == (len(scene.objects), SIZE, SIZE) and masks.dtype == bool
        assert masks.sum(axis=0).max() <= 1
        cell = SIZE / 3
        for o, mask in zip(scene.objects, masks):
            assert mask.any(), (scene.id, o)
            x0, y0, x1, y1 = o.box
            inside = np.zeros_like(mask)
            inside[y0:y1, x0:x1] = True
            assert not (mask & ~inside).any()
            assert mask[y0].any() and mask[y1 - 1].any() and mask[:, x0].any() and mask[:, x1 - 1].any()  # tight
            row, col = o.cell
            assert col * cell - 1 <= x0 and x1 <= (col + 1) * cell + 1
            assert row * cell - 1 <= y0 and y1 <= (row + 1) * cell + 1


def test_masks_show_the_objects_colours():
    """The truth matches the pixels: inside a mask, pixels carry the object's colours, not the background's."""
    for scene in generate_scenes(20, seed=3, image_size=128):
        pixels = np.asarray(scene.image).astype(float)
        for o, mask in zip(scene.objects, scene.masks):
            interior = cv2.erode(mask.astype(np.uint8), np.ones((3, 3), np.uint8)).astype(bool)  # no edge pixels
            inside = pixels[interior if interior.sum() >= 4 else mask]
            # each pixel is a mix of the object's colour and its texture colour
            a = np.array(COLOURS[o.colour], dtype=float)
            b = a if o.texture == "solid" else np.array(texture_colour(o.colour), dtype=float)
            along = np.clip((inside - a) @ (b - a) / max(float((b - a) @ (b - a)), 1e-9), 0.0, 1.0)
            nearest = np.linalg.norm(inside - (a + along[:, None] * (b - a)), axis=1)
            assert np.median(nearest) < 10, (scene.id, o.name, o.texture)


def test_size_words_match_the_drawn_sizes(scenes):
    cell = SIZE / 3
    for scene in scenes:
        for o in scene.objects:
            low, high = SIZES[o.size]
            side = max(o.box[2] - o.box[0], o.box[3] - o.box[1]) / cell
            assert low - 3 / cell <= side <= high + 2 / cell, (scene.id, o.name, o.size, side)


def test_every_sentence_links_to_existing_objects(scenes):
    for scene in scenes:
        n = len(scene.objects)
        kinds = [s.kind for s in scene.sentences]
        assert kinds[0] == "summary" and "summary" not in kinds[1:]
        assert scene.sentences[0].objects == tuple(range(n))
        for s in scene.sentences:
            assert s.objects and all(0 <= k < n for k in s.objects)
            if s.kind == "object":
                assert len(s.objects) == 1
            if s.kind == "relation":
                assert len(s.objects) == 2 and s.objects[0] != s.objects[1] and s.relation
        assert sorted(s.objects[0] for s in scene.sentences if s.kind == "object") == list(range(n))
        assert sum(s.kind == "relation" for s in scene.sentences) >= 1
        sentence_masks = scene.sentence_masks()
        assert sentence_masks.shape == (len(scene.sentences), SIZE, SIZE)
        assert np.array_equal(sentence_masks[0], scene.labels > 0)


def test_object_sentence_names_colour_shape_size_texture_and_position(scenes):
    for scene in scenes:
        for k, o in enumerate(scene.objects):
            text = scene.object_sentence(k).text
            for word in (o.colour, o.shape, o.size, o.texture):
                assert word in _words(text), (text, word)
            assert _has_phrase(text, POSITION_PHRASES[o.position]), text
            others = set(COLOURS) - {o.colour}
            assert not others & set(_words(text)), text  # no other colour is mentioned


def test_relation_sentences_are_true_of_the_picture(scenes):
    seen = set()
    for scene in scenes:
        for s in scene.sentences:
            if s.kind != "relation":
                continue
            a, b = (scene.objects[k] for k in s.objects)
            assert a.name in s.text.lower() and b.name in s.text.lower()
            seen.add(s.relation)
            if s.relation == "above":
                assert a.box[3] <= b.box[1]
            elif s.relation == "below":
                assert a.box[1] >= b.box[3]
            elif s.relation == "left of":
                assert a.box[2] <= b.box[0]
            elif s.relation == "right of":
                assert a.box[0] >= b.box[2]
            elif s.relation == "larger than":
                assert a.extent > b.extent and a.size != b.size
            else:
                assert s.relation == "smaller than" and a.extent < b.extent and a.size != b.size
    assert seen == {"above", "below", "left of", "right of", "larger than", "smaller than"}


def test_long_caption_starts_with_the_summary_and_the_rest_is_shuffled(scenes):
    first_relation = set()
    for scene in scenes:
        summary = scene.sentences[0].text
        assert scene.long_caption.startswith(summary + " ")
        assert COUNT_WORDS[len(scene.objects)] in _words(summary)
        assert _has_phrase(summary, scene.background.name)
        assert scene.long_caption == " ".join(scene.sentence_texts)
        kinds = [s.kind for s in scene.sentences]
        first_relation.add(kinds.index("relation"))
        objects_in_order = [s.objects[0] for s in scene.sentences if s.kind == "object"]
        first_relation.add(("sorted", objects_in_order == sorted(objects_in_order)))
    assert len([x for x in first_relation if isinstance(x, int)]) >= 4  # relations land anywhere
    assert ("sorted", False) in first_relation


def test_split_sentences_returns_exactly_the_scene_sentences(scenes):
    for scene in scenes:
        assert split_sentences(scene.long_caption) == scene.sentence_texts
        dense = split_sentences(scene.dense_caption)
        assert dense[: len(scene.sentences)] == scene.sentence_texts and len(dense) > len(scene.sentences)


def test_hard_negatives_change_exactly_one_attribute(scenes):
    for scene in scenes:
        assert [n.attribute for n in scene.hard_negatives] == list(NEGATIVE_ATTRIBUTES)
        long = scene.long_caption
        for n in scene.hard_negatives:
            o = scene.objects[n.object]
            assert n.caption != long and not re.search(r"\ba [aeiou]", n.caption.lower())
            assert long[n.start:n.start + len(n.original)] == n.original
            assert n.caption == long[:n.start] + n.replacement + long[n.start + len(n.original):]
            sentence = scene.sentences[n.sentence]
            assert sentence.kind == "object" and sentence.objects == (n.object,)
            start = long.index(sentence.text)
            assert start <= n.start and n.start + len(n.original) <= start + len(sentence.text)
            if n.attribute == "position":
                assert n.original.lower() == POSITION_PHRASES[o.position]
                assert n.replacement.lower() == POSITION_PHRASES[n.value]
                assert n.value not in {p.position for p in scene.objects}  # false of every object
            else:
                truth = getattr(o, n.attribute)
                assert n.original == truth and n.replacement == n.value != truth
                before, after = long.split(" "), n.caption.split(" ")
                assert len(before) == len(after)
                changed = [(x, y) for x, y in zip(before, after) if x != y]
                assert len(changed) == 1
                assert changed[0][0].strip(".,;") == truth and changed[0][1].strip(".,;") == n.value


def test_hard_negatives_cover_every_value():
    seen = {a: set() for a in NEGATIVE_ATTRIBUTES}
    for scene in generate_scenes(80, seed=4, image_size=32):
        for n in scene.hard_negatives:
            seen[n.attribute].add(n.value)
    assert seen["colour"] == set(COLOURS) and seen["shape"] == set(SHAPES)
    assert seen["size"] == set(SIZES) and seen["texture"] == set(TEXTURES) and seen["position"] == set(POSITIONS)


def test_long_captions_often_pass_77_tokens_and_fit_248(scenes):
    lengths = np.array([count_tokens(s.long_caption) for s in scenes])
    assert (lengths > 77).mean() >= 0.4
    assert (lengths <= 77).mean() >= 0.15  # two- and three-object scenes stay short
    assert lengths.max() <= 248
    assert max(count_tokens(s.short_caption) for s in scenes) <= 77


def test_short_and_dense_captions(scenes):
    for scene in scenes:
        short = scene.short_caption
        for o in scene.objects:
            assert o.name in short.lower()
        assert _has_phrase(short, scene.background.name) and " an orange " not in scene.long_caption
        assert not re.search(r"\ba [aeiou]", short.lower()) and not re.search(r"\ban [^aeiou]", short.lower())
        assert scene.dense_caption.startswith(scene.long_caption + " ")
        extra = scene.dense_caption[len(scene.long_caption):]
        for o in scene.objects:
            assert o.name in extra and f"{round(o.extent * 100)}%" in extra


def test_backgrounds_vary_and_are_named(scenes):
    kinds = {s.background.kind for s in scenes}
    colours = {s.background.colour for s in scenes}
    assert kinds == {"plain", "gradient", "noise"} and len(colours) >= 6
    for scene in scenes:
        assert scene.background.colour in BACKGROUND_COLOURS
        if scene.background.kind == "plain":
            corner = np.asarray(scene.image)[0, 0]
            assert np.abs(corner.astype(int) - BACKGROUND_COLOURS[scene.background.colour]).max() <= 1 or \
                scene.labels[0, 0] != 0
