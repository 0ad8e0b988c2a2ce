"""Telling a torch tensor from an array without importing torch.

The metrics, Otsu and the caches take numpy arrays and tensors alike; a tensor can only come from a
process that has imported torch, so where torch is not imported nothing is one, and the page (built
before torch is imported) can use them freely.
"""

from __future__ import annotations

import sys


def torch_if_imported():
    """The ``torch`` module when this process has imported it; None otherwise, and None while another thread is
    still importing it (the app's warm-up): no tensor exists yet, and its ``nn`` may not be there."""
    torch = sys.modules.get("torch")
    return torch if torch is not None and hasattr(torch, "nn") else None


def is_tensor(value) -> bool:
    torch = torch_if_imported()
    return torch is not None and isinstance(value, torch.Tensor)
