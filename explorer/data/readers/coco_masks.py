"""COCO segmentations as masks: polygons, run-length encodings (compressed and not), and back.

A COCO annotation's ``segmentation`` is one of:
- polygons: ``[[x0, y0, x1, y1, ...], ...]`` in pixels (pixel i covers [i, i + 1)), their union;
- an uncompressed RLE: ``{"size": [h, w], "counts": [n0, n1, ...]}``: run lengths over the pixels read
  column by column (Fortran order), starting with a run of 0s (possibly of length 0);
- a compressed RLE: the same runs as a string (COCO's format: each run in 5-bit groups written as
  characters from '0' (48) up, the 0x20 bit saying another group follows, the 0x10 bit of the last
  group the sign; from the third run on, each is stored as its difference to the run two before).

``decode`` uses pycocotools when it is installed (the reference), else this module's own decoders
(``decode_rle``, ``rasterize_polygons``). The RLE decoders are exact (tested equal to pycocotools);
the polygon rasterizer fills the pixels whose centre lies inside (even-odd), which differs from
pycocotools' rasterization only on pixels the outline crosses (tested: only there).

A polygon reaching past the picture is clipped to it, as pycocotools' ``frPyObjects`` rasterizes it (the
refer toolkit's ``getMask`` and the RIS loaders decode masks so): only its part inside the picture counts.

Checks (``SegmentationIssue`` with the reason; the refcoco layout skips the unit and counts it): a
polygon reaching more than ``FAR_OUTSIDE`` picture sizes past the edge ("polygon far outside the
picture": no annotation does, and pycocotools would walk its whole outline in memory), an RLE of
another size than the picture's ("mask size differs from the picture"), a malformed segmentation,
and an empty decoded mask ("empty mask": a polygon wholly outside the picture is one).
"""

from __future__ import annotations

import numpy as np

from explorer.data.errors import DatasetError

FAR_OUTSIDE = 1.0  # picture sizes a polygon may reach past the edge (clipped there); beyond: refused
MAX_PIXELS = 64_000_000  # a claimed mask size beyond any COCO picture: refused before allocating it
MAX_GROUPS = 8  # 5-bit groups in one run: 40 bits hold any run of MAX_PIXELS (and keep a long string linear)


class SegmentationIssue(DatasetError):
    """One segmentation cannot be used (its unit is skipped with this reason, the rest go on)."""


def pycocotools_mask():
    """pycocotools' mask module, or None when it is not installed."""
    try:
        from pycocotools import mask
    except ImportError:
        return None
    return mask


# ---- run-length encodings -----------------------------------------------------------------------------


def counts_from_string(text: str) -> list[int]:
    """The run lengths of a compressed COCO RLE string (module docstring)."""
    counts: list[int] = []
    position = 0
    while position < len(text):
        value, shift, more = 0, 0, True
        while more:
            if position >= len(text):
                raise SegmentationIssue("malformed RLE: the counts string ends inside a run")
            if shift >= 5 * MAX_GROUPS:  # else one endless run grows a huge integer, quadratic in the string
                raise SegmentationIssue("malformed RLE: a run longer than any picture")
            group = ord(text[position]) - 48
            if not 0 <= group < 64:
                raise SegmentationIssue("malformed RLE: a character outside the counts alphabet")
            value |= (group & 0x1F) << shift
            more = bool(group & 0x20)
            position += 1
            shift += 5
            if not more and group & 0x10:  # the sign bit of the last group: extend it
                value -= 1 << shift
        if len(counts) > 2:
            value += counts[-2]
        counts.append(value)
    return counts


def counts_to_string(counts) -> str:
    """The compressed COCO RLE string of run lengths ``counts`` (the inverse of ``counts_from_string``)."""
    characters = []
    for index, run in enumerate(int(c) for c in counts):
        value = run - int(counts[index - 2]) if index > 2 else run
        more = True
        while more:
            group = value & 0x1F
            value >>= 5  # arithmetic shift: a negative value ends at -1
            more = not ((value == 0 and not group & 0x10) or (value == -1 and group & 0x10))
            characters.append(chr(48 + (group | (0x20 if more else 0))))
    return "".join(characters)


def mask_to_counts(mask: np.ndarray) -> list[int]:
    """Run lengths of a bool [h, w] mask, read column by column, starting with a run of 0s."""
    flat = np.asarray(mask, dtype=bool).ravel(order="F")
    changes = np.flatnonzero(flat[1:] != flat[:-1]) + 1
    edges = np.concatenate([[0], changes, [flat.size]])
    runs = np.diff(edges).tolist()
    return ([0] + runs) if flat.size and flat[0] else runs


def encode_rle(mask: np.ndarray, compressed: bool = True) -> dict:
    """A COCO RLE of a bool [h, w] mask: counts as a string (compressed) or a list."""
    counts = mask_to_counts(mask)
    height, width = np.asarray(mask).shape
    return {"size": [int(height), int(width)], "counts": counts_to_string(counts) if compressed else counts}


def rle_runs(rle: dict) -> list[int]:
    """The run lengths of a COCO RLE (compressed or not), checked to cover its size exactly (a run past the
    end would make pycocotools' decoder write beyond its buffer: checked before it is called)."""
    height, width = rle_size(rle)
    counts = rle.get("counts")
    if isinstance(counts, bytes):
        counts = counts.decode("ascii", errors="replace")
    runs = counts_from_string(counts) if isinstance(counts, str) else _int_list(counts)
    if any(run < 0 for run in runs) or sum(runs) != height * width:
        raise SegmentationIssue(f"malformed RLE: its runs cover {sum(runs)} pixels, its size {height}x{width} "
                                f"has {height * width}")
    return runs


