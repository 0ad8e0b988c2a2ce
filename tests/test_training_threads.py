"""A CPU job's thread count is measured (issue 63): the faster of torch's count and 1, by a timing that is mocked
here (a shared machine makes 1 thread faster, an idle one all of them)."""

from __future__ import annotations

import time

import pytest
import torch

from explorer.training import threads


@pytest.fixture
def restore_threads():
    before = torch.get_num_threads()
    yield
    torch.set_num_threads(before)


def probe_taking(seconds_by_threads):
    def make():
        def run():
            time.sleep(seconds_by_threads[torch.get_num_threads()])
        return run
    return make


@pytest.mark.parametrize("slow,fast", [(4, 1), (1, 4)])
def test_the_faster_count_is_kept_and_said(monkeypatch, restore_threads, slow, fast):
    monkeypatch.setattr(threads, "_probe", probe_taking({slow: 0.03, fast: 0.001}))
    choice = threads.measure_threads((4, 1), rounds=2)
    assert choice.threads == fast and torch.get_num_threads() == fast
    assert choice.seconds[slow] > choice.seconds[fast]
    assert choice.line().startswith(f"cpu threads: {fast} (measured")


def test_the_real_probe_runs_forward_and_backward(restore_threads):
    choice = threads.measure_threads((1,), rounds=1)
    assert choice.threads == 1 and choice.seconds[1] > 0
