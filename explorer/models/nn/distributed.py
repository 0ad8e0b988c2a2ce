"""What the losses need to take their negatives from the whole batch when training runs on many processes.

Under ``torchrun`` + DDP every rank holds B samples of a global batch of G = world * B. A
contrastive, sigmoid or hinge loss compares each sample with every other sample of the batch, so a
rank must see the other ranks' features, not only its own; otherwise it trains on a batch of B.

- ``world()``: (rank, world size); (0, 1) when no process group is initialised, which makes every
  helper here an identity and every loss exactly what it is in one process.
- ``gather_with_grad(x)``: the concatenation over ranks, in rank order, of every rank's ``x``
  ([B, ...] -> [G, ...]) through ``torch.distributed.nn.functional.all_gather``, whose backward
  sends each rank the gradient that every rank's loss put on that rank's slice (summed). This gradient
  path is why: a plain ``all_gather`` returns detached copies, so rank r would learn from its own
  rows only, never from being a negative in the other ranks' rows, and the step would not be the
  single-process step on the global batch.
- ``batch_offset(B)``: rank * B, where this rank's rows sit in the global matrix (the targets: the
  positive of local row i is global column rank * B + i).
- ``gather_features(f)``: ``gather_with_grad`` over every tensor field of a features dataclass.
- ``same_token_length(text)``: a ``TextFeatures`` padded (masked) to the longest token axis over ranks, which a
  token-level gather needs: each rank encodes its captions at its own longest caption's length.
- ``global_mean(v)``: the mean over every rank's values, for a term whose count differs per rank.
- ``use_group(g)``: the process group the gathers run on (default: the default group). The training
  loop gives them one of their own, so that their backward collectives never interleave with DDP's
  gradient all-reduces on one communicator (ranks must issue a communicator's collectives in one order).

The scaling convention (every loss in ``losses.py`` follows it): rank r returns a loss L_r such
that the mean over ranks of L_r is the single-process loss L of the global batch. DDP averages the
gradients over ranks, and each rank's gradient is that of sum_k L_k through its own features (the
gather's backward), so the averaged gradient is the gradient of mean_r L_r = L: the same step as one
process on the global batch. A mean over rows is therefore a mean over the rank's own rows; a sum
over rows is the rank's own rows times the world size.

Every gather is a collective, forward and backward: every rank must make the same gathers in the
same order, whatever its data (a rank with nothing to contribute gathers an empty slice, never
skips), and keep the graph around them alike on every rank: the backward collectives run in the
order autograd reaches them, and they must pair up too.
"""

from __future__ import annotations

import warnings
from dataclasses import fields, is_dataclass, replace

import torch
import torch.distributed as dist

_gather_group = None  # use_group()


def world() -> tuple[int, int]:
    """(rank, world size) of the default process group; (0, 1) when there is none."""
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return 0, 1


def use_group(group) -> None:
    """Run the gathers on ``group`` (every rank of the default group; None: the default group)."""
    global _gather_group
    _gather_group = group


def batch_offset(local_batch: int) -> int:
    """Index of this rank's first row in the global batch (every rank holds ``local_batch`` rows)."""
    return world()[0] * int(local_batch)


def gather_with_grad(tensor: torch.Tensor, uneven: bool | list[int] = False) -> torch.Tensor:
    """Every rank's ``tensor`` concatenated along dim 0, in rank order, with gradients to every rank.

    ``uneven``: the ranks' first dimensions may differ (True: sizes exchanged first; or every rank's
    size, from ``all_sizes``), so each is padded to the largest and trimmed after.
    The identity (the same tensor object) at world size 1.
    """
    _, size = world()
    if size == 1:
        return tensor
    if tensor.dtype == torch.bool:  # masks: not every backend moves bools
        return gather_with_grad(tensor.to(torch.uint8), uneven).bool()
    from torch.distributed.nn.functional import all_gather

    counts = [tensor.shape[0]] * size
    if uneven:
        counts = all_sizes(tensor.shape[0]) if uneven is True else list(uneven)
        tensor = torch.cat([tensor, tensor.new_zeros(max(counts) - tensor.shape[0], *tensor.shape[1:])])
    with warnings.catch_warnings():  # torch >= 2.10 calls it deprecated; it is the documented autograd gather
        warnings.simplefilter("ignore", FutureWarning)
        parts = all_gather(tensor.contiguous(), group=_gather_group or dist.group.WORLD)
    if parts[0].requires_grad:  # the backward (Gloo) receives into empty_like(grad), which keeps a transposed
        for part in parts:  # grad's strides and then holds the bytes in the wrong order: give it row-major grads
            part.register_hook(torch.Tensor.contiguous)
    return torch.cat([part[:n] for part, n in zip(parts, counts)] if uneven else parts)


def same_token_length(text):
    """``text`` (``TextFeatures``: ``tokens`` [B, K, D], ``mask`` [B, K]) with its token axis padded to the
    longest K over ranks (zero tokens, masked out), so that ``gather_features`` can gather it: each rank encodes
    its captions at the length of its own longest one. Padded by 0 too, so every rank builds the same graph (the
    gathers' backward collectives then run in one order). At world size 1: ``text`` itself."""
    if world()[1] == 1:
        return text
    extra = max(all_sizes(text.tokens.shape[1])) - text.tokens.shape[1]
    return replace(text, tokens=torch.nn.functional.pad(text.tokens, (0, 0, 0, extra)),
                   mask=torch.nn.functional.pad(text.mask, (0, extra), value=False))


def all_sizes(count: int) -> list[int]:
    """Every rank's ``count``, in rank order ([count] at world size 1)."""
    _, size = world()
    if size == 1:
        return [int(count)]
    device = _device()
    sizes = [torch.zeros((), dtype=torch.long, device=device) for _ in range(size)]
    dist.all_gather(sizes, torch.tensor(int(count), device=device), group=_gather_group)
    return [int(s) for s in sizes]


def gather_features(features, uneven: bool | list[int] = False):
    """``gather_with_grad`` on a tensor, or on every tensor field of a features dataclass (others kept)."""
    if torch.is_tensor(features) or world()[1] == 1:
        return gather_with_grad(features, uneven) if torch.is_tensor(features) else features
    if not is_dataclass(features):
        raise TypeError(f"cannot gather a {type(features).__name__} across ranks")
    tensors = {f.name: getattr(features, f.name) for f in fields(features)}
    tensors = {name: value for name, value in tensors.items() if torch.is_tensor(value)}
    if uneven is True:  # one size exchange for every field
        uneven = all_sizes(len(features))
    return replace(features, **{name: gather_with_grad(t, uneven) for name, t in tensors.items()})


def global_mean(values: torch.Tensor) -> torch.Tensor:
    """The mean of ``values`` [n] over every rank's values (n may differ per rank; 0 when none at all),
    scaled by the world size as the module docstring says; ``values.mean()`` at world size 1."""
    _, size = world()
    if size == 1:
        return values.mean()
    total = sum(all_sizes(values.shape[0]))
    return values.sum() * (size / max(total, 1))


def _device() -> torch.device:
    """Where collectives of this process group take their tensors (NCCL: the current CUDA device)."""
    if dist.get_backend(_gather_group) == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


__all__ = ["all_sizes", "batch_offset", "gather_features", "gather_with_grad", "global_mean", "use_group", "world"]
