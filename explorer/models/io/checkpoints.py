"""Reading weights files safely and loading them strictly.

Safe by default: safetensors, or ``torch.load(weights_only=True)``. A file
that needs full unpickling (SEPS's ``model_best.pth`` holds an argparse
Namespace) is refused with a message unless the caller opts in with
``allow_pickle=True``.

Strict always: ``strict_load`` compares the file's keys and shapes with
the model's before touching a weight, and a single missing, unexpected or
mis-shaped key is an error that names the file and the keys. Keys a format
is known to carry and that hold no weights (OpenAI's ``input_resolution``,
Hugging Face's ``position_ids`` buffers) are listed as *ignored*, with the
reason, never dropped silently.
"""

from __future__ import annotations

import json
import pickle
import re
import threading
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping

import torch
from torch import nn

from explorer.core.errors import CheckpointError, CheckpointMismatchError, UnsafeCheckpointError
from explorer.core.files import atomic_path
from explorer.core.thread_setting import set_for_this_thread

EXPLORER_METADATA_KEY = "explorer"  # safetensors metadata written by this project
# What a safetensors file may ask us to parse, checked before parsing: its header (tensor names, shapes and
# offsets, plus metadata; SDXL's UNet, ~2,500 tensors, has 0.2 MB) and our own JSON metadata inside it (a
# method's config: a few KB, 3 levels deep). Deeper JSON would end Python's parser in a RecursionError.
MAX_HEADER_BYTES = 16 * 2**20
MAX_METADATA_CHARS = 2**20
MAX_METADATA_DEPTH = 32


@dataclass
class RawCheckpoint:
    """The tensors of a file, unwrapped, plus whatever else the file said about itself."""

    path: Path
    tensors: dict[str, torch.Tensor]
    wrapper: str = "plain"  # how the tensors were stored: plain, {'state_dict'}, {'model'}, module. prefix
    metadata: dict = field(default_factory=dict)  # explorer metadata of our own safetensors
    extras: dict = field(default_factory=dict)  # non-tensor entries next to the tensors (epoch, name, opt)


@dataclass
class KeyReport:
    """What a strict load found. ``ok`` means every key of both sides was accounted for."""

    source: str
    format: str
    missing: list[str] = field(default_factory=list)  # the model needs them, the file lacks them
    unexpected: list[str] = field(default_factory=list)  # the file has them, the model does not
    mismatched: list[tuple[str, tuple, tuple]] = field(default_factory=list)  # key, file shape, model shape
    ignored: dict[str, str] = field(default_factory=dict)  # key -> why it holds no weight
    notes: list[str] = field(default_factory=list)  # conversions applied on the way
    n_loaded: int = 0

    @property
    def ok(self) -> bool:
        return not (self.missing or self.unexpected or self.mismatched)

    def summary(self, limit: int = 12) -> str:
        lines = [f"{self.source}: format {self.format}, {self.n_loaded} tensors matched"]
        for title, keys in (("missing", self.missing), ("unexpected", self.unexpected)):
            if keys:
                shown = ", ".join(keys[:limit]) + (f", ... ({len(keys) - limit} more)" if len(keys) > limit else "")
                lines.append(f"  {len(keys)} {title} key(s): {shown}")
        for key, got, want in self.mismatched[:limit]:
            lines.append(f"  shape mismatch: {key}: file {list(got)} vs model {list(want)}")
        if self.ignored:
            lines.append(f"  ignored (no weights): {', '.join(f'{k} ({why})' for k, why in self.ignored.items())}")
        lines.extend(f"  note: {note}" for note in self.notes)
        if self.ok:
            lines.append("  key report: clean (no missing, unexpected or mis-shaped keys)")
        return "\n".join(lines)

    def to_dict(self) -> dict:
        return {
            "source": self.source, "format": self.format, "ok": self.ok, "n_loaded": self.n_loaded,
            "missing": self.missing, "unexpected": self.unexpected,
            "mismatched": [[k, list(a), list(b)] for k, a, b in self.mismatched],
            "ignored": self.ignored, "notes": self.notes,
        }


