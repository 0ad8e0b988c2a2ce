"""Reading user images safely: any mode in, RGB out, and never a memory blow-up.

A 20000 x 20000 PNG would take 1.2 GB to decode, so the header is read before
anything is decoded: one rule for every format (PNG, JPEG, WebP, TIFF...), a
picture past ``MAX_DECODE_PIXELS`` pixels or ``MAX_DECODE_BYTES`` as decoded
(16- and 32-bit pictures take two and four bytes a pixel) is refused with a
message that says how to downscale it. A picture is decoded straight to the
size asked for: JPEG through its reduced decode (``draft``), any other format
box-reduced in its own mode before it is converted to 8-bit RGB (palette, 1-bit
and alpha pictures a strip at a time, flattened onto white), so a read holds its
one full-size decode and pictures of the reduced size only (``read_peak_bytes``:
an 8000 x 8000 palette PNG with transparency took ~700 MB, now under 300 MB);
and at most ``DECODE_SLOTS`` reads decode at once in the whole process
(``decode_slot``), whatever the number of requests. Every conversion made on
the way is reported in ``notes`` so the UI can say what happened to the picture.

Pictures to draw maps on must also be of a useful shape (``check_shape``,
``load_image(..., require_shape=True)``): at least ``MIN_SIDE`` px on each side
and at most ``MAX_ASPECT``:1, so that the working picture is never a sliver.
"""

from __future__ import annotations

import hashlib
import io
import math
import os
import threading
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from PIL import Image, ImageOps, UnidentifiedImageError

from explorer.core.errors import ImageError

MAX_DECODE_PIXELS = 64_000_000  # never decode more than this (about 256 MB as RGBA)
MAX_DECODE_BYTES = 256 * 1024 * 1024  # ...nor more bytes than this as decoded (Pillow keeps RGB as 4 bytes a pixel)
DECODE_SLOTS = 2  # full-size decodes at once in the whole process; more requests wait for a slot
MAX_SIDE = 4096  # images are worked on at most this large; maps do not need more
MIN_SIDE = 8  # a picture to draw maps on has at least this many pixels on each side...
MAX_ASPECT = 20  # ...and is at most this many times longer than wide (768 px long: at least 38 px wide)
_open_lock = threading.Lock()  # PIL's bomb limit is process-global; change it under a lock
_slots = threading.BoundedSemaphore(DECODE_SLOTS)
_slots_lock = threading.Lock()


def set_decode_slots(n: int) -> None:
    """How many pictures may be decoded at once in this process (the app sets it from its budget)."""
    global _slots
    with _slots_lock:
        _slots = threading.BoundedSemaphore(max(1, int(n)))


@contextmanager
def decode_slot():
    """Hold one of the process's decode slots: a full-size decode and what is made from it happen inside."""
    slots = _slots
    with slots:
        yield


@dataclass
class LoadedImage:
    image: Image.Image  # RGB
    notes: list[str] = field(default_factory=list)  # what was done to it, for the user
    original_size: tuple[int, int] = (0, 0)  # as stored in the file (before EXIF rotation)
    full_size: tuple[int, int] = (0, 0)  # as shown: decoded and upright, before any downscale
    label: str = "the picture"  # names it in messages (the file's name for a path)


def load_image(source, max_side: int | None = None, require_shape: bool = False, exif: bool = True) -> LoadedImage:
    """Open a path, bytes, numpy array or PIL image as an RGB picture at most ``max_side`` on its long
    side (default ``MAX_SIDE``), or raise ``ImageError``.

    ``require_shape``: also refuse a picture too small or too thin to draw maps on (``check_shape``),
    from its header, before decoding it. ``exif``: turn it upright by its EXIF orientation (as it is shown:
    uploads); False keeps the file's stored pixel frame (a dataset's pictures whose annotations are in it).
    """
    max_side = MAX_SIDE if max_side is None else max_side  # read at call time, so the setting can change
    if isinstance(source, Image.Image):
        image, label = source, "the picture"
    elif isinstance(source, np.ndarray):
        image, label = _from_array(source), "the array"
    else:
        image, label = open_image(source)
    notes: list[str] = []
    original_size = image.size
    if require_shape:
        check_shape(original_size, label)
    check_header(image, label, notes)
    # A JPEG may be decoded small (``draft``): its size as shown comes from the header and EXIF. Any other
    # format is decoded whole, and reading a PNG's EXIF would decode it here, outside a slot.
    full_size = (_upright_size(image) if exif else image.size) if image.format == "JPEG" else None
    with decode_slot():
        image = decode_image(image, label, notes, max_side=max_side, exif=exif)
        full_size = full_size or image.size
        image = _shrink(image, max_side, notes)
        image = _to_rgb(image, notes)
    if max(full_size) > max_side:
        notes.append(downscale_note(full_size, image.size))
    return LoadedImage(image=image, notes=notes, original_size=original_size, full_size=full_size, label=label)


