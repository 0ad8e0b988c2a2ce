"""The words a swap exchanges, by type: colour, shape, size, material, texture (patterns too), position, count.

Where the lists come from (hand-written for this module, nothing downloaded):

- every attribute word of the synthetic world (``explorer.data.vocabulary``: its ten colours, eight shapes,
  three sizes, four textures, nine positions, counts two to six), so a swap of a synthetic caption always
  has its alternatives here and ``explorer probe --data`` covers every word the world writes;
- colour: the eleven basic colour terms of English (Berlin and Kay, *Basic Color Terms*, 1969: black, white,
  red, green, yellow, blue, brown, orange, pink, purple, grey), "gray" read as "grey"'s American spelling;
- shape and material: CLEVR's (Johnson et al., CVPR 2017: cube, sphere, cylinder; rubber, metal) and the
  plane figures and everyday materials a caption of a photo names (rectangle, oval; wooden, glass, ...);
- size, pattern, position and count: the ordinary English words for them (small .. huge, striped .. plain,
  left .. bottom right, one .. ten).

A type's ``words`` are what "Swap every <type>" runs through (other words of the type); ``aliases`` are
recognised in a sentence but never offered as replacements (their main word is). Position phrases of two
words ("top left") are found whole, before their single words.
"""

from __future__ import annotations

from dataclasses import dataclass

from explorer.data import vocabulary as world


@dataclass(frozen=True)
class SwapType:
    name: str
    words: tuple[str, ...]  # the replacements "every <type>" offers, in this order
    aliases: tuple[str, ...] = ()  # also found in sentences, never offered


def _merged(*groups) -> tuple[str, ...]:
    """The words of ``groups`` in order, each once."""
    return tuple(dict.fromkeys(word for group in groups for word in group))


BASIC_COLOURS = ("black", "white", "red", "green", "yellow", "blue", "brown", "orange", "pink", "purple", "gray")
POSITION_WORDS = _merged(world.POSITIONS, ("center", "middle"))

SWAP_TYPES: tuple[SwapType, ...] = (
    SwapType("colour", _merged(world.COLOURS, BASIC_COLOURS), aliases=("grey",)),
    SwapType("shape", _merged(world.SHAPES, ("cube", "sphere", "cylinder", "rectangle", "oval", "hexagon",
                                             "pentagon", "cone"))),
    SwapType("size", _merged(world.SIZES, ("tiny", "big", "huge")), aliases=("little",)),
    SwapType("material", ("metal", "rubber", "wooden", "glass", "plastic", "stone", "paper", "leather",
                          "fabric"), aliases=("metallic", "wood")),
    SwapType("texture", _merged(world.TEXTURES, ("plain", "spotted", "checked", "patterned")),
             aliases=("stripy",)),
    SwapType("position", POSITION_WORDS),
    SwapType("count", ("one", *world.COUNT_WORDS.values(), "seven", "eight", "nine", "ten")),
)
TYPE_NAMES = tuple(t.name for t in SWAP_TYPES)
# what the synthetic world can make true or false of a picture ("every" over the world's own words)
WORLD_WORDS: dict[str, tuple[str, ...]] = {
    "colour": tuple(world.COLOURS), "shape": world.SHAPES, "size": tuple(world.SIZES),
    "texture": world.TEXTURES, "position": world.POSITIONS, "count": tuple(world.COUNT_WORDS.values()),
}
LONGEST_PHRASE = 2  # words: "top left", "bottom right"

_TYPE_OF: dict[str, str] = {}
for _swap_type in SWAP_TYPES:
    for _word in (*_swap_type.words, *_swap_type.aliases):
        _TYPE_OF.setdefault(_word, _swap_type.name)  # a word of two types keeps its first


def word_type(word: str) -> str | None:
    """The type of a word or phrase (case-folded, spaces collapsed), or None when it has none."""
    return _TYPE_OF.get(" ".join(word.casefold().split()))


def swap_type(name: str) -> SwapType:
    for candidate in SWAP_TYPES:
        if candidate.name == name:
            return candidate
    raise KeyError(name)


def alternatives(word: str, words: tuple[str, ...] | None = None) -> list[str]:
    """Every other word of ``word``'s type (``words``: that type's list to take them from instead), in order;
    empty for a word of no type. An alias's main word is not offered back to it ("grey" gets no "gray")."""
    kind = word_type(word)
    if kind is None:
        return []
    folded = " ".join(word.casefold().split())
    same = {folded, "gray"} if folded == "grey" else {folded}
    pool = swap_type(kind).words if words is None else words
    return [w for w in pool if w not in same]


__all__ = ["BASIC_COLOURS", "LONGEST_PHRASE", "SWAP_TYPES", "SwapType", "TYPE_NAMES", "WORLD_WORDS", "alternatives",
           "swap_type", "word_type"]
