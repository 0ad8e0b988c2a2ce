"""Text without padding: every text forward runs at the length of its batch's longest text, not the context.

A tokenizer pads each row to the context (77 or 248) so that a batch is one tensor. The columns after the
last real token of every row change nothing a text tower computes for the real ones: CLIP's tower is causal
(a position sees only the positions before it), and BERT's (SEPS) masks the padding out of every attention. So
they are cut here, once, before the tower runs: 32 sentences of at most 13 tokens through a 248-token tower
then cost 13 positions, not 248 (0.16 s against 4.1 s at Long-CLIP-B sizes, issue 63).

``unpadded`` is the one place that cuts. The text towers call it (``ClipBackbone.encode_text``, GOAL's
training pass, CAFT's chunks, SEPS's BERT), and ``TokenBatch.unpadded`` hands a method's ``encode_text``
ids that are cut already (the model's forwards, scoring, training), so a plugin's own tower gets them too;
``explorer check-method`` checks that it gives what the padded ids give.

``padding_kept()`` turns the cut off inside a ``with``: the padded run, for the tests that compare the two and
for the benchmarks that time them.
"""

from __future__ import annotations

import contextlib
import contextvars

import torch

_KEEP_PADDING: contextvars.ContextVar[bool] = contextvars.ContextVar("keep_padding", default=False)


def unpadded(ids: torch.Tensor, real: torch.Tensor | None = None) -> torch.Tensor:
    """``ids`` [B, K] cut after the last column any row needs.

    Args:
        ids: Token ids, each row padded after its last real token.
        real: [B, K] bool, True at a row's real tokens; None: CLIP's ids, whose last real token is the end
            token, the largest id of the vocabulary (found with argmax, as OpenAI's CLIP finds it). Padding
            is id 0, which is also a real BPE token ("!"), so ``ids != 0`` cannot say it for CLIP.
    """
    if _KEEP_PADDING.get() or ids.ndim != 2 or ids.shape[1] == 0:
        return ids
    length = longest(ids, real)
    return ids if length >= ids.shape[1] else ids[:, :length]


def longest(ids: torch.Tensor, real: torch.Tensor | None = None) -> int:
    """Tokens of the longest row of ``ids`` (``unpadded``'s rule), at least 1."""
    if real is None:
        return int(ids.argmax(dim=-1).max()) + 1 if len(ids) else 1
    columns = real.any(dim=0).nonzero()
    return int(columns.max()) + 1 if len(columns) else 1


@contextlib.contextmanager
def padding_kept():
    """Inside: ``unpadded`` cuts nothing, so every text forward runs at the full context (the padded run)."""
    token = _KEEP_PADDING.set(True)
    try:
        yield
    finally:
        _KEEP_PADDING.reset(token)


__all__ = ["longest", "padding_kept", "unpadded"]