def check_header(image: Image.Image, label: str, notes: list[str]) -> None:
    """Refuse, from the header alone, a picture whose decode would pass the pixel or byte limit; note an
    animation (only its first frame is read)."""
    width, height = image.size
    if width < 1 or height < 1:
        raise ImageError(f"{_subject(label)} has no pixels ({width}x{height}).")
    pixels, per_pixel = width * height, _bytes_per_pixel(image.mode)
    if pixels > MAX_DECODE_PIXELS or pixels * per_pixel > MAX_DECODE_BYTES:
        depth = f" at {8 * per_pixel} bits a pixel" if per_pixel > 1 and pixels <= MAX_DECODE_PIXELS else ""
        raise ImageError(
            f"{_subject(label)} is {width}x{height} px ({_megapixels(pixels)} megapixels{depth}); pictures of "
            f"every format are read up to {_megapixels(MAX_DECODE_PIXELS)} megapixels and "
            f"{MAX_DECODE_BYTES // 2**20} MB decoded. Downscale it first (e.g. to {MAX_SIDE} px on the long side, "
            "8 bits a channel) and load it again.")
    if getattr(image, "is_animated", False):
        notes.append("an animation: its first frame is read")


def _bytes_per_pixel(mode: str) -> int:
    """Bytes a pixel takes once Pillow has decoded it (every multi-band 8-bit mode is stored in 4)."""
    if mode in ("1", "L", "P"):
        return 1
    if mode.startswith("I;16"):
        return 2
    return 4


def _upright_size(image: Image.Image) -> tuple[int, int]:
    """A JPEG's size as shown (EXIF orientations 5-8 swap width and height), from its header."""
    try:
        orientation = image.getexif().get(0x0112, 1)
    except (OSError, ValueError, TypeError, SyntaxError):
        orientation = 1
    return image.size[::-1] if orientation in (5, 6, 7, 8) else image.size


def _shrink(image: Image.Image, max_side: int, notes: list[str]) -> Image.Image:
    """At most ``max_side`` on the long side: box-averaged over whole blocks (``factor`` x ``factor`` pixels, the
    smallest factor that fits) in the picture's own mode, so the only other picture in memory is the reduced one
    (a two-pass resample held a full-height intermediate); palette and 1-bit pictures are reduced a strip at a
    time while they are converted; 16- and 32-bit ones are converted after, small."""
    if max(image.size) <= max_side:
        return image
    factor = math.ceil(max(image.size) / max_side)
    # Pillow cannot average palette indices, and averages alpha through a full-size premultiplied copy: these
    # are flattened onto white and reduced a strip at a time (flat, then averaged: as the premultiplied average).
    if image.mode in ("1", "P", "PA", "LA", "RGBA", "La", "RGBa"):
        return _flat_rgb(image, notes, factor=factor)
    try:
        return image.reduce(factor)
    except ValueError:  # a mode Pillow does not reduce (I;16): resampled to the same size instead
        size = (math.ceil(image.width / factor), math.ceil(image.height / factor))
        return image.resize(size, Image.LANCZOS, reducing_gap=3.0)


STRIP_PIXELS = 2**21  # pixels a strip converts at once (8 MB as RGBA): the only full-width intermediate
WORKING_BYTES_PER_PIXEL = 12  # the reduced picture at its widest (16-bit: itself, float32, 8-bit, RGB)
READ_SLACK_BYTES = 16 * 2**20  # the decoder's buffers and the allocator's rounding


