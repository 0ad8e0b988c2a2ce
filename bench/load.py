"""``explorer.load`` against ``torch.load(weights_only=True)`` of the same ViT-L/14 file, each in a fresh process.

    python bench/load.py [--runs 3] [--folder /tmp/explorer-load-bench]

Files, written once with random weights built in code (no download): a Long-CLIP-L in its released
fp16 ``.pt`` layout, the same tensors as ``.safetensors``, and a GOAL ViT-L in its Hugging Face
``CLIPModel`` layout (``.pth``). Each measurement is a new Python process (so nothing is cached in
memory but the OS page cache), interleaved: torch.load, explorer.load, torch.load, ... The first
round is "cold" as far as this user can make it (the files were just written; dropping the page
cache needs root and is tried); the rest are warm. Printed: seconds of the load call alone (imports
excluded), the ratio, and the child's peak resident memory against the file's size.
Targets: warm ratio <= 3; explorer.load's peak resident memory <= 1.5x the weights' size in memory
(fp32: twice an fp16 file).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

CHILD = r"""
import json, sys, time
from explorer.core.runtime import prepare_process
prepare_process()
import torch, explorer
from explorer.models.methods import discover_methods
discover_methods()
kind, path = sys.argv[1], sys.argv[2]
def high_water_kb():
    # VmHWM: this process's own peak (ru_maxrss would carry the parent's across exec)
    for line in open('/proc/self/status'):
        if line.startswith('VmHWM:'):
            return int(line.split()[1])
base = high_water_kb()
start = time.perf_counter()
if kind == "torch":
    if path.endswith(".safetensors"):
        from safetensors.torch import load_file
        loaded = load_file(path)
    else:
        loaded = torch.load(path, map_location="cpu", weights_only=True)
else:
    loaded = explorer.load(path, device="cpu")
seconds = time.perf_counter() - start
peak = high_water_kb()
print(json.dumps({"seconds": seconds, "peak_gb": peak / 1e6, "base_gb": base / 1e6}))
"""


def write_files(folder: Path) -> dict[str, Path]:
    import torch

    from explorer.core.runtime import prepare_process

    prepare_process()
    from safetensors.torch import save_file

    from explorer.models.methods.clip import LongClipMethod, example_architecture
    from explorer.models.methods.goal import GoalMethod

    folder.mkdir(parents=True, exist_ok=True)
    files = {"Long-CLIP-L .pt (fp16)": folder / "longclip-L.pt", "Long-CLIP-L .safetensors (fp16)":
             folder / "longclip-L.safetensors", "GOAL ViT-L HF layout .pth": folder / "goal-L.pth"}
    if all(path.exists() for path in files.values()):
        return files
    arch = example_architecture("large", 248)
    longclip = {k: v.half() for k, v in LongClipMethod(arch).released_state_dict().items()}
    torch.save(longclip, files["Long-CLIP-L .pt (fp16)"])
    save_file({k: v.contiguous() for k, v in longclip.items()}, str(files["Long-CLIP-L .safetensors (fp16)"]))
    del longclip
    torch.save(GoalMethod(arch).released_state_dict(), files["GOAL ViT-L HF layout .pth"])
    return files


def drop_page_cache() -> bool:
    try:
        subprocess.run(["sync"], check=False)
        Path("/proc/sys/vm/drop_caches").write_text("3\n")
        return True
    except OSError:
        return False


def measure(kind: str, path: Path) -> dict:
    out = subprocess.run([sys.executable, "-c", CHILD, kind, str(path)], capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--folder", type=Path, default=Path("/tmp/explorer-load-bench"))
    args = parser.parse_args()
    files = write_files(args.folder)
    for label, path in files.items():
        size_gb = path.stat().st_size / 1e9
        cold = drop_page_cache()
        runs = {"torch": [], "explorer": []}
        for _ in range(args.runs + 1):
            for kind in ("torch", "explorer"):
                runs[kind].append(measure(kind, path))
        first = {kind: runs[kind][0]["seconds"] for kind in runs}
        warm = {kind: statistics.median(r["seconds"] for r in runs[kind][1:]) for kind in runs}
        peak = max(r["peak_gb"] - r["base_gb"] for r in runs["explorer"])  # what the load itself added
        weights = 2 * size_gb if "fp16" in label else size_gb  # the model holds fp32
        print(f"{label}: file {size_gb:.2f} GB")
        print(f"  first ({'page cache dropped' if cold else 'page cache not dropped: not root'}): torch.load "
              f"{first['torch']:.2f} s, explorer.load {first['explorer']:.2f} s, ratio "
              f"{first['explorer'] / first['torch']:.1f}")
        lazy = " (safetensors' load_file maps the file and reads nothing yet: not a like-for-like baseline)" \
            if path.suffix == ".safetensors" else ""
        print(f"  warm (median of {args.runs}): torch.load {warm['torch']:.2f} s, explorer.load {warm['explorer']:.2f} s, "
              f"ratio {warm['explorer'] / warm['torch']:.1f} (target <= 3){lazy}")
        print(f"  explorer.load: peak resident memory grew {peak:.2f} GB = {peak / weights:.2f}x the weights in fp32 "
              f"({weights:.2f} GB; target <= 1.5x); the mapped file's pages count while the copy reads them")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
