"""What opening a picture will allocate for its metadata, counted from the file's own structure before Pillow reads it.

Pillow keeps every metadata item it meets, and a file can point many items at the same bytes: a TIFF's tags (or the
EXIF block a PNG's ``eXIf`` chunk, a JPEG's APP1 segment or a WebP's ``EXIF`` chunk carries, which Pillow parses as a
TIFF when the picture is turned upright) each read their data again, and numbers become Python objects (about 40
bytes each, a rational several times that). A 10 MB TIFF whose 100 tags all point at one blob cost 2 GB. Text chunks,
ICC profiles, JPEG APPn and GIF comments are counted by what they decompress or join to (a GIF comment is joined
sub-block by sub-block, each join a copy: quadratic time, bounded apart), frames by their number, an animated WebP by the two canvases its decoder holds.

``metadata_cost(path)`` walks the container (no decoding, no Python object per item) and returns the bytes opening
it may allocate and its frames; ``check(path)`` refuses past ``METADATA_BYTES``, ``COPIED_BYTES`` or ``FRAMES``
(``MetadataTooLarge``).
The walk itself reads at most ``WALK_ITEMS`` items, so a hostile file cannot make the count expensive either.
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass
from pathlib import Path

from explorer.core.errors import ExplorerError

MB = 1024 * 1024
METADATA_BYTES = 16 * MB  # what opening one picture may allocate for its metadata (a phone photo's: under 1 MB)
COPIED_BYTES = 256 * MB  # bytes Pillow may copy joining a GIF's sub-blocks (quadratic in their number; ~0.1 s)
FRAMES = 1000  # frames (pages, animation frames) one picture may declare
WALK_ITEMS = 200_000  # chunks, segments, blocks or tags the walk reads before it stops and refuses
TEXT_CHUNK = 1 * MB  # Pillow's own cap on one decompressed PNG text chunk (PngImagePlugin.MAX_TEXT_CHUNK)
# A TIFF value type's size in the file, and what Pillow makes of each value: bytes and text stay bytes, numbers
# become Python objects in a tuple (a pointer and an object), rationals objects of their own.
_TIFF_TYPES = {1: (1, 1), 2: (1, 1), 3: (2, 40), 4: (4, 40), 5: (8, 200), 6: (1, 40), 7: (1, 1), 8: (2, 40),
               9: (4, 40), 10: (8, 200), 11: (4, 40), 12: (8, 40), 13: (4, 40), 16: (8, 40), 17: (8, 40),
               18: (8, 40)}
_SUB_IFDS = {0x8769, 0x8825, 0xA005, 0x014A}  # EXIF, GPS, interoperability, SubIFDs: Pillow follows them too


class MetadataTooLarge(ExplorerError):
    """A picture whose metadata (tags, EXIF, text, ICC, comments) or frames would cost more than the page reads."""


@dataclass
class Cost:
    bytes: int = 0
    frames: int = 1
    items: int = 0
    copied: int = 0  # bytes copied joining sub-blocks (time, not memory)
    limit: int | None = None  # past this many bytes the walk stops at once (``check``: the verdict is known)

    def add(self, nbytes: int, items: int = 1) -> None:
        self.bytes += max(int(nbytes), 0)
        self.items += items
        if self.items > WALK_ITEMS:
            raise MetadataTooLarge(f"the picture has more than {WALK_ITEMS:,} metadata items")
        if self.limit is not None and self.bytes > self.limit:
            raise MetadataTooLarge(f"opening the picture would take more than {self.limit // MB} MB for its "
                                   "metadata")


def check(path: Path) -> Cost:
    """The cost of opening ``path``, or ``MetadataTooLarge`` past the bounds."""
    cost = metadata_cost(Path(path).read_bytes(), limit=METADATA_BYTES)
    if cost.bytes > METADATA_BYTES:
        raise MetadataTooLarge(f"opening the picture would take {cost.bytes / MB:,.0f} MB for its metadata "
                               f"(at most {METADATA_BYTES // MB} MB)")
    if cost.copied > COPIED_BYTES:
        raise MetadataTooLarge(f"reading the picture's comments would copy {cost.copied / MB:,.0f} MB "
                               f"(at most {COPIED_BYTES // MB} MB)")
    if cost.frames > FRAMES:
        raise MetadataTooLarge(f"the picture declares {cost.frames:,} frames (at most {FRAMES:,})")
    return cost


def metadata_cost(data: bytes, limit: int | None = None) -> Cost:
    """What opening the picture in ``data`` may allocate for metadata, by its format (unknown formats: nothing);
    past ``limit`` bytes, ``MetadataTooLarge`` at once."""
    cost = Cost(limit=limit)
    try:
        if data[:4] in (b"II*\x00", b"MM\x00*", b"II+\x00", b"MM\x00+"):
            tiff_cost(data, cost)
        elif data[:8] == b"\x89PNG\r\n\x1a\n":
            png_cost(data, cost)
        elif data[:2] == b"\xff\xd8":
            jpeg_cost(data, cost)
        elif data[:4] == b"RIFF" and data[8:12] == b"WEBP":
            webp_cost(data, cost)
        elif data[:6] in (b"GIF87a", b"GIF89a"):
            gif_cost(data, cost)
    except (struct.error, IndexError, zlib.error):
        pass  # a truncated structure: counted as far as it goes; Pillow refuses the rest itself
    return cost


# ---- TIFF, and the EXIF blocks other formats carry ---------------------------------------------------------


def tiff_cost(blob: bytes, cost: Cost, frames: bool = True) -> None:
    """Every tag of every IFD in ``blob`` (a TIFF file or an EXIF block), each counted at what Pillow reads for it,
    however many point at the same bytes; the IFD chain's length as frames."""
    order = "<" if blob[:2] == b"II" else ">"
    big = struct.unpack(order + "H", blob[2:4])[0] == 43
    first = struct.unpack(order + ("Q" if big else "I"), blob[8:16] if big else blob[4:8])[0]
    todo, seen, chain = [(first, True)], set(), 0
    while todo:
        offset, in_chain = todo.pop()
        if offset in seen or not 0 < offset < len(blob):
            continue
        seen.add(offset)
        chain += in_chain
        following = _ifd_cost(blob, offset, order, big, cost, todo)
        if in_chain and following:
            todo.append((following, True))
    if frames:
        cost.frames = max(cost.frames, chain)


