"""explorer.core.images.load_image: every kind of upload in, RGB out, or a readable ImageError."""

from __future__ import annotations

import io
import struct
import time
import tracemalloc
import zlib

import numpy as np
import pytest
from PIL import Image, PngImagePlugin

import explorer.core.images as images
from explorer.core.errors import ExplorerError, ImageError
from explorer.core.images import load_image


def _noise(width: int, height: int, seed: int = 0) -> Image.Image:
    rng = np.random.default_rng(seed)
    return Image.fromarray(rng.integers(0, 256, (height, width, 3), dtype=np.uint8), "RGB")


def _jpeg_bytes(image: Image.Image, **kwargs) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, "JPEG", quality=90, **kwargs)
    return buffer.getvalue()


def _png_chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)


def _png_header_only(width: int, height: int) -> bytes:
    """A PNG whose IHDR declares width x height RGB but whose IDAT holds a few bytes."""
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)  # 8-bit RGB, no interlace
    idat = zlib.compress(b"\x00" * 16)
    return (b"\x89PNG\r\n\x1a\n" + _png_chunk(b"IHDR", ihdr) + _png_chunk(b"IDAT", idat)
            + _png_chunk(b"IEND", b""))


# ---- unreadable input ---------------------------------------------------------------------------


def test_corrupt_png_is_refused_with_a_clear_message(tmp_path):
    path = tmp_path / "photo.png"
    path.write_bytes(np.random.default_rng(1).integers(0, 256, 4096, dtype=np.uint8).tobytes())
    with pytest.raises(ImageError) as info:
        load_image(path)
    message = str(info.value)
    assert "photo.png" in message and "not an image" in message


def test_truncated_jpeg_is_refused_with_a_clear_message(tmp_path):
    data = _jpeg_bytes(_noise(256, 256))
    path = tmp_path / "cut.jpg"
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(ImageError) as info:
        load_image(path)
    message = str(info.value)
    assert "cut.jpg" in message and "truncated" in message


