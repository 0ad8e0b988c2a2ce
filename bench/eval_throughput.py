"""How close the benchmark's evaluations run to the model forwards they need (issue 63, part 3).

    python bench/eval_throughput.py [--models demo-clip-base demo-finelip] [--scenes 96] [--threads 0]

For each model, on the first ``--scenes`` scenes of a held-out synthetic world (seed 1, 64 px, written to a
temporary folder), the evaluation as ``explorer eval`` runs it (``evaluate_model``: retrieval and hard negatives;
grounding left out, it is the maps' own cost) against the bare forwards it needs, in the same run on the same
inputs: every picture through the image tower once (its pixels preprocessed beforehand, so decoding is not
counted) and every distinct text it scores through the text tower once (long and short captions, the hard
negatives within reach), in batches of 32 with the padding cut. Printed per evaluation: its seconds, the bare
forwards' seconds, the ratio (target at most 1.3x), the forwards it made against the ones it needs (counted
on the towers), and the CPU seconds of this process beside each (a machine shared with other work stretches
wall time).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
TARGET = 1.3
BATCH = 32


class Forwards:
    """Rows through each tower of a method, counted on its inputs (forward pre-hooks)."""

    def __init__(self, method):
        self.images = self.texts = 0
        self.hooks = [method.visual.transformer.register_forward_pre_hook(self.image),
                      (getattr(method, "txt_enc", None) or method.transformer).register_forward_pre_hook(self.text)]

    def image(self, module, args):
        self.images += int(args[0].shape[0])

    def text(self, module, args):
        self.texts += int(args[0].shape[0])

    def close(self):
        for hook in self.hooks:
            hook.remove()


def timed(call):
    start, cpu = time.perf_counter(), time.process_time()
    value = call()
    return time.perf_counter() - start, time.process_time() - cpu, value


def bare_forwards(model, scenes, texts: list[str]) -> tuple[float, float]:
    """(wall, CPU) seconds of every picture and every text through the towers once, nothing else."""
    method = model.method
    pixels = [model.pixels([s.image for s in scenes[i:i + BATCH]]) for i in range(0, len(scenes), BATCH)]
    batches = [model.tokenize(texts[i:i + BATCH]).unpadded().ids for i in range(0, len(texts), BATCH)]

    def run():
        with torch.inference_mode(), model.computing():
            for block in pixels:
                method.encode_image(block)
            for ids in batches:
                method.encode_text(ids)

    wall, cpu, _ = timed(run)
    return wall, cpu


def needed_texts(model, scenes) -> list[str]:
    """The distinct texts retrieval and the hard negatives score: long and short captions, negatives in reach."""
    from explorer.evaluation.runner import in_reach

    texts = [s.long_caption for s in scenes] + [s.short_caption for s in scenes]
    for scene in scenes:
        texts += [n.caption for n, within in zip(scene.hard_negatives, in_reach(model, scene)) if within]
    return list(dict.fromkeys(texts))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=["demo-clip-base", "demo-finelip"])
    parser.add_argument("--scenes", type=int, default=96)
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    from explorer.data import read_dataset, write_dataset
    from explorer.evaluation.runner import evaluate_model
    from explorer.zoo import Zoo

    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, CPU, load average "
          f"{' '.join(f'{x:.1f}' for x in os.getloadavg())}; {args.scenes} scenes of the held-out world (seed 1)")
    print(f"{'model':<16} {'evaluation':<28} {'eval s':>7} {'bare s':>7} {'ratio':>6}   {'CPU eval':>8} {'CPU bare':>8}"
          f"   forwards made / needed (images, texts)")
    worst = 0.0
    with tempfile.TemporaryDirectory() as tmp:
        write_dataset(Path(tmp), n_scenes=args.scenes, seed=1, image_size=64, split_fractions=(0.0, 0.0, 1.0),
                      n_objects=(2, 6))
        scenes = read_dataset(Path(tmp), "test")
        zoo = Zoo(ROOT / "checkpoints", precision="fp32")
        for name in args.models:
            model = zoo.load(name)
            texts = needed_texts(model, scenes)
            bare_forwards(model, scenes[:BATCH], texts[:BATCH])  # warm the kernels and caches
            counter = Forwards(model.method)
            wall, cpu, result = timed(lambda: evaluate_model(model, scenes, grounding_limit=0, seed=0))
            made = (counter.images, counter.texts)
            counter.close()
            bare_wall, bare_cpu = bare_forwards(model, scenes, texts)
            seconds = result["seconds"]
            evaluation = seconds["encode_images"] + seconds["retrieval"] + seconds["hard_negatives"]
            ratio = evaluation / bare_wall
            worst = max(worst, ratio)
            print(f"{name:<16} {'retrieval + hard negatives':<28} {evaluation:7.2f} {bare_wall:7.2f} {ratio:6.2f}   "
                  f"{cpu:8.2f} {bare_cpu:8.2f}   ({made[0]}, {made[1]}) / ({len(scenes)}, {len(texts)})")
    print(f"target eval / bare <= {TARGET}: {'met' if worst <= TARGET else 'NOT met'} (worst {worst:.2f})")
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    sys.exit(main())
