"""The words of the synthetic world and what each one looks like.

Every attribute a caption can name has a fixed, small vocabulary, and every
word maps to something drawable: a colour to an RGB value, a size to a range
of extents (as a fraction of a layout cell), a position to a cell of a 3 x 3
grid. Captions and pictures are both made from these tables, so a word in a
caption is true of the picture by construction.
"""

from __future__ import annotations

SHAPES = ("square", "circle", "triangle", "star", "ring", "cross", "diamond", "heart")

# Clearly named, well separated colours (sRGB). Backgrounds use their own palette below.
COLOURS: dict[str, tuple[int, int, int]] = {
    "red": (215, 35, 35),
    "orange": (245, 135, 20),
    "yellow": (245, 215, 30),
    "green": (35, 160, 55),
    "blue": (35, 85, 215),
    "purple": (135, 55, 185),
    "pink": (245, 115, 185),
    "brown": (125, 75, 35),
    "black": (20, 20, 20),
    "white": (250, 250, 250),
}

# Extent of the shape's bounding square as a fraction of its cell's side; the ranges do not
# overlap, so "large" is always larger than "medium" in pixels.
SIZES: dict[str, tuple[float, float]] = {
    "small": (0.34, 0.44),
    "medium": (0.55, 0.66),
    "large": (0.78, 0.90),
}

TEXTURES = ("solid", "striped", "dotted", "checkered")

# Row-major 3 x 3 layout: POSITIONS[row * 3 + col].
POSITIONS = ("top left", "top", "top right", "left", "centre", "right", "bottom left", "bottom", "bottom right")

# How a position reads after a verb ("is at the top left", "is in the centre").
POSITION_PHRASES: dict[str, str] = {
    "top left": "at the top left",
    "top": "at the top",
    "top right": "at the top right",
    "left": "on the left",
    "centre": "in the centre",
    "right": "on the right",
    "bottom left": "at the bottom left",
    "bottom": "at the bottom",
    "bottom right": "at the bottom right",
}

BACKGROUND_KINDS = ("plain", "gradient", "noise")

BACKGROUND_COLOURS: dict[str, tuple[int, int, int]] = {
    "light gray": (205, 205, 205),
    "beige": (226, 211, 178),
    "light blue": (168, 200, 236),
    "pale green": (192, 226, 184),
    "lavender": (212, 196, 236),
    "cream": (250, 244, 218),
    "dark gray": (64, 64, 64),
    "navy": (28, 36, 84),
}

GRADIENT_DIRECTIONS = ("vertical", "horizontal", "diagonal")

# An object colour is only used on a background whose colours are at least this far away
# (Euclidean sRGB distance), so every object stands out from what is behind it.
MIN_CONTRAST = 110.0

COUNT_WORDS = {2: "two", 3: "three", 4: "four", 5: "five", 6: "six"}
MIN_OBJECTS, MAX_OBJECTS = 2, 6


def cell_of(position: str) -> tuple[int, int]:
    """(row, col) of a position name."""
    index = POSITIONS.index(position)
    return divmod(index, 3)


def position_at(row: int, col: int) -> str:
    return POSITIONS[row * 3 + col]


def luminance(rgb: tuple[int, int, int]) -> float:
    """Relative brightness in [0, 1] (Rec. 601 weights, good enough to pick a contrasting shade)."""
    r, g, b = rgb
    return (0.299 * r + 0.587 * g + 0.114 * b) / 255.0


def shade_of(rgb: tuple[int, int, int], amount: float = 0.5) -> tuple[tuple[int, int, int], str]:
    """A contrasting shade of a colour and its qualifier: lighter for dark colours, darker for light ones."""
    if luminance(rgb) < 0.6:
        target, word = (255, 255, 255), "light"
    else:
        target, word = (0, 0, 0), "dark"
    mixed = tuple(int(round(c + (t - c) * amount)) for c, t in zip(rgb, target))
    return mixed, word  # type: ignore[return-value]


def colour_distance(a: tuple[int, int, int], b: tuple[int, int, int]) -> float:
    return float(sum((x - y) ** 2 for x, y in zip(a, b)) ** 0.5)


GRADIENT_SHADE = 0.4  # the far end of a gradient is this far towards white (dark colours) or black (light ones)


def gradient_end(colour: str) -> tuple[int, int, int]:
    """The second colour of a gradient background of the named colour."""
    return shade_of(BACKGROUND_COLOURS[colour], GRADIENT_SHADE)[0]