def test_truncated_jpeg_upload_is_refused(tmp_path):
    data = _jpeg_bytes(_noise(256, 256))
    with pytest.raises(ImageError, match="truncated"):
        load_image(data[: len(data) // 2])


def test_text_file_upload_is_refused(tmp_path):
    path = tmp_path / "notes.txt"
    path.write_text("a photo of a cat sitting on a mat\n" * 20)
    with pytest.raises(ImageError, match="not an image"):
        load_image(path)
    with pytest.raises(ImageError, match="not an image"):
        load_image(path.read_bytes())


def test_missing_path_and_folder_are_refused(tmp_path):
    with pytest.raises(ImageError, match="No image file"):
        load_image(tmp_path / "nowhere.png")
    with pytest.raises(ImageError, match="folder"):
        load_image(tmp_path)


@pytest.mark.parametrize("source", [12345, None, object()], ids=["int", "none", "object"])
def test_unsupported_source_type_is_refused(source):
    with pytest.raises(ImageError, match="Cannot read an image from"):
        load_image(source)


def test_image_error_is_an_explorer_error():
    assert issubclass(ImageError, ExplorerError)


# ---- modes --------------------------------------------------------------------------------------


def test_rgb_passes_through_without_notes(tmp_path):
    path = tmp_path / "rgb.png"
    _noise(40, 30).save(path)
    loaded = load_image(path)
    assert loaded.image.mode == "RGB" and loaded.image.size == (40, 30)
    assert loaded.notes == []
    assert loaded.original_size == (40, 30)
    assert np.array_equal(np.asarray(loaded.image), np.asarray(_noise(40, 30)))


def test_grayscale_becomes_rgb_with_a_note(tmp_path):
    gray = Image.fromarray(np.arange(48 * 32, dtype=np.uint32).reshape(32, 48).astype(np.uint8), "L")
    path = tmp_path / "gray.png"
    gray.save(path)
    loaded = load_image(path)
    assert loaded.image.mode == "RGB" and loaded.image.size == (48, 32)
    array = np.asarray(loaded.image)
    for channel in range(3):
        assert np.array_equal(array[..., channel], np.asarray(gray))
    assert any("grayscale" in note for note in loaded.notes)


def test_rgba_is_flattened_onto_white_with_a_note(tmp_path):
    rgba = np.zeros((8, 8, 4), dtype=np.uint8)
    rgba[...] = (10, 20, 30, 0)  # fully transparent, with colour behind it
    rgba[1, 1] = (255, 0, 0, 255)  # opaque red
    rgba[2, 2] = (0, 0, 0, 128)  # half-transparent black
    path = tmp_path / "alpha.png"
    Image.fromarray(rgba, "RGBA").save(path)
    loaded = load_image(path)
    array = np.asarray(loaded.image)
    assert loaded.image.mode == "RGB"
    assert tuple(array[0, 0]) == (255, 255, 255)  # transparent -> white, not the hidden colour
    assert tuple(array[1, 1]) == (255, 0, 0)
    assert all(abs(int(v) - 127) <= 1 for v in array[2, 2])
    assert any("transparent" in note and "white" in note for note in loaded.notes)


def test_palette_with_transparency_is_flattened_onto_white(tmp_path):
    palette_image = Image.new("P", (4, 4), 0)
    palette_image.putpalette([0, 0, 255] + [255, 0, 0] * 255)
    palette_image.putpixel((1, 1), 1)
    path = tmp_path / "palette.png"
    palette_image.save(path, transparency=0)
    loaded = load_image(path)
    array = np.asarray(loaded.image)
    assert tuple(array[0, 0]) == (255, 255, 255)
    assert tuple(array[1, 1]) == (255, 0, 0)
    assert any("white" in note for note in loaded.notes)


def test_16_bit_png_is_scaled_to_8_bits_with_a_note(tmp_path):
    values = np.array([[0, 257, 32896, 65535]], dtype=np.uint16).repeat(3, axis=0)
    sixteen = Image.fromarray(values)
    assert sixteen.mode == "I;16"
    path = tmp_path / "depth.png"
    sixteen.save(path)
    with Image.open(path) as reopened:
        assert reopened.mode.startswith("I;16")  # the file really is 16-bit
    loaded = load_image(path)
    array = np.asarray(loaded.image)
    assert loaded.image.mode == "RGB" and array.dtype == np.uint8
    assert list(array[0, :, 0]) == [0, 1, 128, 255]  # 65535 -> 255, 257 -> 1: divided by 257
    assert np.array_equal(array[..., 0], array[..., 2])
    assert any("16-bit" in note for note in loaded.notes)


# ---- size limits ------------------------------------------------------------------------------


@pytest.mark.parametrize("as_bytes", [False, True], ids=["path", "upload"])
def test_huge_png_is_refused_from_its_header_without_decoding(tmp_path, monkeypatch, as_bytes):
    data = _png_header_only(20000, 20000)
    assert len(data) < 200
    path = tmp_path / "huge.png"
    path.write_bytes(data)
    decoded = []
    original_load = PngImagePlugin.PngImageFile.load

    def spy_load(self, *args, **kwargs):
        decoded.append(self.size)
        return original_load(self, *args, **kwargs)

    monkeypatch.setattr(PngImagePlugin.PngImageFile, "load", spy_load)
    tracemalloc.start()
    start = time.perf_counter()
    try:
        with pytest.raises(ImageError) as info:
            load_image(data if as_bytes else path)
        elapsed = time.perf_counter() - start
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    message = str(info.value)
    assert "megapixels" in message and "20000x20000" in message
    assert decoded == []  # refused from the header alone
    assert elapsed < 1.0
    assert peak < 50 * 2**20


def test_large_png_over_the_decode_limit_is_refused(tmp_path, monkeypatch):
    monkeypatch.setattr(images, "MAX_DECODE_PIXELS", 1_000_000)
    path = tmp_path / "big.png"
    Image.new("RGB", (1500, 1500), (1, 2, 3)).save(path)
    with pytest.raises(ImageError, match="megapixels"):
        load_image(path)


def test_large_jpeg_over_the_decode_limit_is_refused_like_any_other_format(tmp_path, monkeypatch):
    # Issue 10: one rule for every format. A JPEG past the limit used to be decoded at reduced scale
    # (draft) while a PNG of the same size was refused; now both are refused, with the same message.
    monkeypatch.setattr(images, "MAX_DECODE_PIXELS", 1_000_000)
    path = tmp_path / "big.jpg"
    picture = Image.new("RGB", (1500, 1500), (200, 30, 30))
    picture.paste((30, 30, 200), (0, 750, 1500, 1500))  # bottom half blue
    path.write_bytes(_jpeg_bytes(picture))
    with pytest.raises(ImageError) as info:
        load_image(path)
    message = str(info.value)
    assert "big.jpg" in message and "1500x1500" in message and "megapixels" in message
    assert "every format" in message and "Downscale it first" in message


def test_image_wider_than_max_side_is_downscaled_with_a_note(tmp_path, monkeypatch):
    monkeypatch.setattr(images, "MAX_SIDE", 256)
    path = tmp_path / "wide.png"
    _noise(600, 300).save(path)
    loaded = load_image(path)
    assert loaded.image.size == (200, 100)  # box-reduced by the smallest whole factor that fits: 3
    assert loaded.original_size == (600, 300)
    assert any("downscaled" in note and "600x300" in note for note in loaded.notes)


def test_explicit_max_side_wins(tmp_path):
    loaded = load_image(_noise(300, 100), max_side=150)
    assert loaded.image.size == (150, 50)
    assert any("downscaled" in note for note in loaded.notes)
    small = load_image(_noise(300, 100))
    assert small.image.size == (300, 100) and small.notes == []


# ---- orientation ------------------------------------------------------------------------------


def test_exif_orientation_is_applied(tmp_path):
    picture = Image.new("RGB", (80, 40), (255, 0, 0))
    picture.paste((0, 0, 255), (0, 0, 40, 40))  # left half blue
    exif = Image.Exif()
    exif[0x0112] = 6  # rotate 90 degrees clockwise to display
    path = tmp_path / "phone.jpg"
    path.write_bytes(_jpeg_bytes(picture, exif=exif.tobytes()))
    with Image.open(path) as stored:
        assert stored.size == (80, 40) and stored.getexif()[0x0112] == 6
    loaded = load_image(path)
    assert loaded.image.size == (40, 80)  # width and height swapped
    array = np.asarray(loaded.image).astype(int)
    # rotated clockwise: the stored left (blue) half is now on top
    assert array[5, 20, 2] > 150 and array[-5, 20, 0] > 150
