"""Whether bf16 is worth it on this CPU, by measurement: the answer precision "auto" asks for.

oneDNN's own check (``torch.ops.mkldnn._is_mkldnn_bf16_supported()``) answers whether bf16 *runs*, not whether it
runs fast: it says yes on every AVX-512 CPU, where oneDNN emulates bf16 with fp32 instructions and a ViT-B/16 image
tower under bf16 autocast runs at 0.27-0.33x the speed of fp32 (Skylake, Cascade Lake and Ice Lake servers, and VMs
that hide avx512_bf16/AMX from /proc/cpuinfo). So "auto" times the work a model does, a transformer block's
matrix products, in fp32 and under bf16 autocast, and takes bf16 only where it is clearly faster.

The timing takes about 0.1-0.3 s and is made once per machine: it is kept in ``$EXPLORER_HOME/cpu-bf16.json``
under a key naming the CPU, its flags, torch's version and the thread count (a change of any of them measures
again), and in memory for the process.
"""

from __future__ import annotations

import functools
import hashlib
import json
import platform
import time
from dataclasses import asdict, dataclass

from explorer.core import paths

# bf16 must beat fp32 by this factor: below it the low format's rounding buys nothing measurable, and timing noise
# on a loaded machine (+-5 % seen here) must not flip the choice from one start to the next.
FASTER_BY = 1.15
CACHE_FILE = "cpu-bf16.json"
# The block timed: a ViT-B/16 picture's tokens (197) through a width-768 MLP (768 -> 3072 -> 768), the products
# that dominate a CLIP tower's forward; big enough that oneDNN picks its real kernels, small enough for 0.1 s.
TOKENS, WIDTH, HIDDEN = 197, 768, 3072
REPEATS = 5


@dataclass(frozen=True)
class Bf16Timing:
    """One measurement: the block's best time in fp32 and under bf16 autocast (weights held in bf16, as a model
    under "auto" holds them), and what was decided."""

    runs: bool  # oneDNN runs bf16 on this CPU at all (its own check)
    fp32_s: float | None = None
    bf16_s: float | None = None

    @property
    def speedup(self) -> float | None:
        """fp32's time over bf16's: above 1, bf16 is faster."""
        return None if not self.fp32_s or not self.bf16_s else self.fp32_s / self.bf16_s

    @property
    def faster(self) -> bool:
        return self.runs and self.speedup is not None and self.speedup >= FASTER_BY

    def evidence(self) -> str:
        """What the choice rests on, in a few words the page and the CLI show after "auto: fp32" or "auto: bf16"."""
        if not self.runs:
            return "this CPU has no bf16 in oneDNN"
        measured = f"bf16 measured {self.speedup:.2f}x the speed of fp32 on this CPU"
        return measured if self.faster else f"{measured}: emulated or no faster, {FASTER_BY:.2f}x needed"


def onednn_runs_bf16() -> bool:
    """oneDNN's check: bf16 runs here (natively, or emulated on AVX-512). Not a speed claim."""
    import torch

    try:
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):  # a torch built without oneDNN
        return False


def time_block() -> tuple[float, float]:
    """(fp32 seconds, bf16 seconds): the best of ``REPEATS`` runs of the block in each format, after a warm-up."""
    import torch

    generator = torch.Generator().manual_seed(0)
    tokens = torch.randn(TOKENS, WIDTH, generator=generator)
    up, down = (torch.randn(HIDDEN, WIDTH, generator=generator) * 0.02,
                torch.randn(WIDTH, HIDDEN, generator=generator) * 0.02)

    def block(x, w1, w2):
        return torch.nn.functional.linear(torch.nn.functional.gelu(torch.nn.functional.linear(x, w1)), w2)

    def best(run) -> float:
        run()  # warm-up: oneDNN builds its kernels on first use
        times = []
        for _ in range(REPEATS):
            started = time.perf_counter()
            run()
            times.append(time.perf_counter() - started)
        return min(times)

    with torch.inference_mode():
        fp32 = best(lambda: block(tokens, up, down))
        low_up, low_down = up.bfloat16(), down.bfloat16()
        with torch.autocast("cpu", dtype=torch.bfloat16):
            bf16 = best(lambda: block(tokens, low_up, low_down))
    return fp32, bf16


def machine_key() -> str:
    """What the measurement depends on: the CPU (model and flags), torch's version and its thread count."""
    import torch

    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as info:
            lines = info.read().splitlines()
        cpu = next((line.split(":", 1)[1].strip() for line in lines if line.startswith("model name")), cpu)
        flags = next((line.split(":", 1)[1] for line in lines if line.startswith("flags")), "")
    except OSError:  # not Linux
        flags = ""
    digest = hashlib.sha256(flags.encode()).hexdigest()[:12]
    return f"{cpu} | flags {digest} | torch {torch.__version__} | {torch.get_num_threads()} threads"


def read_remembered(key: str) -> Bf16Timing | None:
    try:
        stored = json.loads((paths.home() / CACHE_FILE).read_text(encoding="utf-8"))
        return Bf16Timing(**stored[key])
    except (OSError, ValueError, KeyError, TypeError):  # none yet, another machine's, or a damaged file
        return None


def remember(key: str, timing: Bf16Timing) -> None:
    path = paths.home() / CACHE_FILE
    try:
        stored = json.loads(path.read_text(encoding="utf-8")) if path.exists() else {}
        stored = stored if isinstance(stored, dict) else {}
    except (OSError, ValueError):
        stored = {}
    stored[key] = asdict(timing)
    try:
        paths.ensure(path.parent)
        path.write_text(json.dumps(stored, indent=1), encoding="utf-8")
    except OSError:  # a read-only home: measured again next start, which costs 0.1-0.3 s
        pass


@functools.cache
def measured() -> Bf16Timing:
    """This CPU's measurement: remembered from an earlier start, else timed now (and remembered)."""
    if not onednn_runs_bf16():
        return Bf16Timing(runs=False)
    key = machine_key()
    timing = read_remembered(key)
    if timing is None:
        timing = Bf16Timing(True, *time_block())
        remember(key, timing)
    return timing


__all__ = ["Bf16Timing", "FASTER_BY", "machine_key", "measured", "onednn_runs_bf16", "time_block"]
