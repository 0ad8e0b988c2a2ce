"""From a weights file to a ready method module, with its key report.

Two kinds of file:
- a released checkpoint of any supported method, whose layout is detected
  from its keys (methods/ decides, most specific layout first);
- a safetensors file written by this project, whose metadata names the
  method and its config, so no guessing is needed.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Mapping

import torch

from explorer.core.errors import CheckpointError, ConfigError
from explorer.core.files import atomic_path
from explorer.models.io.skip_init import weights_from_file
from explorer.models.io.checkpoints import (KeyReport, RawCheckpoint, read_checkpoint, save_safetensors, strict_load,
                                            weights_held_in)
from explorer.models.methods import detect_format, get_method
from explorer.models.methods.base import Method

EXPLORER_FORMAT = "explorer"


@dataclass
class CheckResult:
    """What ``explorer models check`` prints: how the file was read and what it matched."""

    path: Path
    method: str
    format: str
    wrapper: str
    architecture: str
    context_length: int
    report: KeyReport

    def summary(self) -> str:
        return "\n".join([
            f"file:         {self.path}",
            f"stored as:    {self.wrapper}",
            f"format:       {self.format}",
            f"method:       {self.method}",
            f"architecture: {self.architecture}",
            f"context:      {self.context_length} tokens",
            self.report.summary(),
        ])


def load_method(path: str | Path, method: str | None = None, overrides: Mapping | None = None,
                allow_pickle: bool = False, dry_run: bool = False,
                weights_in: Callable[[Method, str], torch.dtype | None] | None = None) -> tuple[Method, KeyReport]:
    """Build the method a weights file holds, and the report of its keys. ``method`` forces a method
    instead of detecting it; ``dry_run`` builds it on the meta device (keys and shapes only);
    ``weights_in(method, key)``: the dtype the floating-point weight ``key`` is read into (None: the
    model's own)."""
    raw = read_checkpoint(path, allow_pickle=allow_pickle)
    with weights_held_in(weights_in) if weights_in is not None else contextlib.nullcontext():
        return method_from_raw(raw, method, overrides, dry_run)


def method_from_raw(raw: RawCheckpoint, method: str | None = None, overrides: Mapping | None = None,
                    dry_run: bool = False) -> tuple[Method, KeyReport]:
    # Every path below ends in a strict load (a missing key is an error), so the modules are built without
    # initialising weights the file is about to overwrite (a ViT-L spends ~2 s there).
    with weights_from_file():
        if raw.metadata.get("format") == EXPLORER_FORMAT:
            return _from_explorer_file(raw, overrides, dry_run)
        cls, fmt = detect_format(raw)
        if method is not None and method != cls.name:
            forced = get_method(method)
            fmt = forced.detect(raw.tensors, raw) or fmt
            cls = forced
        return cls.from_checkpoint(raw, fmt, overrides=overrides, dry_run=dry_run)


def check(path: str | Path, allow_pickle: bool = False) -> CheckResult:
    """Detect the format and compare keys without filling a model (built on the meta device)."""
    raw = read_checkpoint(path, allow_pickle=allow_pickle)
    method, report = method_from_raw(raw, dry_run=True)
    arch = getattr(method, "arch", None)
    return CheckResult(path=Path(path), method=method.name, format=report.format, wrapper=raw.wrapper,
                       architecture=arch.name if arch is not None else method.architecture_name,
                       context_length=method.context_length, report=report)


def save_method(method: Method, path: str | Path, extra_metadata: Mapping | None = None) -> Path:
    """Write a method in this project's own format: its state dict plus what rebuilds it."""
    metadata = {"format": EXPLORER_FORMAT, "method": method.name, "config": method.config(),
                **(extra_metadata or {})}
    return save_safetensors(method.state_dict(), path, metadata)


def save_released(method: Method, path: str | Path) -> Path:
    """Write a method in its official layout (what its release code would read)."""
    path = Path(path)
    with atomic_path(path) as tmp:
        torch.save(method.released_file_object(), tmp)
    return path


def _from_explorer_file(raw: RawCheckpoint, overrides: Mapping | None, dry_run: bool) -> tuple[Method, KeyReport]:
    meta = raw.metadata
    try:
        cls = get_method(meta["method"])
        report = KeyReport(source=str(raw.path), format=f"{EXPLORER_FORMAT} ({meta['method']})")
        with torch.device("meta") if dry_run else contextlib.nullcontext():
            method = cls.build(cls.merge_config(meta["config"], overrides))
    except (KeyError, TypeError, ValueError, ConfigError) as error:
        raise CheckpointError(f"{raw.path}: its explorer metadata is incomplete or wrong ({error}).") from error
    strict_load(method, raw.tensors, report, dry_run=dry_run)
    return method, report
