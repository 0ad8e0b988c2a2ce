"""Progress bars for the benchmark's loops (tqdm when it is installed, else none)."""

from __future__ import annotations


def progress(iterable, enabled: bool, description: str, **kwargs):
    """``iterable`` behind a tqdm bar titled ``description`` (transient), or as it is when not ``enabled``."""
    if not enabled:
        return iterable
    try:
        from tqdm.auto import tqdm
    except ImportError:  # tqdm comes with transformers; without it, no bar
        return iterable
    return tqdm(iterable, desc=description, leave=False, **kwargs)


__all__ = ["progress"]
