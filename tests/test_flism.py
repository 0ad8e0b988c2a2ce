"""FLISM (explorer/grounding/flism.py): region proposals, sentence x region matching, the chosen pair.

Expectations are worked out by hand from the paper's description: four
quadrants + one centre box spanned by the quadrants' midpoints, every
sentence takes its best region, the single highest cosine is the pair.
"""

from __future__ import annotations

import math

import pytest
import torch
from PIL import Image, ImageDraw

from explorer.core.regions import Region, pixel_box, spatial_regions
from explorer.grounding.flism import (FlismResult, crop_regions, flism, match_sentences, match_similarity,
                                      region_proposals)
from explorer.models.features import ImageFeatures, TextFeatures
from explorer.core.errors import ExplorerError

# ---- matching on crafted similarities -------------------------------------------------------------


def test_each_sentence_takes_its_best_region_and_the_single_best_pair_wins():
    similarity = torch.tensor([
        [0.10, 0.50, 0.20, 0.00, 0.30, 0.10],  # sentence 0: best region 1 (0.50)
        [0.90, 0.20, 0.10, 0.00, 0.00, 0.40],  # sentence 1: best region 0 (0.90) <- the pair
        [0.00, 0.10, 0.10, 0.70, 0.80, 0.20],  # sentence 2: best region 4 (0.80)
    ])
    result = match_similarity(similarity)
    assert result.best_region.tolist() == [1, 0, 4]
    assert result.best_pair == (1, 0)
    assert result.best_score == pytest.approx(0.90)
    # The pair is the overall maximum, not the first sentence's nor the best column on average.
    assert similarity.sum(dim=0).argmax().item() != 0


def test_ties_go_to_the_first_maximum():
    result = match_similarity(torch.tensor([[0.2, 0.7, 0.7], [0.7, 0.1, 0.0]]))
    assert result.best_region.tolist() == [1, 0]
    assert result.best_pair == (0, 1)


def test_match_sentences_uses_cosines_of_normalised_embeddings():
    regions = torch.eye(3) * torch.tensor([[5.0], [0.1], [2.0]])  # lengths must not matter
    sentences = torch.tensor([[3.0, 4.0, 0.0],  # cos 0.6 with region 0, 0.8 with region 1
                              [0.0, 0.0, -2.0],  # cos -1 with region 2, 0 elsewhere
                              [1.0, 0.0, 1.0]])  # cos 1/sqrt(2) with regions 0 and 2
    result = match_sentences(regions, sentences)
    s = 1 / math.sqrt(2)
    torch.testing.assert_close(result.similarity, torch.tensor([[0.6, 0.8, 0.0], [0.0, 0.0, -1.0], [s, 0.0, s]]))
    assert result.best_region.tolist() == [1, 0, 0]
    assert result.best_pair == (0, 1)


def test_empty_inputs_are_refused():
    with pytest.raises(ValueError):
        match_similarity(torch.zeros(0, 5))
    with pytest.raises(ValueError):
        match_sentences(torch.zeros(0, 4), torch.ones(2, 4))


# ---- proposals -----------------------------------------------------------------------------------


def test_quadrants_and_centre_of_a_100_by_60_image():
    regions = spatial_regions(100, 60)
    assert [r.box for r in regions] == [
        (0, 0, 50, 30), (50, 0, 100, 30), (0, 30, 50, 60), (50, 30, 100, 60),  # TL, TR, BL, BR
        (25, 15, 75, 45),  # spanned by the quadrants' midpoints (25,15) (75,15) (25,45) (75,45)
    ]
    assert [r.source for r in regions] == ["quadrant"] * 4 + ["centre"]
    assert [r.label for r in regions] == ["top-left", "top-right", "bottom-left", "bottom-right", "centre"]
    assert regions[1].unit_box(100, 60) == (0.5, 0.0, 1.0, 0.5)


class FakeDetector:
    def __init__(self, regions):
        self.regions = regions
        self.seen = []

    def __call__(self, image):
        self.seen.append(image.size)
        return list(self.regions)


def test_detector_boxes_come_first_labelled_by_source_and_kept_inside_the_image():
    detector = FakeDetector([
        Region((10, 5, 40, 25), "detector", "cat 0.91"),
        Region((80, 40, 130, 90), "quadrant", "dog 0.55"),  # a detector cannot pose as a quadrant; half outside
        Region((120, 70, 150, 90), "detector", "kite 0.30"),  # wholly outside the picture: dropped
    ])
    image = Image.new("RGB", (100, 60))
    regions = region_proposals(image, detector)
    assert detector.seen == [(100, 60)]
    assert [r.source for r in regions] == ["detector", "detector", "quadrant", "quadrant", "quadrant", "quadrant",
                                           "centre"]
    assert [r.label for r in regions[:2]] == ["cat 0.91", "dog 0.55"]
    assert regions[0].box == (10, 5, 40, 25)
    assert regions[1].box == (80, 40, 100, 60)  # clipped to the image
    assert regions[2:] == spatial_regions(100, 60)
    assert region_proposals(image) == spatial_regions(100, 60)  # default: no detector boxes


