"""Does a base CLIP bind attributes when its batches hold counterfactual twins? (issue 34)

    OMP_NUM_THREADS=2 python zoo_research/binding_experiment.py --name cf-long --captions long --twins all --steps 600

Trains the demo zoo's base CLIP (``demo_architecture``, the "clip-base" recipe of ``RUNS``: lr 5e-4,
warm-up 5 %, weight decay 0.1, clip 1.0, batch 32, seed 0) on the demo world's training split (seed 0,
5,400 scenes, 64 px, 2-6 objects, generated in memory: the same scenes ``write_world`` writes), then
scores it on the held-out world (seed 1, test split, first 300 scenes: what ``explorer eval`` uses):
long / short T2I R@1 and ``hard_negative_acc[/<attribute>]`` from ``explorer.evaluation.runner``, plus
the per-attribute accuracy over negatives whose changed words lie within the 77-token context
("reach", issue 34's fair test; not yet the README's metric).

``--twins``: none = random batches (the current recipe); a list of attributes (or "all") = every
scene in a batch brings one twin per attribute (one object, chosen at random, changed;
``explorer.data.counterfactual``), and the batch is filled scene by scene to the same 32 pictures,
so pictures per step are identical and the unchanged InfoNCE loss sees twins as negatives.
With long captions, a twin whose change lies past the 77-token cut is redrawn on another object
(its caption would be the original's after the cut).
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import numpy as np
import torch

from explorer.data.counterfactual import ATTRIBUTES, counterfactual_twin
from explorer.data.synthetic import generate_scenes
from explorer.training.demo_base import PATCH_ATTRIBUTES, patch_attributes
from explorer.models.tokenizer import encode
from explorer.training.demo_world import DEMO_SCENES, DEMO_SEED, EVAL_SEED, WORLD_OBJECTS
from explorer.training.demo_zoo import WARMUP_RATIO, WEIGHT_DECAY, demo_run
from explorer.training.samples import TrainingSample, collate

# The world's resolution and the ViT's depth (--image-size, --vision-layers): the patch grid stays 16 x 16.
IMAGE_SIZE = int(os.environ.get("BINDING_IMAGE_SIZE", 64))
GRID = 16
CONTEXT = 77
TRAIN_SCENES = int(DEMO_SCENES * 0.9)  # write_world's train share
EVAL_LIMIT = 300  # explorer eval's default
PROBE_CHUNK = 32  # scene / twin pairs scored at once


def sample_of(scene, captions: str) -> TrainingSample:
    return TrainingSample(image=scene.image, caption=scene.short_caption if captions == "short" else scene.long_caption)


def caption_of(scene, kind: str, rng) -> str:
    """One training text of ``scene``: "long", "short", or "object" (one of its object sentences, at random)."""
    if kind == "object":
        sentences = [s.text for s in scene.sentences if s.kind == "object"]
        return sentences[int(rng.integers(len(sentences)))]
    return scene.short_caption if kind == "short" else scene.long_caption


def scratch_model(vision_layers: int):
    """The base CLIP of the demo zoo at this run's resolution and depth (16 x 16 patches), seeded."""
    import dataclasses

    from explorer.models.methods.clip import ClipMethod
    from explorer.training.demo_zoo import demo_architecture

    torch.manual_seed(DEMO_SEED)
    arch = dataclasses.replace(demo_architecture(), image_size=IMAGE_SIZE, patch_size=IMAGE_SIZE // GRID,
                               vision_layers=vision_layers)
    return ClipMethod(arch)


