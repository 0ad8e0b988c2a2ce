"""Where a training run's weights start: from scratch, or from any checkpoint of a CLIP-family model.

``init_from(method, init)`` is how the papers start: FineLIP, GOAL and MulCLIP
fine-tune from Long-CLIP or CLIP, Long-CLIP from CLIP. Rules, in order:

1. The init is read like any checkpoint (``load_method``: format detected,
   strict key report), so it may be a released file of any CLIP-family method
   or one of this project's own.
2. Context: the target trains at ``context_length`` if given, else at the
   init's context when the init is the same method, else at the method's
   default (CLIP and FLAIR 77, the long-text methods 248). A 77-token init for
   a 248-token target is stretched first with Long-CLIP's formula
   (``stretch_to_long_context``); a longer init is never cut, that is an error.
3. The target is built with the init's architecture (widths, layers,
   activation); new modules get a fresh initialisation from ``seed``. When init
   and target are the same method, the init's own module sizes are kept.
4. Keys: every CLIP backbone key of the target must be in the init (an init
   without a full CLIP backbone is an error); every other target key is
   copied when the init has it and kept fresh otherwise. Any shape mismatch is
   an error that names the keys. Init keys the target has no place for are
   listed as unused (e.g. FineLIP's ``cross_net.*`` when starting a CLIP from
   a FineLIP file): reported, never dropped in silence.
5. Temperature: ``logit_scale`` goes with ``logit_bias``. A sigmoid loss
   (FLAIR, MulCLIP, CAFT) starts its temperature and bias as a pair (SigLIP:
   t = 10, b = -10), so a softmax model's temperature is not copied into a
   model with a bias, nor the reverse; both sides having a bias, or neither,
   copies it.

Methods not built on the CLIP backbone (SEPS) start only from their own
checkpoints.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping

import torch

from explorer.core.errors import CheckpointError, CheckpointMismatchError, ConfigError
from explorer.models.io.checkpoints import KeyReport
from explorer.models.io.loading import load_method
from explorer.models.methods import get_method
from explorer.models.methods.clip import ClipFamily, example_architecture
from explorer.models.nn.backbone import ClipBackbone
from explorer.models.nn.positional import stretch_positions

TEMPERATURE, BIAS = "logit_scale", "logit_bias"


@dataclass
class InitReport:
    """Which of the target's keys came from the init, which kept a fresh initialisation, and why."""

    target: str  # method trained
    source: str | None = None  # init file; None: built from scratch
    source_method: str | None = None
    source_format: str | None = None
    from_init: list[str] = field(default_factory=list)  # target keys copied from the init
    kept_init: dict[str, str] = field(default_factory=dict)  # target key -> why it starts fresh
    unused: list[str] = field(default_factory=list)  # init keys the target does not take
    notes: list[str] = field(default_factory=list)
    load_report: KeyReport | None = None  # how the init file itself was read

    @property
    def from_scratch(self) -> bool:
        return self.source is None

    def summary(self, limit: int = 12) -> str:
        if self.from_scratch:
            lines = [f"{self.target}: built from scratch ({len(self.kept_init)} tensors freshly initialised)"]
        else:
            lines = [f"{self.target} from {self.source} ({self.source_method}, format {self.source_format}): "
                     f"{len(self.from_init)} tensors from the init, {len(self.kept_init)} freshly initialised, "
                     f"{len(self.unused)} init tensors unused"]
            fresh = [f"{k} ({why})" for k, why in self.kept_init.items()]
            for title, keys in (("fresh", fresh), ("unused", self.unused)):
                if keys:
                    shown = ", ".join(keys[:limit]) + (f", ... ({len(keys) - limit} more)" if len(keys) > limit else "")
                    lines.append(f"  {title}: {shown}")
        lines.extend(f"  note: {note}" for note in self.notes)
        return "\n".join(lines)

    def to_dict(self) -> dict:
        return {"target": self.target, "source": self.source, "source_method": self.source_method,
                "source_format": self.source_format, "from_init": list(self.from_init),
                "kept_init": dict(self.kept_init), "unused": list(self.unused), "notes": list(self.notes),
                "load_report": None if self.load_report is None else self.load_report.to_dict()}


def init_from(method: str, init: str | Path | None = None, size: str | None = None, seed: int = 0,
              context_length: int | None = None, allow_pickle: bool = False, options: Mapping | None = None,
              **extra):
    """(model, InitReport): a ``method`` model from scratch (``size``: "tiny" or "base") or from ``init``.

    ``extra`` are the method's own constructor options (e.g. FineLIP's ``mode``);
    ``options`` are manifest-style overrides for reading the init file.
    """
    cls = get_method(method)
    if init is None:
        return _from_scratch(cls, size or "tiny", seed, context_length, extra)
    if size is not None:
        raise ConfigError(f"size={size!r} is for models built from scratch; the init {init} sets the architecture")
    source, load_report = load_method(init, allow_pickle=allow_pickle, overrides=options)
    report = InitReport(target=cls.name, source=str(init), source_method=source.name,
                        source_format=load_report.format, load_report=load_report)
    if not issubclass(cls, ClipFamily):
        return _same_method_only(cls, source, report, context_length, extra)
    if not isinstance(source, ClipBackbone):
        raise CheckpointError(f"{init} is a {source.title} model, which has no CLIP backbone; {cls.title} starts from "
                              "a CLIP-family checkpoint (CLIP, Long-CLIP, FineLIP, GOAL, FLAIR, MulCLIP, ...).")
    same = type(source) is cls
    target_context = context_length or (source.context_length if same else cls.default_context)
    _match_context(source, target_context, report)
    sizes = {**(source.extra_config if same else {}), **extra}
    torch.manual_seed(seed)
    method = cls(source.arch, **sizes)
    _copy_keys(source, method, report)
    if not report.from_init:
        raise CheckpointError(f"{init}: no tensor of it fits {cls.title}.")
    return method, report


