"""AdamW over a method's parameter groups, with per-group learning rates and a weight-decay rule.

Groups come from ``method.parameter_groups()``: "backbone" (the CLIP towers it
starts from) and "new" (modules the method adds), trained at their own rates
(e.g. MulCLIP: 1e-5 and 2e-4).

Weight decay rule. A parameter is *not* decayed when any of these holds:
- it has fewer than two dimensions: biases, LayerNorm/BatchNorm gains, scalars
  such as ``logit_scale``, ``logit_bias``, a refiner's ``scale``, and the
  1-D ``visual.class_embedding``;
- it belongs to a normalisation layer (LayerNorm, GroupNorm, BatchNorm,
  RMSNorm) or to an ``nn.Embedding``;
- its own name (the last dotted part) contains "embedding" (position tables
  such as ``positional_embedding`` are plain parameters) or starts with "logit_".
Every other parameter (linear and attention weights, convolution kernels,
projection matrices) is decayed. Decaying gains, offsets, tables and the
temperature pulls them towards zero, which is not a prior anyone wants.

Each group therefore becomes up to two AdamW groups, ``<group>`` (decayed) and
``<group>/no_decay``, at the same learning rate.
"""

from __future__ import annotations

from typing import Iterable

import torch
from torch import nn

from explorer.core.errors import ConfigError

GROUPS = ("backbone", "new")
_NO_DECAY_MODULES = (nn.LayerNorm, nn.GroupNorm, nn.BatchNorm1d, nn.BatchNorm2d, nn.BatchNorm3d, nn.SyncBatchNorm,
                     nn.Embedding, *((nn.RMSNorm,) if hasattr(nn, "RMSNorm") else ()))


def no_decay_names(model: nn.Module) -> set[str]:
    """Names of the parameters the rule above exempts from weight decay."""
    exempt = set()
    for module_name, module in model.named_modules():
        for name, parameter in module.named_parameters(recurse=False):
            full = f"{module_name}.{name}" if module_name else name
            if parameter.ndim < 2 or isinstance(module, _NO_DECAY_MODULES) or "embedding" in name \
                    or name.startswith("logit_"):
                exempt.add(full)
    return exempt


def optimizer_groups(method: nn.Module, lrs: dict[str, float], weight_decay: float) -> list[dict]:
    """AdamW parameter groups: one per (method group, decayed or not), each with "name", "lr", "weight_decay".

    Every trainable parameter must be in exactly one of the method's groups: a parameter
    left out, listed twice, or frozen but listed is an error, never skipped.
    """
    groups = method.parameter_groups()
    unknown = sorted(set(groups) - set(GROUPS))
    if unknown:
        raise ValueError(f"{_title(method)}.parameter_groups() has unknown group(s) {unknown}; expected {GROUPS}")
    names = {id(p): n for n, p in method.named_parameters()}
    seen: dict[int, str] = {}
    for group, params in groups.items():
        for p in params:
            if id(p) not in names:
                raise ValueError(f"{_title(method)}: group {group!r} holds a parameter that is not the model's")
            if id(p) in seen:
                raise ValueError(f"{_title(method)}: {names[id(p)]} is in groups {seen[id(p)]!r} and {group!r}")
            if not p.requires_grad:
                raise ValueError(f"{_title(method)}: {names[id(p)]} is frozen but listed in group {group!r}")
            seen[id(p)] = group
    left_out = [n for n, p in method.named_parameters() if p.requires_grad and id(p) not in seen]
    if left_out:
        raise ValueError(f"{_title(method)}: trainable parameters in no group: {', '.join(left_out[:8])}")
    exempt = no_decay_names(method)
    out = []
    for group in GROUPS:
        params = list(groups.get(group, []))
        if not params:
            continue
        if group not in lrs:
            raise ConfigError(f"no learning rate for the {group!r} group: give one in the training config's "
                              "learning rates")
        decayed = [p for p in params if names[id(p)] not in exempt]
        plain = [p for p in params if names[id(p)] in exempt]
        for suffix, members, decay in (("", decayed, weight_decay), ("/no_decay", plain, 0.0)):
            if members:
                out.append({"params": members, "name": group + suffix, "group": group, "lr": lrs[group],
                            "weight_decay": decay})
    if not out:
        raise ValueError(f"{_title(method)} has no trainable parameters")
    return out


def build_adamw(method: nn.Module, lrs: dict[str, float], weight_decay: float,
                betas: Iterable[float] = (0.9, 0.98), eps: float = 1e-6) -> torch.optim.AdamW:
    """AdamW (CLIP's betas and eps by default) over ``optimizer_groups``: fused kernels when the
    parameters are on CUDA, the multi-tensor (foreach) implementation otherwise."""
    groups = optimizer_groups(method, lrs, weight_decay)
    on_cuda = all(p.is_cuda for group in groups for p in group["params"])
    kernel = {"fused": True} if on_cuda else {"foreach": True}
    return torch.optim.AdamW(groups, betas=tuple(betas), eps=eps, **kernel)


def group_lrs(optimizer: torch.optim.Optimizer) -> dict[str, float]:
    """Current learning rate of each method group ("backbone", "new")."""
    return {g["group"]: g["lr"] for g in optimizer.param_groups}


def _title(method) -> str:
    return getattr(method, "title", type(method).__name__)
