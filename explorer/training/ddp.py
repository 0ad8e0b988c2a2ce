"""The training loop on many processes: ``torchrun --nproc_per_node N`` with DistributedDataParallel.

    torchrun --standalone --nproc_per_node 4 -m explorer.cli train --method finelip --data DIR --batch-size 32

``train`` (loop.py) calls ``setup`` first: under torchrun (``RANK``, ``WORLD_SIZE`` > 1 and
``LOCAL_RANK`` in the environment) it initialises the default process group, NCCL on CUDA (each
rank on ``cuda:LOCAL_RANK``) and Gloo on CPU (``device="cpu"``), and destroys it when the run
ends; a caller that initialised a group itself (tests with ``torch.multiprocessing.spawn``) keeps
it. Without either, nothing here runs and the loop is the single-process loop.

What changes on many processes:

- data: ``batch_size`` is per rank, so a global batch is ``batch_size * world`` samples. The
  sample order is the single-process order of the global batches (``SampleLoader`` with the
  global batch size, same seed) and rank r takes slice r of each (``RankSampleLoader``;
  ``RankSlices`` slices the ready batches of any other ``BatchSource``). The schedule, the steps per
  epoch and the data order are those of one process with a batch of ``batch_size * world``;
  resuming needs the same world size (``world_size`` is part of the run's settings);
- losses: the methods gather the other ranks' features with gradients (``models.nn.distributed``),
  so a rank's loss is its share of the global-batch loss and DDP's gradient average is the
  single-process gradient of the global batch; the logged terms are averaged over ranks, i.e. the
  global-batch loss. The gathers run on a process group of their own (made here), so their backward
  collectives and DDP's gradient all-reduces never share a communicator;
- DDP wraps ``LossModule(method)`` (its forward is ``method.losses``); ``find_unused_parameters``
  is on only when a probe step (one forward and backward of the first batch before wrapping,
  random state restored) leaves a trainable parameter without a gradient on some rank: searching
  the graph every step costs time, and DDP without it hangs or fails when a parameter gets no
  gradient. Accumulation runs the first micro-batches under ``no_sync``;
- only rank 0 writes (metrics, run log, checkpoints, manifest) and calls ``on_metrics``; the others
  wait at a barrier after each checkpoint; a stop request (SIGTERM reaches every rank under
  torchrun) is agreed on (``agree``: any rank asking stops all) so every rank stops at one step.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from typing import Iterator

import torch
import torch.distributed as dist
from torch import nn

from explorer.models.batch import TrainingBatch
from explorer.models.nn.distributed import use_group
from explorer.training.metrics_log import JsonlLog
from explorer.training.samples import BatchSource, SampleLoader

TORCHRUN_VARIABLES = ("RANK", "WORLD_SIZE", "LOCAL_RANK")


@dataclass
class Ranks:
    """This process's place in the process group, as the loop uses it."""

    rank: int
    world: int
    device: torch.device
    owns_group: bool  # setup() initialised the group, so the run destroys it at the end
    gather_group: object = None  # the losses' gathers run on a group of their own (models.nn.distributed)

    @property
    def leader(self) -> bool:
        return self.rank == 0

    @property
    def backend(self) -> str:
        return str(dist.get_backend())

    def agree(self, flag: bool) -> bool:
        """True on every rank when ``flag`` is True on any rank (a collective: every rank must call it)."""
        value = torch.tensor([1.0 if flag else 0.0], device=self.device)
        dist.all_reduce(value, op=dist.ReduceOp.MAX)
        return bool(value.item() > 0)

    def mean(self, values: list[float]) -> list[float]:
        """The mean over ranks of each value (every rank passes as many)."""
        tensor = torch.tensor(values, dtype=torch.float64, device=self.device)
        dist.all_reduce(tensor)
        return (tensor / self.world).tolist()

    def barrier(self) -> None:
        if self.device.type == "cuda":
            dist.barrier(device_ids=[self.device.index])
        else:
            dist.barrier()

    def close(self) -> None:
        if not dist.is_initialized():
            return
        if self.owns_group:
            dist.destroy_process_group()
        elif self.gather_group is not None:
            dist.destroy_process_group(self.gather_group)
        use_group(None)


def launched_by_torchrun() -> bool:
    return all(name in os.environ for name in TORCHRUN_VARIABLES) and int(os.environ["WORLD_SIZE"]) > 1


