"""Models built for a strict load skip torch.nn.init (explorer/models/io/skip_init.py), in that thread only."""

from __future__ import annotations

import threading

import torch
from torch import nn

from explorer.models.io.skip_init import weights_from_file


def test_init_is_skipped_inside_and_only_inside():
    kept = torch.zeros(4, 4)
    with weights_from_file():
        nn.init.normal_(kept)
        nn.init.kaiming_uniform_(kept)
        attention = nn.MultiheadAttention(8, 2)  # its module imported xavier_uniform_ by name
        attention.in_proj_weight.data.zero_()
        nn.MultiheadAttention._reset_parameters(attention)  # what its __init__ ran: skipped, zeros stay
    assert torch.count_nonzero(kept) == 0 and torch.count_nonzero(attention.in_proj_weight) == 0
    drawn = torch.zeros(4, 4)
    nn.init.normal_(drawn)
    assert torch.count_nonzero(drawn) == 16  # outside, init works as ever
    fresh = nn.Linear(16, 16)
    assert fresh.weight.std() > 0.01


def test_another_thread_still_initialises_while_one_skips():
    inside, outside = threading.Event(), threading.Event()
    results = {}

    def loader():
        with weights_from_file():
            inside.set()
            outside.wait(10)
            results["skipped"] = nn.init.normal_(torch.zeros(8))

    def builder():
        inside.wait(10)
        results["built"] = nn.init.normal_(torch.zeros(8))
        outside.set()

    threads = [threading.Thread(target=loader), threading.Thread(target=builder)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(20)
    assert torch.count_nonzero(results["skipped"]) == 0
    assert torch.count_nonzero(results["built"]) == 8


def test_a_strict_load_takes_the_files_tensors_and_copies_only_to_convert():
    from explorer.models.io.checkpoints import KeyReport, strict_load

    model = nn.Sequential(nn.Linear(4, 4), nn.LayerNorm(4))
    file = {key: torch.randn_like(value) for key, value in model.state_dict().items()}
    file["0.weight"] = file["0.weight"].half()  # as a fp16 release stores it: converted, so a copy
    strict_load(model, file, KeyReport(source="test", format="test"))
    assert model[0].bias.data_ptr() == file["0.bias"].data_ptr()  # no second copy of what already fits
    assert model[0].weight.dtype == torch.float32 and torch.equal(model[0].weight, file["0.weight"].float())
    assert isinstance(model[0].weight, nn.Parameter) and model[0].weight.requires_grad  # still trainable
