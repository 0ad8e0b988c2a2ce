"""The number format a model computes in for inference: fp32, bf16, fp16, or "auto".

"auto" takes bf16 where the hardware computes it fast: on a GPU with bf16, and on a CPU where bf16 is measured
faster than fp32 (``explorer.models.cpu_bf16``: oneDNN says yes to bf16 on any AVX-512 CPU, where it is emulated and
three times slower, so the choice is timed, once per machine); fp16 on other GPUs, fp32 elsewhere. Under bf16 or fp16 the weights are held in that
format (half the memory) and every forward pass runs under ``torch.autocast``, which runs matrix products
in the low format and keeps the sensitive ops (softmax, layer norm, losses) in fp32; maps and scores leave
the model as fp32. Evaluation tables keep fp32 unless asked (their numbers go into papers).
"""

from __future__ import annotations

import contextlib

from explorer.core.errors import ExplorerError

AUTO = "auto"
FORMATS = ("fp32", "bf16", "fp16")  # what a model's weights may be held in
PRECISION_CHOICES = (AUTO, *FORMATS)  # torch is imported only when a model is made: the CLI's flags need none


# What "auto" keeps in fp32 is the method's to say, measured with bench/precision.py (Otsu-mask IoU of 0.95
# median against fp32 the target for maps, retrieval R@1 within 1 point for scores), by where the loss arises:
# ``Method.fp32_under_auto`` (the whole model stays fp32: SEPS) and ``Method.fp32_heads`` (a kind's own head
# computes in fp32, the towers in the low format: FineLIP's refinement weights).


class PrecisionError(ExplorerError):
    """A precision that is not one of ``PRECISION_CHOICES``."""


def dtype(precision: str):
    """The torch dtype of one of ``FORMATS``."""
    import torch

    return {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}[precision]


def cpu_has_native_bf16() -> bool:
    """Whether bf16 runs fast on this CPU: oneDNN runs it and it is measured faster than fp32 here (AMX or
    avx512_bf16 in practice; an emulating AVX-512 CPU is measured slower). ``cpu_bf16`` times it once a machine."""
    from explorer.models import cpu_bf16

    return cpu_bf16.measured().faster


def cpu_runs_bf16() -> bool:
    """Whether bf16 runs on this CPU at all (a forced "bf16" is honoured there, fast or not)."""
    from explorer.models import cpu_bf16

    return cpu_bf16.onednn_runs_bf16()


def auto_reason(chosen: str) -> str:
    """Why "auto" runs ``chosen`` on this CPU, in one line: the measurement it rests on."""
    from explorer.models import cpu_bf16

    return f"auto: {chosen} ({cpu_bf16.measured().evidence()})"


def gpu_has_bf16(device) -> bool:
    import torch

    return device.type == "cuda" and torch.cuda.is_available() and torch.cuda.is_bf16_supported()


def resolve_precision(requested: str, device) -> tuple[str, str | None]:
    """(the precision to run, a note: why "auto" chose it on a CPU (the measurement), or why a forced format was
    replaced)."""
    if requested not in PRECISION_CHOICES:
        raise PrecisionError(f"precision is one of {', '.join(PRECISION_CHOICES)}, not {requested!r}")
    if requested == AUTO:
        if device.type == "cuda":
            return ("bf16" if gpu_has_bf16(device) else "fp16"), None
        if device.type != "cpu":
            return "fp32", None
        chosen = "bf16" if cpu_has_native_bf16() else "fp32"
        return chosen, auto_reason(chosen)
    if device.type == "cpu" and requested == "fp16":
        return "fp32", "fp16 asked for on CPU (no fast fp16 there): using fp32"
    if device.type == "cpu" and requested == "bf16" and not cpu_runs_bf16():
        return "fp32", "bf16 asked for on a CPU where oneDNN has no bf16: using fp32"
    return requested, None


def method_precision(method, requested: str, device) -> tuple[str, str | None]:
    """(what a model of ``method`` (a Method class or instance) computes in and holds its weights in, a note
    when it differs from what was asked): ``resolve_precision``, but fp32 under "auto" for a method whose
    ``fp32_under_auto`` says why. ``Model`` and the loaders ask it."""
    running, note = resolve_precision(requested, device)
    why = getattr(method, "fp32_under_auto", None)
    if requested == AUTO and running != "fp32" and why:
        return "fp32", f"auto: {method.name} computes in fp32 ({why})"
    return running, note


def fp32_heads(method, requested: str, device) -> dict[str, str]:
    """{kind: the submodule computing it in fp32} for a model of ``method`` (its ``fp32_heads``): under "auto"
    when the model runs in a low format; empty otherwise (a forced "bf16" runs every head in bf16)."""
    running, _ = method_precision(method, requested, device)
    return dict(getattr(method, "fp32_heads", {})) if requested == AUTO and running != "fp32" else {}


def computing(precision: str, device):
    """The context a forward pass runs in (``device``: a torch.device): autocast to the low format, or nothing
    for fp32."""
    import torch

    if precision == "fp32":
        return contextlib.nullcontext()
    return torch.autocast(device_type=device.type, dtype=dtype(precision))


__all__ = ["AUTO", "FORMATS", "PRECISION_CHOICES", "dtype", "PrecisionError", "auto_reason", "computing",
           "cpu_has_native_bf16", "cpu_runs_bf16",
           "fp32_heads", "method_precision", "resolve_precision"]
