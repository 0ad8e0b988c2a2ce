"""A run folder on disk: the zoo entry a run publishes, and the state it resumes from.

    <out>/
      <name>.json               the zoo manifest ("weights": "model.safetensors"), rewritten at every checkpoint
      model.safetensors         the latest weights in this project's format (``save_method``)
      metrics.jsonl, run.jsonl  the logs (metrics_log.py)
      resume/LATEST             the name of the newest complete checkpoint folder, e.g. "step-00000200"
      resume/step-00000200/
          model.safetensors     the weights at that step
          state.pt              optimizer, scheduler, grad scaler, step, RNG states, run config

Atomicity: every file is written to a temporary name and renamed over the
old one, so a reader sees the old file or the new one, never half of one. A
checkpoint folder is complete before ``LATEST`` is rewritten to name it, and
older folders are removed only after that; a crash at any moment leaves a
resumable run whose weights, optimizer state and step agree.
``model.safetensors`` at the top is a hard link to the checkpoint's weights
(a copy where links are not possible), so publishing costs no second write.

``state.pt`` holds only tensors, numbers, strings and containers of them, and
is read with ``torch.load(weights_only=True)``.
"""

from __future__ import annotations

import json
import os
import random
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from explorer.core.errors import CheckpointError
from explorer.core.files import atomic_path, write_text_atomic
from explorer.models.io.checkpoints import KeyReport, read_checkpoint, strict_load
from explorer.models.io.loading import save_method
from explorer.zoo import Manifest

RESUME_DIR = "resume"
LATEST_FILE = "LATEST"
WEIGHTS_FILE = "model.safetensors"
STATE_FILE = "state.pt"
_STEP_DIR = re.compile(r"^step-(\d+)$")


@dataclass
class SavedState:
    """What a checkpoint folder restores besides the weights."""

    step: int
    state: dict  # the whole state.pt dict
    folder: Path


def manifest_name(out_dir: Path, name: str | None) -> str:
    raw = name or out_dir.resolve().name or "trained"
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", raw).strip("-") or "trained"


def checkpoint_folder_name(step: int) -> str:
    """The folder (under ``resume/``) that holds the checkpoint of optimizer step ``step``."""
    return f"step-{int(step):08d}"


def architecture_name(method) -> str:
    arch = getattr(method, "arch", None)
    return arch.name if arch is not None else getattr(method, "architecture_name", "")


# ---- writing ------------------------------------------------------------------------------------


def save_checkpoint(out_dir: Path, method, state: dict, metadata: dict, keep_last: int = 1) -> Path:
    """Write weights + state as ``resume/step-<step>/``, publish the weights, then point LATEST at it."""
    step = int(state["step"])
    resume = out_dir / RESUME_DIR
    folder = resume / checkpoint_folder_name(step)
    if folder.exists():  # a leftover of a crash before LATEST moved: rewrite it whole
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    weights = save_method(method, folder / WEIGHTS_FILE, extra_metadata=metadata)
    _atomic_torch_save(state, folder / STATE_FILE)
    _publish(weights, out_dir / WEIGHTS_FILE)
    write_text_atomic(resume / LATEST_FILE, folder.name + "\n")
    for old in sorted(_step_folders(resume))[:-max(1, keep_last)]:
        if old[1] != folder:
            shutil.rmtree(old[1], ignore_errors=True)
    return folder


def write_manifest(out_dir: Path, name: str, method, source: str, notes: str) -> Path:
    """The run's zoo entry, pointing at ``model.safetensors`` beside it."""
    manifest = Manifest(name=name, method=method.name, weights=WEIGHTS_FILE, architecture=architecture_name(method),
                        context_length=int(method.context_length), source=source, format="explorer",
                        trained=True, notes=notes)
    return manifest.write(out_dir / f"{name}.json")


def capture_rng() -> dict:
    """Every random generator the run draws from (Python, numpy, torch CPU and CUDA)."""
    np_state = np.random.get_state()
    out = {"python": random.getstate(), "torch": torch.get_rng_state(),
           "numpy": {"kind": np_state[0], "keys": torch.from_numpy(np_state[1].astype(np.int64)),
                     "pos": int(np_state[2]), "has_gauss": int(np_state[3]), "cached_gaussian": float(np_state[4])}}
    if torch.cuda.is_available():
        out["cuda"] = torch.cuda.get_rng_state_all()
    return out


def restore_rng(state: dict) -> None:
    random.setstate(state["python"])
    torch.set_rng_state(state["torch"])
    n = state["numpy"]
    np.random.set_state((n["kind"], n["keys"].numpy().astype(np.uint32), n["pos"], n["has_gauss"],
                         n["cached_gaussian"]))
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


# ---- reading ------------------------------------------------------------------------------------


def latest_checkpoint(out_dir: Path) -> Path | None:
    """The checkpoint folder LATEST names, or None when the run has none."""
    pointer = out_dir / RESUME_DIR / LATEST_FILE
    if not pointer.is_file():
        return None
    folder = out_dir / RESUME_DIR / pointer.read_text().strip()
    if not (folder / WEIGHTS_FILE).is_file() or not (folder / STATE_FILE).is_file():
        raise CheckpointError(f"{pointer} names {folder.name}, which is incomplete or missing; the run cannot resume.")
    return folder


def load_checkpoint(folder: Path, method) -> SavedState:
    """Fill ``method`` with the folder's weights (strictly: same method, same config, every key) and read its state."""
    raw = read_checkpoint(folder / WEIGHTS_FILE)
    saved_method, saved_config = raw.metadata.get("method"), raw.metadata.get("config")
    if saved_method != method.name:
        raise CheckpointError(f"{folder} holds a {saved_method} model; this run trains {method.name}.")
    if _json(saved_config) != _json(method.config()):
        raise CheckpointError(f"{folder} was saved from a {method.name} model with another configuration "
                              f"({saved_config}) than this one ({method.config()}); resume with the same model.")
    report = KeyReport(source=str(folder / WEIGHTS_FILE), format=f"explorer ({method.name})")
    strict_load(method, raw.tensors, report)
    try:
        state = torch.load(folder / STATE_FILE, map_location="cpu", weights_only=True)
    except Exception as error:  # noqa: BLE001 - any failure means the state is unreadable
        raise CheckpointError(f"Cannot read {folder / STATE_FILE} ({error}).") from error
    return SavedState(step=int(state["step"]), state=state, folder=folder)


# ---- helpers ------------------------------------------------------------------------------------


def _step_folders(resume: Path) -> list[tuple[int, Path]]:
    if not resume.is_dir():
        return []
    return [(int(m.group(1)), p) for p in resume.iterdir() if p.is_dir() and (m := _STEP_DIR.match(p.name))]


def _publish(source: Path, target: Path) -> None:
    with atomic_path(target, keep_mode=False) as tmp:  # a hard link shares the source's mode: leave it
        try:  # a hard link (no copy) when the file system allows it
            os.link(source, tmp)
        except OSError:
            shutil.copy2(source, tmp)


def _atomic_torch_save(obj, path: Path) -> None:
    with atomic_path(path) as tmp:
        torch.save(obj, tmp)


def _json(value) -> str:
    return json.dumps(value, sort_keys=True, default=str)
