"""Grounding: per-sentence maps of a caption over an image, cached.

The UI and the CLI both call ``ground``. Its result holds the maps on the patch
grid and gives them at the working picture's resolution on demand, so re-colouring
or changing the opacity only re-renders (explorer/views/render.py); the model runs
once per (model, image, sentences, map kind), and the cache keeps the last few results.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from PIL import Image

from explorer.core.cache import GB, BoundedCache
from explorer.core.errors import InputError
from explorer.core.images import downscale_note, image_digest, load_image
from explorer.grounding.budget import CaptionAnalysis, analyse_caption
from explorer.models.map_kinds import GENERIC_MAP

if TYPE_CHECKING:  # named in annotations only: the page builds a MapCache before torch is imported
    from explorer.models.model import Model, SentenceMaps

WORKING_SIDE = 768  # maps are computed at most this large: enough to see, cheap to upsample


@dataclass
class GroundingResult:
    image: Image.Image  # the working picture the maps are drawn on
    analysis: CaptionAnalysis
    maps: SentenceMaps
    model_name: str
    notes: list[str] = field(default_factory=list)  # what happened to the inputs, for the user


class MapCache(BoundedCache):
    """Grounding results (maps per model, picture, sentences and kind), shared by every session.

    Bounded in entries and bytes. A result holds its maps on the patch grid (kilobytes); the maps at
    picture size are made from it on demand and kept, bounded, in ``explorer.models.model.FULL_MAPS``.
    """

    def __init__(self, capacity: int = 32, max_bytes: int = 1 * GB, name: str = "grounding results"):
        super().__init__(name, max_items=capacity, max_bytes=max_bytes)


def prepare_image(source, working_side: int = WORKING_SIDE):
    """Load any image input and shrink it to the working size; returns (picture, notes).

    ``ImageError`` for a picture that cannot be read, is past the decode limit, or is too small or
    too thin to draw maps on. The notes say once what was done: "picture 4000x3000 px; worked on at
    768x576" when the working picture is smaller than the file, then each conversion (mode, EXIF).
    """
    working = working_picture(source, working_side)
    return working.image, list(working.notes)


def describe_picture(source, working_side: int = WORKING_SIDE) -> tuple[Image.Image, list[str]]:
    """The working picture and lines that describe it for the page, or ``ImageError``.

    ``lines[0]`` is always a headline naming the file's size and the working size ("Image 4000x3000 px,
    worked on at 768x576." or "Image 640x480 px ready, worked on at full size."); the lines after it are the
    conversions made on the way (mode, transparency, EXIF), one per line, as ``prepare_image``'s notes
    without its size note.
    """
    working = working_picture(source, working_side)
    (width, height), picture = working.full_size, working.image
    at = "full size" if picture.size == working.full_size else f"{picture.width}x{picture.height}"
    return picture, [f"Image {width}x{height} px ready, worked on at {at}.", *working.conversions]


def shrink(picture: Image.Image, working_side: int = WORKING_SIDE) -> Image.Image:
    """The picture at most ``working_side`` on its long side (a copy when it shrinks)."""
    if max(picture.size) > working_side:
        picture = picture.copy()
        picture.thumbnail((working_side, working_side), Image.BICUBIC)
    return picture


@dataclass(frozen=True)
class WorkingPicture:
    """A picture decoded and shrunk once, with its content key: what every model of a request sees."""

    image: Image.Image
    conversions: tuple[str, ...]  # what was done to it on the way (mode, transparency, EXIF)
    digest: str
    original_size: tuple[int, int]  # the file's own size (an uploaded label mask is checked against it)
    full_size: tuple[int, int] = (0, 0)  # the picture as shown (upright), before any downscale

    @property
    def notes(self) -> tuple[str, ...]:
        """For the user: the file's size and the working size once (when they differ), then the conversions."""
        if self.image.size == self.full_size:
            return self.conversions
        (width, height), (at_w, at_h) = self.full_size, self.image.size
        return (f"picture {width}x{height} px; worked on at {at_w}x{at_h}", *self.conversions)


def working_picture(source, working_side: int = WORKING_SIDE, exif: bool = True) -> WorkingPicture:
    """Decode, check and shrink a picture once (``ImageError`` as ``prepare_image`` says); ``exif``: turned
    upright by its EXIF orientation (False: as stored, for a dataset whose annotations are in that frame).

    The notes name the file's size and the working size once (the intermediate downscale to
    ``MAX_SIDE`` on reading is folded into it), then the conversions made on the way.
    """
    loaded = load_image(source, require_shape=True, exif=exif)
    picture = shrink(loaded.image, working_side)
    reading = downscale_note(loaded.full_size, loaded.image.size)  # folded into the one size note
    conversions = tuple(note for note in loaded.notes if note != reading)
    return WorkingPicture(picture, conversions, image_digest(picture), loaded.original_size, loaded.full_size)


def ground(model: Model, image, caption: str, kind: str = GENERIC_MAP, cache: MapCache | None = None,
           working_side: int = WORKING_SIDE, dense_caption: str | None = None) -> GroundingResult:
    """Split the caption, and draw one map per sentence of the chosen kind.

    ``image`` is any image input, or a ``WorkingPicture`` when several models see the same one
    (decoded once). ``dense_caption`` goes to methods that read one (SEPS); when they get none,
    the long caption stands in for it, and the notes say so.
    """
    analysis = analyse_caption(caption, model.token_counter, (model.context_length,))
    working = image if isinstance(image, WorkingPicture) else working_picture(image, working_side)
    picture, notes = working.image, [*working.notes, *analysis.notes]
    sentences = [s.text for s in analysis.sentences]
    if kind not in model.map_kinds:
        raise InputError(f"{model.name} offers the maps {', '.join(model.map_kinds)}, not {kind!r}.")

    dense = None
    if model.uses_dense_caption:
        dense = (dense_caption or "").strip() or caption
        if not (dense_caption or "").strip():
            notes.append(f"{model.title} reads a dense caption; none was given, so the long caption stands in for it")

    def compute() -> SentenceMaps:
        return model.sentence_maps(picture, sentences, kind=kind, dense_caption=dense)

    key = (model.name, id(model), working.digest, tuple(sentences), kind, dense)
    maps = cache.get(key, compute) if cache is not None else compute()
    if len(sentences) == 1:
        notes.append("one sentence: one map (split the caption with . ! ? to compare sentences)")
    cut = [i + 1 for i, n in enumerate(maps.n_cut) if n]
    if cut:
        notes.append(f"sentence(s) {', '.join(map(str, cut))} exceed {model.context_length} tokens "
                     "on their own and were truncated")
    if not model.trained:
        notes.append(f"{model.name} is UNTRAINED (random weights): its maps mean nothing")
    return GroundingResult(image=picture, analysis=analysis, maps=maps, model_name=model.name, notes=notes)