def _ifd_cost(blob: bytes, offset: int, order: str, big: bool, cost: Cost, todo: list) -> int:
    """One IFD's tags counted (its sub-IFDs queued); the next IFD's offset."""
    count_format, entry, inline = ("Q", 20, 8) if big else ("H", 12, 4)
    head = 8 if big else 2
    entries = struct.unpack(order + count_format, blob[offset:offset + head])[0]
    cost.add(0, 1)
    for i in range(min(entries, WALK_ITEMS + 1)):
        at = offset + head + i * entry
        if at + entry > len(blob):
            break
        tag, kind = struct.unpack(order + "HH", blob[at:at + 4])
        count = struct.unpack(order + ("Q" if big else "I"), blob[at + 4:at + 4 + inline])[0]
        size, each = _TIFF_TYPES.get(kind, (1, 1))
        raw = count * size
        where = at + 4 + inline
        if raw > inline:  # the value lies elsewhere: Pillow reads it, up to the end of the block
            pointer = struct.unpack(order + ("Q" if big else "I"), blob[where:where + inline])[0]
            raw = max(min(raw, len(blob) - pointer), 0)
        values = raw // size
        cost.add(raw + (values * each if each > 1 else 0))
        if tag in _SUB_IFDS and kind in (4, 13, 16):
            pointer = struct.unpack(order + ("Q" if big else "I"), blob[where:where + inline])[0]
            todo.append((pointer, False))
    end = offset + head + entries * entry
    return struct.unpack(order + ("Q" if big else "I"), blob[end:end + inline])[0] if end + inline <= len(blob) else 0


def exif_cost(block: bytes, cost: Cost) -> None:
    """An EXIF block (``Exif\\0\\0`` and a TIFF structure, or the structure alone): its size and its tags."""
    cost.add(len(block))
    body = block[6:] if block[:6] == b"Exif\x00\x00" else block
    if body[:4] in (b"II*\x00", b"MM\x00*"):
        tiff_cost(body, cost, frames=False)


# ---- PNG ---------------------------------------------------------------------------------------------------


def png_cost(data: bytes, cost: Cost) -> None:
    at = 8
    frames = 0
    while at + 8 <= len(data):
        length, kind = struct.unpack(">I4s", data[at:at + 8])
        body = data[at + 8:at + 8 + length]
        cost.add(0)
        if kind == b"eXIf":
            exif_cost(body, cost)
        elif kind in (b"tEXt", b"iTXt", b"zTXt", b"iCCP"):
            cost.add(len(body) + _png_text(kind, body))
        elif kind == b"fcTL":
            frames += 1
        elif kind == b"IEND":
            break
        at += 12 + length
    cost.frames = max(cost.frames, frames)


def _png_text(kind: bytes, body: bytes) -> int:
    """What a text or ICC chunk decompresses to (as Pillow reads it: at most ``TEXT_CHUNK``) and its text copy."""
    name, _, rest = body.partition(b"\x00")
    if kind == b"tEXt":
        return 2 * len(rest)
    if kind in (b"zTXt", b"iCCP"):
        return _inflated(rest[1:])
    compressed, rest = rest[:1] == b"\x01", rest[2:]  # iTXt: flag, method, language, translated keyword, text
    text = rest.split(b"\x00", 2)[-1]
    return _inflated(text) if compressed else 2 * len(text)