def read_peak_bytes(size: tuple[int, int], mode: str, max_side: int = MAX_SIDE) -> int:
    """The most a read of a picture with this header holds at once, every mode Pillow opens: its decode
    (``MAX_DECODE_BYTES`` at most, refused from the header past that), the reduced picture through its
    conversion to RGB, and one strip's conversions (tests/test_decode_memory.py measures it per mode)."""
    width, height = size
    factor = max(1, math.ceil(max(size) / max_side))
    reduced = math.ceil(width / factor) * math.ceil(height / factor)
    return (width * height * _bytes_per_pixel(mode) + reduced * WORKING_BYTES_PER_PIXEL + 3 * 4 * STRIP_PIXELS
            + READ_SLACK_BYTES)


def _flat_rgb(image: Image.Image, notes: list[str], factor: int = 1) -> Image.Image:
    """``image`` (palette, 1-bit, or with alpha) as RGB, transparent areas flattened onto white, box-reduced by
    ``factor``: converted a strip of rows at a time, so that no full-size RGBA, background or composite exists
    (an 8000 x 8000 palette PNG with transparency took ~700 MB that way; now its 64 MB decode and the result)."""
    width, height = image.size
    transparent = image.mode in ("RGBA", "LA", "PA", "La", "RGBa") or "transparency" in image.info
    if transparent:
        notes.append("transparent areas flattened onto white")
    elif image.mode == "1":
        notes.append("grayscale image repeated on three channels")
    flat = Image.new("RGB", (math.ceil(width / factor), math.ceil(height / factor)), (255, 255, 255))
    rows = factor * max(1, STRIP_PIXELS // (width * factor))  # a multiple of factor: strips reduce whole blocks
    for top in range(0, height, rows):
        strip = image.crop((0, top, width, min(height, top + rows)))
        if transparent:
            rgba = strip.convert("RGBA")
            strip = Image.new("RGB", rgba.size, (255, 255, 255))
            strip.paste(rgba, (0, 0), rgba)  # over white, as alpha compositing onto an opaque background
        else:
            strip = strip.convert("RGB")
        flat.paste(strip.reduce(factor) if factor > 1 else strip, (0, top // factor))
    return flat


def downscale_note(before: tuple[int, int], after: tuple[int, int]) -> str:
    """The note ``load_image`` adds when it shrinks a picture to ``max_side``."""
    return f"downscaled from {before[0]}x{before[1]} to {after[0]}x{after[1]}"


def check_shape(size: tuple[int, int], label: str = "the picture") -> None:
    """Refuse (``ImageError``) a picture too small or too long and thin to draw maps on."""
    width, height = size
    if min(width, height) < MIN_SIDE:
        raise ImageError(f"{_subject(label)} is {width}x{height} px: too small to see anything. "
                         f"A picture needs at least {MIN_SIDE} px on each side.")
    ratio = max(width, height) / min(width, height)
    if ratio > MAX_ASPECT:
        shown = f"{ratio:.0f}" if ratio >= 100 else f"{math.ceil(ratio * 10) / 10:g}"  # never "20" past 20
        raise ImageError(f"{_subject(label)} is {width}x{height} px, {shown}:1: too long and thin to draw maps on "
                         f"(at most {MAX_ASPECT}:1). Crop it into parts closer to square first.")


def open_image(source) -> tuple[Image.Image, str]:
    """Open (not decode) a path or bytes: (lazy PIL image, a label naming it for messages)."""
    if isinstance(source, (bytes, bytearray)):
        handle, label = io.BytesIO(source), "the uploaded data"
    elif isinstance(source, (str, os.PathLike)):
        path = Path(source)
        if not path.exists():
            raise ImageError(f"No image file at {path}.")
        if path.is_dir():
            raise ImageError(f"{path} is a folder, not an image.")
        handle, label = path, path.name
    else:
        raise ImageError(f"Cannot read an image from a {type(source).__name__}; give a path, bytes, an array "
                         "or a PIL image.")
    with _open_lock:
        limit, Image.MAX_IMAGE_PIXELS = Image.MAX_IMAGE_PIXELS, None  # we check the size ourselves
        try:
            image = Image.open(handle)
        except UnidentifiedImageError as error:
            raise ImageError(f"{_subject(label)} is not an image that can be read "
                             "(PNG, JPEG, WebP, TIFF, BMP, GIF...).") from error
        except OSError as error:
            raise ImageError(f"Cannot read {label}: {error}.") from error
        finally:
            Image.MAX_IMAGE_PIXELS = limit
    return image, label


def decode_image(image: Image.Image, label: str, notes: list[str], max_side: int | None = None,
                 exif: bool = True) -> Image.Image:
    """Decode an opened image within the limits, EXIF-rotated (unless ``exif`` is False: as stored); past
    them, refuse it (any format). ``max_side``: a JPEG is decoded at the smallest of its reduced scales still
    at least that large."""
    check_header(image, label, [])
    if max_side is not None and image.format == "JPEG" and max(image.size) > max_side:
        scale = max_side / max(image.size)
        image.draft(image.mode if image.mode in ("RGB", "L") else None,
                    (math.ceil(image.width * scale), math.ceil(image.height * scale)))
    try:
        image.load()
    except (OSError, SyntaxError, ValueError) as error:
        raise ImageError(f"{_subject(label)} is damaged or truncated and cannot be decoded ({error}).") from error
    if not exif:
        return image
    try:
        # In place: without it Pillow returns a full-size copy even when there is nothing to turn.
        ImageOps.exif_transpose(image, in_place=True)
        return image
    except (OSError, ValueError, TypeError):
        notes.append("EXIF orientation could not be read; shown as stored")
        return image


def _subject(label: str) -> str:
    """A label at the start of a message: "The picture ...", but a file's name as it is."""
    return "T" + label[1:] if label.startswith("the ") else label


def _megapixels(pixels: int) -> str:
    """A pixel count in megapixels, with as few decimals as tell it apart from the limit."""
    if pixels == MAX_DECODE_PIXELS:
        return f"{pixels / 1e6:g}"
    for decimals in range(7):
        text = f"{pixels / 1e6:.{decimals}f}"
        if text != f"{MAX_DECODE_PIXELS / 1e6:.{decimals}f}":
            return text
    return f"{pixels / 1e6:g}"


def _to_rgb(image: Image.Image, notes: list[str]) -> Image.Image:
    mode = image.mode
    if mode == "RGB":
        return image
    if mode in ("I;16", "I;16B", "I;16L", "I;16N", "I", "F"):
        array = np.array(image, dtype=np.float32)  # one copy, scaled in place (float64 took two, twice as big)
        if mode == "F":
            low, high = float(array.min()), float(array.max())
            array -= low
            array *= 255 / (high - low or 1.0)
            notes.append("floating-point image scaled to 8 bits (min-max)")
        else:
            array /= 257.0  # 65535 -> 255
            notes.append(f"{'16' if mode.startswith('I;16') else '32'}-bit image converted to 8 bits")
        np.clip(array, 0, 255, out=array)
        gray = Image.fromarray(array.astype(np.uint8), mode="L")
        return gray.convert("RGB")
    if mode in ("RGBA", "LA", "PA", "1") or (mode == "P" and "transparency" in image.info):
        return _flat_rgb(image, notes)
    if mode == "L":
        notes.append("grayscale image repeated on three channels")
    return image.convert("RGB")


def image_digest(image: Image.Image) -> str:
    """A key for a picture's content (pixels and size), for caches and ground-truth lookup."""
    return hashlib.blake2b(image.tobytes(), digest_size=16).hexdigest() + f"-{image.width}x{image.height}"


def _from_array(array: np.ndarray) -> Image.Image:
    if array.ndim == 2:
        array = np.repeat(array[..., None], 3, axis=2)
    if array.ndim != 3 or array.shape[2] not in (3, 4):
        raise ImageError(f"an image array must be HxW, HxWx3 or HxWx4, not {array.shape}")
    if array.dtype != np.uint8:
        array = np.clip(array * (255 if array.max() <= 1.0 else 1), 0, 255).astype(np.uint8)
    return Image.fromarray(array)
