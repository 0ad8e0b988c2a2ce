"""PCA maps (explorer/grounding/pca.py): planted axes are recovered, signs are fixed, joint vs per-image colours."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from explorer.grounding.pca import PcaBasis, fit_pca, pca_maps
from explorer.core.errors import ExplorerError


def planted(seed: int = 0, count: int = 2000, dim: int = 32, noise: float = 0.05):
    """Rows = 3 * a * u0 + 2 * b * u1 + c * u2 + noise with a, b, c ~ N(0, 1): variances 9, 4, 1."""
    rng = np.random.default_rng(seed)
    directions = np.linalg.qr(rng.normal(size=(dim, 3)))[0].T  # [3, D] orthonormal
    coefficients = rng.normal(size=(count, 3)) * np.array([3.0, 2.0, 1.0])
    rows = coefficients @ directions + rng.normal(0, noise, size=(count, dim))
    return rows, directions


def test_planted_axes_are_recovered_in_order():
    rows, directions = planted()
    basis = fit_pca([rows])
    assert basis.components.shape == (3, 32) and basis.mean.shape == (32,)
    np.testing.assert_allclose(np.linalg.norm(basis.components, axis=1), 1.0, atol=1e-12)
    for axis in range(3):
        assert abs(float(basis.components[axis] @ directions[axis])) > 0.99
    total = 9 + 4 + 1 + 32 * 0.05 ** 2
    assert basis.explained[0] > basis.explained[1] > basis.explained[2] > 0
    np.testing.assert_allclose(basis.explained, np.array([9, 4, 1]) / total, atol=0.03)


def test_signs_do_not_depend_on_row_order():
    rows, _ = planted(1, count=500)
    shuffled = rows[np.random.default_rng(7).permutation(len(rows))]
    first, second = fit_pca([rows]), fit_pca([shuffled])
    np.testing.assert_allclose(first.components, second.components, atol=1e-9)
    np.testing.assert_allclose(first.low, second.low, atol=1e-9)
    np.testing.assert_allclose(first.high, second.high, atol=1e-9)
    # The rule itself: every axis's projections skew positive.
    projection = first.project(rows)
    assert (np.mean(projection ** 3, axis=0) > 0).all()


def test_joint_basis_shares_colours_and_per_image_bases_normalise_each_input():
    rows, _ = planted(2, count=64)
    shifted = 2.0 * rows + 5.0  # same directions, scaled and moved away
    grids = [(8, 8), (8, 8)]
    joint_maps, joint_bases = pca_maps([rows, shifted], grids, joint=True)
    own_maps, own_bases = pca_maps([rows, shifted], grids, joint=False)
    assert len(joint_bases) == 1 and len(own_bases) == 2
    assert all(isinstance(basis, PcaBasis) for basis in joint_bases + own_bases)
    # Each input's own PCA is blind to a shift and a scale: identical colours ...
    np.testing.assert_allclose(own_maps[0], own_maps[1], atol=1e-5)
    # ... while one shared basis shows the two inputs as different.
    assert np.abs(joint_maps[0] - joint_maps[1]).mean() > 0.2


def test_rgb_shape_range_and_tensor_input():
    rows, _ = planted(3, count=48)
    basis = fit_pca([rows])
    rgb = basis.to_rgb(rows, (6, 8))
    assert rgb.shape == (6, 8, 3) and rgb.dtype == np.float32
    assert rgb.min() >= 0.0 and rgb.max() <= 1.0 and rgb.max() > rgb.min()
    from_tensor = fit_pca([torch.tensor(rows, dtype=torch.float32)]).to_rgb(torch.tensor(rows), (6, 8))
    np.testing.assert_allclose(from_tensor, rgb, atol=1e-4)
    with pytest.raises(ValueError, match="6 x 7 grid"):
        basis.to_rgb(rows, (6, 7))


def test_two_planted_regions_get_clearly_different_colours():
    rng = np.random.default_rng(4)
    rows_, cols, dim = 8, 8, 16
    left, right = rng.normal(size=dim), rng.normal(size=dim)
    grid = np.empty((rows_, cols, dim))
    grid[:, : cols // 2] = left
    grid[:, cols // 2:] = right
    grid += rng.normal(0, 0.05, size=grid.shape)
    (rgb,), _ = pca_maps([grid.reshape(-1, dim)], [(rows_, cols)])
    left_colour, right_colour = rgb[:, : cols // 2].reshape(-1, 3), rgb[:, cols // 2:].reshape(-1, 3)
    gap = np.linalg.norm(left_colour.mean(axis=0) - right_colour.mean(axis=0))
    assert gap > 0.5
    assert gap > 3 * max(left_colour.std(axis=0).max(), right_colour.std(axis=0).max())


def test_mismatched_widths_and_grids_raise():
    with pytest.raises(ValueError, match=r"\[8, 9\]"):
        fit_pca([np.zeros((4, 8)), np.zeros((4, 9))])
    with pytest.raises(ValueError, match="one grid per input"):
        pca_maps([np.zeros((4, 8))], [(2, 2), (2, 2)])
    with pytest.raises(ValueError, match="input 0"):
        pca_maps([np.zeros((4, 8))], [(2, 3)])
    with pytest.raises(ExplorerError, match="1 to 3"):
        fit_pca([np.zeros((4, 8))], n_components=4)


def test_flat_and_single_row_inputs_give_mid_grey_without_nan():
    flat = np.full((16, 8), 0.1)
    (rgb,), (basis,) = pca_maps([flat], [(4, 4)])
    assert basis.components.shape == (3, 8)
    np.testing.assert_array_equal(basis.explained, 0.0)
    np.testing.assert_array_equal(rgb, 0.5)
    one = fit_pca([np.arange(8.0)[None]])
    assert one.components.shape == (3, 8) and not np.isnan(one.explained).any()
    np.testing.assert_array_equal(one.to_rgb(np.arange(8.0)[None], (1, 1)), 0.5)


def test_components_are_capped_by_the_rank_but_rgb_keeps_three_channels():
    rows = np.random.default_rng(5).normal(size=(3, 8))  # 3 rows: centred rank 2
    basis = fit_pca([rows])
    assert basis.components.shape == (2, 8)
    rgb = basis.to_rgb(rows, (1, 3))
    assert rgb.shape == (1, 3, 3)
    np.testing.assert_array_equal(rgb[..., 2], 0.0)