def dense_probe(method, scenes) -> dict:
    """Accuracy of the per-patch attribute heads on held-out object patches (None without heads): does the
    image tower see each attribute at all?"""
    if not hasattr(method, "aux_heads"):
        return {}
    pixels = collate([TrainingSample(image=s.image, caption="-") for s in scenes[:100]], method.preprocess).pixels
    scenes = scenes[:100]
    targets = torch.stack([patch_attributes(s, GRID) for s in scenes])
    with torch.no_grad():
        patches = method.encode_image(pixels).patches
    out = {}
    for a, (name, head) in enumerate(zip(PATCH_ATTRIBUTES, method.aux_heads)):
        on_object = targets[:, a] > 0
        out[f"patch_acc/{name}"] = float((head(patches).argmax(-1)[on_object] == targets[:, a][on_object]).float().mean())
    return out


def object_sentences(scene) -> list[str]:
    return [s.text for s in scene.sentences if s.kind == "object"]


def add_objectives(method, objectives: set, dense_weight: float, grid: int):
    """Wrap ``method.losses`` with the experiment's extra terms (bench only; the heads are dropped after)."""
    import torch.nn as nn
    import torch.nn.functional as F

    base_losses = method.losses
    if "dense" in objectives:
        dim = method.encode_image(torch.zeros(1, 3, IMAGE_SIZE, IMAGE_SIZE)).patches.shape[-1]
        method.aux_heads = nn.ModuleList([nn.Linear(dim, len(v) + 1) for v in PATCH_ATTRIBUTES.values()])

    def losses(batch):
        out = {}
        image = method.encode_image(batch.pixels)
        image_n = F.normalize(image.cls, dim=-1)
        scale = method.logit_scale.exp()
        text = F.normalize(method.encode_captions(batch.captions).eot, dim=-1)
        logits = scale * image_n @ text.T
        target = torch.arange(len(batch), device=logits.device)
        out["contrastive"] = (F.cross_entropy(logits, target) + F.cross_entropy(logits.T, target)) / 2
        if "multi" in objectives:  # every object sentence of the batch against every picture
            sentences = batch.extras["object_sentences"]
            flat = [t for group in sentences for t in group]
            owner = torch.as_tensor([i for i, group in enumerate(sentences) for _ in group])
            emb = F.normalize(method.encode_captions(flat).eot, dim=-1)
            sl = scale * emb @ image_n.T  # [S, B]
            t2i = F.cross_entropy(sl, owner)
            positive = owner[None, :] == torch.arange(len(batch))[:, None]  # [B, S]
            il = sl.T
            i2t = -(torch.logsumexp(il.masked_fill(~positive, -1e4), 1) - torch.logsumexp(il, 1)).mean()
            out["objects"] = (t2i + i2t) / 2
        if "dense" in objectives:
            targets = batch.extras["patch_targets"]  # [B, 4, P]
            terms = [F.cross_entropy(head(image.patches).flatten(0, 1), targets[:, a].flatten())
                     for a, head in enumerate(method.aux_heads)]
            out["dense"] = dense_weight * sum(terms) / len(terms)
        return out

    method.losses = losses


