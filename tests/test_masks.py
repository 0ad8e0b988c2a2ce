"""Otsu masks: the known split of a bimodal map, flat maps, non-finite pixels, stacks."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from explorer.grounding.masks import otsu_mask, otsu_masks


def bimodal_map(seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """A 32 x 32 map: about 0.2 outside a square, about 0.8 inside it, with small noise."""
    rng = np.random.default_rng(seed)
    truth = np.zeros((32, 32), dtype=bool)
    truth[8:20, 10:26] = True
    values = np.where(truth, 0.8, 0.2) + rng.normal(0, 0.03, truth.shape)
    return values, truth


def test_bimodal_map_splits_at_the_gap():
    values, truth = bimodal_map()
    mask, threshold = otsu_mask(values)
    assert values[~truth].max() < threshold < values[truth].min()
    np.testing.assert_array_equal(mask, truth)
    assert mask.dtype == bool and mask.shape == values.shape


def test_tensor_input_gives_the_same_mask():
    values, truth = bimodal_map(1)
    mask, threshold = otsu_mask(torch.tensor(values, dtype=torch.float32))
    np.testing.assert_array_equal(mask, truth)


def test_two_level_map_keeps_the_high_level():
    values = np.array([[0.0, 1.0], [1.0, 0.0]])
    mask, threshold = otsu_mask(values)
    np.testing.assert_array_equal(mask, values > 0.5)
    assert 0.0 <= threshold < 1.0


def test_flat_map_gives_an_empty_mask_at_its_value():
    mask, threshold = otsu_mask(np.full((5, 7), 0.3))
    assert not mask.any() and mask.shape == (5, 7)
    assert threshold == pytest.approx(0.3)


def test_non_finite_pixels_are_never_in_the_mask():
    values, truth = bimodal_map(2)
    values[0, 0] = np.nan
    values[12, 12] = np.inf  # inside the square
    mask, threshold = otsu_mask(values)
    assert not mask[0, 0] and not mask[12, 12]
    expected = truth.copy()
    expected[12, 12] = False
    np.testing.assert_array_equal(mask, expected)
    with pytest.raises(ValueError, match="no finite"):
        otsu_mask(np.full((3, 3), np.nan))


def test_stack_thresholds_each_map_on_its_own():
    values, truth = bimodal_map(3)
    stack = np.stack([values, values * 10 + 5, np.ones_like(values)])
    masks, thresholds = otsu_masks(stack)
    np.testing.assert_array_equal(masks[0], truth)
    np.testing.assert_array_equal(masks[1], truth)
    assert not masks[2].any() and thresholds[2] == 1.0
    assert thresholds[1] == pytest.approx(thresholds[0] * 10 + 5, rel=0.05)
