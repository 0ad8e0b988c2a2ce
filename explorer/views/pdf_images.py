"""The pictures inside a saved PDF figure stored as JPEG: a four-model, eight-sentence maps PDF drops from
about 5.3 MB to under 1 MB.

matplotlib's PDF backend stores every raster (each map panel) losslessly (PNG predictors and Flate), which
suits a mask but not a heat map: a smooth colour ramp barely compresses that way. The panels are drawn at
most at the size they print at, 300 dpi (``figure_pages``), so a JPEG at quality 85 with no chroma
subsampling (4:4:4, so a one-pixel coloured outline keeps its colour) shows no loss at that size.

What stays as matplotlib wrote it: a picture with an alpha channel (its soft mask), one of 256 colours or
fewer (matplotlib's indexed colour: masks and flat cells, lossless and small already), and a picture whose
JPEG would not be clearly smaller (a synthetic scene's flat shapes). A picture drawn more than once (the
picture column, on every row) is stored once. Text, lines and colour bars are vectors and are not touched.
The same PDF in gives the same bytes out (qpdf, through pikepdf, with an id made from the content).
"""

from __future__ import annotations

import hashlib
import io
from pathlib import Path

JPEG_QUALITY = 85
LEAST_PIXELS = 64 * 64  # a picture smaller than this is left lossless: it costs next to nothing
JPEG_GAIN = 0.8  # JPEG only where it is at most this fraction of the lossless stream


def compress_pdf_images(path: str | Path, quality: int = JPEG_QUALITY) -> int:
    """Rewrite ``path`` with its opaque true-colour pictures stored as JPEG and its repeated pictures stored
    once; returns how many pictures were rewritten or shared."""
    import pikepdf

    path = Path(path)
    changed = 0
    with pikepdf.open(path, allow_overwriting_input=True) as pdf:
        seen: dict[bytes, pikepdf.Object] = {}  # the first picture of each content
        for page in pdf.pages:
            pictures = page.obj.get("/Resources", {}).get("/XObject", {})
            for name in list(pictures.keys()):
                picture = pictures[name]
                if picture.get("/Subtype") != "/Image":
                    continue
                key = hashlib.sha256(picture.read_raw_bytes() + repr(sorted(picture.keys())).encode()).digest()
                if key in seen:
                    pictures[name] = seen[key]  # the copy is no longer referenced: qpdf leaves it out
                    changed += 1
                    continue
                seen[key] = picture
                changed += _as_jpeg(pikepdf, picture, quality)
        if changed:
            pdf.save(path, deterministic_id=True, compress_streams=True)
    return changed


def _as_jpeg(pikepdf, picture, quality: int) -> bool:
    """Store one picture as JPEG where that helps; True if it was rewritten."""
    if "/SMask" in picture or picture.get("/ColorSpace") != "/DeviceRGB" or picture.get("/BitsPerComponent") != 8:
        return False
    if int(picture.Width) * int(picture.Height) < LEAST_PIXELS or picture.get("/Filter") != "/FlateDecode":
        return False
    pixels = pikepdf.PdfImage(picture).as_pil_image().convert("RGB")
    buffer = io.BytesIO()
    pixels.save(buffer, "JPEG", quality=quality, subsampling=0)
    jpeg = buffer.getvalue()
    if len(jpeg) > JPEG_GAIN * len(picture.read_raw_bytes()):
        return False
    picture.write(jpeg, filter=pikepdf.Name.DCTDecode)  # raw JPEG bytes; drops the PNG predictor's parameters
    return True


__all__ = ["JPEG_QUALITY", "compress_pdf_images"]