# ---- reading ------------------------------------------------------------------------------------


def stored_config(path: str | Path) -> dict:
    """The method config this project stored in a safetensors file's header ({} for any other file,
    or one that cannot be read): read without loading a tensor."""
    from safetensors import SafetensorError, safe_open

    path = Path(path).expanduser()
    if path.suffix != ".safetensors" or not path.is_file():
        return {}
    try:
        check_safetensors_header(path)
        with safe_open(str(path), framework="pt") as handle:
            metadata = handle.metadata() or {}
        return dict(explorer_metadata(metadata, path).get("config") or {})
    except (CheckpointError, SafetensorError, OSError, ValueError, AttributeError):
        return {}


def read_checkpoint(path: str | Path, allow_pickle: bool = False) -> RawCheckpoint:
    """Read a weights file into tensors, refusing anything that needs pickle unless allowed."""
    path = Path(path).expanduser()
    if not path.exists():
        raise CheckpointError(f"No weights file at {path}.")
    if path.is_dir():
        raise CheckpointError(f"{path} is a folder; give the weights file inside it.")
    if path.suffix == ".safetensors":
        return _read_safetensors(path)
    if _is_torchscript_archive(path):
        return _read_torchscript(path, allow_pickle)
    obj = _torch_load(path, allow_pickle)
    return _unwrap(path, obj)


def _read_safetensors(path: Path) -> RawCheckpoint:
    from safetensors import SafetensorError, safe_open

    try:
        check_safetensors_header(path)
        with safe_open(str(path), framework="pt") as handle:
            metadata = handle.metadata() or {}
            tensors = {key: handle.get_tensor(key) for key in handle.keys()}
    except (SafetensorError, OSError, ValueError) as error:
        raise CheckpointError(f"Cannot read {path}: not a valid safetensors file ({error}).") from error
    return RawCheckpoint(path=path, tensors=tensors, metadata=explorer_metadata(metadata, path))


def check_safetensors_header(path: Path) -> None:
    """Refuse a file whose header is larger than ``MAX_HEADER_BYTES``, before it is read. The file starts
    with the header's length: 8 bytes, little-endian."""
    with open(path, "rb") as handle:
        length = int.from_bytes(handle.read(8), "little")
    if length > MAX_HEADER_BYTES:
        raise CheckpointError(f"Cannot read {path}: its safetensors header says it is {length / 2**20:.0f} MB "
                              f"(at most {MAX_HEADER_BYTES // 2**20} MB is read).")


def explorer_metadata(metadata: Mapping[str, str], path: Path) -> dict:
    """This project's JSON metadata in a safetensors header ({} if none), its size and nesting checked
    before it is parsed."""
    text = metadata.get(EXPLORER_METADATA_KEY)
    if text is None:
        return {}
    if len(text) > MAX_METADATA_CHARS:
        raise CheckpointError(f"Cannot read {path}: its {EXPLORER_METADATA_KEY!r} metadata is {len(text):,} "
                              f"characters (at most {MAX_METADATA_CHARS:,}).")
    if json_depth(text, MAX_METADATA_DEPTH) > MAX_METADATA_DEPTH:
        raise CheckpointError(f"Cannot read {path}: its {EXPLORER_METADATA_KEY!r} metadata nests deeper than "
                              f"{MAX_METADATA_DEPTH} levels.")
    try:
        value = json.loads(text)
    except ValueError as error:
        raise CheckpointError(f"Cannot read {path}: its {EXPLORER_METADATA_KEY!r} metadata is not JSON "
                              f"({error}).") from error
    if not isinstance(value, dict):
        raise CheckpointError(f"Cannot read {path}: its {EXPLORER_METADATA_KEY!r} metadata is not a JSON object.")
    return value


JSON_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')


def json_depth(text: str, limit: int) -> int:
    """How deep the brackets of JSON ``text`` nest (strings skipped), counted up to ``limit + 1``."""
    depth = deepest = 0
    for mark in re.sub(r"[^\[\]{}]", "", JSON_STRING.sub("", text)):
        depth += 1 if mark in "[{" else -1
        deepest = max(deepest, depth)
        if deepest > limit:
            break
    return deepest


