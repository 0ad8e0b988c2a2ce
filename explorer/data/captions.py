"""Everything said about a scene, written from its objects so that every word is true.

- Sentences: a summary (count and background) first, then one sentence per
  object (size, texture, colour, shape, position) and relation sentences
  between pairs of objects (above / below / left of / right of / larger than /
  smaller than), the object and relation sentences shuffled together. Each
  kind has several paraphrase templates, so a model cannot key on one
  wording, and facts land anywhere in the caption, often past token 77.
- Long caption: the sentences joined by single spaces. ``explorer.core.sentences.split_sentences``
  splits it back into exactly these sentences.
- Short caption (what a 77-token CLIP is trained on): the objects by colour
  and shape in reading order (top left to bottom right) and the background,
  "A red triangle, a green circle and an orange star on a plain beige
  background." It never needs more than 77 tokens. It holds no sizes,
  textures, positions or relations: those are what the long caption adds.
- Dense caption (SEPS's dense text): the long caption followed by one
  differently worded detail sentence per object (its side as a percentage of
  the picture, its size word, and its texture in full: stripe direction, the
  second colour) and one about the background.
- Hard negatives: one per attribute (colour, shape, size, texture, position),
  each on a randomly chosen object: the object's own sentence is rewritten
  with the same template and one value changed (a position moves to an empty
  cell, so the changed sentence is false of every object). Relation sentences
  are left as they were: the negative differs from the long caption in that
  one place only.

Templates put the article "a" only before size, texture and shape words, none
of which starts with a vowel, so changing a value never changes "a" to "an".
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from explorer.data.scene import Background, HardNegative, SceneObject, Sentence
from explorer.data.vocabulary import (BACKGROUND_COLOURS, COLOURS, COUNT_WORDS, POSITION_PHRASES, POSITIONS, SHAPES,
                                      SIZES, TEXTURES, gradient_end, luminance, shade_of)

SUMMARY_TEMPLATES = (
    "A picture of {count} shapes on {background} background.",
    "An image showing {count} shapes on {background} background.",
    "{count} shapes are arranged on {background} background.",
    "This scene contains {count} shapes set against {background} background.",
)

OBJECT_TEMPLATES = (
    "A {size} {texture} {colour} {shape} is {position}.",
    "{position}, there is a {size} {colour} {shape} with a {texture} surface.",
    "The {shape} {position} is {colour}, {texture} and {size}.",
    "{position} sits a {size}, {texture} {colour} {shape}.",
    "There is a {size} {colour} {shape} {position}; it is {texture}.",
)

SPATIAL_TEMPLATES = (
    "The {a} is {relation} the {b}.",
    "The {a} sits {relation} the {b}.",
    "{relation} the {b} is the {a}.",
    "The {a} appears {relation} the {b}.",
)
SIZE_TEMPLATES = (
    "The {a} is {relation} than the {b}.",
    "The {a} looks {relation} than the {b}.",
    "Compared with the {b}, the {a} is {relation}.",
)
SPATIAL_WORDS = {"above": "above", "below": "below", "left of": "to the left of", "right of": "to the right of"}
SIZE_WORDS = {"larger than": ("larger", "bigger"), "smaller than": ("smaller",)}

NEGATIVE_ATTRIBUTES = ("colour", "shape", "size", "texture", "position")
_VALUES = {"colour": tuple(COLOURS), "shape": SHAPES, "size": tuple(SIZES), "texture": TEXTURES}
_SLOT = re.compile(r"\{(\w+)\}")
_STRIPE_DIRECTIONS = {0: "horizontal", 90: "vertical", 45: "diagonal", 135: "diagonal"}


@dataclass(frozen=True)
class Captions:
    sentences: tuple[Sentence, ...]
    long: str
    short: str
    dense: str
    hard_negatives: tuple[HardNegative, ...]


def fill(template: str, values: dict[str, str]) -> tuple[str, dict[str, tuple[int, int]]]:
    """The template with its slots filled and capitalised, and where each slot's words ended up."""
    pieces, spans, length, last = [], {}, 0, 0
    for match in _SLOT.finditer(template):
        literal = template[last:match.start()]
        value = values[match.group(1)]
        pieces += [literal, value]
        spans[match.group(1)] = (length + len(literal), length + len(literal) + len(value))
        length += len(literal) + len(value)
        last = match.end()
    pieces.append(template[last:])
    text = "".join(pieces)
    return text[:1].upper() + text[1:], spans


def article(word: str) -> str:
    return "an" if word[:1].lower() in "aeiou" else "a"


def object_values(obj: SceneObject) -> dict[str, str]:
    """The words an object sentence fills its template with."""
    return {"size": obj.size, "texture": obj.texture, "colour": obj.colour, "shape": obj.shape,
            "position": POSITION_PHRASES[obj.position]}


def second_colour_name(colour: str) -> str:
    """How the dense caption names a textured object's second colour."""
    if colour in ("black", "white"):
        return "gray"
    return f"{shade_of(COLOURS[colour], 0.5)[1]} {colour}"


def reading_order(objects: tuple[SceneObject, ...]) -> list[SceneObject]:
    return sorted(objects, key=lambda o: POSITIONS.index(o.position))


def summary_sentence(objects: tuple[SceneObject, ...], background: Background, rng: np.random.Generator) -> str:
    template = SUMMARY_TEMPLATES[rng.integers(len(SUMMARY_TEMPLATES))]
    name = background.name
    text, _ = fill(template, {"count": COUNT_WORDS[len(objects)], "background": f"{article(name)} {name}"})
    return text


