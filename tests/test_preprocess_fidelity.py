"""Pixels exactly as each official pipeline gives them (issue: preprocessing fidelity).

References are the implementations the official code calls, built here independently:
torchvision's transform classes and open_clip's ``image_transform`` (OpenAI CLIP, Long-CLIP,
FineLIP, FLAIR, CAFT), Hugging Face's CLIP image processor with GOAL's settings, and LAPS's
squash transform (SEPS). Pictures are non-square, odd-sized, and smaller than the input.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from PIL import Image

from explorer.core.runtime import prepare_libraries
from explorer.models.preprocess import IMAGENET_MEAN, IMAGENET_STD, OPENAI_MEAN, OPENAI_STD, Preprocess
from explorer.core.errors import ExplorerError

prepare_libraries()  # the references below import torchvision, open_clip and transformers directly

SIZES = [(640, 427), (427, 640), (100, 70), (81, 130), (257, 199), (199, 257), (40, 300), (30, 20), (64, 64),
         (65, 64)]


def picture(width: int, height: int, seed: int = 0) -> Image.Image:
    """Smooth gradients plus texture: resampling differences show, as on a photo."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:height, 0:width]
    base = np.stack([x / max(width - 1, 1), y / max(height - 1, 1), (x + y) / (width + height)], -1) * 200
    noise = rng.normal(0, 20, (height, width, 3))
    return Image.fromarray(np.clip(base + noise, 0, 255).astype(np.uint8))


def torchvision_reference(size: int, squash: bool, mean, std):
    from torchvision import transforms as T

    resize = T.Resize((size, size) if squash else size, interpolation=T.InterpolationMode.BICUBIC)
    steps = [resize] + ([] if squash else [T.CenterCrop(size)]) + [T.ToTensor(), T.Normalize(mean, std)]
    return T.Compose(steps)


def goal_processor(size: int):
    """GOAL's processor (openai/clip-vit-base-patch16's preprocessor_config), PIL implementation."""
    import transformers

    cls = getattr(transformers, "CLIPImageProcessorPil", None) or transformers.CLIPImageProcessor
    return cls(size={"shortest_edge": size}, crop_size={"height": size, "width": size}, resample=3,
               do_center_crop=True, do_normalize=True, do_rescale=True, image_mean=list(OPENAI_MEAN),
               image_std=list(OPENAI_STD))


@pytest.mark.parametrize("size", [64, 224])
@pytest.mark.parametrize("width,height", SIZES)
def test_openai_pipeline_matches_torchvision_and_open_clip(width, height, size):
    import open_clip

    image = picture(width, height)
    ours = Preprocess(size)([image])[0]
    assert torch.equal(ours, torchvision_reference(size, False, OPENAI_MEAN, OPENAI_STD)(image))
    assert torch.equal(ours, open_clip.image_transform(size, is_train=False)(image))  # FLAIR's and CAFT's


@pytest.mark.parametrize("size", [64, 224])
@pytest.mark.parametrize("width,height", SIZES)
def test_goal_pipeline_matches_huggingface_clip_image_processor(width, height, size):
    image = picture(width, height)
    ours = Preprocess(size, pipeline="hf-clip")([image])[0]
    reference = torch.from_numpy(goal_processor(size)(images=[image], return_tensors="np")["pixel_values"][0])
    assert torch.equal(ours, reference)


@pytest.mark.parametrize("size", [64, 224])
@pytest.mark.parametrize("width,height", SIZES)
def test_seps_pipeline_matches_laps_squash_transform(width, height, size):
    image = picture(width, height)
    ours = Preprocess(size, IMAGENET_MEAN, IMAGENET_STD, pipeline="laps")([image])[0]
    assert torch.equal(ours, torchvision_reference(size, True, IMAGENET_MEAN, IMAGENET_STD)(image))


def test_the_rounding_the_official_pipelines_use():
    """The cases measured against the official code: truncated long side, rounded crop offset
    (torchvision) or floored (Hugging Face)."""
    image = picture(100, 70)
    resized = image.resize((91, 64), Image.BICUBIC)  # long side int(64 * 100 / 70) = 91
    openai, goal = Preprocess(64).resize(image), Preprocess(64, pipeline="hf-clip").resize(image)
    assert np.array_equal(np.asarray(openai), np.asarray(resized.crop((14, 0, 78, 64))))  # round(13.5) = 14
    assert np.array_equal(np.asarray(goal), np.asarray(resized.crop((13, 0, 77, 64))))  # floor(13.5) = 13
    tall = picture(81, 130)  # height int(64 * 130 / 81) = 102, not round() = 103
    assert np.array_equal(np.asarray(Preprocess(64).resize(tall)),
                          np.asarray(tall.resize((64, 102), Image.BICUBIC).crop((0, 19, 64, 83))))
    wide = picture(257, 199)  # width int(64 * 257 / 199) = 82
    assert np.array_equal(np.asarray(Preprocess(64).resize(wide)),
                          np.asarray(wide.resize((82, 64), Image.BICUBIC).crop((9, 0, 73, 64))))


def test_maps_squash_the_whole_picture_in_every_pipeline():
    image = picture(100, 70)
    for pipeline, (mean, std) in {"openai": (OPENAI_MEAN, OPENAI_STD), "hf-clip": (OPENAI_MEAN, OPENAI_STD),
                                  "laps": (IMAGENET_MEAN, IMAGENET_STD)}.items():
        ours = Preprocess(64, mean, std, pipeline=pipeline)([image], fit="squash")[0]
        assert torch.equal(ours, torchvision_reference(64, True, mean, std)(image)), pipeline


def test_each_method_uses_its_official_pipeline():
    from explorer.models.methods import discover_methods

    expected = {"clip": "openai", "longclip": "openai", "finelip": "openai", "mulclip": "openai",
                "flair": "openai", "caft": "openai", "goal": "hf-clip", "seps": "laps"}
    methods = discover_methods()
    assert {name: methods[name].example().preprocess.pipeline for name in expected} == expected
    assert methods["seps"].example().preprocess.mean == IMAGENET_MEAN


def test_an_unknown_pipeline_or_fit_is_refused():
    with pytest.raises(ExplorerError, match="pipeline"):
        Preprocess(64, pipeline="imagenet")
    with pytest.raises(ExplorerError, match="fit"):
        Preprocess(64).resize(picture(10, 10), fit="pad")


def test_transformers_torchvision_backend_is_within_a_grey_level_of_goals_pipeline():
    """What the docstring claims: transformers 5's default (torchvision) CLIP processor crops the
    same pixels and resamples them within one grey level of the PIL one GOAL's numbers used."""
    import transformers

    if not hasattr(transformers, "CLIPImageProcessorPil"):
        pytest.skip("transformers 4: CLIPImageProcessor is the PIL implementation itself")
    default = transformers.CLIPImageProcessor(size={"shortest_edge": 224}, crop_size={"height": 224, "width": 224},
                                              resample=3)
    for width, height in [(640, 427), (257, 199), (81, 130)]:
        image = picture(width, height)
        ours = Preprocess(224, pipeline="hf-clip")([image])[0]
        theirs = default(images=[image], return_tensors="pt")["pixel_values"][0]
        assert (ours - theirs).abs().max() <= 1.01 / 255 / min(OPENAI_STD)