def _inflated(stream: bytes) -> int:
    """Twice what ``stream`` inflates to, up to ``TEXT_CHUNK``, counted in pieces (nothing big held)."""
    inflate, total = zlib.decompressobj(), 0
    while stream and total < TEXT_CHUNK:
        total += len(inflate.decompress(stream, 64 * 1024))
        stream = inflate.unconsumed_tail
    return 2 * min(total, TEXT_CHUNK)


# ---- JPEG --------------------------------------------------------------------------------------------------


def jpeg_cost(data: bytes, cost: Cost) -> None:
    """Every segment before the scan (Pillow keeps each APPn and comment), an APP1 EXIF's tags, MPO frames."""
    at = 2
    while at + 4 <= len(data):
        if data[at] != 0xFF:
            break
        marker = data[at + 1]
        if marker == 0xFF:
            at += 1
            continue
        if marker in (0xD8, 0x01) or 0xD0 <= marker <= 0xD7:
            at += 2
            continue
        if marker in (0xDA, 0xD9):  # the scan: Pillow stops reading segments here
            break
        length = struct.unpack(">H", data[at + 2:at + 4])[0]
        body = data[at + 4:at + 2 + length]
        cost.add(2 * len(body))  # the segment and its copy in the picture's info
        if marker == 0xE1 and body[:6] == b"Exif\x00\x00":
            exif_cost(body, cost)
        elif marker == 0xE2 and body[:4] == b"MPF\x00":
            mpf = body[4:]
            before = cost.frames
            tiff_cost(mpf, cost, frames=False)
            cost.frames = max(before, _mpo_frames(mpf))
        at += 2 + length


def _mpo_frames(mpf: bytes) -> int:
    """The frame count an MPO index declares (tag 0xB001), 1 when it names none."""
    order = "<" if mpf[:2] == b"II" else ">"
    offset = struct.unpack(order + "I", mpf[4:8])[0]
    entries = struct.unpack(order + "H", mpf[offset:offset + 2])[0]
    for i in range(min(entries, 64)):
        at = offset + 2 + 12 * i
        tag = struct.unpack(order + "H", mpf[at:at + 2])[0]
        if tag == 0xB001:
            return struct.unpack(order + "I", mpf[at + 8:at + 12])[0]
    return 1


# ---- WebP --------------------------------------------------------------------------------------------------


def webp_cost(data: bytes, cost: Cost) -> None:
    """Pillow reads the whole file, copies its ICC, EXIF and XMP chunks, and an animation's decoder holds two
    canvases of 4 bytes a pixel."""
    cost.add(len(data))
    at, frames = 12, 0
    while at + 8 <= len(data):
        kind, length = struct.unpack("<4sI", data[at:at + 8])
        body = data[at + 8:at + 8 + length]
        if kind == b"EXIF":
            exif_cost(body, cost)
        elif kind in (b"ICCP", b"XMP "):
            cost.add(len(body))
        elif kind == b"VP8X" and len(body) >= 10 and body[0] & 0x02:  # animated: its canvas, twice
            width = 1 + int.from_bytes(body[4:7], "little")
            height = 1 + int.from_bytes(body[7:10], "little")
            cost.add(2 * 4 * width * height)
        elif kind == b"ANMF":
            frames += 1
            cost.add(0)
        at += 8 + length + (length & 1)
    cost.frames = max(cost.frames, frames)


# ---- GIF ---------------------------------------------------------------------------------------------------


def gif_cost(data: bytes, cost: Cost) -> None:
    """Comments and application data are joined sub-block by sub-block (each join copies what came before: the
    square of their length, counted in bytes), frames by their image descriptors."""
    at = 13 + (3 << ((data[10] & 7) + 1) if data[10] & 0x80 else 0)
    frames = 0
    while at < len(data):
        kind = data[at]
        if kind == 0x3B:
            break
        if kind == 0x21:
            label = data[at + 1]
            at, joined, blocks = _sub_blocks(data, at + 2, cost)
            if label in (0xFE, 0xFF):  # comment, application (XMP): joined, each join a copy
                cost.add(joined)
                cost.copied += joined * (blocks + 1) // 2
        elif kind == 0x2C:
            frames += 1
            flags = data[at + 9]
            at += 10 + (3 << ((flags & 7) + 1) if flags & 0x80 else 0) + 1  # descriptor, local table, LZW size
            at = _sub_blocks(data, at, cost)[0]
        else:
            break
    cost.frames = max(cost.frames, frames)


def _sub_blocks(data: bytes, at: int, cost: Cost) -> tuple[int, int, int]:
    """Skip a run of GIF sub-blocks from ``at``: (where it ends, its bytes, its blocks)."""
    total = blocks = 0
    while at < len(data) and data[at]:
        size = data[at]
        total, blocks, at = total + size, blocks + 1, at + 1 + size
        cost.add(0)
    return at + 1, total, blocks
