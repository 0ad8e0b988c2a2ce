"""Batches in which the attributes decide: each scene followed by its counterfactual twins.

A twin (``explorer.data.counterfactual``) is the same scene with one attribute of one object changed,
so in a batch of scenes and their twins an unchanged contrastive loss has to tell colour, shape, size,
texture and place apart: the twin's picture is a hard negative for the scene's caption, and the twin's
caption for the scene's picture. Nothing in the loss changes; only which pictures share a batch.

    source = TwinBatches(scenes, to_samples, method.preprocess, batch_size=32, twins=1)
    train(method, source, config, out_dir)
"""

from __future__ import annotations

from typing import Callable, Hashable, Iterator, Sequence

import numpy as np
import torch

from explorer.core.errors import ConfigError
from explorer.data.counterfactual import ATTRIBUTES, counterfactual_twin
from explorer.data.scene import Scene
from explorer.models.batch import TrainingBatch
from explorer.models.preprocess import Preprocess
from explorer.training.samples import collate


def _long_caption(scene: Scene) -> str:
    return scene.long_caption


class TwinBatches:
    """A ``BatchSource`` over scenes: each batch is ``ceil(batch_size / (1 + twins))`` scenes in a seeded
    random order, each followed by up to ``twins`` twins (attributes and objects drawn at random), cut at
    ``batch_size`` pictures.

    ``to_samples``: scenes -> training samples (the run's captions and fields). ``reads``: what the model
    reads of a scene's training caption (its first tokens, for a model with a short context); a twin that
    reads the same as one already in its group is drawn again elsewhere, since it would be a negative
    identical to a positive. ``n_objects``: the range the scenes were generated with (twins replay it)."""

    def __init__(self, scenes: Sequence[Scene], to_samples: Callable[[list[Scene]], list], preprocess: Preprocess,
                 batch_size: int, twins: int = 1, seed: int = 0, reads: Callable[[Scene], Hashable] = _long_caption,
                 n_objects: tuple[int, int] = (2, 6)):
        if twins < 1 or batch_size < 1 + twins:
            raise ConfigError(f"twins must be at least 1 and batch_size at least 1 + twins, got {twins}, {batch_size}")
        self.scenes, self.to_samples, self.preprocess = scenes, to_samples, preprocess
        self.batch_size, self.twins, self.seed, self.reads, self.n_objects = batch_size, twins, seed, reads, n_objects
        self.per_batch = -(-batch_size // (1 + twins))  # scenes a batch starts from

    def __len__(self) -> int:
        return len(self.scenes) // self.per_batch

    def group(self, scene: Scene, rng: np.random.Generator) -> list[Scene]:
        """``scene`` and up to ``twins`` twins of it, each changing another attribute."""
        out, seen = [scene], {self.reads(scene)}
        for a in rng.permutation(len(ATTRIBUTES)):
            if len(out) > self.twins:
                break
            for k in rng.permutation(len(scene.objects)):
                twin = counterfactual_twin(scene, ATTRIBUTES[a], int(k), rng, self.n_objects)
                if twin is not None and self.reads(twin) not in seen:
                    seen.add(self.reads(twin))
                    out.append(twin)
                    break
        return out

    def batch_scenes(self, epoch: int, b: int) -> list[Scene]:
        """The pictures of batch ``b`` of ``epoch``: scenes and their twins (further scenes fill a batch whose
        scenes lacked twins)."""
        generator = torch.Generator().manual_seed(self.seed * 1_000_003 + epoch)
        order = torch.randperm(len(self.scenes), generator=generator).tolist()
        picked, i = [], b * self.per_batch
        while len(picked) < self.batch_size:
            index = order[i % len(order)]
            picked.extend(self.group(self.scenes[index], np.random.default_rng([self.seed, epoch, index])))
            i += 1
        return picked[:self.batch_size]

    def batches(self, epoch: int, start: int = 0) -> Iterator[TrainingBatch]:
        for b in range(start, len(self)):
            yield collate(self.to_samples(self.batch_scenes(epoch, b)), self.preprocess)


__all__ = ["TwinBatches"]
