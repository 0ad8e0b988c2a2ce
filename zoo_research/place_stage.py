"""Place in the patch features: the demo base continued with a per-patch place head, and fine-tunes from it
(issue 34; zoo_research/results/binding_experiment.md, part 10).

    python zoo_research/place_stage.py train OUT WORK [RUN ...]    # e.g. caft flair mulclip; default: the base only
    explorer eval --zoo OUT --model demo-clip-place          # held-out world; --data WORK/data --split test: validation
    python zoo_research/place_stage.py probe MANIFEST ... [--features patches|tokens|projected]  # the cell of an object patch

FLAIR's and CAFT's scores pool the patch features by the caption, and MulCLIP's sub-caption term by the
sentence; the demo base says where things are only through its attention pool's position keys, and a
linear probe reads the cell of an object patch from its patch features 32 % of the time (9 cells). The
"place" stage (``demo_base.PlacingClip``) is the binding stage with one more patch head, the cell of the
object a patch shows, run from the zoo's base for ``--steps`` steps (default 600 at lr 5e-4, the binding
stage's rate). Each RUN is then the zoo's recipe row with that stage as its init. OUT holds a copy of the
zoo's base (``clip-base``), the stage (``clip-place``) and the fine-tunes, each with its manifest; WORK
the world and the run folders, as ``explorer zoo build-demo`` lays them out. ``--stage bind`` is the
control: the same continuation without the place head; ``--stage place-background`` scores the place head
on the background patches too, as "no object"; ``--stage place-balanced`` weights the object patches and
the background half and half in that head's loss (part 11).

``probe``: on the held-out world (seed 1, 300 test scenes), each object patch (an object covering a quarter
of it) labelled with its object's cell; a linear softmax probe on the model's patch features fitted on the
first half of the patches and scored on the second (chance: the commonest cell). ``--features tokens`` or
``projected`` probes the tower's tokens (after ``ln_post``) or those through the image projection instead:
on the attention-pooled base the patch features are the pool's values, which keep less of place (part 12).
"""

from __future__ import annotations

import argparse
import shutil
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from explorer.core import paths
from explorer.data.synthetic import generate_scenes
from explorer.data.vocabulary import POSITIONS
from explorer.training import demo_zoo
from explorer.training.demo_base import BINDING_STAGES, patch_attributes
from explorer.zoo.manifest import Manifest, load_manifest

BASE = "clip-base"
FEATURES = ("patches", "tokens", "projected")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    train = commands.add_parser("train")
    train.add_argument("out", type=Path)
    train.add_argument("work", type=Path)
    train.add_argument("runs", nargs="*", help="recipe rows to fine-tune from the continued base")
    train.add_argument("--steps", type=int, default=600)
    train.add_argument("--lr", type=float, default=5e-4)
    train.add_argument("--stage", choices=BINDING_STAGES, default="place")
    probe = commands.add_parser("probe")
    probe.add_argument("manifests", nargs="+", type=Path)
    probe.add_argument("--scenes", type=int, default=300)
    probe.add_argument("--features", choices=FEATURES, default="patches",
                       help="which patch vectors: the patch features (maps; the pool's values on an attention-pooled "
                            "base), the tower's tokens after ln_post, or those through the image projection")
    args = parser.parse_args()
    if args.command == "probe":
        for manifest in args.manifests:
            accuracy, chance, n = cell_probe(manifest, args.scenes, args.features)
            print(f"{manifest} ({args.features}): cell of 9 from {n} object patches {100 * accuracy:.1f} % (commonest cell {100 * chance:.1f})")
        return
    name = "clip-cont" if args.stage == "bind" else f"clip-{args.stage}"
    args.out.mkdir(parents=True, exist_ok=True)
    for file in (f"{BASE}.json", f"{BASE}.safetensors", "seps-vocab.txt"):
        if not (args.out / file).exists():
            shutil.copy(paths.demo_zoo_root() / file, args.out / file)
    stage = demo_zoo.DemoRun(name, "clip", steps=args.steps, init=BASE, lr_backbone=args.lr, lr_new=1e-3,
                             stage=args.stage)
    table = demo_zoo.all_runs()
    # the recipe table with the stage added and every fine-tune of the base started from it instead
    moved = tuple(replace(run, init=name) if run.init == BASE and not run.stage else run for run in table)
    demo_zoo.all_runs = lambda: (stage, *moved)
    demo_zoo.build_demo(out=args.out, work=args.work, only=[name, *args.runs], progress=False)


@torch.no_grad()
def cell_probe(manifest: Path, n_scenes: int, features: str = "patches") -> tuple[float, float, int]:
    model = load_manifest(Manifest.read(manifest), device="cpu")
    scenes = list(generate_scenes(n_scenes, seed=1, image_size=demo_zoo.IMAGE_SIZE, split="test"))
    kept, cells = [], []
    for start in range(0, n_scenes, 50):
        chunk = scenes[start:start + 50]
        vectors = patch_vectors(model, [scene.image for scene in chunk], features)
        grid = round(vectors.shape[1] ** 0.5)
        for scene, patches in zip(chunk, vectors):
            # each patch's object's cell + 1 (0: no object covers it), as the place head is taught
            cell = patch_attributes(scene, grid, {"position": POSITIONS})[0]
            kept.append(patches[cell > 0])
            cells.append(cell[cell > 0] - 1)
    x, y = torch.cat(kept).float(), torch.cat(cells)
    half = len(x) // 2
    x = (x - x[:half].mean(0)) / (x[:half].std(0) + 1e-6)
    head = torch.nn.Linear(x.shape[1], len(POSITIONS))
    optimiser = torch.optim.LBFGS(head.parameters(), max_iter=300)

    def loss():
        optimiser.zero_grad()
        value = F.cross_entropy(head(x[:half]), y[:half]) + 1e-4 * head.weight.pow(2).sum()
        value.backward()
        return value

    with torch.enable_grad():
        optimiser.step(loss)
    accuracy = float((head(x[half:]).argmax(1) == y[half:]).float().mean())
    return accuracy, float(np.bincount(y[half:]).max() / (len(y) - half)), len(x)


def patch_vectors(model, images: list, features: str) -> torch.Tensor:
    """[B, P, d]: the patch features, or the tower's patch tokens (after ``ln_post``), or those through the
    image projection (what FLAIR's code pools: part 12)."""
    if features == "patches":
        return model.encode_image(images).patches
    tokens = model.method.image_tokens(model.pixels(images))[:, 1:]
    return tokens if features == "tokens" else model.method.project_image(tokens)


if __name__ == "__main__":
    main()