def _is_torchscript_archive(path: Path) -> bool:
    # OpenAI's original CLIP .pt files are TorchScript archives: a zip with code/ and constants.pkl.
    if not zipfile.is_zipfile(path):
        return False
    with zipfile.ZipFile(path) as archive:
        return any(name.endswith("constants.pkl") for name in archive.namelist())


def _read_torchscript(path: Path, allow_pickle: bool) -> RawCheckpoint:
    # Loading a TorchScript archive runs the program it carries (its modules' __setstate__ code, which can
    # reach torch ops that write files), so it is an opt-in like pickle. We take the state dict and drop the
    # program.
    if not allow_pickle:
        raise UnsafeCheckpointError(
            f"{path} is a TorchScript archive (OpenAI's original CLIP .pt files are): loading it runs the program "
            "it carries, which can do more than hold tensors. If you trust where the file came from, opt in: "
            "`--allow-pickle` on the command line or `allow_pickle=True` in Python (the web page never does).")
    try:
        module = torch.jit.load(str(path), map_location="cpu")
    except Exception as error:  # noqa: BLE001 - any failure here is "cannot read the archive"
        raise CheckpointError(f"Cannot read {path} as a TorchScript archive ({error}).") from error
    tensors = {key: value for key, value in module.state_dict().items()}
    return RawCheckpoint(path=path, tensors=tensors, wrapper="torchscript")


def _torch_load(path: Path, allow_pickle: bool):
    if not _looks_like_torch_file(path):  # else random bytes read as "unsafe" and invite an opt-in
        raise CheckpointError(f"Cannot read {path}: not a PyTorch or safetensors weights file "
                              "(neither a zip archive nor a pickle).")
    try:
        # Memory-mapped where the format allows (zip archives): the tensors are read once, by the copy
        # into the model, instead of into a second buffer first.
        return torch.load(path, map_location="cpu", weights_only=True, mmap=zipfile.is_zipfile(path))
    except pickle.UnpicklingError as error:
        if not allow_pickle:
            raise UnsafeCheckpointError(
                f"{path} holds Python objects besides tensors ({_first_line(error)}). Reading it means "
                "unpickling, which can run arbitrary code. If you trust where the file came from, "
                "opt in: `--allow-pickle` on the command line or `allow_pickle=True` in Python (the web "
                "page never unpickles)."
            ) from error
    except (RuntimeError, EOFError, OSError, ValueError, KeyError, IndexError, zipfile.BadZipFile) as error:
        raise CheckpointError(f"Cannot read {path}: not a PyTorch or safetensors weights file "
                              f"({_first_line(error)}).") from error
    try:
        return torch.load(path, map_location="cpu", weights_only=False)
    except Exception as error:  # noqa: BLE001
        raise CheckpointError(f"Cannot unpickle {path} ({_first_line(error)}).") from error


def _looks_like_torch_file(path: Path) -> bool:
    # torch.save writes a zip archive; its legacy format (and plain pickle >= protocol 2) starts with PROTO.
    if zipfile.is_zipfile(path):
        return True
    with open(path, "rb") as handle:
        return handle.read(1) == b"\x80"


_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def _first_line(error: Exception) -> str:
    text = _ANSI.sub("", str(error)).strip().splitlines()
    return text[0][:300] if text else type(error).__name__


