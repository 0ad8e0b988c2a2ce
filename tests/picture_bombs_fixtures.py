"""Pictures whose metadata amplifies when Pillow opens them (issue 64), built in code: one per format, each a few
bytes of pixels and metadata items that all point at one blob (or text that decompresses, or joins, big).
``bench/abuse_part4.py`` measures them at full size; the tests use small ones."""

from __future__ import annotations

import io
import struct
import zlib

from PIL import Image


def exif_block(tags: int, blob: int, prefix: bool = False) -> bytes:
    """A little-endian TIFF structure (an EXIF block) whose ``tags`` private tags all point at one ``blob`` of
    bytes; ``prefix``: with ``Exif\\0\\0`` in front (JPEG's APP1)."""
    ifd = 8
    blob_at = ifd + 2 + 12 * tags + 4
    entries = b"".join(struct.pack("<HHII", 40000 + i, 7, blob, blob_at) for i in range(tags))
    body = b"II*\x00" + struct.pack("<I", ifd) + struct.pack("<H", tags) + entries + b"\x00" * 4 + b"\x01" * blob
    return (b"Exif\x00\x00" if prefix else b"") + body


def tiff_bomb(tags: int, blob: int) -> bytes:
    """A 1 x 1 grey TIFF whose IFD has ``tags`` more tags, every one pointing at the same ``blob`` bytes."""
    base = [(256, 3, 1, 1), (257, 3, 1, 1), (258, 3, 1, 8), (259, 3, 1, 1), (262, 3, 1, 1), (273, 4, 1, None),
            (277, 3, 1, 1), (278, 3, 1, 1), (279, 4, 1, 1)]
    count = len(base) + tags
    ifd = 8
    pixel_at = ifd + 2 + 12 * count + 4
    blob_at = pixel_at + 1
    entries = []
    for tag, kind, n, value in base:
        value = pixel_at if value is None else value
        entries.append(struct.pack("<HHI", tag, kind, n) + (struct.pack("<HH", value, 0) if kind == 3
                                                              else struct.pack("<I", value)))
    entries += [struct.pack("<HHII", 40000 + i, 7, blob, blob_at) for i in range(tags)]
    return (b"II*\x00" + struct.pack("<I", ifd) + struct.pack("<H", count) + b"".join(entries) + b"\x00" * 4
            + b"\x80" + b"\x01" * blob)


def _saved(fmt: str, **options) -> bytes:
    buffer = io.BytesIO()
    Image.new("RGB", (4, 4), (200, 30, 30)).save(buffer, format=fmt, **options)
    return buffer.getvalue()


def png_exif_bomb(tags: int, blob: int) -> bytes:
    """A PNG with an ``eXIf`` chunk whose tags all point at one blob (parsed when the picture is turned upright)."""
    return _saved("PNG", exif=exif_block(tags, blob))


def _png_with(chunks: list[tuple[bytes, bytes]]) -> bytes:
    plain = _saved("PNG")
    at = plain.index(b"IDAT") - 4
    extra = b"".join(struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))
                     for kind, body in chunks)
    return plain[:at] + extra + plain[at:]


def png_text_bomb(chunks: int, inflated: int = 1024 * 1024, kind: bytes = b"zTXt") -> bytes:
    """A PNG with ``chunks`` compressed text chunks (``zTXt`` or ``iTXt``), each inflating to ``inflated`` bytes."""
    text = zlib.compress(b"a" * inflated, 9)
    body = b"k%d\x00\x00" + text if kind == b"zTXt" else b"k%d\x00\x01\x00\x00\x00" + text
    return _png_with([(kind, body.replace(b"%d", str(i).encode())) for i in range(chunks)])


def png_icc_bomb(inflated: int = 1024 * 1024) -> bytes:
    return _png_with([(b"iCCP", b"icc\x00\x00" + zlib.compress(b"\x00" * inflated, 9))])


def jpeg_exif_bomb(tags: int = 2000, blob: int = 40_000) -> bytes:
    """A JPEG whose APP1 EXIF (one segment, under 64 KB) has ``tags`` tags all pointing at one ``blob``."""
    return _saved("JPEG", exif=exif_block(tags, blob, prefix=True))


def jpeg_appn_bomb(segments: int = 200) -> bytes:
    """A JPEG with ``segments`` full APP2 segments (64 KB each) before its scan."""
    plain = _saved("JPEG")
    segment = b"\xff\xe2" + struct.pack(">H", 65535) + b"\x00" * 65533
    return plain[:2] + segment * segments + plain[2:]


def webp_exif_bomb(tags: int, blob: int) -> bytes:
    return _saved("WEBP", exif=exif_block(tags, blob, prefix=True), lossless=True)


def gif_comment_bomb(comment: int) -> bytes:
    """A GIF whose comment extension is ``comment`` bytes in 255-byte sub-blocks (Pillow joins them one by one)."""
    plain = _saved("GIF")
    blocks = b"".join(bytes([len(part)]) + part for part in (b"c" * min(255, comment - i) for i in range(0, comment, 255)))
    at = plain.index(b"\x2c")  # the first image descriptor
    return plain[:at] + b"\x21\xfe" + blocks + b"\x00" + plain[at:]


def ordinary_pictures() -> dict[str, bytes]:
    """One ordinary picture per format, with ordinary metadata (a short EXIF, a comment)."""
    exif = Image.Exif()
    exif[0x0112] = 1
    exif[0x010F] = "maker"
    return {"tiff": _saved("TIFF"), "png": _saved("PNG", exif=exif.tobytes()), "jpeg": _saved("JPEG", exif=exif),
            "webp": _saved("WEBP", exif=exif.tobytes()), "gif": _saved("GIF", comment=b"a comment")}