def _from_scratch(cls, size: str, seed: int, context_length: int | None, extra: Mapping):
    if context_length is not None and issubclass(cls, ClipFamily):
        torch.manual_seed(seed)
        method = cls(example_architecture(size, context_length, cls.default_quick_gelu), **extra)
    else:
        method = cls.example(size, seed=seed, **extra)
        if context_length is not None and context_length != method.context_length:
            raise ConfigError(f"{cls.title} built from scratch reads {method.context_length} tokens, "
                             f"not {context_length}")
    report = InitReport(target=cls.name, kept_init={k: f"{size} example, seed {seed}" for k in method.state_dict()})
    return method, report


def _same_method_only(cls, source, report: InitReport, context_length: int | None, extra: Mapping):
    if type(source) is not cls:
        raise CheckpointError(f"{report.source} is a {source.title} model; {cls.title} is not built on a CLIP backbone "
                              f"and starts only from a {cls.title} checkpoint.")
    if extra:
        raise ConfigError(f"{cls.title} started from its own checkpoint keeps that checkpoint's configuration; "
                         f"options {sorted(extra)} cannot apply")
    if context_length is not None and context_length != source.context_length:
        raise ConfigError(f"{report.source} reads {source.context_length} tokens, not {context_length}: leave "
                          "context_length out, or start from a checkpoint of that length")
    report.from_init = list(source.state_dict())
    return source, report


def _match_context(source: ClipBackbone, target: int, report: InitReport) -> None:
    have = source.context_length
    if have == target:
        return
    if have < target:
        stretched = stretch_positions(source.positional_embedding.data[:, :1]).shape[0]
        if stretched != target:
            raise CheckpointError(f"{report.source} reads {have} tokens; Long-CLIP's stretch takes it to {stretched}, "
                                  f"not the {target} tokens asked for.")
        source.stretch_to_long_context()
        report.notes.append(f"position table stretched {have} -> {target} tokens (Long-CLIP's knowledge-preserved "
                            "stretch) before copying")
        return
    raise CheckpointError(f"{report.source} reads {have} tokens and {report.target} would train at {target}; a "
                          f"position table is never cut. Pass context_length={have} to train at {have} tokens.")


def _copy_keys(source: ClipBackbone, method, report: InitReport) -> None:
    theirs, ours = source.state_dict(), method.state_dict()
    with torch.device("meta"):
        backbone_keys = set(ClipBackbone(method.arch).state_dict())
    lacking = sorted(k for k in backbone_keys if k not in theirs and k != TEMPERATURE)
    if lacking:
        raise CheckpointMismatchError(f"{report.source} lacks {len(lacking)} CLIP backbone key(s) that "
                                      f"{method.title} needs: {', '.join(lacking[:8])}", report.load_report)
    take_temperature = (BIAS in theirs) == (BIAS in ours)
    mismatched = [(k, tuple(theirs[k].shape), tuple(v.shape)) for k, v in ours.items()
                  if k in theirs and tuple(theirs[k].shape) != tuple(v.shape)
                  and not (k == TEMPERATURE and not take_temperature)]
    if mismatched:
        shown = "; ".join(f"{k}: init {list(a)} vs {method.title} {list(b)}" for k, a, b in mismatched[:8])
        raise CheckpointMismatchError(f"{report.source} does not fit {method.title}: {shown}", report.load_report)
    new_prefixes = tuple(getattr(method, "new_module_prefixes", ()))
    dtypes = set()
    with torch.no_grad():
        for key, tensor in ours.items():
            if key == TEMPERATURE and not take_temperature:
                report.kept_init[key] = ("sigmoid-loss temperature, initialised with its bias" if BIAS in ours
                                         else "the init's temperature belongs to a sigmoid loss with a bias")
            elif key in theirs:
                dtypes.add(theirs[key].dtype)
                tensor.copy_(theirs[key])
                report.from_init.append(key)
            elif new_prefixes and key.startswith(new_prefixes):
                report.kept_init[key] = f"new {method.title} module"
            else:
                report.kept_init[key] = "not in the init"
    report.unused = sorted(k for k in theirs if k not in ours or (k == TEMPERATURE and not take_temperature))
    converted = sorted(str(d).replace("torch.", "") for d in dtypes if d != next(iter(ours.values())).dtype)
    if converted:
        report.notes.append(f"init tensors in {', '.join(converted)} converted to the method's dtype")