def epoch_batches(n: int, batch_size: int, seed: int, epoch: int, start: int):
    """The scene indices of each batch of ``epoch`` from batch ``start`` on (a seeded shuffle per epoch)."""
    generator = torch.Generator().manual_seed(seed * 1_000_003 + epoch)
    order = torch.randperm(n, generator=generator).tolist()
    for b in range(start, n // batch_size):
        yield order[b * batch_size:(b + 1) * batch_size]


class ObjectiveBatches:
    """Random batches (as ``SampleLoader`` shuffles) with the extras the experiment's objectives read."""

    def __init__(self, scenes, preprocess, batch_size: int, captions: str, grid: int, seed: int = 0):
        self.scenes, self.preprocess, self.batch_size, self.captions, self.grid, self.seed = (
            scenes, preprocess, batch_size, captions, grid, seed)
        self.targets = {}

    def __len__(self) -> int:
        return len(self.scenes) // self.batch_size

    def batches(self, epoch: int, start: int = 0):
        for indices in epoch_batches(len(self.scenes), self.batch_size, self.seed, epoch, start):
            chosen = [self.scenes[i] for i in indices]
            batch = collate([sample_of(s, self.captions) for s in chosen], self.preprocess)
            for s in chosen:
                if s.id not in self.targets:
                    self.targets[s.id] = patch_attributes(s, self.grid)
            batch.extras["patch_targets"] = torch.stack([self.targets[s.id] for s in chosen])
            batch.extras["object_sentences"] = [object_sentences(s) for s in chosen]
            yield batch


class MixedCaptionBatches:
    """A ``BatchSource`` of random batches (the base recipe's), each picture's text drawn per epoch from
    ``mix`` ({"object": p, "long": p, "short": p}): an object sentence names one object's colour, shape,
    size, texture and place, so, unlike a whole caption (told apart by its colours alone), it needs them
    all to find its picture among 32."""

    def __init__(self, scenes, preprocess, batch_size: int, mix: dict, seed: int = 0):
        self.scenes, self.preprocess, self.batch_size, self.seed = scenes, preprocess, batch_size, seed
        self.kinds, self.weights = list(mix), np.asarray(list(mix.values()), dtype=float) / sum(mix.values())

    def __len__(self) -> int:
        return len(self.scenes) // self.batch_size

    def batches(self, epoch: int, start: int = 0):
        for indices in epoch_batches(len(self.scenes), self.batch_size, self.seed, epoch, start):
            samples = []
            for i in indices:
                rng = np.random.default_rng([self.seed, epoch, i])
                kind = self.kinds[int(rng.choice(len(self.kinds), p=self.weights))]
                samples.append(TrainingSample(image=self.scenes[i].image, caption=caption_of(self.scenes[i], kind, rng)))
            yield collate(samples, self.preprocess)


def visible(text: str) -> list[int]:
    """The tokens a 77-token context keeps (SOT and EOT aside)."""
    return encode(text)[:CONTEXT - 2]


class CounterfactualBatches:
    """A ``BatchSource``: each batch is scenes in a seeded random order, each followed by its twins, cut at
    ``batch_size`` pictures. Kept as it ran for the records of part 1 (its draws for the scenes that fill a
    batch differ); the build's batches are ``explorer.training.twin_batches.TwinBatches``."""

    def __init__(self, scenes, preprocess, batch_size: int, attributes, captions: str, seed: int = 0,
                 per_scene: int | None = None):
        self.scenes, self.preprocess, self.batch_size = scenes, preprocess, batch_size
        self.attributes, self.captions, self.seed = tuple(attributes), captions, seed
        self.twins = per_scene or len(self.attributes)  # twins per scene, attributes drawn in random order
        self.per_scene = 1 + self.twins

    def __len__(self) -> int:
        return len(self.scenes) // -(-self.batch_size // self.per_scene)

    def group(self, scene, rng) -> list[TrainingSample]:
        out = [sample_of(scene, self.captions)]
        seen = {tuple(visible(out[0].caption))} if self.captions == "long" else {out[0].caption}
        for a in rng.permutation(len(self.attributes)):
            if len(out) > self.twins:
                break
            attribute = self.attributes[a]
            for k in rng.permutation(len(scene.objects)):
                twin = counterfactual_twin(scene, attribute, int(k), rng, WORLD_OBJECTS)
                if twin is None:
                    continue
                sample = sample_of(twin, self.captions)
                key = tuple(visible(sample.caption)) if self.captions == "long" else sample.caption
                if key not in seen:  # a caption the batch already has would be a false negative
                    seen.add(key)
                    out.append(sample)
                    break
        return out

    def batches(self, epoch: int, start: int = 0):
        generator = torch.Generator().manual_seed(self.seed * 1_000_003 + epoch)
        order = torch.randperm(len(self.scenes), generator=generator).tolist()
        per_batch = -(-self.batch_size // self.per_scene)
        for b in range(start, len(self)):
            samples = []
            for i in order[b * per_batch:(b + 1) * per_batch]:
                rng = np.random.default_rng([self.seed, epoch, i])
                samples.extend(self.group(self.scenes[i], rng))
            i = (b + 1) * per_batch
            while len(samples) < self.batch_size:  # a scene lacked a twin: fill with further scenes
                samples.extend(self.group(self.scenes[order[i % len(order)]], np.random.default_rng([self.seed, epoch, i])))
                i += 1
            yield collate(samples[:self.batch_size], self.preprocess)


def evaluate(model, scenes) -> dict:
    """Long / short T2I R@1 and the fair hard-negative test of ``explorer eval`` (issue 34) on ``scenes``."""
    from explorer.evaluation.retrieval_metrics import recall_at_k
    from explorer.evaluation.runner import encode_images, hard_negative_metrics, score_captions

    features = encode_images(model, [s.image for s in scenes])
    out = {f"{kind}_t2i_R@1": recall_at_k(score_captions(model, features, [getattr(s, f"{kind}_caption") for s in scenes]),
                                          ks=(1,)).text_to_image[1] for kind in ("long", "short")}
    hard, _ = hard_negative_metrics(model, features, scenes)
    out.update(hard)
    return out


CURVE_SCENES = 200


def learning_curve(method, args, batch_size: int):
    """An ``on_metrics`` hook: every ``args.curve_every`` steps, the fair per-attribute test on held-out scenes
    against samples seen, appended to ``<out>/curves.jsonl``."""
    from explorer.evaluation.runner import encode_images, hard_negative_metrics
    from explorer.models.model import Model

    held_out = list(generate_scenes(CURVE_SCENES, EVAL_SEED, IMAGE_SIZE, split="test", n_objects=WORLD_OBJECTS))

    def hook(row: dict) -> None:
        if row["step"] % args.curve_every:
            return
        was_training = method.training
        model = Model(method, name=args.name, device="cpu")
        with torch.no_grad():
            hard, _ = hard_negative_metrics(model, encode_images(model, [s.image for s in held_out]), held_out)
        method.train(was_training)
        record = {"name": args.name, "step": row["step"], "samples": row["step"] * batch_size,
                  **{k: v for k, v in hard.items() if k.startswith("hard_negative_acc/")}}
        with open(args.out / "curves.jsonl", "a") as f:
            f.write(json.dumps(record) + "\n")

    return hook


def twin_probe(model, scenes, captions: str, seed: int = 0) -> dict:
    """In the run's own caption format, on held-out scenes and one twin per attribute (a random object):
    ``twin_t2i/<a>``: the scene's caption scores its own picture above the twin's picture;
    ``twin_i2t/<a>``: the picture scores its own caption above the twin's caption (None where the
    format does not say the attribute, e.g. size in a short caption). A tie is a miss."""
    rng = np.random.default_rng(seed)
    out = {}
    for attribute in ATTRIBUTES:
        pairs = []  # (scene, twin)
        for scene in scenes:
            twin = counterfactual_twin(scene, attribute, int(rng.integers(len(scene.objects))), rng, WORLD_OBJECTS)
            if twin is not None:
                pairs.append((scene, twin))
        t2i, i2t = [], []
        for start in range(0, len(pairs), PROBE_CHUNK):
            chunk = pairs[start:start + PROBE_CHUNK]
            n = len(chunk)
            images = [s.image for s, _ in chunk] + [t.image for _, t in chunk]
            texts = [sample_of(s, captions).caption for s, _ in chunk] + [sample_of(t, captions).caption for _, t in chunk]
            scores = model.similarity(model.encode_image(images), texts)  # [2n images, 2n captions]
            for j in range(n):
                t2i.append(bool(scores[j, j] > scores[n + j, j]))
                if visible(texts[j]) != visible(texts[n + j]):
                    i2t.append(bool(scores[j, j] > scores[j, n + j]))
        out[f"twin_t2i/{attribute}"] = float(np.mean(t2i)) if t2i else None
        out[f"twin_i2t/{attribute}"] = float(np.mean(i2t)) if i2t else None
    return out


def main() -> None:
    from explorer.models.model import Model
    from explorer.training.loop import TrainConfig, train

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--name", required=True)
    parser.add_argument("--captions", choices=("short", "long"), default="short")
    parser.add_argument("--twins", default="none", help="none, all, or attributes joined by commas")
    parser.add_argument("--twins-per-scene", type=int, help="twins per scene (default: one per attribute)")
    parser.add_argument("--mix", help='random batches whose texts are drawn per picture, e.g. "object:0.5,long:0.5"')
    parser.add_argument("--objectives", default="", help="extra terms: multi (every object sentence vs every "
                        "picture, multi-positive), dense (per-patch attribute heads)")
    parser.add_argument("--dense-weight", type=float, default=1.0)
    parser.add_argument("--steps", type=int, default=600)
    parser.add_argument("--init-state", type=Path, help="a state dict whose visual.* weights start the image tower")
    parser.add_argument("--lock-image", action="store_true", help="train the text tower (and scale) only (LiT)")
    parser.add_argument("--image-size", type=int, default=64, help="world resolution (patches stay 16 x 16)")
    parser.add_argument("--vision-layers", type=int, default=3)
    parser.add_argument("--curve-every", type=int, default=0, help="score the fair hard-negative test on "
                        f"{CURVE_SCENES} held-out scenes every N steps (curves.jsonl)")
    parser.add_argument("--logit-scale", type=float, help="initial exp(logit_scale) (default: the model's, 1/0.07)")
    parser.add_argument("--out", type=Path, default=Path("/tmp/binding"))
    parser.add_argument("--evaluate", type=Path, help="only score these trained weights (evaluate + twin_probe)")
    parser.add_argument("--probe", type=Path, help="only probe these trained weights with twins (twin_probe)")
    parser.add_argument("--init", type=Path, help="start from these weights (a run's model.safetensors) instead of "
                                                  "from scratch; the recipe (warm-up included) starts afresh")
    args = parser.parse_args()
    global IMAGE_SIZE
    IMAGE_SIZE = args.image_size
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", 2)))
    attributes = () if args.twins == "none" else ATTRIBUTES if args.twins == "all" else tuple(args.twins.split(","))

    if args.evaluate:  # score weights a run already wrote (the run's record is written again with them)
        from safetensors.torch import load_file

        method = scratch_model(args.vision_layers)
        if any(k.startswith("aux_heads.") for k in load_file(args.evaluate)):
            add_objectives(method, {"dense"}, 1.0, GRID)
        method.load_state_dict(load_file(args.evaluate))
        held_out = list(generate_scenes(EVAL_LIMIT, EVAL_SEED, IMAGE_SIZE, split="test", n_objects=WORLD_OBJECTS))
        model = Model(method, name=args.name, device="cpu")
        metrics = {**evaluate(model, held_out), **twin_probe(model, held_out, args.captions), **dense_probe(method, held_out)}
        record = {"name": args.name, "evaluated": str(args.evaluate), "metrics": metrics}
        print(json.dumps(record))
        with open(args.out / "results.jsonl", "a") as f:
            f.write(json.dumps(record) + "\n")
        return
    if args.probe:
        from explorer.models.io.loading import load_method

        held_out = list(generate_scenes(EVAL_LIMIT, EVAL_SEED, IMAGE_SIZE, split="test", n_objects=WORLD_OBJECTS))
        model = Model(load_method(args.probe)[0], name=args.name, device="cpu")
        record = {"name": args.name, "captions": args.captions, "probe": twin_probe(model, held_out, args.captions)}
        print(json.dumps(record))
        with open(args.out / "probes.jsonl", "a") as f:
            f.write(json.dumps(record) + "\n")
        return
    clock = time.perf_counter()
    scenes = list(generate_scenes(TRAIN_SCENES, DEMO_SEED, IMAGE_SIZE, split="train", n_objects=WORLD_OBJECTS))
    run = demo_run("clip-base")
    if args.init:
        from explorer.models.io.loading import load_method

        method, _ = load_method(args.init)
    else:
        method = scratch_model(args.vision_layers)
    if args.init_state:  # an image tower trained to see (/tmp/cap/capacity.py); the text tower stays as built
        from safetensors.torch import load_file

        seen = load_file(args.init_state)
        method.load_state_dict({**method.state_dict(), **{k: v for k, v in seen.items() if k.startswith("visual.")}})
    if args.lock_image:  # LiT (Zhai et al., CVPR 2022): the image tower is locked, only the text tower learns
        for name, parameter in method.named_parameters():
            if name.startswith("visual."):
                parameter.requires_grad_(False)
    if args.logit_scale:  # a sharper softmax from the start: twins are much closer than scenes
        with torch.no_grad():
            method.logit_scale.fill_(float(np.log(args.logit_scale)))
    mix = {k: float(v) for k, v in (part.split(":") for part in args.mix.split(","))} if args.mix else None
    objectives = set(filter(None, args.objectives.split(",")))
    if objectives:
        add_objectives(method, objectives, args.dense_weight, GRID)
    dataset = (ObjectiveBatches(scenes, method.preprocess, run.batch_size, args.captions, GRID) if objectives
               else MixedCaptionBatches(scenes, method.preprocess, run.batch_size, mix) if mix
               else [sample_of(s, args.captions) for s in scenes] if not attributes
               else CounterfactualBatches(scenes, method.preprocess, run.batch_size, attributes, args.captions,
                                             per_scene=args.twins_per_scene))
    config = TrainConfig(max_steps=args.steps, batch_size=run.batch_size, lr_backbone=run.lr_backbone,
                         lr_new=run.lr_new, warmup_ratio=WARMUP_RATIO, weight_decay=WEIGHT_DECAY,
                         clip_grad_norm=run.clip_grad_norm, seed=DEMO_SEED, checkpoint_every=args.steps,
                         precision="auto", name=f"binding-{args.name}")
    world_s = time.perf_counter() - clock
    clock = time.perf_counter()
    curve = learning_curve(method, args, run.batch_size) if args.curve_every else None
    result = train(method, dataset, config, args.out / args.name, progress=False, on_metrics=curve)
    train_s = time.perf_counter() - clock

    clock = time.perf_counter()
    held_out = list(generate_scenes(EVAL_LIMIT, EVAL_SEED, IMAGE_SIZE, split="test", n_objects=WORLD_OBJECTS))
    model = Model(method, name=args.name, device="cpu")
    metrics = evaluate(model, held_out)
    metrics.update(twin_probe(model, held_out, args.captions))
    metrics.update(dense_probe(method, held_out))
    eval_s = time.perf_counter() - clock
    record = {"name": args.name, "init": str(args.init) if args.init else None, "captions": args.captions, "init_state": str(args.init_state or ""), "lock_image": args.lock_image, "image_size": IMAGE_SIZE, "vision_layers": args.vision_layers, "mix": mix, "objectives": sorted(objectives), "dense_weight": args.dense_weight, "twins": list(attributes), "twins_per_scene": args.twins_per_scene,
              "logit_scale_init": args.logit_scale, "steps": result.steps,
              "batch_size": run.batch_size, "last_loss": (result.last or {}).get("loss"),
              "seconds": {"world": round(world_s, 1), "train": round(train_s, 1), "eval": round(eval_s, 1)},
              "metrics": metrics}
    print(json.dumps(record))
    with open(args.out / "results.jsonl", "a") as f:
        f.write(json.dumps(record) + "\n")


if __name__ == "__main__":
    main()