def true_relations(a: SceneObject, b: SceneObject) -> list[str]:
    """Every relation from the vocabulary that holds between a (subject) and b."""
    (ra, ca), (rb, cb) = a.cell, b.cell
    out = []
    if ra != rb:
        out.append("above" if ra < rb else "below")
    if ca != cb:
        out.append("left of" if ca < cb else "right of")
    size_a, size_b = tuple(SIZES).index(a.size), tuple(SIZES).index(b.size)
    if size_a != size_b:
        out.append("larger than" if size_a > size_b else "smaller than")
    return out


def relation_sentence(a: SceneObject, b: SceneObject, relation: str, rng: np.random.Generator) -> str:
    if relation in SPATIAL_WORDS:
        template = SPATIAL_TEMPLATES[rng.integers(len(SPATIAL_TEMPLATES))]
        word = SPATIAL_WORDS[relation]
    else:
        template = SIZE_TEMPLATES[rng.integers(len(SIZE_TEMPLATES))]
        words = SIZE_WORDS[relation]
        word = words[rng.integers(len(words))]
    text, _ = fill(template, {"a": a.name, "b": b.name, "relation": word})
    return text


def short_caption(objects: tuple[SceneObject, ...], background: Background) -> str:
    names = [f"{article(o.colour)} {o.name}" for o in reading_order(objects)]
    listed = names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]
    name = background.name
    return f"{listed[:1].upper()}{listed[1:]} on {article(name)} {name} background."


def _texture_detail(obj: SceneObject) -> str:
    second = second_colour_name(obj.colour)
    if obj.texture == "solid":
        return f"is filled with flat {obj.colour}"
    if obj.texture == "striped":
        return f"is painted with {_STRIPE_DIRECTIONS[obj.pattern_angle]} stripes of {obj.colour} and {second}"
    if obj.texture == "dotted":
        return f"is {obj.colour} covered in {second} dots"
    return f"is checkered in {obj.colour} and {second} squares"


def _background_detail(background: Background) -> str:
    if background.kind == "plain":
        return f"The background is a flat {background.colour}."
    if background.kind == "gradient":
        end = gradient_end(background.colour)
        tone = "lighter" if luminance(end) > luminance(BACKGROUND_COLOURS[background.colour]) else "darker"
        return f"The background is a {background.direction} gradient from {background.colour} to a {tone} shade."
    return f"The background is {background.colour} with soft, blotchy noise."


def dense_caption(long: str, objects: tuple[SceneObject, ...], background: Background) -> str:
    details = []
    for obj in reading_order(objects):
        percent = int(round(obj.extent * 100))
        details.append(f"In detail, the {obj.name} {POSITION_PHRASES[obj.position]} measures about {percent}% "
                       f"of the picture's side, which makes it {obj.size}, and {_texture_detail(obj)}.")
    details.append(_background_detail(background))
    return " ".join([long, *details])


def _hard_negative(attribute: str, k: int, objects: tuple[SceneObject, ...], template: str, sentence_index: int,
                   sentence_start: int, long: str, rng: np.random.Generator) -> HardNegative:
    obj = objects[k]
    if attribute == "position":
        taken = {o.position for o in objects}
        choices = [p for p in POSITIONS if p not in taken]  # an empty cell: the sentence is false of everyone
    else:
        current = getattr(obj, attribute)
        choices = [v for v in _VALUES[attribute] if v != current]
    value = choices[rng.integers(len(choices))]
    before = object_values(obj)
    after = dict(before, **{attribute: POSITION_PHRASES[value] if attribute == "position" else value})
    old_text, old_spans = fill(template, before)
    new_text, new_spans = fill(template, after)
    (a, b), (c, d) = old_spans[attribute], new_spans[attribute]
    original, replacement = old_text[a:b], new_text[c:d]
    start = sentence_start + a
    caption = long[:start] + replacement + long[start + len(original):]
    return HardNegative(caption=caption, attribute=attribute, object=k, sentence=sentence_index, original=original,
                        replacement=replacement, start=start, value=value)


def write_captions(objects: tuple[SceneObject, ...], background: Background, rng: np.random.Generator) -> Captions:
    """All captions of a scene. Draws from ``rng`` in a fixed order, so a seed fixes every word."""
    n = len(objects)
    summary = Sentence(summary_sentence(objects, background, rng), "summary", tuple(range(n)))
    body: list[tuple[Sentence, str | None]] = []  # (sentence, its template if it is an object sentence)
    for obj in objects:
        template = OBJECT_TEMPLATES[rng.integers(len(OBJECT_TEMPLATES))]
        text, _ = fill(template, object_values(obj))
        body.append((Sentence(text, "object", (obj.index,)), template))
    pairs = [(i, j) for i in range(n) for j in range(i + 1, n)]
    for p in rng.permutation(len(pairs))[: max(1, n - 1)]:
        i, j = pairs[p]
        a, b = (objects[i], objects[j]) if rng.random() < 0.5 else (objects[j], objects[i])
        relations = true_relations(a, b)
        relation = relations[rng.integers(len(relations))]
        body.append((Sentence(relation_sentence(a, b, relation, rng), "relation", (a.index, b.index), relation),
                     None))
    body = [body[i] for i in rng.permutation(len(body))]
    sentences = (summary, *(s for s, _ in body))
    long = " ".join(s.text for s in sentences)

    starts, offset = [], 0
    for s in sentences:
        starts.append(offset)
        offset += len(s.text) + 1
    templates = {s.objects[0]: (t, i + 1) for i, (s, t) in enumerate(body) if t is not None}
    negatives = []
    for attribute in NEGATIVE_ATTRIBUTES:
        k = int(rng.integers(n))
        template, index = templates[k]
        negatives.append(_hard_negative(attribute, k, objects, template, index, starts[index], long, rng))
    return Captions(sentences=sentences, long=long, short=short_caption(objects, background),
                    dense=dense_caption(long, objects, background), hard_negatives=tuple(negatives))
