"""Image -> normalised tensor, exactly as each method's official code prepares it.

Published numbers are computed with the official pipelines, so scores here use the same pixels.
Each pipeline calls the well-kept implementation the official code calls, rather than re-deriving
its rounding:

- ``"openai"``: torchvision ``Resize(size, bicubic)`` of the short side on the PIL picture (the
  long side is truncated, ``int(size * long / short)``), ``CenterCrop(size)`` (offsets rounded,
  half to even), ``ToTensor``, ``Normalize`` with OpenAI's mean and std. OpenAI CLIP's
  ``_transform``, open_clip's ``image_transform`` for OpenAI-style configs (resize mode
  "shortest"), Long-CLIP's and FineLIP's ``_transform``: CLIP, Long-CLIP, FineLIP, MulCLIP, FLAIR
  and CAFT.
- ``"hf-clip"``: Hugging Face's ``CLIPImageProcessor`` with GOAL's settings (shortest edge
  ``size``, centre crop ``size``, bicubic, rescale 1/255, OpenAI mean and std): GOAL's code runs
  ``AutoProcessor.from_pretrained("openai/clip-vit-base-patch16")``. Its centre crop floors the
  offset, so it can differ from "openai" by one pixel. The PIL implementation is used (transformers
  4's ``CLIPImageProcessor``, 5's ``CLIPImageProcessorPil``): it is what GOAL's published numbers
  were computed with; transformers 5's torchvision backend differs from it by at most one grey level.
- ``"laps"``: torchvision ``Resize((size, size), bicubic)``, the whole picture squashed to the
  square (no crop), ``ToTensor``, ``Normalize`` with ImageNet's mean and std: LAPS's test
  transform, which SEPS uses.

``fit="squash"`` resizes the whole picture to the square input whatever the pipeline (with its
mean and std): the sentence maps use it, so that a map covers every pixel the user uploaded rather
than only the centre crop. Pictures reach here as RGB (``explorer.core.images``), so the official
pipelines' order of RGB conversion (some convert after cropping) makes no difference.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np
import torch
from PIL import Image

from explorer.core.errors import ConfigError, InputError

OPENAI_MEAN = (0.48145466, 0.4578275, 0.40821073)
OPENAI_STD = (0.26862954, 0.26130258, 0.27577711)
IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
PIPELINES = ("openai", "hf-clip", "laps")
FITS = ("crop", "squash")


def _torchvision():
    """torchvision's functional transforms and its bicubic mode. Imported on the first picture, not when the
    page starts; without torchvision's ``__init__`` (``prepared_import``)."""
    from explorer.core.runtime import prepared_import

    functional = prepared_import("torchvision.transforms.functional")
    return functional, functional.InterpolationMode.BICUBIC


@dataclass(frozen=True)
class Preprocess:
    image_size: int
    mean: tuple[float, float, float] = OPENAI_MEAN
    std: tuple[float, float, float] = OPENAI_STD
    pipeline: str = "openai"

    def __post_init__(self):
        if self.pipeline not in PIPELINES:
            raise ConfigError(f"pipeline must be one of {PIPELINES}, not {self.pipeline!r}")

    def resize(self, image: Image.Image, fit: str = "crop") -> Image.Image:
        """The picture as the model sees it, before normalisation (``image_size`` square)."""
        if fit not in FITS:
            raise InputError(f"fit must be 'crop' or 'squash', not {fit!r}")
        size = self.image_size
        TF, BICUBIC = _torchvision()
        if fit == "squash" or self.pipeline == "laps":
            return TF.resize(image, [size, size], BICUBIC)
        if self.pipeline == "hf-clip":
            return Image.fromarray(self._hf_pixels(image, rescale=False))
        return TF.center_crop(TF.resize(image, size, BICUBIC), [size, size])

    def __call__(self, images: list[Image.Image], fit: str = "crop") -> torch.Tensor:
        """[B, 3, S, S] float32, normalised."""
        if fit == "crop" and self.pipeline == "hf-clip":
            return torch.stack([torch.from_numpy(self._hf_pixels(image.convert("RGB"))) for image in images])
        # ToTensor's arithmetic (uint8 / 255 in float32) in one numpy step for the whole batch, then
        # torchvision's Normalize: the same numbers, fewer small torch ops per picture.
        arrays = np.stack([np.asarray(self.resize(image.convert("RGB"), fit)) for image in images])
        batch = torch.from_numpy(arrays.astype(np.float32) / np.float32(255)).permute(0, 3, 1, 2)
        return _torchvision()[0].normalize(batch.contiguous(), list(self.mean), list(self.std))

    # ---- GOAL: Hugging Face's CLIP image processor --------------------------------------------------

    @cached_property
    def hf_processor(self):
        """GOAL's ``CLIPImageProcessor``, built in code with its settings (nothing is fetched)."""
        import transformers

        processor_class = getattr(transformers, "CLIPImageProcessorPil", None) or transformers.CLIPImageProcessor
        return processor_class(do_resize=True, size={"shortest_edge": self.image_size}, resample=Image.BICUBIC,
                               do_center_crop=True, crop_size={"height": self.image_size, "width": self.image_size},
                               do_rescale=True, rescale_factor=1 / 255, do_normalize=True, image_mean=list(self.mean),
                               image_std=list(self.std), do_convert_rgb=True)

    def _hf_pixels(self, image: Image.Image, rescale: bool = True):
        """[3, S, S] float32 normalised (``rescale``), or [S, S, 3] uint8 resized and cropped only."""
        if rescale:
            return self.hf_processor(images=[image], return_tensors="np")["pixel_values"][0]
        cropped = self.hf_processor(images=[image], do_rescale=False, do_normalize=False, return_tensors="np")
        return cropped["pixel_values"][0].transpose(1, 2, 0).round().clip(0, 255).astype("uint8")
