"""A seeded world of shapes where the truth is known: pictures, instance masks and long captions.

    from explorer.data import generate_scene, generate_scenes
    scene = generate_scene(seed=7, image_size=112)
    scene.image, scene.masks, scene.long_caption, scene.sentences, scene.hard_negatives

A scene holds 2 to 6 objects, each in its own cell of a 3 x 3 layout (with
jitter, never leaving its cell, so masks are disjoint), with a shape, a
colour that stands out from the background, a size, a texture and the
position name of its cell, on a plain, gradient or noisy background. The
words come from ``explorer.data.vocabulary``, the pixels from
``explorer.data.drawing`` and the captions from ``explorer.data.captions``.

Determinism: a scene is a function of its seed alone. The layout, the
attributes and every word are drawn in relative units before anything is
drawn, so the same seed gives the same scene (same captions, same layout) at
any ``image_size``; pixel noise comes from a separate stream. Scene ``i`` of a
stream uses the seed ``(seed, stream, i)``, so it does not depend on how many
scenes come before it, and the three splits are independent streams: the test
set of a seed never changes when the training set grows.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import numpy as np

from explorer.core.errors import InputError
from explorer.data.captions import write_captions
from explorer.data.drawing import background_colours, box_of, render
from explorer.data.scene import Background, Scene, SceneObject
from explorer.data.vocabulary import (BACKGROUND_COLOURS, BACKGROUND_KINDS, COLOURS, GRADIENT_DIRECTIONS, MAX_OBJECTS,
                                      MIN_CONTRAST, MIN_OBJECTS, POSITIONS, SHAPES, SIZES, TEXTURES, colour_distance)

DEFAULT_IMAGE_SIZE = 224
MIN_IMAGE_SIZE = 32  # below this a small object covers less than a pixel
CELL_MARGIN = 0.03  # an object keeps this fraction of its cell's side away from the cell's edges
PATTERN_ANGLES = (0, 45, 90, 135)
STREAMS = {"train": 0, "val": 1, "test": 2}


def _entropy(seed: int | Sequence[int]) -> tuple[int, ...]:
    values = (seed,) if isinstance(seed, (int, np.integer)) else tuple(seed)
    if not values or any(not isinstance(v, (int, np.integer)) or v < 0 for v in values):
        raise InputError(f"a seed is a non-negative integer or a sequence of them, got {seed!r}")
    return tuple(int(v) for v in values)


def scene_generators(seed: int | Sequence[int]) -> tuple[np.random.Generator, np.random.Generator]:
    """The two random streams of a scene: one for layout and words, one for pixel noise."""
    layout, pixels = np.random.SeedSequence(list(_entropy(seed))).spawn(2)
    return np.random.default_rng(layout), np.random.default_rng(pixels)


def _objects_range(n_objects: int | tuple[int, int] | None) -> tuple[int, int]:
    low, high = ((MIN_OBJECTS, MAX_OBJECTS) if n_objects is None
                 else (n_objects, n_objects) if isinstance(n_objects, (int, np.integer)) else tuple(n_objects))
    if not MIN_OBJECTS <= low <= high <= MAX_OBJECTS:
        raise InputError(f"n_objects must lie in {MIN_OBJECTS}..{MAX_OBJECTS}, got {n_objects!r}")
    return int(low), int(high)


def sample_background(rng: np.random.Generator) -> Background:
    kind = BACKGROUND_KINDS[rng.integers(len(BACKGROUND_KINDS))]
    colour = tuple(BACKGROUND_COLOURS)[rng.integers(len(BACKGROUND_COLOURS))]
    direction = GRADIENT_DIRECTIONS[rng.integers(len(GRADIENT_DIRECTIONS))]
    reverse = bool(rng.random() < 0.5)
    if kind != "gradient":
        direction, reverse = None, False
    return Background(kind=kind, colour=colour, direction=direction, reverse=reverse)


def usable_colours(background: Background) -> list[str]:
    """Object colours that stand out from every colour of the background."""
    behind = background_colours(background)
    return [name for name, rgb in COLOURS.items() if min(colour_distance(rgb, b) for b in behind) >= MIN_CONTRAST]


def sample_objects(rng: np.random.Generator, background: Background, n: int) -> tuple[SceneObject, ...]:
    """n objects in distinct cells, each (colour, shape) pair at most once, so 'the red triangle' is unique."""
    cells = rng.choice(len(POSITIONS), size=n, replace=False)
    colours = usable_colours(background)
    used: set[tuple[str, str]] = set()
    objects = []
    for index, cell in enumerate(cells):
        shape = SHAPES[rng.integers(len(SHAPES))]
        free = [c for c in colours if (c, shape) not in used]
        colour = free[rng.integers(len(free))]
        used.add((colour, shape))
        size = tuple(SIZES)[rng.integers(len(SIZES))]
        low, high = SIZES[size]
        extent_in_cell = float(rng.uniform(low, high))
        slack = (1.0 - extent_in_cell) / 2.0 - CELL_MARGIN
        dx, dy = (float(v) for v in rng.uniform(-slack, slack, size=2))
        row, col = divmod(int(cell), 3)
        texture = TEXTURES[rng.integers(len(TEXTURES))]
        angle = PATTERN_ANGLES[rng.integers(len(PATTERN_ANGLES))]
        phase = rng.random(2)
        objects.append(SceneObject(
            index=index, shape=shape, colour=colour, size=size, texture=texture, position=POSITIONS[int(cell)],
            centre=((col + 0.5 + dx) / 3.0, (row + 0.5 + dy) / 3.0), extent=extent_in_cell / 3.0,
            pattern_angle=angle, pattern_phase=(float(phase[0]), float(phase[1]))))
    return tuple(objects)


def generate_scene(seed: int | Sequence[int] = 0, image_size: int = DEFAULT_IMAGE_SIZE, *,
                   n_objects: int | tuple[int, int] | None = None, scene_id: str | None = None,
                   split: str | None = None) -> Scene:
    """One scene, fully determined by ``seed`` (an int or a sequence of ints) and ``n_objects``."""
    if not isinstance(image_size, (int, np.integer)) or image_size < MIN_IMAGE_SIZE:
        raise InputError(f"image_size must be an integer of at least {MIN_IMAGE_SIZE}, got {image_size!r}")
    entropy = _entropy(seed)
    low, high = _objects_range(n_objects)
    rng, pixel_rng = scene_generators(entropy)
    background = sample_background(rng)
    n = int(rng.integers(low, high + 1))
    objects = sample_objects(rng, background, n)
    captions = write_captions(objects, background, rng)
    image, labels = render(objects, background, int(image_size), pixel_rng)
    objects = tuple(SceneObject(**{**o.__dict__, "box": box_of(labels == o.index + 1)}) for o in objects)
    return Scene(
        id=scene_id if scene_id is not None else "scene-" + "-".join(map(str, entropy)),
        image_size=int(image_size), background=background, objects=objects, sentences=captions.sentences,
        long_caption=captions.long, short_caption=captions.short, dense_caption=captions.dense,
        hard_negatives=captions.hard_negatives, split=split, seed=entropy, _image=image, _labels=labels)


def generate_scenes(n: int, seed: int = 0, image_size: int = DEFAULT_IMAGE_SIZE, *, split: str = "train",
                    start: int = 0, n_objects: int | tuple[int, int] | None = None) -> Iterator[Scene]:
    """Scenes ``start .. start + n - 1`` of a split's stream, with ids like 'train-000042'."""
    if split not in STREAMS:
        raise InputError(f"split must be one of {', '.join(STREAMS)}, got {split!r}")
    for i in range(start, start + n):
        yield generate_scene((int(seed), STREAMS[split], i), image_size, n_objects=n_objects,
                             scene_id=f"{split}-{i:06d}", split=split)
