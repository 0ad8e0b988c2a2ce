"""Every method's losses go down on a fixed batch when the training loop takes a few steps."""

from __future__ import annotations

import pytest
import torch

from explorer.models.batch import example_batch
from explorer.models.methods import METHODS, discover_methods
from explorer.training.loop import TrainConfig, train
from explorer.training.samples import BatchList

discover_methods()


@pytest.mark.parametrize("name", sorted(METHODS))
def test_a_few_steps_lower_the_loss_on_a_fixed_batch(name, tmp_path):
    torch.manual_seed(0)
    method = METHODS[name].example("tiny", seed=0)
    batch = example_batch(method.preprocess.image_size, batch_size=4, seed=0)
    batch.extras["chunk_generator"] = torch.Generator().manual_seed(0)  # CAFT: the same chunks every step
    steps = 4
    config = TrainConfig(max_steps=steps, lr_backbone=1e-3, lr_new=1e-3, weight_decay=0.0, seed=0,
                         clip_grad_norm=None, device="cpu", precision="fp32", shuffle=False)
    result = train(method, BatchList([batch] * steps), config, tmp_path / name, progress=False)
    losses = [row["loss"] for row in result.history]
    assert len(losses) == steps
    assert losses[-1] < losses[0], f"{name}: {losses}"
