"""What an explainer map costs, as a ratio to the generic map's request.

    python bench/explainers.py [--runs 5] [--sentences 8] [--methods clip,finelip,flair]

ViT-B/16-sized models with random weights, built in code (no download), on the CPU. One picture
at the working size (768 px) and one caption of ``--sentences`` sentences; a request is
``Model.sentence_maps`` (picture read, squashed to 224 px, text and image towers, the map), as the
Grounding tab runs it. Printed per method and kind: the median seconds of ``--runs`` requests and the
ratio to the generic map's median. Targets: gradient kinds (gradcam, legrad) at most 3x the generic
map, forward-only readouts (clearclip, naclip) at most 1.3x.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from grounding_latency import SENTENCES, picture  # noqa: E402  (the same kitchen caption and picture)

from explorer.models.explainers import EXPLAINER_KINDS, FORWARD_KINDS  # noqa: E402
from explorer.models.methods import get_method  # noqa: E402
from explorer.models.model import Model  # noqa: E402

TARGETS = {"forward": 1.3, "gradient": 3.0}


def median_seconds(model, image, sentences, kind: str, runs: int) -> float:
    model.sentence_maps(image, sentences, kind=kind)  # warm-up: allocations, first-call costs
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        model.sentence_maps(image, sentences, kind=kind)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--sentences", type=int, default=8)
    parser.add_argument("--methods", default="clip,finelip,flair")
    args = parser.parse_args()
    sentences = [SENTENCES[i % len(SENTENCES)] for i in range(args.sentences)]
    image = picture(768)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads; ViT-B/16 sizes, {len(sentences)} "
          f"sentences, a 768 px picture; median of {args.runs}")
    missed = []
    for name in args.methods.split(","):
        model = Model(get_method(name).example("base").eval(), name=name)
        generic = median_seconds(model, image, sentences, "generic", args.runs)
        print(f"{name:8s} generic    {generic:6.3f} s")
        for kind in EXPLAINER_KINDS:
            seconds = median_seconds(model, image, sentences, kind, args.runs)
            family = "forward" if kind in FORWARD_KINDS else "gradient"
            ratio = seconds / generic
            verdict = "ok" if ratio <= TARGETS[family] else f"MISSES {TARGETS[family]}x"
            if ratio > TARGETS[family]:
                missed.append(f"{name}/{kind}")
            print(f"{name:8s} {kind:10s} {seconds:6.3f} s  {ratio:4.2f}x generic ({family}: target "
                  f"{TARGETS[family]}x, {verdict})")
    print("every target met" if not missed else f"missed: {', '.join(missed)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
