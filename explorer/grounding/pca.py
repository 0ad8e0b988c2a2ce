"""PCA maps: the top three principal components of patch features, shown as RGB.

The "PCA attention map" of the papers (METHODS.md, GOAL): fit PCA on the patch
features of one or more images, project every patch onto the first three axes
and read the three projections as red, green and blue. Patches that the model
represents alike get alike colours.

Decisions made here once:
- Joint or per image. A basis fitted on all inputs together colours every
  input with the same axes, so a colour means the same thing across images
  (or models of one width); a basis per input shows each image's own
  structure but its colours are not comparable with the next one's.
- Signs. An axis and its negation explain the same variance; SVD picks either.
  We fix the sign so the projections' skewness (third central moment) is
  positive, i.e. the long tail, usually the few patches of a distinct object,
  is bright. If the skewness is negligible, the largest loading is made
  positive. Refitting on the same rows in any order gives the same colours.
- Colour range. Each channel runs from the 1st to the 99th percentile of the
  fitted projections, so a handful of outlier patches cannot wash out the rest.
- Degenerate input (fewer than two rows, or no variance along an axis): the
  axis is still there but explains 0 and its channel is a flat 0.5. No NaN.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Sequence, Union

import numpy as np

from explorer.core.errors import InputError
from explorer.core.tensors import is_tensor

if TYPE_CHECKING:
    import torch

MAX_COMPONENTS = 3  # one per colour channel
_PERCENTILES = (1.0, 99.0)
_FLAT = 1e-10  # an axis whose spread is below this fraction of the features' magnitude has none
_SKEW_NEGLIGIBLE = 1e-6  # |third moment| / std**3 below this: the skewness cannot decide the sign

Features = Union[np.ndarray, "torch.Tensor"]


@dataclass(eq=False)  # arrays: equality would be ambiguous
class PcaBasis:
    mean: np.ndarray  # [D] the mean row the axes are centred on
    components: np.ndarray  # [k, D] unit principal axes, strongest first, signs fixed
    explained: np.ndarray  # [k] fraction of the total variance along each axis
    low: np.ndarray  # [k] colour 0 of each channel: 1st percentile of the fitted projections
    high: np.ndarray  # [k] colour 1 of each channel: 99th percentile

    @property
    def n_components(self) -> int:
        return int(self.components.shape[0])

    def project(self, features: Features) -> np.ndarray:
        """[P, D] -> [P, k] coordinates along the axes."""
        rows = _as_matrix(features)
        if rows.shape[1] != self.mean.shape[0]:
            raise ValueError(f"this basis was fitted on {self.mean.shape[0]}-dim features, got {rows.shape[1]}-dim")
        return (rows - self.mean) @ self.components.T

    def to_rgb(self, features: Features, grid_hw: tuple[int, int]) -> np.ndarray:
        """[P, D] patch features -> [rows, cols, 3] float32 in [0, 1] (channels past k are 0)."""
        rows, cols = (int(v) for v in grid_hw)
        projection = self.project(features)
        if rows * cols != projection.shape[0]:
            raise ValueError(f"a {rows} x {cols} grid holds {rows * cols} patches, got {projection.shape[0]}")
        spread = self.high - self.low
        has_range = spread > 0
        scaled = np.full(projection.shape, 0.5)  # a channel without range says nothing: mid-grey
        scaled[:, has_range] = (projection[:, has_range] - self.low[has_range]) / spread[has_range]
        rgb = np.zeros((rows * cols, MAX_COMPONENTS))
        rgb[:, :projection.shape[1]] = np.clip(scaled, 0.0, 1.0)
        return rgb.reshape(rows, cols, MAX_COMPONENTS).astype(np.float32)


def fit_pca(features: Sequence[Features], n_components: int = 3) -> PcaBasis:
    """One PCA over all rows of all inputs ([P_i, D] each, one D for all)."""
    if not 1 <= n_components <= MAX_COMPONENTS:
        raise InputError(f"a PCA map has 1 to {MAX_COMPONENTS} components (one per colour), not {n_components}")
    rows = _stack(features)
    count, dim = rows.shape
    k = min(n_components, dim) if count < 2 else min(n_components, dim, count - 1)  # centred rank <= P - 1
    mean = rows.mean(axis=0) if count else np.zeros(dim)
    centred = rows - mean
    scale = float(np.abs(rows).max()) if count else 0.0
    components, variances, total = _principal_axes(centred, k)
    components, projection = _fix_signs(components, centred)
    flat = np.sqrt(variances) <= _FLAT * scale  # rounding noise, not structure
    ratio = variances / total if total > 0 else np.zeros(k)
    explained = np.where(flat, 0.0, ratio)
    low, high = _colour_range(projection, flat)
    return PcaBasis(mean=mean, components=components, explained=explained, low=low, high=high)


def pca_maps(features: Sequence[Features], grids: Sequence[tuple[int, int]], joint: bool = True,
             n_components: int = 3) -> tuple[list[np.ndarray], list[PcaBasis]]:
    """RGB maps [rows, cols, 3] of each input, and the basis (joint) or bases (one per input) used."""
    features = list(features)
    grids = [tuple(int(v) for v in grid) for grid in grids]
    if len(grids) != len(features):
        raise ValueError(f"one grid per input: {len(features)} inputs, {len(grids)} grids")
    counts = [_as_matrix(one).shape[0] for one in features]
    for index, ((rows, cols), count) in enumerate(zip(grids, counts)):
        if rows * cols != count:  # checked before any fitting, so a bad grid fails fast
            raise ValueError(f"input {index}: a {rows} x {cols} grid holds {rows * cols} patches, not {count}")
    if joint:
        bases = [fit_pca(features, n_components)]
        return [bases[0].to_rgb(one, grid) for one, grid in zip(features, grids)], bases
    bases = [fit_pca([one], n_components) for one in features]
    return [basis.to_rgb(one, grid) for basis, one, grid in zip(bases, features, grids)], bases


# ---- helpers ------------------------------------------------------------------------------------


def _as_matrix(features: Features) -> np.ndarray:
    if is_tensor(features):
        features = features.detach().float().cpu().numpy()
    rows = np.asarray(features, dtype=np.float64)
    if rows.ndim != 2:
        raise ValueError(f"patch features are a matrix [patches, dim], got shape {rows.shape}")
    if not np.isfinite(rows).all():
        raise ValueError("patch features contain NaN or infinite values")
    return rows


def _stack(features: Sequence[Features]) -> np.ndarray:
    matrices = [_as_matrix(one) for one in features]
    if not matrices:
        raise ValueError("PCA needs at least one input")
    dims = [m.shape[1] for m in matrices]
    if len(set(dims)) > 1:
        raise ValueError(f"a joint PCA needs features of one width, got dims {dims}")
    return np.concatenate(matrices, axis=0)


def _principal_axes(centred: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray, float]:
    """(axes [k, D], variance along each [k], total variance) of centred rows."""
    count, dim = centred.shape
    if count < 2:  # no variance to find: any orthonormal axes will do, take the first coordinates
        return np.eye(dim)[:k], np.zeros(k), 0.0
    _, singular, vt = np.linalg.svd(centred, full_matrices=False)
    variances = singular ** 2 / (count - 1)
    return vt[:k].copy(), variances[:k], float(variances.sum())


def _fix_signs(components: np.ndarray, centred: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Flip each axis so its projections skew positive (else its largest loading is positive)."""
    projection = centred @ components.T
    for axis in range(components.shape[0]):
        values = projection[:, axis]
        std = float(values.std()) if values.size else 0.0
        skew = float(np.mean(values ** 3)) if values.size else 0.0
        if std > 0 and abs(skew) >= _SKEW_NEGLIGIBLE * std ** 3:
            flip = skew < 0
        else:
            flip = components[axis, int(np.argmax(np.abs(components[axis])))] < 0
        if flip:
            components[axis] *= -1
            projection[:, axis] *= -1
    return components, projection


def _colour_range(projection: np.ndarray, flat: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """1st..99th percentile per axis; min..max where those coincide; nothing (low == high) on flat axes."""
    k = projection.shape[1]
    if projection.shape[0] == 0:
        return np.zeros(k), np.zeros(k)
    low, high = np.percentile(projection, _PERCENTILES, axis=0)
    narrow = high <= low  # e.g. all but one patch alike: the percentiles miss the one
    low = np.where(narrow, projection.min(axis=0), low)
    high = np.where(narrow, projection.max(axis=0), high)
    centre = np.median(projection, axis=0)
    return np.where(flat, centre, low), np.where(flat, centre, high)


__all__ = ["MAX_COMPONENTS", "PcaBasis", "fit_pca", "pca_maps"]
