"""Issue 10, "Input handling, made consistent": one rule per kind of bad input, each with a clear word.

- a picture past the decode limit is refused the same way whatever its format (PNG and JPEG alike);
- the notes about a picture's size say once what the file is and what the app works at;
- a picture too small (under 8 px on a side) or too thin (past 20:1) to draw maps on is refused;
- a caption with no word ("....", emoji) is refused; wordless pieces of a longer one are left out, and said so;
- CJK full stops end sentences (tests/test_text.py has the splitting itself).
"""

from __future__ import annotations

import io
import struct
import warnings
import zlib

import numpy as np
import pytest
from PIL import Image, JpegImagePlugin, PngImagePlugin

import explorer.core.images as images
from explorer.core.errors import CaptionError, ImageError
from explorer.core.images import load_image
from explorer.grounding.budget import analyse_caption, caption_sentences
from explorer.grounding.sentence_maps import describe_picture, prepare_image, working_picture


def _picture(width: int, height: int) -> Image.Image:
    rng = np.random.default_rng(width * 7 + height)
    return Image.fromarray(rng.integers(0, 256, (height, width, 3), dtype=np.uint8), "RGB")


def _encoded(image: Image.Image, fmt: str, **kwargs) -> bytes:
    buffer = io.BytesIO()
    image.save(buffer, fmt, **kwargs)
    return buffer.getvalue()