def setup(device: str = "auto") -> Ranks | None:
    """The process group of this run (module docstring), or None for a single process."""
    owns = False
    if not dist.is_initialized():
        if not launched_by_torchrun():
            return None
        cuda = device != "cpu" and torch.cuda.is_available()
        if cuda:
            torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
        dist.init_process_group("nccl" if cuda else "gloo")
        owns = True
    if dist.get_world_size() == 1:
        if owns:
            dist.destroy_process_group()
        return None
    where = (torch.device("cuda", torch.cuda.current_device()) if dist.get_backend() == "nccl"
             else torch.device("cpu"))
    gathers = dist.new_group(backend=dist.get_backend())  # collective: every rank creates it here
    use_group(gathers)
    return Ranks(rank=dist.get_rank(), world=dist.get_world_size(), device=where, owns_group=owns,
                 gather_group=gathers)


# ---- data ---------------------------------------------------------------------------------------


def shard_batch(batch: TrainingBatch, rank: int, world: int) -> TrainingBatch:
    """Slice ``rank`` of ``world`` equal slices of a global batch (every per-sample field)."""
    n = len(batch)
    if n % world:
        raise ValueError(f"a batch of {n} does not split into {world} equal slices (one per rank)")
    size = n // world
    part = slice(rank * size, (rank + 1) * size)

    def cut(value):
        return None if value is None else value[part]

    return replace(batch, pixels=batch.pixels[part], captions=list(batch.captions[part]),
                   short_captions=cut(batch.short_captions), sentences=cut(batch.sentences),
                   dense_captions=cut(batch.dense_captions), local_pixels=cut(batch.local_pixels),
                   local_sentences=cut(batch.local_sentences), local_boxes=cut(batch.local_boxes),
                   extras=dict(batch.extras))


class RankSampleLoader(SampleLoader):
    """``SampleLoader`` over the global batches (``batch_size * world``) that collates only slice ``rank``."""

    def __init__(self, samples, preprocess, batch_size: int, rank: int, world: int, **options):
        self.rank, self.world, self.rank_batch_size = rank, world, int(batch_size)
        super().__init__(samples, preprocess, int(batch_size) * world, **options)

    def index_batches(self, epoch: int, start: int = 0) -> list[list[int]]:
        b = self.rank_batch_size
        return [indices[self.rank * b:(self.rank + 1) * b] for indices in super().index_batches(epoch, start)]


class RankSlices:
    """A ``BatchSource`` whose batches are slice ``rank`` of another source's (global) batches."""

    def __init__(self, source: BatchSource, rank: int, world: int):
        self.source, self.rank, self.world = source, rank, world

    def __len__(self) -> int:
        return len(self.source)

    def batches(self, epoch: int, start: int = 0) -> Iterator[TrainingBatch]:
        for batch in self.source.batches(epoch, start):
            yield shard_batch(batch, self.rank, self.world)


# ---- the model ----------------------------------------------------------------------------------


class LossModule(nn.Module):
    """What DDP wraps: its forward is the method's ``losses`` (DDP hooks the forward, not other calls)."""

    def __init__(self, method: nn.Module):
        super().__init__()
        self.method = method

    def forward(self, batch: TrainingBatch) -> dict[str, torch.Tensor]:
        return self.method.losses(batch)


def unused_parameters(method: nn.Module, batch: TrainingBatch, amp) -> list[str]:
    """Trainable parameters that one forward and backward of ``batch`` leaves without a gradient
    (the random state is restored and the gradients cleared, so the run is as if it never ran)."""
    from explorer.training.checkpointing import capture_rng, restore_rng

    state = capture_rng()
    try:
        with amp:
            parts = method.losses(batch)
        sum(parts.values()).backward()
        missing = [name for name, p in method.named_parameters() if p.requires_grad and p.grad is None]
    finally:
        method.zero_grad(set_to_none=True)
        restore_rng(state)
    return missing


def wrap(method: nn.Module, ranks: Ranks, first_batch: TrainingBatch, amp) -> tuple[nn.Module, list[str]]:
    """DDP around ``LossModule(method)``; returns it and the parameters the probe found unused (any rank)."""
    from torch.nn.parallel import DistributedDataParallel

    missing = unused_parameters(method, first_batch, amp)
    find_unused = ranks.agree(bool(missing))
    device_ids = [ranks.device.index] if ranks.device.type == "cuda" else None
    model = DistributedDataParallel(LossModule(method), device_ids=device_ids, find_unused_parameters=find_unused)
    return model, missing if find_unused else []


class SilentLog(JsonlLog):
    """The logs of ranks other than 0: the same path, nothing written."""

    def write(self, row: dict) -> None:
        return None

    def truncate_after_step(self, step: int) -> int:
        return 0


__all__ = ["LossModule", "RankSampleLoader", "RankSlices", "Ranks", "SilentLog", "launched_by_torchrun",
           "setup", "shard_batch", "unused_parameters", "wrap"]
