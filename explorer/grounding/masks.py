"""Binary masks from maps by Otsu's threshold (Otsu, 1979).

A per-sentence map becomes a mask the way CAFT and MulCLIP draw them: the
threshold that best separates the map's values into two classes (maximal
between-class variance, ``skimage.filters.threshold_otsu``), and the mask is
the pixels strictly above it.

Edge cases, decided here once:
- a flat map (every finite value equal) has no two classes: the mask is empty
  and the threshold is that value. A map that says nothing selects nothing.
- non-finite pixels (NaN, +-inf) take no part in the threshold and are never
  in the mask; a map with no finite pixel is an error.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from explorer.core.tensors import is_tensor


def otsu_mask(values, nbins: int = 256) -> tuple[np.ndarray, float]:
    """(mask, threshold) of one map: ``mask = map > threshold``, bool, same shape as the map.

    Otsu picks the split of a ``nbins``-bin histogram of the finite values; the
    returned threshold is the middle of the gap between the highest value below the
    split and the lowest value above it, so ``map > threshold`` is exactly that split.
    (skimage returns the centre of the last background bin, which would put the upper
    half of that bin into the mask.)
    """
    array = _as_array(values)
    finite = np.isfinite(array)
    whole = bool(finite.all())  # the usual map: no copy of its finite values needed
    if not whole and not finite.any():
        raise ValueError("the map has no finite value to threshold")
    inside = array.ravel() if whole else array[finite]
    low, high = float(inside.min()), float(inside.max())
    if low == high:  # flat map: one class only
        return np.zeros(array.shape, dtype=bool), low
    counts, edges = np.histogram(inside, bins=nbins, range=(low, high))
    centers = (edges[:-1] + edges[1:]) / 2
    from skimage.filters import threshold_otsu  # ~0.5 s: on the first mask, not when the page starts

    split = int(np.searchsorted(centers, threshold_otsu(hist=(counts, centers))))  # last background bin
    # A value lies in a bin past the split (bins counted as ``searchsorted(edges, value, "right") - 1``, the last
    # bin closed) exactly when it reaches the split bin's upper edge: one comparison, where sorting every pixel
    # into its bin took 60% of a mask's time (30-40 ms of a 768 px map on a 2-core machine; a Draw makes dozens).
    above = inside >= edges[split + 1] if split < nbins - 1 else np.zeros(inside.shape, dtype=bool)
    threshold = (float(np.max(inside, where=~above, initial=-np.inf))
                 + float(np.min(inside, where=above, initial=np.inf))) / 2
    if whole:
        return above.reshape(array.shape), threshold
    mask = np.zeros(array.shape, dtype=bool)
    mask[finite] = above
    return mask, threshold


def otsu_masks(maps, nbins: int = 256) -> tuple[np.ndarray, np.ndarray]:
    """One Otsu mask per map of a stack [M, H, W]: masks [M, H, W] bool and thresholds [M]."""
    array = _as_array(maps)
    if array.ndim != 3:
        raise ValueError(f"expected a stack of maps [M, H, W], got shape {array.shape}")
    results = [otsu_mask(one, nbins) for one in array]
    masks = np.stack([mask for mask, _ in results]) if results else np.zeros(array.shape, dtype=bool)
    return masks, np.array([threshold for _, threshold in results], dtype=np.float64)


OUTSIDE_EDGE = 0.75  # the share of the border a mask holds when it is the region outside its outline


@dataclass(frozen=True)
class MaskSide:
    """Which side of its outline a mask lies on, decided once per map for every view and figure.

    A map that heats the background gets an Otsu mask of the background: its outline still hugs the shapes,
    so the picture reads as if the shapes were picked. One measured property decides, with a margin: the share
    of the picture's border pixels inside the mask. A mask that holds at least ``OUTSIDE_EDGE`` (three quarters)
    of the border surrounds the rest, and views hatch the masked side and say "mask: the region outside the
    outline (38 % of the picture)". The margin (0.75, not 0.5) keeps look-alike maps on one side: a grid-shaped
    or scattered mask touches the border about as much as it covers the picture (a third, say) and reads as
    inside, while a background mask holds nearly all of the border. The mask's area does not decide: a large
    object in the middle is still inside its outline.
    """

    share: float  # fraction of the picture inside the mask
    edge_share: float  # fraction of the picture's border pixels inside the mask

    @property
    def outside(self) -> bool:
        return self.edge_share >= OUTSIDE_EDGE

    @property
    def label(self) -> str:
        percent = f"{100 * self.share:.0f} %"
        return f"mask: the region outside the outline ({percent} of the picture)" if self.outside else f"mask {percent}"

    @property
    def key(self) -> str:
        """The label under a figure's panel, where a column may be half an inch wide (the panel's title and the
        page say it in full): "mask outside the outline (38 %)"; "" for a mask inside its outline."""
        return f"mask outside the outline ({100 * self.share:.0f} %)" if self.outside else ""


def mask_side(mask: np.ndarray) -> MaskSide:
    """The ``MaskSide`` of one bool mask [H, W]."""
    mask = np.asarray(mask, dtype=bool)
    if mask.size == 0:
        return MaskSide(0.0, 0.0)
    edge = np.concatenate([mask[0], mask[-1], mask[1:-1, 0], mask[1:-1, -1]])
    return MaskSide(share=float(mask.mean()), edge_share=float(edge.mean()))


def _as_array(values) -> np.ndarray:
    if is_tensor(values):
        values = values.detach().float().cpu().numpy()
    array = np.asarray(values, dtype=np.float64)
    if array.ndim < 1 or array.size == 0:
        raise ValueError(f"a map needs at least one value, got shape {array.shape}")
    return array