def _png_claiming(width: int, height: int) -> bytes:
    """A PNG whose header declares width x height (its data holds a few bytes: never decoded)."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(b"\x00" * 16))
            + chunk(b"IEND", b""))


def _jpeg_claiming(width: int, height: int) -> bytes:
    """A small JPEG whose frame header (SOF0) is patched to declare width x height."""
    data = bytearray(_encoded(_picture(16, 16), "JPEG", quality=90))
    at = data.index(b"\xff\xc0")  # baseline frame: marker, length (2), precision (1), height (2), width (2)
    data[at + 5:at + 9] = struct.pack(">HH", height, width)
    return bytes(data)


# ---- 1. the decode limit: one rule for every format ----------------------------------------------


def test_a_12000_px_png_and_jpeg_are_refused_alike_from_their_headers(monkeypatch):
    decoded = []
    for plugin in (PngImagePlugin.PngImageFile, JpegImagePlugin.JpegImageFile):
        original = plugin.load
        monkeypatch.setattr(plugin, "load", lambda self, *a, _original=original, **k: (
            decoded.append(self.format), _original(self, *a, **k))[1])
    messages = {}
    for fmt, data in (("PNG", _png_claiming(12000, 12000)), ("JPEG", _jpeg_claiming(12000, 12000))):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", Image.DecompressionBombWarning)  # this check opens it outside the app
            with Image.open(io.BytesIO(data)) as opened:
                assert opened.format == fmt and opened.size == (12000, 12000)
        with pytest.raises(ImageError) as info:
            prepare_image(data)
        messages[fmt] = str(info.value)
    assert decoded == []  # both refused before a pixel is decoded
    assert messages["PNG"] == messages["JPEG"]  # the same rule, the same words
    assert messages["PNG"] == ("The uploaded data is 12000x12000 px (144 megapixels); pictures of every format are "
                               "read up to 64 megapixels and 256 MB decoded. Downscale it first (e.g. to 4096 px on "
                               "the long side, 8 bits a channel) and load it again.")


@pytest.mark.parametrize("fmt", ["PNG", "JPEG", "WEBP", "TIFF", "BMP"])
def test_every_format_past_the_limit_is_refused_and_within_it_read(tmp_path, monkeypatch, fmt):
    monkeypatch.setattr(images, "MAX_DECODE_PIXELS", 100_000)
    path = tmp_path / f"picture.{fmt.lower()}"
    path.write_bytes(_encoded(_picture(400, 300), fmt))  # 120,000 px: past the lowered limit
    with pytest.raises(ImageError, match=r"picture\.\w+ is 400x300 px \(0\.12 megapixels\); pictures of every "
                                         r"format are read up to 0\.1 megapixels"):
        load_image(path)
    monkeypatch.setattr(images, "MAX_DECODE_PIXELS", 120_000)  # exactly at the limit: read, at full size
    loaded = load_image(path)
    assert loaded.image.size == (400, 300) and loaded.full_size == (400, 300)


# ---- 2. size notes: the file's size and the working size, once ----------------------------------


def test_a_picture_over_the_working_side_says_its_size_and_the_working_size_once():
    picture, notes = prepare_image(_encoded(_picture(1024, 768), "PNG"))
    assert picture.size == (768, 576)
    assert notes == ["picture 1024x768 px; worked on at 768x576"]
    same, lines = describe_picture(_encoded(_picture(1024, 768), "PNG"))
    assert same.size == (768, 576)
    assert lines == ["Image 1024x768 px ready, worked on at 768x576."]


def test_a_picture_within_the_working_side_is_worked_on_at_full_size_without_notes():
    picture, notes = prepare_image(_picture(300, 200))
    assert picture.size == (300, 200) and notes == []
    assert describe_picture(_picture(300, 200))[1] == ["Image 300x200 px ready, worked on at full size."]


def test_two_downscales_are_one_note_that_agrees_with_the_picture(monkeypatch):
    # On reading, a picture past MAX_SIDE is downscaled; then to the working side. The old notes said
    # "downscaled to 4096x16" beside "Image 768x3 ready.": now one note names the file and the working size.
    monkeypatch.setattr(images, "MAX_SIDE", 1000)
    data = _encoded(_picture(6000, 1500), "PNG")
    picture, notes = prepare_image(data)
    assert picture.size == (768, 192)
    assert notes == ["picture 6000x1500 px; worked on at 768x192"]
    assert not any("1000x250" in note or "downscaled" in note for note in notes)
    working = working_picture(data)
    assert working.notes == tuple(notes) and working.image.size == picture.size
    assert working.full_size == (6000, 1500) and working.original_size == (6000, 1500)
    assert describe_picture(data)[1] == ["Image 6000x1500 px ready, worked on at 768x192."]


def test_conversions_follow_the_size_note_and_the_headline():
    gray = Image.fromarray(np.tile(np.arange(256, dtype=np.uint8), (100, 4)), "L")  # 1024x100
    picture, notes = prepare_image(gray)
    assert picture.size == (768, 75) and picture.mode == "RGB"
    assert notes[0] == "picture 1024x100 px; worked on at 768x75" and "grayscale" in notes[1] and len(notes) == 2
    _, lines = describe_picture(gray)
    assert lines[0] == "Image 1024x100 px ready, worked on at 768x75." and lines[1:] == notes[1:]


def test_the_size_note_names_the_upright_size_of_a_rotated_photo():
    exif = Image.Exif()
    exif[0x0112] = 6  # stored 1000x500, shown 500x1000
    data = _encoded(_picture(1000, 500), "JPEG", quality=90, exif=exif.tobytes())
    picture, notes = prepare_image(data)
    assert picture.size == (384, 768)
    assert notes == ["picture 500x1000 px; worked on at 384x768"]


# ---- 3. too small or too thin --------------------------------------------------------------------


@pytest.mark.parametrize("size", [(1, 1), (768, 3), (7, 500)])
def test_a_picture_under_8_px_on_a_side_is_refused(size):
    for prepare in (prepare_image, describe_picture, working_picture):
        with pytest.raises(ImageError) as info:
            prepare(_picture(*size))
        assert str(info.value) == (f"The picture is {size[0]}x{size[1]} px: too small to see anything. "
                                   "A picture needs at least 8 px on each side.")


def test_a_1x1_file_is_refused_with_its_name(tmp_path):
    path = tmp_path / "dot.png"
    _picture(1, 1).save(path)
    with pytest.raises(ImageError, match=r"^dot\.png is 1x1 px: too small to see anything"):
        prepare_image(str(path))


def test_a_picture_past_20_to_1_is_refused_from_its_header(monkeypatch):
    decoded = []
    original = PngImagePlugin.PngImageFile.load
    monkeypatch.setattr(PngImagePlugin.PngImageFile, "load",
                        lambda self, *a, **k: (decoded.append(self.size), original(self, *a, **k))[1])
    with pytest.raises(ImageError) as info:
        prepare_image(_png_claiming(20000, 80))
    assert decoded == []
    assert str(info.value) == ("The uploaded data is 20000x80 px, 250:1: too long and thin to draw maps on "
                               "(at most 20:1). Crop it into parts closer to square first.")
    with pytest.raises(ImageError, match=r"421x20 px, 21.1:1: too long and thin"):
        prepare_image(_picture(421, 20))


def test_a_picture_at_20_to_1_and_8_px_is_accepted():
    picture, notes = prepare_image(_picture(800, 40))
    assert picture.size == (768, 38) and notes == ["picture 800x40 px; worked on at 768x38"]
    assert prepare_image(_picture(8, 8))[0].size == (8, 8)


def test_load_image_alone_keeps_reading_small_pictures():
    # datasets, training and label masks read pictures with load_image: the shape rule is for maps only
    assert load_image(_picture(4, 3)).image.size == (4, 3)
    with pytest.raises(ImageError, match="too small"):
        load_image(_picture(4, 3), require_shape=True)


# ---- 4. captions with no words --------------------------------------------------------------------


@pytest.mark.parametrize("caption", ["....", "!!! ???", "😀😀😀", "🐱 🐶\n🐭", "。。。", "…"])
def test_a_caption_with_no_word_is_refused(caption):
    with pytest.raises(CaptionError, match=r"^The caption has no words: .* is only punctuation or symbols\. "
                                           r"Write at least one sentence with letters or digits\.$"):
        analyse_caption(caption)
    with pytest.raises(CaptionError, match="no words"):
        caption_sentences(caption)  # the regions view's split


def test_an_empty_caption_keeps_its_own_message():
    with pytest.raises(CaptionError, match="The caption is empty"):
        analyse_caption("  \n ")


def test_wordless_pieces_of_a_caption_are_left_out_and_said_so():
    caption = "!!! A red cube. A blue ball.\n\n😀😀\n\nA green floor."
    analysis = analyse_caption(caption)
    assert [s.text for s in analysis.sentences] == ["A red cube.", "A blue ball.", "A green floor."]
    assert analysis.dropped == ("!!!", "😀😀")
    assert analysis.notes == ['2 piece(s) of the caption with no letter or digit left out (not sentences, '
                              'no map drawn): "!!!", "😀😀"']
    assert analyse_caption("A red cube. A blue ball.").notes == []


def test_a_left_out_piece_still_counts_in_the_token_positions():
    from explorer.models.tokenizer import CLIP_TOKENS

    analysis = analyse_caption("!!! A red cube.")
    bangs = CLIP_TOKENS.count("!!!") - CLIP_TOKENS.specials
    assert bangs > 0
    (sentence,) = analysis.sentences
    assert sentence.start_token == 1 + bangs
    assert sentence.end_token == analysis.n_tokens - 1  # the last word sits just before EOT


# ---- 5. CJK full stops ----------------------------------------------------------------------------


def test_a_chinese_caption_is_read_sentence_by_sentence():
    analysis = analyse_caption("左边有一个红色的立方体。上面有一个蓝色的球！地板是绿色的吗？是的。")
    assert [s.text for s in analysis.sentences] == [
        "左边有一个红色的立方体。", "上面有一个蓝色的球！", "地板是绿色的吗？", "是的。"]
    assert analysis.dropped == ()
