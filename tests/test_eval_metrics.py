"""Retrieval and grounding metrics on matrices and maps whose answers are known by hand."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from explorer.evaluation import (box_iou, flism_region_accuracy, hard_negative_accuracy, mask_iou, mean_iou,
                                 pointing_game, pointing_hits, recall_at_k)
from explorer.evaluation.metrics.retrieval import RSUM_KS, rsum
from explorer.evaluation.metrics.maps import score_maps

# ---- Recall@K ---------------------------------------------------------------------------------------


def test_perfect_matrix_gives_recall_one_both_ways():
    result = recall_at_k(torch.eye(6) + 0.01 * torch.rand(6, 6) * (1 - torch.eye(6)), ks=(1, 5))
    assert result.text_to_image == {1: 1.0, 5: 1.0}
    assert result.image_to_text == {1: 1.0, 5: 1.0}
    assert result.rsum == pytest.approx(600.0)  # R@1 + R@5 + R@10 both ways, whatever Ks were asked


def test_rsum_is_the_papers_whatever_ks_were_asked():
    similarity, _ = crafted_matrix()
    result = recall_at_k(similarity, ks=(1,))
    full = recall_at_k(similarity, ks=RSUM_KS)
    papers = 100 * (sum(full.text_to_image.values()) + sum(full.image_to_text.values()))
    assert result.rsum == pytest.approx(papers) and full.rsum == pytest.approx(papers)
    assert rsum(result.t2i_ranks, result.i2t_ranks) == pytest.approx(papers)
    assert result.as_dict()["rsum"] == pytest.approx(papers) and "t2i_R@5" not in result.as_dict()


def test_several_captions_per_image_perfect():
    owner = [0, 0, 1, 1, 2, 2]
    similarity = np.zeros((3, 6))
    similarity[owner, np.arange(6)] = 1.0
    result = recall_at_k(similarity, owner, ks=(1,))
    assert result.text_to_image[1] == 1.0 and result.image_to_text[1] == 1.0


def crafted_matrix():
    """7 images, 7 captions; caption j is of image j. The right image of caption j is ranked r_j by hand."""
    n = 7
    wanted_t2i = [0, 1, 2, 4, 5, 6, 0]  # rank of the right image for each caption (column)
    similarity = np.zeros((n, n))
    for j, rank in enumerate(wanted_t2i):
        others = [i for i in range(n) if i != j]
        similarity[j, j] = 10.0
        for i in others[:rank]:  # exactly `rank` wrong images score above the right one
            similarity[i, j] = 20.0 + i
        for i in others[rank:]:
            similarity[i, j] = 1.0 + 0.1 * i
    return similarity, wanted_t2i


def test_crafted_ranks_give_hand_computed_recall():
    similarity, wanted = crafted_matrix()
    result = recall_at_k(similarity, ks=(1, 5))
    np.testing.assert_array_equal(result.t2i_ranks, wanted)
    assert result.text_to_image[1] == pytest.approx(2 / 7)  # ranks 0 and 0
    assert result.text_to_image[5] == pytest.approx(5 / 7)  # ranks 0,1,2,4,0
    # image -> text by hand: row i of the matrix ranks the captions for image i.
    hand = []
    for i in range(7):
        right = similarity[i, i]
        hand.append(int(sum(similarity[i, j] >= right for j in range(7) if j != i)))
    np.testing.assert_array_equal(result.i2t_ranks, hand)
    assert result.image_to_text[1] == pytest.approx(np.mean(np.array(hand) < 1))
    assert result.image_to_text[5] == pytest.approx(np.mean(np.array(hand) < 5))


def test_image_to_text_takes_the_best_of_an_images_captions():
    # image 0 has captions 0 and 1; caption 1 is ranked first, caption 0 last -> rank 0
    # image 1 has caption 2, beaten by both captions of image 0 -> rank 2
    similarity = np.array([[0.1, 0.9, 0.5],
                           [0.8, 0.7, 0.6]])
    result = recall_at_k(similarity, [0, 0, 1], ks=(1, 2, 3))
    np.testing.assert_array_equal(result.i2t_ranks, [0, 2])
    assert result.image_to_text == {1: 0.5, 2: 0.5, 3: 1.0}
    # text -> image: caption 0: image 1 scores higher (rank 1); caption 1: rank 0;
    # caption 2: its image 1 scores 0.6 > 0.5 (rank 0)
    np.testing.assert_array_equal(result.t2i_ranks, [1, 0, 0])


def test_ties_count_against_the_model():
    result = recall_at_k(np.ones((4, 4)), ks=(1, 4))
    assert result.text_to_image == {1: 0.0, 4: 1.0}
    assert result.image_to_text == {1: 0.0, 4: 1.0}


def test_images_without_captions_are_distractors_not_queries():
    similarity = np.array([[1.0, 0.0], [0.0, 1.0], [0.5, 0.5]])
    result = recall_at_k(similarity, [0, 1], ks=(1,))
    np.testing.assert_array_equal(result.i2t_queries, [0, 1])
    assert result.text_to_image[1] == 1.0 and result.image_to_text[1] == 1.0


def test_bad_inputs_are_refused():
    with pytest.raises(ValueError, match="text_to_image"):
        recall_at_k(np.zeros((2, 3)))
    with pytest.raises(ValueError, match="index images"):
        recall_at_k(np.zeros((2, 2)), [0, 2])
    with pytest.raises(ValueError, match="NaN"):
        recall_at_k(np.full((2, 2), np.nan))


# ---- masks, pointing, hard negatives, FLISM ---------------------------------------------------------


def square(top, left, size, shape=(10, 10)):
    mask = np.zeros(shape, dtype=bool)
    mask[top:top + size, left:left + size] = True
    return mask


def test_iou_of_equal_disjoint_and_partial_masks():
    a = square(0, 0, 4)
    assert mask_iou(a, a) == 1.0
    assert mask_iou(a, square(5, 5, 4)) == 0.0
    assert mask_iou(square(0, 0, 2), square(0, 0, 4)) == pytest.approx(4 / 16)
    assert mask_iou(np.zeros((3, 3), bool), np.zeros((3, 3), bool)) == 1.0
    with pytest.raises(ValueError, match="shape"):
        mask_iou(a, a[:5])


def test_mean_iou_over_sentences():
    truth = np.stack([square(0, 0, 4), square(5, 5, 4)])
    predicted = np.stack([square(0, 0, 4), square(0, 0, 2)])
    assert mean_iou(predicted, truth) == pytest.approx(0.5)
    assert mean_iou(torch.tensor(truth), torch.tensor(truth)) == 1.0


def test_pointing_game_on_crafted_maps():
    truth = np.stack([square(0, 0, 3), square(0, 0, 3), square(0, 0, 3), np.ones((10, 10), bool)])
    maps = np.zeros((4, 10, 10))
    maps[0, 1, 1] = 5.0  # peak inside -> hit
    maps[1, 8, 8] = 5.0  # peak outside -> miss
    maps[2, 1, 1] = maps[2, 8, 8] = 5.0  # peak reached inside and outside -> miss
    # maps[3] is flat, and its truth covers everything -> hit
    np.testing.assert_array_equal(pointing_hits(maps, truth), [True, False, False, True])
    assert pointing_game(maps, truth) == 0.5
    near = np.zeros((1, 10, 10))
    near[0, 3, 1] = 1.0  # one pixel below the square
    assert pointing_game(near, truth[:1]) == 0.0
    assert pointing_game(near, truth[:1], tolerance=1) == 1.0


def test_score_maps_decides_nan_flat_and_empty_truth_once():
    truth = np.stack([square(0, 0, 3)] * 5 + [np.zeros((10, 10), bool), np.ones((10, 10), bool)])
    maps = np.zeros((7, 10, 10))
    maps[0, 1, 1], maps[0, 8, 8] = 5.0, np.nan  # NaN never peaks: a hit, Otsu picks the one pixel
    maps[1] = np.nan  # no finite value: selects nothing, flat for pointing -> a miss, not left out
    maps[2] = 3.0  # constant: an empty Otsu mask, peak everywhere -> a miss
    maps[3] = -np.inf
    maps[3, 8, 8] = np.nan  # NaN ranks below -inf: the peak is every -inf pixel, some outside -> a miss
    maps[4, :3, :3] = np.nan
    maps[4, 8, 8] = -np.inf  # the only non-NaN pixel is the peak, outside -> a miss
    maps[5, 2, 2] = 1.0  # empty truth: the pointing game misses; IoU 0 against a non-empty mask
    maps[6] = np.nan  # no finite value, truth everywhere: the flat peak lies inside -> a hit
    ious, hits = score_maps(maps, truth)
    assert ious == [pytest.approx(1 / 9), 0.0, 0.0, 0.0, 0.0, 0.0, 0.0]
    assert hits == [True, False, False, False, False, False, True]
    assert all(type(hit) is bool for hit in hits)
    flat = np.zeros((1, 10, 10))
    assert score_maps(flat, np.zeros((1, 10, 10), bool)) == ([1.0], [False])  # nothing to find, nothing found
    box = square(0, 0, 3)[None]
    assert score_maps(maps[:1], truth[:1], predicted=box) == ([1.0], [True])  # IoU of the given mask
    assert score_maps(torch.tensor(maps[:1]), torch.tensor(truth[:1])) == score_maps(maps[:1], truth[:1])
    with pytest.raises(ValueError):
        score_maps(maps[0], truth[0])  # one map, not a stack
    with pytest.raises(ValueError):
        score_maps(maps, truth[:3])
    with pytest.raises(ValueError):
        score_maps(maps[:1], truth[:1], predicted=box[:, :5])


def test_hard_negative_accuracy_is_strict():
    assert hard_negative_accuracy([0.9, 0.5, 0.4], [0.1, 0.5, 0.6]) == pytest.approx(1 / 3)
    many = np.array([[0.1, 0.2], [0.1, 0.95]])
    assert hard_negative_accuracy([0.9, 0.9], many) == 0.5


def test_box_iou_by_hand():
    iou = box_iou([[0, 0, 2, 2]], [[0, 0, 2, 2], [1, 1, 3, 3], [5, 5, 6, 6]])
    np.testing.assert_allclose(iou, [[1.0, 1 / 7, 0.0]])


def test_flism_region_accuracy():
    regions = [[0, 0, 50, 50], [50, 0, 100, 50], [0, 50, 50, 100], [50, 50, 100, 100], [25, 25, 75, 75]]
    sentence_boxes = [[5, 5, 40, 40],  # top-left quadrant is best (region 0)
                      [60, 60, 95, 95],  # bottom-right (region 3)
                      [30, 30, 70, 70],  # centre box (region 4)
                      [200, 200, 210, 210]]  # overlaps nothing: skipped
    result = flism_region_accuracy([0, 1, 4, 2], sentence_boxes, regions)
    np.testing.assert_array_equal(result.targets, [0, 3, 4, -1])
    assert (result.hits, result.scored, result.skipped) == (2, 3, 1)
    assert result.accuracy == pytest.approx(2 / 3)
    with pytest.raises(ValueError, match="index"):
        flism_region_accuracy([0, 1, 9, 2], sentence_boxes, regions)


def test_pixel_auroc_on_crafted_maps():
    from explorer.evaluation.metrics.maps import pixel_auroc

    truth = np.zeros((6, 6), dtype=bool)
    truth[1:3, 1:4] = True
    rest = ~truth
    perfect = truth.astype(float)
    assert pixel_auroc(perfect, truth, rest) == 1.0
    assert pixel_auroc(np.full((6, 6), 0.3), truth, rest) == 0.5  # a constant map: every pair a tie
    assert pixel_auroc(-perfect, truth, rest) == 0.0
    # one background pixel above the object: 1 of 6 x 30 pairs lost
    graded = perfect.copy()
    graded[5, 5] = 2.0
    assert np.isclose(pixel_auroc(graded, truth, rest), 1 - 6 / (6 * 30))
    assert pixel_auroc(perfect, truth, np.zeros_like(truth)) is None  # nothing to compare with
    with pytest.raises(ValueError, match="overlap"):
        pixel_auroc(perfect, truth, truth)


def test_map_aurocs_tell_the_named_object_from_the_background_and_from_the_others():
    from explorer.evaluation.grounding_eval import map_aurocs

    truth = np.zeros((2, 4, 4), dtype=bool)
    truth[0, 0, :2] = True  # object A
    truth[1, 3, 2:] = True  # object B
    objects = truth.any(axis=0).astype(float)
    same_for_both = np.stack([objects, objects])  # lights up every object, whatever the sentence
    by_background, by_others = map_aurocs(same_for_both, truth)
    assert by_background == [1.0, 1.0] and by_others == [0.5, 0.5]
    right = truth.astype(float)
    assert map_aurocs(right, truth) == ([1.0, 1.0], [1.0, 1.0])
