"""What each method costs at ViT-B/16 sizes with random weights (a script that prints figures).

For every registered method: the similarity of 1 image x 1 long caption and
of 16 images x 16 long captions (encoders included, inference mode), and one
training step at batch 4 (losses, backward, AdamW step). Medians of a few
runs after a warm-up; CPU unless --device says otherwise.

    python bench/method_costs.py [--methods clip finelip] [--runs 3] [--device cpu]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from explorer.models.batch import example_batch
from explorer.models.methods import METHODS, discover_methods

LONG_CAPTION = (
    "A red cube sits on the left of a wooden table. A small blue ball rests in front of it. "
    "Behind them a green cone leans against a white wall. A yellow ring lies on the floor at the right. "
    "The light comes from a window at the top left, and the shadows fall to the right."
)


def median_seconds(fn, runs: int) -> float:
    fn()  # warm-up
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def similarity_cost(method, n: int, device, runs: int) -> float:
    size = method.preprocess.image_size
    pixels = torch.randn(n, 3, size, size, device=device)
    ids = method.tokenize([LONG_CAPTION] * n).ids.to(device)

    @torch.inference_mode()
    def run():
        method.similarity(method.encode_image(pixels), method.encode_text(ids))

    return median_seconds(run, runs)


def training_step_cost(method, device, runs: int) -> float:
    batch = example_batch(method.preprocess.image_size, batch_size=4).to(device)
    groups = [{"params": params, "lr": lr} for (name, params), lr in
              zip(method.parameter_groups().items(), (1e-5, 2e-4)) if params]
    optimizer = torch.optim.AdamW(groups)
    method.train()

    def run():
        optimizer.zero_grad(set_to_none=True)
        loss = sum(method.losses(batch).values())
        loss.backward()
        optimizer.step()

    try:
        return median_seconds(run, runs)
    finally:
        method.eval()


def main() -> None:
    discover_methods()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--methods", nargs="*", default=sorted(METHODS))
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()
    device = torch.device(args.device)
    print(f"device {device}, torch threads {torch.get_num_threads()}, {args.runs} runs after a warm-up (median)")
    header = f"{'method':10s} {'params (M)':>10s} {'sim 1x1 (s)':>12s} {'sim 16x16 (s)':>14s} {'train step b4 (s)':>18s}"
    print(header)
    print("-" * len(header))
    for name in args.methods:
        torch.manual_seed(0)
        method = METHODS[name].example("base").to(device).eval()
        params = sum(p.numel() for p in method.parameters()) / 1e6
        one = similarity_cost(method, 1, device, args.runs)
        many = similarity_cost(method, 16, device, max(1, args.runs // 2))
        try:
            step = f"{training_step_cost(method, device, max(1, args.runs // 2)):18.2f}"
        except NotImplementedError:
            step = f"{'no losses':>18s}"
        print(f"{name:10s} {params:10.1f} {one:12.3f} {many:14.2f} {step}", flush=True)
        del method


if __name__ == "__main__":
    main()
