"""Counterfactual twins of a scene: the same scene with one attribute of one object changed.

    twin = counterfactual_twin(scene, "shape", k=1, rng=np.random.default_rng(0))
    twin.image, twin.short_caption, twin.long_caption

A twin is regenerated from the scene's own seed (``Scene.seed``): the same background,
layout, templates, relation pairs and pixel noise, with one object's colour, shape, size,
texture or position replaced, then drawn by the world's renderer and captioned by the world's
caption writer (``write_captions`` with the layout stream at the same state), so every word of
the twin's captions is true of the twin's picture. The changed value follows the world's rules:
a colour that stands out from the background, a (colour, shape) pair unique in the scene, a
position in an empty cell (as the hard negatives do).
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from explorer.core.errors import InputError
from explorer.data.captions import write_captions
from explorer.data.drawing import box_of, render
from explorer.data.scene import Scene, SceneObject
from explorer.data.synthetic import (CELL_MARGIN, sample_background, sample_objects, scene_generators,
                                     usable_colours)
from explorer.data.vocabulary import MAX_OBJECTS, MIN_OBJECTS, POSITIONS, SHAPES, SIZES, TEXTURES

ATTRIBUTES = ("colour", "shape", "size", "texture", "position")


def _changed(obj: SceneObject, attribute: str, objects, background, rng: np.random.Generator) -> SceneObject:
    """``obj`` with ``attribute`` set to another value the world allows."""
    pairs = {(o.colour, o.shape) for o in objects if o.index != obj.index}
    if attribute == "colour":
        choices = [c for c in usable_colours(background) if c != obj.colour and (c, obj.shape) not in pairs]
    elif attribute == "shape":
        choices = [s for s in SHAPES if s != obj.shape and (obj.colour, s) not in pairs]
    elif attribute == "size":
        choices = [s for s in SIZES if s != obj.size]
    elif attribute == "texture":
        choices = [t for t in TEXTURES if t != obj.texture]
    else:
        taken = {o.position for o in objects}
        choices = [p for p in POSITIONS if p not in taken]
    if not choices:
        return obj
    value = choices[rng.integers(len(choices))]
    row, col = divmod(POSITIONS.index(obj.position), 3)
    # the object's offset inside its cell, in cell units; kept where the new size or cell allows
    dx, dy = obj.centre[0] * 3 - (col + 0.5), obj.centre[1] * 3 - (row + 0.5)
    extent_in_cell = obj.extent * 3
    if attribute == "size":
        low, high = SIZES[value]
        extent_in_cell = (low + high) / 2  # the middle of the new size's range
    if attribute == "position":
        row, col = divmod(POSITIONS.index(value), 3)
    slack = (1.0 - extent_in_cell) / 2.0 - CELL_MARGIN
    dx, dy = float(np.clip(dx, -slack, slack)), float(np.clip(dy, -slack, slack))
    fields = {attribute: value, "extent": extent_in_cell / 3.0,
              "centre": ((col + 0.5 + dx) / 3.0, (row + 0.5 + dy) / 3.0), "box": None}
    return replace(obj, **fields)


def counterfactual_twin(scene: Scene, attribute: str, k: int, rng: np.random.Generator,
                        n_objects: tuple[int, int] = (MIN_OBJECTS, MAX_OBJECTS)) -> Scene | None:
    """The scene with ``attribute`` of object ``k`` changed (None when the world allows no other value).
    ``n_objects``: the range the scene was generated with (its draw is replayed)."""
    if attribute not in ATTRIBUTES:
        raise InputError(f"attribute must be one of {', '.join(ATTRIBUTES)}, got {attribute!r}")
    if scene.seed is None:
        raise InputError(f"scene {scene.id} has no seed to regenerate it from: counterfactuals are drawn for "
                         "synthetic scenes only")
    layout, pixels = scene_generators(scene.seed)
    background = sample_background(layout)
    n = int(layout.integers(n_objects[0], n_objects[1] + 1))  # the draw generate_scene made
    objects = sample_objects(layout, background, n)
    if [o.attributes() for o in objects] != [o.attributes() for o in scene.objects]:
        raise InputError(f"scene {scene.id} does not regenerate from its seed with n_objects={n_objects}")
    changed = _changed(objects[k], attribute, objects, background, rng)
    if changed == objects[k]:
        return None
    objects = tuple(changed if o.index == k else o for o in objects)
    captions = write_captions(objects, background, layout)
    image, labels = render(objects, background, scene.image_size, pixels)
    objects = tuple(replace(o, box=box_of(labels == o.index + 1)) for o in objects)
    return Scene(id=f"{scene.id}-{attribute}{k}", image_size=scene.image_size, background=background,
                 objects=objects, sentences=captions.sentences, long_caption=captions.long,
                 short_caption=captions.short, dense_caption=captions.dense,
                 hard_negatives=captions.hard_negatives, split=scene.split, seed=scene.seed, _image=image,
                 _labels=labels)