def test_crops_cover_the_boxes():
    image = Image.new("RGB", (101, 61))
    regions = spatial_regions(101, 61)  # fractional boxes: floor the start, ceil the end
    assert pixel_box(regions[0].box, 101, 61) == (0, 0, 51, 31)
    assert pixel_box(regions[4].box, 101, 61) == (25, 15, 76, 46)
    assert [c.size for c in crop_regions(image, regions)] == [(51, 31), (51, 31), (51, 31), (51, 31), (51, 31)]
    assert pixel_box((10.2, 3.0, 10.4, 3.0), 101, 61) == (10, 3, 11, 4)  # never an empty crop


def test_region_source_is_checked():
    with pytest.raises(ValueError):
        Region((0, 0, 1, 1), "sam")


# ---- the whole pipeline ----------------------------------------------------------------------------


class RednessModel:
    """A stand-in for explorer.Model: a crop's embedding is (share of pure red pixels, share of the rest)."""

    def __init__(self):
        self.crop_sizes = []

    def encode_image(self, images, fit="crop"):
        rows = []
        for image in images:
            self.crop_sizes.append(image.size)
            pixels = torch.tensor(list(image.getdata()), dtype=torch.float32)
            red = ((pixels[:, 0] == 255) & (pixels[:, 1] == 0) & (pixels[:, 2] == 0)).float().mean()
            rows.append(torch.stack([red, 1 - red]))
        cls = torch.stack(rows)
        return ImageFeatures(cls=cls, patches=cls[:, None], grid_hw=(1, 1))

    def encode_text(self, texts):
        table = {"a red ball": [1.0, 0.0], "grey floor": [0.05, 1.0]}
        eot = torch.tensor([table[t] for t in texts])
        return TextFeatures(eot=eot, tokens=eot[:, None], mask=torch.ones(len(texts), 1, dtype=torch.bool))


def test_flism_crops_embeds_and_picks_the_planted_pair():
    image = Image.new("RGB", (100, 60), (128, 128, 128))
    ImageDraw.Draw(image).rectangle((60, 5, 89, 24), fill=(255, 0, 0))  # 30 x 20 red, inside the top-right quadrant
    detector = FakeDetector([Region((60, 5, 90, 25), "detector", "ball 0.88")])
    model = RednessModel()
    result = flism(model, image, ["grey floor", "a red ball"], detector=detector)
    assert isinstance(result, FlismResult)
    assert model.crop_sizes == [(30, 20), (50, 30), (50, 30), (50, 30), (50, 30), (50, 30)]
    # red shares: detector 1, TL 0, TR 600/1500, BL 0, BR 0, centre (60..75 x 15..25 = 150)/1500
    red = torch.tensor([1.0, 0.0, 0.4, 0.0, 0.0, 0.1])
    crops = torch.stack([red, 1 - red], dim=1)
    expected = torch.nn.functional.normalize(torch.tensor([[0.05, 1.0], [1.0, 0.0]]), dim=1) @ \
        torch.nn.functional.normalize(crops, dim=1).T
    torch.testing.assert_close(result.similarity, expected)
    assert result.best_region.tolist() == [1, 0]  # grey: TL (0.99875) beats the centre (0.99816); red: the detector box
    assert result.best_pair == (1, 0)
    assert result.pair_sentence == "a red ball"
    assert result.pair_region.source == "detector" and result.pair_region.label == "ball 0.88"
    assert result.pair_region.unit_box(100, 60) == (0.6, 5 / 60, 0.9, 25 / 60)


def test_flism_with_a_real_tiny_model():
    from explorer.models.methods.goal import GoalMethod
    from explorer.models.model import Model

    model = Model(GoalMethod.example("tiny"), device="cpu")
    image = Image.new("RGB", (90, 70), (10, 200, 30))
    result = flism(model, image, ["A green field.", "A small house.", "Sky."])
    assert result.similarity.shape == (3, 5) and len(result.regions) == 5
    assert torch.all(result.similarity.abs() <= 1 + 1e-5)
    with pytest.raises(ExplorerError):
        flism(model, image, ["  "])
