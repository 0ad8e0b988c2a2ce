"""SEPS's image preprocessing: squash-resize (no crop), bicubic, ImageNet mean/std, as the official code."""

from __future__ import annotations

from dataclasses import dataclass

from PIL import Image

from explorer.models.preprocess import Preprocess


@dataclass(frozen=True)
class SquashPreprocess(Preprocess):
    """SEPS's official resize: the whole image squashed to the square, never cropped.

    The public ``Model`` asks for ``fit="crop"`` for scores and ``"squash"`` for
    maps; SEPS was trained and evaluated on squashed images, so both squash.
    """

    def resize(self, image: Image.Image, fit: str = "squash") -> Image.Image:
        if fit not in ("crop", "squash"):
            raise ValueError(f"fit must be 'crop' or 'squash', not {fit!r}")
        return super().resize(image, "squash")
