"""The synthetic world as a folder of classes: one object per picture, a class per (colour, shape) pair,
``red_circle/test-000042-1.png``, so ``explorer eval-zeroshot --layout folder`` runs offline on the demo zoo.

A picture is one object's cell of a scene (its box grown by ``MARGIN`` on each side, the background
around it; the world keeps one object per cell of its 3 x 3 grid). Scenes are drawn from the world's
test stream of ``seed`` (the demo zoo trained on seed 0's train stream) until every class holds
``per_class`` pictures, or ``MAX_SCENES_PER_PICTURE`` scenes per wanted picture have been drawn: a colour
the world never puts on a background it cannot stand out from makes a few pairs rarer, and a class
still short is written with what it has (the counts are returned).
"""

from __future__ import annotations

from pathlib import Path

from explorer.data.errors import DatasetError
from explorer.data.vocabulary import COLOURS, SHAPES

MAX_SCENES_PER_PICTURE = 2
MARGIN = 0.15  # of the box's side, added on each side


def class_name(colour: str, shape: str) -> str:
    return f"{colour}_{shape}"


def write_classes_twin(out, per_class: int = 10, seed: int = 1, image_size: int = 224,
                       overwrite: bool = False) -> dict[str, int]:
    """Write the folder; returns {class folder: pictures}."""
    from explorer.data.synthetic import generate_scenes

    out = Path(out)
    if out.exists() and any(out.iterdir()) and not overwrite:
        raise DatasetError(f"{out} already holds files; pass --overwrite to write the class folders there")
    wanted = {class_name(c, s): per_class for c in COLOURS for s in SHAPES}
    counts = dict.fromkeys(wanted, 0)
    for scene in generate_scenes(per_class * len(wanted) * MAX_SCENES_PER_PICTURE, seed, image_size, split="test"):
        for obj in scene.objects:
            name = class_name(obj.colour, obj.shape)
            if counts[name] >= per_class or obj.box is None:
                continue
            folder = out / name
            folder.mkdir(parents=True, exist_ok=True)
            scene.image.crop(_grown(obj.box, image_size)).save(folder / f"{scene.id}-{obj.index}.png",
                                                               compress_level=1)
            counts[name] += 1
        if all(n >= per_class for n in counts.values()):
            break
    return {name: n for name, n in counts.items() if n}


def _grown(box, side: int) -> tuple[int, int, int, int]:
    x0, y0, x1, y1 = box
    grow = int(round(MARGIN * max(x1 - x0, y1 - y0)))
    return max(0, x0 - grow), max(0, y0 - grow), min(side, x1 + grow), min(side, y1 + grow)


__all__ = ["class_name", "write_classes_twin"]
