"""Building a model whose every weight is about to be loaded, without initialising it first.

A ViT-L/14 spends about 2 s in ``torch.nn.init`` (Linear's Kaiming, open_clip's normal draws) only for
the loaded checkpoint to overwrite every value. Inside ``weights_from_file()``, the ``torch.nn.init``
functions leave their tensor as allocated, for this thread only (a model built in code elsewhere at
the same time still gets its random start). Use it only where a strict load follows: a key the file
lacks is an error there, so no uninitialised value is ever used.
"""

from __future__ import annotations

import functools
import threading

import torch

from explorer.core.thread_setting import set_for_this_thread

_LOCAL = threading.local()
_NAMES = ("uniform_", "normal_", "trunc_normal_", "constant_", "ones_", "zeros_", "eye_", "dirac_",
          "xavier_uniform_", "xavier_normal_", "kaiming_uniform_", "kaiming_normal_", "orthogonal_", "sparse_")
_INSTALLED = threading.Lock()


def _skippable(function):
    @functools.wraps(function)
    def maybe(tensor, *args, **kwargs):
        if getattr(_LOCAL, "skip", False):
            return tensor
        return function(tensor, *args, **kwargs)

    maybe.explorer_skippable = True
    return maybe


def _install() -> None:
    """Wrap ``torch.nn.init``'s functions once, where modules find them: as ``nn.init.normal_`` (open_clip,
    Linear) and as names ``nn.MultiheadAttention``'s module imported (``xavier_uniform_``, ``constant_``)."""
    import torch.nn.modules.activation as activation

    with _INSTALLED:
        for namespace in (torch.nn.init, activation):
            for name in _NAMES:
                function = getattr(namespace, name, None)
                if function is not None and not getattr(function, "explorer_skippable", False):
                    setattr(namespace, name, _skippable(function))


def weights_from_file():
    """Inside (this thread): modules are built without initialising their weights."""
    _install()
    return set_for_this_thread(_LOCAL, "skip", True)
