"""DreamLIP fits explorer (the conformance kit) and its two terms do what the formulas say."""

import math

import torch
import torch.nn.functional as F

from explorer.testing import check_method
from explorer_dreamlip.method import DreamLipMethod, grouping_weights


def test_it_passes_the_conformance_kit():
    check_method(DreamLipMethod)


def test_grouping_weights_keep_the_patches_a_sentence_is_about():
    patches = torch.eye(4)  # four patches, each its own direction
    # about patch 0, half as much about patch 1, a little about patch 2 (min-max 0.2: under 1/M = 0.25)
    text = torch.tensor([[1.0, 0.5, 0.1, 0.0]])
    weights = grouping_weights(text, patches)
    torch.testing.assert_close(weights, torch.tensor([[1.0, 0.5, 0.0, 0.0]]) / 1.5)


def test_multi_positive_loss_is_lowest_when_every_sub_caption_points_at_its_image():
    images = torch.eye(2, 8)
    owner = torch.tensor([0, 0, 1])
    right = DreamLipMethod.multi_positive(images, images[owner], owner, 10.0)
    wrong = DreamLipMethod.multi_positive(images, images[1 - owner], owner, 10.0)
    # each image's positives share its probability mass: image 0's two identical sub-captions cost log 2 at
    # best (L_i2t = (log 2 + 0) / 2), the text side nearly 0; the whole loss is the mean of the two sides
    assert abs(float(right) - math.log(2) / 4) < 0.01 and wrong > 5


def test_sub_captions_are_distinct_sentences_of_their_own_caption_and_come_from_the_caption_without_them():
    from dataclasses import replace

    from explorer.models.batch import example_batch
    from explorer_dreamlip.method import SUB_CAPTIONS, sample_sub_captions

    batch = example_batch(32, batch_size=4)
    for given in (batch, replace(batch, sentences=None)):
        texts, owner = sample_sub_captions(given, SUB_CAPTIONS)
        for i in range(len(batch)):
            mine = [t for t, o in zip(texts, owner) if o == i]
            assert mine and len(mine) == len(set(mine)) <= SUB_CAPTIONS
            assert all(t in batch.captions[i] for t in mine)


def test_grouping_loss_is_the_mean_over_sub_captions_of_both_directions():
    """L_grp by hand: for each image, logits = scale * cos(group_k, sub-caption_j); each sub-caption's term is
    the mean of its row's and its column's cross-entropy; the loss averages those terms over every sub-caption."""
    torch.manual_seed(0)
    patches, texts = torch.randn(2, 5, 8), torch.randn(5, 8)
    owner, scale = torch.tensor([0, 0, 0, 1, 1]), torch.tensor(3.0)
    terms = []
    for i in range(2):
        mine = texts[owner == i]
        groups = grouping_weights(mine, patches[i]) @ patches[i]
        logits = scale * F.normalize(groups, dim=-1) @ F.normalize(mine, dim=-1).T
        rows, cols = logits.log_softmax(dim=1), logits.log_softmax(dim=0)
        terms += [-(rows[k, k] + cols[k, k]) / 2 for k in range(len(mine))]
    expected = torch.stack(terms).mean()
    assert math.isclose(float(DreamLipMethod.grouping(patches, texts, owner, scale)), float(expected), rel_tol=1e-5)