def _unwrap(path: Path, obj) -> RawCheckpoint:
    """Find the state dict inside the common training wrappers."""
    wrapper = "plain"
    extras: dict = {}
    if isinstance(obj, Mapping):
        for key in ("state_dict", "model", "model_state_dict"):
            inner = obj.get(key)
            if isinstance(inner, Mapping) and inner and all(torch.is_tensor(v) for v in inner.values()):
                extras = {k: v for k, v in obj.items() if k != key}
                obj, wrapper = inner, f"{{'{key}': ...}}"
                break
    elif isinstance(obj, nn.Module):
        obj, wrapper = obj.state_dict(), "pickled module"
    if not isinstance(obj, Mapping):
        raise CheckpointError(f"{path} does not hold a state dict (found {type(obj).__name__}).")
    tensors = {k: v for k, v in obj.items() if torch.is_tensor(v)}
    extras.update({k: v for k, v in obj.items() if not torch.is_tensor(v)})
    if not tensors:
        raise CheckpointError(f"{path} holds no tensors.")
    if all(k.startswith("module.") for k in tensors):
        tensors = {k[len("module."):]: v for k, v in tensors.items()}
        wrapper += " with 'module.' prefix (DDP)"
    return RawCheckpoint(path=path, tensors=tensors, wrapper=wrapper, extras=extras)


# ---- strict loading -----------------------------------------------------------------------------


def compare_keys(model: nn.Module, tensors: Mapping[str, torch.Tensor], report: KeyReport) -> KeyReport:
    """Fill ``report`` with the differences between the file's tensors and the model's."""
    expected = model.state_dict()
    report.missing = sorted(k for k in expected if k not in tensors)
    report.unexpected = sorted(k for k in tensors if k not in expected)
    report.mismatched = [
        (k, tuple(tensors[k].shape), tuple(expected[k].shape))
        for k in sorted(expected)
        if k in tensors and tuple(tensors[k].shape) != tuple(expected[k].shape)
    ]
    report.n_loaded = sum(1 for k in expected if k in tensors) - len(report.mismatched)
    return report


_HELD = threading.local()


def weights_held_in(choose):
    """Inside (this thread): ``strict_load`` puts floating-point weights straight into ``choose(model, key)``
    (a torch dtype; None keeps the model's), so a bf16 model read from an fp16 or fp32 file converts once and is
    never held in fp32 whole."""
    return set_for_this_thread(_HELD, "choose", choose)


def _held_dtype(model: nn.Module, key: str, target: torch.Tensor):
    choose = getattr(_HELD, "choose", None)
    held = choose(model, key) if choose is not None else None
    return held if held is not None and target.is_floating_point() else target.dtype


def strict_load(model: nn.Module, tensors: Mapping[str, torch.Tensor], report: KeyReport,
                dry_run: bool = False) -> KeyReport:
    """Load every tensor or none: raise ``CheckpointMismatchError`` naming the keys otherwise."""
    compare_keys(model, tensors, report)
    if not report.ok:
        raise CheckpointMismatchError(
            f"{report.source} does not match a {report.format} model:\n{report.summary()}", report)
    if not dry_run:
        # The model takes the file's tensors themselves where dtype and device already match (a memory-mapped
        # file's pages, read once), copies only to convert: a copy into the freshly built parameters would
        # hold the weights twice while loading (GOAL's fp32 ViT-L peaked at 2.2x its size).
        targets = model.state_dict(keep_vars=True)
        model.load_state_dict({key: value.to(targets[key].device, _held_dtype(model, key, targets[key]))
                               for key, value in tensors.items()}, strict=True, assign=True)
    return report


def pop_ignored(tensors: dict[str, torch.Tensor], reasons: Mapping[str, str], report: KeyReport) -> None:
    """Remove keys known to carry no weights, recording each with its reason."""
    for key in list(tensors):
        for suffix, why in reasons.items():
            if key == suffix or key.endswith("." + suffix):
                tensors.pop(key)
                report.ignored[key] = why
                break


def save_safetensors(tensors: Mapping[str, torch.Tensor], path: str | Path, metadata: Mapping) -> Path:
    """Write tensors and explorer metadata atomically (a reader never sees half a file)."""
    from safetensors.torch import save_file

    path = Path(path)
    contiguous = {k: v.detach().contiguous().cpu() for k, v in tensors.items()}
    with atomic_path(path) as tmp:
        save_file(contiguous, str(tmp), metadata={EXPLORER_METADATA_KEY: json.dumps(dict(metadata))})
    return path
