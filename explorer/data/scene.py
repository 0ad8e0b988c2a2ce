"""One synthetic scene: its picture, its objects with their truth, and everything said about it.

A ``Scene`` is the same object whether it was just generated (picture and
instance labels in memory) or read back from disk (``image_path`` and
``mask_path`` set, the pixels loaded on first use). Truth lives in two forms:

- ``labels``: one uint8 H x W instance-label map, 0 = background, k + 1 =
  object k; masks are disjoint by construction. ``mask(k)`` / ``masks`` give
  bool masks, ``sentence_masks()`` the union of the objects each sentence
  links to (what a grounding metric compares a sentence's map with).
- ``SceneObject.box``: (x0, y0, x1, y1) in pixels, x1 and y1 exclusive, the
  tight box of the object's mask.

``to_record`` / ``from_record`` convert to and from the JSON line stored in
``scenes.jsonl`` (see ``explorer.data.store``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from PIL import Image

from explorer.data.errors import DatasetError
from explorer.data.vocabulary import cell_of


@dataclass(frozen=True)
class Background:
    kind: str  # plain | gradient | noise
    colour: str  # a name from BACKGROUND_COLOURS
    direction: str | None = None  # gradients: vertical | horizontal | diagonal
    reverse: bool = False  # gradients: the named colour is at the bottom / right end

    @property
    def name(self) -> str:
        """How captions call it: 'plain beige', 'light blue gradient', 'noisy navy'."""
        if self.kind == "plain":
            return f"plain {self.colour}"
        if self.kind == "gradient":
            return f"{self.colour} gradient"
        return f"noisy {self.colour}"

    def to_json(self) -> dict:
        return {"kind": self.kind, "colour": self.colour, "name": self.name, "direction": self.direction,
                "reverse": self.reverse}

    @classmethod
    def from_json(cls, data: dict) -> Background:
        return cls(kind=data["kind"], colour=data["colour"], direction=data.get("direction"),
                   reverse=bool(data.get("reverse", False)))


@dataclass(frozen=True)
class SceneObject:
    index: int  # position in Scene.objects; its label in the instance map is index + 1
    shape: str
    colour: str
    size: str  # small | medium | large
    texture: str  # solid | striped | dotted | checkered
    position: str  # one of the 3 x 3 layout names
    centre: tuple[float, float]  # (x, y) as fractions of the image side
    extent: float  # side of the shape's bounding square, as a fraction of the image side
    pattern_angle: int = 0  # stripes: 0 horizontal, 90 vertical, 45 / 135 diagonal
    pattern_phase: tuple[float, float] = (0.0, 0.0)  # offset of the texture, in periods
    box: tuple[int, int, int, int] | None = None  # pixels, x1 / y1 exclusive; set once drawn

    @property
    def cell(self) -> tuple[int, int]:
        return cell_of(self.position)

    @property
    def name(self) -> str:
        """The reference used by relation sentences and the short caption: 'red triangle'."""
        return f"{self.colour} {self.shape}"

    def attributes(self) -> dict[str, str]:
        return {"shape": self.shape, "colour": self.colour, "size": self.size, "texture": self.texture,
                "position": self.position}

    def to_json(self) -> dict:
        return {"index": self.index, "label": self.index + 1, **self.attributes(),
                "box": list(self.box) if self.box is not None else None,
                "centre": list(self.centre), "extent": self.extent,
                "pattern_angle": self.pattern_angle, "pattern_phase": list(self.pattern_phase)}

    @classmethod
    def from_json(cls, data: dict) -> SceneObject:
        box = data.get("box")
        return cls(index=int(data["index"]), shape=data["shape"], colour=data["colour"], size=data["size"],
                   texture=data["texture"], position=data["position"], centre=tuple(float(v) for v in data["centre"]),
                   extent=float(data["extent"]), pattern_angle=int(data.get("pattern_angle", 0)),
                   pattern_phase=tuple(float(v) for v in data.get("pattern_phase", (0.0, 0.0))),
                   box=tuple(int(v) for v in box) if box is not None else None)


@dataclass(frozen=True)
class Sentence:
    text: str
    kind: str  # summary | object | relation
    objects: tuple[int, ...]  # indices into Scene.objects: all (summary), one (object), two (relation)
    relation: str | None = None  # relation sentences: above | below | left of | right of | larger than | smaller than

    def to_json(self) -> dict:
        return {"text": self.text, "kind": self.kind, "objects": list(self.objects), "relation": self.relation}

    @classmethod
    def from_json(cls, data: dict) -> Sentence:
        return cls(text=data["text"], kind=data["kind"], objects=tuple(int(i) for i in data["objects"]),
                   relation=data.get("relation"))


@dataclass(frozen=True)
class HardNegative:
    """The long caption with one attribute of one object changed in that object's own sentence.

    ``caption == long_caption[:start] + replacement + long_caption[start + len(original):]``.
    Relation sentences still name the object by its true colour and shape.
    """

    caption: str
    attribute: str  # colour | shape | size | texture | position
    object: int  # the object whose attribute was changed
    sentence: int  # index into Scene.sentences of the changed sentence
    original: str  # the words replaced, as they appear in the long caption
    replacement: str  # the words put in their place
    start: int  # character offset of ``original`` in the long caption
    value: str  # the new attribute value (vocabulary form, e.g. 'bottom right')

    def to_json(self) -> dict:
        return {"caption": self.caption, "attribute": self.attribute, "object": self.object,
                "sentence": self.sentence, "original": self.original, "replacement": self.replacement,
                "start": self.start, "value": self.value}

    @classmethod
    def from_json(cls, data: dict) -> HardNegative:
        return cls(caption=data["caption"], attribute=data["attribute"], object=int(data["object"]),
                   sentence=int(data["sentence"]), original=data["original"], replacement=data["replacement"],
                   start=int(data["start"]), value=data["value"])


@dataclass(eq=False)
class Scene:
    id: str
    image_size: int
    background: Background
    objects: tuple[SceneObject, ...]
    sentences: tuple[Sentence, ...]  # in caption order; the summary first
    long_caption: str  # the sentences joined by single spaces
    short_caption: str
    dense_caption: str
    hard_negatives: tuple[HardNegative, ...]
    split: str | None = None
    seed: tuple[int, ...] | None = None  # entropy that regenerates this scene (generate_scene(seed=...))
    image_path: Path | None = None
    mask_path: Path | None = None
    _image: Image.Image | None = field(default=None, repr=False)
    _labels: np.ndarray | None = field(default=None, repr=False)

    # -- pixels ---------------------------------------------------------------------------------------------
    @property
    def image(self) -> Image.Image:
        """The RGB picture (read from ``image_path`` on first use)."""
        if self._image is None:
            if self.image_path is None:
                raise DatasetError(f"scene {self.id} has neither a picture nor an image path: its record needs "
                                   "an image path")
            with Image.open(self.image_path) as opened:
                self._image = opened.convert("RGB")
        return self._image

    @property
    def labels(self) -> np.ndarray:
        """uint8 [H, W] instance labels: 0 background, k + 1 object k."""
        if self._labels is None:
            if self.mask_path is None:
                raise DatasetError(f"scene {self.id} has neither instance labels nor a mask path: its record "
                                   "needs a mask path")
            with Image.open(self.mask_path) as opened:
                self._labels = np.array(opened.convert("L"), dtype=np.uint8)
        return self._labels

    def mask(self, k: int) -> np.ndarray:
        """bool [H, W] mask of object k."""
        if not 0 <= k < len(self.objects):
            raise IndexError(f"scene {self.id} has {len(self.objects)} objects; there is no object {k}")
        return self.labels == k + 1

    @property
    def masks(self) -> np.ndarray:
        """bool [K, H, W], one mask per object."""
        labels = self.labels
        return np.stack([labels == k + 1 for k in range(len(self.objects))])

    def sentence_masks(self) -> np.ndarray:
        """bool [M, H, W]: for each sentence, the union of the masks of the objects it links to."""
        labels = self.labels
        return np.stack([np.isin(labels, [k + 1 for k in s.objects]) for s in self.sentences])

    # -- text -----------------------------------------------------------------------------------------------
    @property
    def sentence_texts(self) -> list[str]:
        return [s.text for s in self.sentences]

    @property
    def summary(self) -> str:
        return self.sentences[0].text

    def object_sentence(self, k: int) -> Sentence:
        """The sentence that describes object k on its own."""
        for sentence in self.sentences:
            if sentence.kind == "object" and sentence.objects == (k,):
                return sentence
        raise KeyError(f"scene {self.id} has no sentence for object {k}")

    # -- JSON -----------------------------------------------------------------------------------------------
    def to_record(self, image: str | None = None, mask: str | None = None) -> dict:
        """The JSON object stored for this scene; ``image`` / ``mask`` are paths relative to the dataset."""
        return {
            "id": self.id, "split": self.split, "image": image, "mask": mask, "image_size": self.image_size,
            "seed": list(self.seed) if self.seed is not None else None,
            "background": self.background.to_json(),
            "objects": [o.to_json() for o in self.objects],
            "sentences": [s.to_json() for s in self.sentences],
            "long_caption": self.long_caption, "short_caption": self.short_caption,
            "dense_caption": self.dense_caption,
            "hard_negatives": [n.to_json() for n in self.hard_negatives],
        }

    @classmethod
    def from_record(cls, record: dict, root: Path | None = None) -> Scene:
        """A scene from its JSON object; paths are resolved against ``root`` (pixels load lazily)."""
        root = Path(root) if root is not None else None

        def resolve(rel):
            if rel is None:
                return None
            return root / rel if root is not None else Path(rel)

        seed = record.get("seed")
        return cls(
            id=record["id"], image_size=int(record["image_size"]),
            background=Background.from_json(record["background"]),
            objects=tuple(SceneObject.from_json(o) for o in record["objects"]),
            sentences=tuple(Sentence.from_json(s) for s in record["sentences"]),
            long_caption=record["long_caption"], short_caption=record["short_caption"],
            dense_caption=record["dense_caption"],
            hard_negatives=tuple(HardNegative.from_json(n) for n in record["hard_negatives"]),
            split=record.get("split"), seed=tuple(seed) if seed is not None else None,
            image_path=resolve(record.get("image")), mask_path=resolve(record.get("mask")),
        )
