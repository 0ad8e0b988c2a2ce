"""Long-CLIP's knowledge-preserved stretch of the text position table.

From a 77-row table ``pe`` (Long-CLIP, section 3.2):
- rows 0..19 are kept as they are (the well-trained positions);
- each later gap pe[20+i] -> pe[21+i] (i = 0..55) becomes four rows,
  pe[20+i] * (1 - j/4) + pe[21+i] * (j/4) for j = 0..3;
- the last four rows extrapolate past pe[76] with the last step,
  pe[76] + k * (pe[76] - pe[75]) / 4 for k = 0..3.
That is 20 + 56 * 4 + 4 = 248 rows = 4 * 77 - 3 * 20.

This is the only place the stretch is written.
"""

from __future__ import annotations

import torch

from explorer.core.errors import CheckpointError
from explorer.models.contexts import KEEP_ROWS, LONG_CONTEXT, SHORT_CONTEXT, STRETCH  # noqa: F401 (re-exported)


def stretch_positions(table: torch.Tensor, keep: int = KEEP_ROWS, ratio: int = STRETCH) -> torch.Tensor:
    """Return the stretched table: [n, d] -> [ratio * n - (ratio - 1) * keep, d]."""
    n, _ = table.shape
    if n <= keep + 1:
        raise CheckpointError(f"position table has {n} rows; the stretch keeps {keep} and needs at least {keep + 2}")
    head = table[:keep]
    left, right = table[keep:-1], table[keep + 1 :]  # consecutive pairs (pe[20+i], pe[21+i])
    steps = torch.arange(ratio, dtype=table.dtype, device=table.device) / ratio  # j / 4
    # [n_pairs, ratio, d]: row 4i + j interpolates from left[i] towards right[i]
    middle = left[:, None, :] * (1 - steps)[None, :, None] + right[:, None, :] * steps[None, :, None]
    last_step = table[-1] - table[-2]
    tail = table[-1][None, :] + steps[:, None] * last_step[None, :]
    return torch.cat([head, middle.reshape(-1, table.shape[1]), tail], dim=0)


def merge_longclip_tables(positional_embedding: torch.Tensor, positional_embedding_res: torch.Tensor,
                          keep: int = KEEP_ROWS) -> torch.Tensor:
    """The table a released Long-CLIP checkpoint actually uses.

    Long-CLIP keeps two tables and adds ``pe * mask1 + pe_res * mask2`` with
    mask1 = rows < 20 and mask2 = rows >= 20, so the effective table is
    ``cat(pe[:20], pe_res[20:])``. Reading only ``pe`` is silently wrong
    after token 20.
    """
    if positional_embedding.shape != positional_embedding_res.shape:
        raise CheckpointError(
            f"positional_embedding {tuple(positional_embedding.shape)} and positional_embedding_res "
            f"{tuple(positional_embedding_res.shape)} differ in shape")
    return torch.cat([positional_embedding[:keep], positional_embedding_res[keep:]], dim=0)
