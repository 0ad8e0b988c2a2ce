"""Throughput of `explorer eval-grounding` (``evaluate_grounding``) on a synthesized IIW-400 layout.

    python bench/real_grounding.py [--pictures 500] [--objects 10] [--model demo-clip-base ...] [--kind K ...]

Writes ``--pictures`` random pictures of 64-224 px a side (seeded) with ``--objects`` described boxes
each into a temporary folder in the IIW-400 layout (data.jsonl + <key>.jpg), then scores every unit
with the demo models (default: demo-clip-base with every kind it offers) and the baselines, as the
CLI does (work file on disk, so the resume bookkeeping is in the time). Prints units/s and the time.
The default is 5,000 units; the issue's target is minutes on 2 CPU cores.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import numpy as np
from PIL import Image

from explorer.core import paths
from explorer.data.grounding_sets import read_grounding_set
from explorer.evaluation.real_grounding import evaluate_grounding
from explorer.zoo import Zoo

WORDS = ["red", "blue", "green", "cube", "ball", "tree", "cup", "lamp", "chair", "on the left", "at the top"]


def synthesize(root: Path, pictures: int, objects: int, seed: int = 0) -> None:
    """An IIW-400 folder: ``pictures`` pictures, each with ``objects`` boxes and descriptions."""
    rng = np.random.default_rng(seed)
    lines = []
    for n in range(pictures):
        width, height = (int(v) for v in rng.integers(64, 225, 2))
        Image.fromarray(rng.integers(0, 255, (height, width, 3), dtype=np.uint8)).save(root / f"p{n}.jpg")
        items = []
        for _ in range(objects):
            y0, x0 = (int(v) for v in rng.integers(0, 700, 2))
            y1, x1 = y0 + int(rng.integers(50, 300)), x0 + int(rng.integers(50, 300))
            text = "A " + " ".join(rng.choice(WORDS, 4)) + "."
            items.append({"label": "thing", "description": text, "normalized_coords": [str(y0), str(x0), str(y1),
                                                                                       str(x1)]})
        lines.append(json.dumps({"image/key": f"p{n}", "IIW": "A picture of things.", "objects": items}))
    (root / "data.jsonl").write_text("\n".join(lines) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pictures", type=int, default=500)
    parser.add_argument("--objects", type=int, default=10)
    parser.add_argument("--model", action="append", dest="models")
    parser.add_argument("--kind", action="append", dest="kinds")
    args = parser.parse_args()
    names = args.models or ["demo-clip-base"]
    zoo = Zoo(paths.demo_zoo_root())
    models = {name: zoo.load(name) for name in names}
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        synthesize(root, args.pictures, args.objects)
        dataset = read_grounding_set(root)
        start = time.perf_counter()
        result = evaluate_grounding(models, dataset, kinds=args.kinds, work_file=root / "out.json.work.jsonl")
        seconds = time.perf_counter() - start
    units = result["dataset"]["n_units"]
    pairs = sum(len(m["kinds"]) for m in result["models"] if m["method"] != "baseline")
    print(f"{units} units x {pairs} model-kinds (+2 baselines) on {len(dataset.pictures)} pictures: "
          f"{seconds:.1f} s, {units / seconds:.1f} units/s ({units * pairs / seconds:.1f} unit-maps/s)")
    for model in result["models"]:
        for kind, s in model["kinds"].items():
            print(f"  {model['name']:>15} {kind:<18} pointing {s['pointing']:.3f} auroc {s['auroc']:.3f}")


if __name__ == "__main__":
    main()
