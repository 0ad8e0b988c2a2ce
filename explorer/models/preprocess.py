"""Image -> normalised tensor, as the released models were trained.

``fit="crop"`` is OpenAI's recipe (bicubic resize of the short side, centre
crop): used for scores, so they match the papers' numbers. ``fit="squash"``
resizes the whole image to the square input: used for maps, so that a map
covers every pixel the user uploaded rather than only the centre crop.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from PIL import Image

OPENAI_MEAN = (0.48145466, 0.4578275, 0.40821073)
OPENAI_STD = (0.26862954, 0.26130258, 0.27577711)
IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


@dataclass(frozen=True)
class Preprocess:
    image_size: int
    mean: tuple[float, float, float] = OPENAI_MEAN
    std: tuple[float, float, float] = OPENAI_STD

    def resize(self, image: Image.Image, fit: str = "crop") -> Image.Image:
        size = self.image_size
        if fit == "squash":
            return image.resize((size, size), Image.BICUBIC)
        if fit != "crop":
            raise ValueError(f"fit must be 'crop' or 'squash', not {fit!r}")
        width, height = image.size
        scale = size / min(width, height)
        resized = image.resize((max(size, round(width * scale)), max(size, round(height * scale))), Image.BICUBIC)
        left = (resized.width - size) // 2
        top = (resized.height - size) // 2
        return resized.crop((left, top, left + size, top + size))

    def __call__(self, images: list[Image.Image], fit: str = "crop") -> torch.Tensor:
        """[B, 3, S, S] float32, normalised."""
        arrays = [np.asarray(self.resize(image.convert("RGB"), fit), dtype=np.float32) / 255.0 for image in images]
        batch = torch.from_numpy(np.stack(arrays)).permute(0, 3, 1, 2)
        mean = torch.tensor(self.mean).view(1, 3, 1, 1)
        std = torch.tensor(self.std).view(1, 3, 1, 1)
        return (batch - mean) / std
