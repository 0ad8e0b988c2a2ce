"""Reading user images safely: any mode in, RGB out, and never a memory blow-up.

A 20000 x 20000 PNG would take 1.2 GB to decode, so the pixel count is
checked from the header before anything is decoded: JPEGs are decoded at a
reduced scale (the codec does it for free), anything else past the limit is
refused. Every conversion made on the way is reported in ``notes`` so the
UI can say what happened to the picture.
"""

from __future__ import annotations

import hashlib
import io
import os
import threading
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from PIL import Image, ImageOps, UnidentifiedImageError

from explorer.core.errors import ImageError

MAX_DECODE_PIXELS = 64_000_000  # never decode more than this (about 256 MB as RGBA)
MAX_SIDE = 4096  # images are worked on at most this large; maps do not need more
_open_lock = threading.Lock()  # PIL's bomb limit is process-global; change it under a lock


@dataclass
class LoadedImage:
    image: Image.Image  # RGB
    notes: list[str] = field(default_factory=list)  # what was done to it, for the user
    original_size: tuple[int, int] = (0, 0)


def load_image(source, max_side: int | None = None) -> LoadedImage:
    """Open a path, bytes, numpy array or PIL image as an RGB picture, or raise ``ImageError``."""
    max_side = MAX_SIDE if max_side is None else max_side  # read at call time, so the setting can change
    if isinstance(source, Image.Image):
        image, label = source, "image"
    elif isinstance(source, np.ndarray):
        image, label = _from_array(source), "array"
    else:
        image, label = open_image(source)
    notes: list[str] = []
    original_size = image.size
    image = decode_image(image, label, notes)
    image = _to_rgb(image, notes)
    if max(image.size) > max_side:
        before = image.size
        image.thumbnail((max_side, max_side), Image.LANCZOS)
        notes.append(f"downscaled from {before[0]}x{before[1]} to {image.size[0]}x{image.size[1]}")
    return LoadedImage(image=image, notes=notes, original_size=original_size)


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
            raise ImageError(f"{label} is not an image that can be read (PNG, JPEG, WebP, TIFF, BMP, GIF...).") from error
        except OSError as error:
            raise ImageError(f"Cannot read {label}: {error}.") from error
        finally:
            Image.MAX_IMAGE_PIXELS = limit
    return image, label


def decode_image(image: Image.Image, label: str, notes: list[str]) -> Image.Image:
    """Decode an opened image within the pixel limit (large JPEGs at reduced scale), EXIF-rotated."""
    width, height = image.size
    if width < 1 or height < 1:
        raise ImageError(f"{label} has no pixels ({width}x{height}).")
    if width * height > MAX_DECODE_PIXELS:
        if image.format == "JPEG":
            scale = 1  # the smallest power-of-two reduction (at most 1/8) whose decoded size fits
            while -(-width // scale) * -(-height // scale) > MAX_DECODE_PIXELS and scale < 8:
                scale *= 2
            image.draft("RGB", (max(1, width // scale), max(1, height // scale)))
            notes.append(f"very large JPEG ({width}x{height}) decoded at reduced scale {image.size[0]}x{image.size[1]}")
        else:
            megapixels = width * height / 1e6
            raise ImageError(
                f"{label} is {width}x{height} ({megapixels:.0f} megapixels); the limit is "
                f"{MAX_DECODE_PIXELS / 1e6:.0f} megapixels. Downscale it first (e.g. to {MAX_SIDE} px on the long side).")
    try:
        image.load()
    except (OSError, SyntaxError, ValueError) as error:
        raise ImageError(f"{label} is damaged or truncated and cannot be decoded ({error}).") from error
    try:
        image = ImageOps.exif_transpose(image)
    except (OSError, ValueError, TypeError):
        notes.append("EXIF orientation could not be read; shown as stored")
    return image


def _to_rgb(image: Image.Image, notes: list[str]) -> Image.Image:
    mode = image.mode
    if mode == "RGB":
        return image
    if mode in ("I;16", "I;16B", "I;16L", "I;16N", "I", "F"):
        array = np.asarray(image, dtype=np.float64)
        if mode == "F":
            low, high = float(array.min()), float(array.max())
            array = (array - low) / (high - low or 1.0) * 255
            notes.append("floating-point image scaled to 8 bits (min-max)")
        else:
            array = array / 257.0  # 65535 -> 255
            notes.append(f"{'16' if mode.startswith('I;16') else '32'}-bit image converted to 8 bits")
        gray = Image.fromarray(np.clip(array, 0, 255).astype(np.uint8), mode="L")
        return gray.convert("RGB")
    if mode in ("RGBA", "LA", "PA") or (mode == "P" and "transparency" in image.info):
        rgba = image.convert("RGBA")
        background = Image.new("RGBA", rgba.size, (255, 255, 255, 255))
        notes.append("transparent areas flattened onto white")
        return Image.alpha_composite(background, rgba).convert("RGB")
    if mode in ("L", "1"):
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