def decode_rle(rle: dict) -> np.ndarray:
    """bool [h, w] of a COCO RLE (compressed or not), with the project's own decoder."""
    height, width = rle_size(rle)
    runs = rle_runs(rle)
    values = np.zeros(len(runs), dtype=bool)
    values[1::2] = True
    flat = np.repeat(values, runs)
    return flat.reshape((width, height)).T.copy()


def rle_size(rle: dict) -> tuple[int, int]:
    size = rle.get("size")
    if (not isinstance(size, (list, tuple)) or len(size) != 2
            or not all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in size)):
        raise SegmentationIssue(f"malformed RLE: size {str(size)[:40]}")
    if size[0] * size[1] > MAX_PIXELS:
        raise SegmentationIssue(f"malformed RLE: size {size[0]}x{size[1]} is beyond any picture")
    return int(size[0]), int(size[1])


def _int_list(counts) -> list[int]:
    if not isinstance(counts, (list, tuple)) or not all(isinstance(c, int) and not isinstance(c, bool)
                                                        for c in counts):
        raise SegmentationIssue("malformed RLE: counts are neither a string nor a list of integers")
    return [int(c) for c in counts]


# ---- polygons -----------------------------------------------------------------------------------------


def polygon_points(polygon) -> np.ndarray:
    """float [N, 2] (x, y) of a flat COCO polygon; a ``SegmentationIssue`` when it is not one."""
    try:
        values = np.asarray(polygon, dtype=np.float64).ravel()
    except (TypeError, ValueError) as error:
        raise SegmentationIssue("malformed polygon: not a list of numbers") from error
    if values.size < 6 or values.size % 2 or not np.isfinite(values).all():
        raise SegmentationIssue("malformed polygon: fewer than three points, an odd count or a non-number")
    return values.reshape(-1, 2)


def rasterize_polygons(polygons, height: int, width: int) -> np.ndarray:
    """bool [h, w]: the union of the polygons, a pixel in when its centre (x + 0.5, y + 0.5) lies inside one
    (even-odd rule per polygon)."""
    mask = np.zeros((height, width), dtype=bool)
    ys = np.arange(height) + 0.5
    xs = np.arange(width) + 0.5
    for polygon in polygons:
        points = polygon_points(polygon)
        inside = np.zeros((height, width), dtype=bool)
        start, end = points, np.roll(points, -1, axis=0)
        for (x0, y0), (x1, y1) in zip(start, end):
            if y0 == y1:
                continue  # a horizontal edge crosses no scan line through pixel centres
            rows = (ys >= min(y0, y1)) & (ys < max(y0, y1))
            if not rows.any():
                continue
            crossing = x0 + (ys[rows] - y0) * (x1 - x0) / (y1 - y0)  # where the edge meets each row's centre line
            inside[rows] ^= xs[None, :] < crossing[:, None]
        mask |= inside
    return mask


def check_polygons(polygons, height: int, width: int) -> None:
    """Refuse a polygon reaching far past the picture (module docstring); nearer ones are clipped when drawn."""
    reach = np.array([width, height], dtype=np.float64) * FAR_OUTSIDE
    for polygon in polygons:
        points = polygon_points(polygon)
        if (points < -reach).any() or (points > np.array([width, height]) + reach).any():
            raise SegmentationIssue("polygon far outside the picture")


# ---- any segmentation ---------------------------------------------------------------------------------


def decode(segmentation, height: int, width: int, use_pycocotools: bool | None = None) -> np.ndarray:
    """bool [height, width] of a COCO segmentation (polygons or RLE); ``SegmentationIssue`` says why not.

    ``use_pycocotools``: None (default) uses it when installed; False the project's own decoders."""
    if height * width > MAX_PIXELS:  # the picture's size comes from the annotations file: refused before allocating
        raise SegmentationIssue(f"malformed segmentation: picture size {height}x{width} is beyond any picture")
    coco = pycocotools_mask() if use_pycocotools in (None, True) else None
    if use_pycocotools and coco is None:
        raise DatasetError("pycocotools is not installed")
    if isinstance(segmentation, dict):
        if rle_size(segmentation) != (height, width):
            raise SegmentationIssue(f"mask size differs from the picture ({rle_size(segmentation)} vs "
                                    f"{(height, width)})")
        mask = _coco_rle(coco, segmentation) if coco is not None else decode_rle(segmentation)
    elif isinstance(segmentation, (list, tuple)) and segmentation:
        polygons = [segmentation] if all(isinstance(v, (int, float)) for v in segmentation) else segmentation
        check_polygons(polygons, height, width)
        if coco is not None:
            rles = coco.frPyObjects([list(map(float, polygon_points(p).ravel())) for p in polygons], height, width)
            mask = coco.decode(coco.merge(rles)).astype(bool)
        else:
            mask = rasterize_polygons(polygons, height, width)
    else:
        raise SegmentationIssue("malformed segmentation: neither polygons nor an RLE")
    if not mask.any():
        raise SegmentationIssue("empty mask")
    return mask


def _coco_rle(coco, rle: dict) -> np.ndarray:
    runs = rle_runs(rle)  # checked first: pycocotools trusts the runs
    compressed = {"size": list(rle_size(rle)), "counts": counts_to_string(runs).encode("ascii")}
    return coco.decode(compressed).astype(bool)


__all__ = ["FAR_OUTSIDE", "SegmentationIssue", "check_polygons", "counts_from_string", "counts_to_string",
           "decode", "decode_rle", "encode_rle", "mask_to_counts", "polygon_points", "pycocotools_mask",
           "rasterize_polygons", "rle_runs"]
