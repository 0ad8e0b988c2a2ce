"""What the long-text swap costs in SDXL (a script that prints figures, not a timed test).

For each mode, stock (CLIP-L + bigG at 77 tokens, the pipeline's own ``encode_prompt``) and swapped
(a long text tower + stretched bigG at 248 tokens): seconds per image (text encoding + denoising +
decoding; the two modes interleaved, one image each in turn, median over ``--rounds``), the
text-encoding time alone, and peak memory (GPU: ``torch.cuda.max_memory_allocated`` per mode;
CPU: the process's peak resident set after each mode).
Target: the swap costs < 5 % of the stock pipeline's time per image.

Without ``--sdxl`` it runs on a tiny SDXL built in code (random weights; its text_encoder as wide as
the chosen model's tower), at 128 px: the figures are then about plumbing, and the swap's share is
larger than on SDXL base, where the UNet's cost dwarfs the text encoders. With ``--sdxl DIR`` and a
ViT-L/14 long model (e.g. Long-CLIP-L) it measures SDXL base (on a GPU: fp16, 1024 px, 30 steps).

    python bench/sdxl.py [--model demo-longclip] [--steps 10] [--size 128] [--rounds 5]
    python bench/sdxl.py --sdxl /models/sdxl-base --model longclip-L --size 1024 --steps 30 --device cuda
"""

from __future__ import annotations

import argparse
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

from explorer.generation import GenerationSettings, Generator
from explorer.generation.generate import denoise
from explorer.generation.tiny_sdxl import build_tiny_sdxl
from explorer.zoo import Zoo

TARGET = 0.05
PROMPT = ("A quiet harbour town at dusk, seen from the end of a wooden pier. Three small fishing boats are tied to "
          "the pier, the nearest one painted red with a white stripe along its hull. Behind the boats, a row of "
          "narrow houses in yellow, blue and green climbs the hill, their windows already lit. A lighthouse stands "
          "on the rocks to the left, its beam just visible against the violet sky. On the pier, an old man in a grey "
          "coat sits on an upturned crate, mending a net spread across his knees. A black and white cat sleeps beside "
          "him on a coil of rope.")


def peak_memory_mb(device: torch.device) -> float:
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**20
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sdxl", help="SDXL base folder (default: a tiny SDXL built in code)")
    parser.add_argument("--model", default="demo-longclip")
    parser.add_argument("--checkpoints", help="zoo folder")
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--size", type=int, default=128)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--device", default="auto")
    args = parser.parse_args()

    zoo = Zoo(args.checkpoints, device=args.device)
    sdxl = args.sdxl
    if not sdxl:
        width = zoo.load(args.model).text_tower().width
        sdxl = str(build_tiny_sdxl(Path(tempfile.mkdtemp()) / "sdxl-tiny", long_width=width))
        print(f"tiny SDXL (random weights), text_encoder width {width}, at {args.size} px, {args.steps} steps")
    generator = Generator(load_model=zoo.load)
    settings = GenerationSettings(prompt=PROMPT, models=[args.model], stock=True, steps=args.steps, size=args.size,
                                  sdxl=sdxl, device=args.device).check()
    pipe = generator.pipeline(settings)
    device = settings.options().resolved_device()
    print(f"device {device}, {settings.options().dtype()}, torch threads {torch.get_num_threads()}")
    for column in ("stock", args.model):  # warm-up: load the model, build the conditioner, first kernels
        denoise(pipe, generator.conditioning(column, pipe, settings), settings, seed=0)

    seconds = {"stock": [], "swapped": []}
    encode = {"stock": [], "swapped": []}
    peaks = {}
    for round_ in range(args.rounds):
        order = ("stock", "swapped") if round_ % 2 == 0 else ("swapped", "stock")
        for mode in order:
            column = "stock" if mode == "stock" else args.model
            if device.type == "cuda":
                torch.cuda.synchronize(device)
                torch.cuda.reset_peak_memory_stats(device)
            start = time.perf_counter()
            conditioning = generator.conditioning(column, pipe, settings)
            encode[mode].append(conditioning.seconds)
            denoise(pipe, conditioning, settings, seed=round_)
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            seconds[mode].append(time.perf_counter() - start)
            peaks[mode] = max(peaks.get(mode, 0.0), peak_memory_mb(device))

    stock, swapped = statistics.median(seconds["stock"]), statistics.median(seconds["swapped"])
    for mode in ("stock", "swapped"):
        print(f"{mode:8s} {statistics.median(seconds[mode]):8.3f} s/image  text encoding "
              f"{1000 * statistics.median(encode[mode]):8.2f} ms  peak memory {peaks[mode]:8.0f} MB")
    overhead = swapped / stock - 1
    verdict = "met" if overhead < TARGET else "missed"
    print(f"swap cost: {100 * overhead:+.1f} % of the stock pipeline's time per image "
          f"(target < {100 * TARGET:.0f} %: {verdict})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
