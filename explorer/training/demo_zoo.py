"""The demo zoo: every method trained by this project on its own synthetic world.

``explorer zoo build-demo`` reproduces ``checkpoints/demo/`` from nothing:

1. write the synthetic long-caption world (seeded) to a work folder;
2. build the base CLIP (77 tokens, attention-pooled) in two stages (``explorer.training.demo_base``): a ViT
   taught the world's attributes per patch and where its objects are ("clip-see", kept in the work folder),
   then a CLIP trained from it on the long captions, the object sentences and NegCLIP's one-attribute
   negatives, its patch heads kept on ("clip-base", the analogue of OpenAI CLIP);
3. fine-tune each method from that base with its own losses on the LONG captions, as the papers do
   (Long-CLIP's stretch to 248 comes from ``init_from``), most in batches of scenes and their
   counterfactual twins (``twin_batches``), so that the attributes the base tells apart stay asked for;
   GOAL's local pairs are mined with FLISM using the base CLIP, as FAST-GOAL mines them with CLIP; SEPS
   (ViT + BERT, no CLIP backbone) trains from scratch with a word vocabulary of the world written beside it;
4. store each result as fp16 safetensors (<= 25 MB) with a manifest that records the seed, the
   steps, the samples seen, the wall time, the recipe and the command.

The build resumes: run again, it keeps the runs it finished and continues an interrupted one from its
newest checkpoint (one every ``CHECKPOINT_MINUTES``); ``--background`` runs it as its own process with a
log (``explorer.jobs.demo_build``). Everything is small enough for a 2-core CPU; ``--scale`` shortens it.
"""

from __future__ import annotations

import functools
import json
import shutil
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable

from explorer.core import errors, paths
from explorer.training.demo_world import (DEMO_SCENES, DEMO_SEED, IMAGE_SIZE, WORLD_OBJECTS, world_record,
                                         world_vocabulary, write_world)
from explorer.zoo.manifest import DEMO_COMMAND

PATCH_SIZE = 4  # a 16 x 16 grid: measured against 8 px patches in docs/demo-zoo-choices.md
SEPS_PATCH_SIZE = 8  # SEPS's own ViT (no CLIP backbone); see its run below
BASE_POOL = "attn"  # nn.image_pool: the mean of the patches cannot keep place (docs/demo-zoo-choices.md)
COMMAND = DEMO_COMMAND  # recorded in every manifest: how the zoo tells a demo model (Manifest.is_demo)


@dataclass(frozen=True)
class DemoRun:
    """One model of the demo zoo and how it is trained."""

    name: str
    method: str
    steps: int
    init: str | None = "clip-base"  # the demo model it starts from; None: from scratch
    captions: str = "long"  # which caption it trains on: "long" or "short"
    lr_backbone: float = 1e-4
    lr_new: float = 1e-3
    batch_size: int = 32
    extra: dict = field(default_factory=dict)  # the method's own constructor options
    clip_grad_norm: float | None = 1.0
    patch_size: int = PATCH_SIZE  # of a method with its own image tower (SEPS); the others use the base's
    source: str | None = None  # the manifest's "source" (default: fine-tuned from the base)
    twins: int = 0  # counterfactual twins that follow each scene in a batch (twin_batches.py); 0: random batches
    stage: str | None = None  # a stage of the base (``demo_base.STAGES``): its training class and data
    published: bool = True  # False: an intermediate stage, kept in the work folder (stages/), not in the zoo

    def recipe(self, steps: int) -> dict:
        """What the manifest records of how the model was trained."""
        return {"steps": steps, "batch_size": self.batch_size, "lr_backbone": self.lr_backbone,
                "lr_new": self.lr_new, "warmup_ratio": WARMUP_RATIO, "weight_decay": WEIGHT_DECAY,
                "clip_grad_norm": self.clip_grad_norm, "captions": self.captions,
                **({"twins": self.twins} if self.twins else {}),  # each scene and its twins in a batch
                **({"stage": self.stage} if self.stage else {}),
                "init": f"demo {self.init}" if self.init else "from scratch", "options": dict(self.extra),
                "world": {"seed": DEMO_SEED, "image_size": IMAGE_SIZE, "objects": list(WORLD_OBJECTS)},
                "patch_size": self.patch_size,
                **({"image_pool": BASE_POOL} if self.stage or self.init else {}),  # the base's tower, not SEPS's
                "command": f"{COMMAND} --only {self.name}"}


WARMUP_RATIO = 0.05
WEIGHT_DECAY = 0.1

# The reading + NegCLIP stage from the seeing one (zoo_research/results/binding_experiment.md, part 3: the attention pool;
# part 7: 2,400 steps, not 1,200, with the seeing stage's patch heads kept on)
BIND_STEPS, BIND_LR = 2400, 5e-4

# The recipe table: one row per demo model (a table of data, so it names the methods).
RUNS = (
    # The base in two stages (explorer.training.demo_base): an image tower taught the world's attributes per
    # patch and its objects' cells; then CLIP's loss on the long captions, the object sentences (multi-positive)
    # and NegCLIP's one-attribute negatives together, the patch heads kept on (docs/demo-zoo-choices.md, "Choices behind the demo
    # zoo": each stage's numbers; seeing 4,000 steps, not 2,000: zoo_research/results/binding_experiment.md, part 7).
    DemoRun("clip-see", "clip", steps=4000, init=None, captions="short", lr_backbone=2e-3, lr_new=2e-3,
            stage="see", published=False),
    DemoRun("clip-base", "clip", steps=BIND_STEPS, init="clip-see", captions="long", lr_backbone=BIND_LR,
            lr_new=BIND_LR, stage="bind",
            source="an attention-pooled ViT taught the synthetic world's attributes per patch and its objects' "
                   "places, trained as a CLIP on its long captions and object sentences with NegCLIP's "
                   "one-attribute negatives, its patch heads kept on; context 77"),
    # The fine-tunes train on batches of scenes and their counterfactual twins (twin_batches.py), their
    # losses unchanged: on random batches nothing asked for the attributes the base had learned, and the
    # fine-tunes gave them back (zoo_research/results/binding_experiment.md, part 9: one twin a scene, five for
    # the MulCLIPs, none for CAFT; chosen on the training world's test split).
    DemoRun("longclip", "longclip", steps=200, twins=1),
    DemoRun("finelip", "finelip", steps=200, twins=1),
    # sub_loss "sentences": the same image's other sentences are negatives too (docs/demo-zoo-choices.md: why, with both numbers)
    DemoRun("mulclip", "mulclip", steps=200, extra={"sub_loss": "sentences"}, twins=5),
    DemoRun("mulclip-paper", "mulclip", steps=200, extra={"sub_loss": "paper"}, twins=5),  # the paper-literal L_sub
    DemoRun("goal", "goal", steps=200, twins=1),
    # FLAIR's text-conditioned pool and CAFT's grouping stages are new at the fine-tune (the base has neither):
    # 200 steps left FLAIR below the base on long R@1 (79.3; 87.3 at 600, 89.7 at 1,200) and CAFT under 80 % of
    # its margin on size and texture (docs/demo-zoo.md, "What the table says"; zoo_research/results/binding_experiment.md, part 4).
    DemoRun("flair", "flair", steps=2400, twins=1),  # 1,200 left it 0.7 below the 2,400-step base (part 8)
    DemoRun("caft", "caft", steps=600),  # random batches: on twins its own map fell below the base's (part 9)
    # SEPS, as the official code trains it (LAPS): all negatives summed for the first half (the warm-up
    # LAPS runs for its first epoch), then the hardest; gradients clipped at 2.0. Batch 16 keeps a step
    # near 1 s: SEPS scores every (image, caption) pair with its own patch selection. Its own ViT keeps
    # 8 px patches (SEPS_PATCH_SIZE), where this recipe was measured: on the 16 x 16 grid that scoring
    # costs about four times as much.
    DemoRun("seps", "seps", steps=300, init=None, lr_backbone=5e-4, lr_new=1e-3, batch_size=16,
            extra={"recipe": "official", "mean_violation_steps": 150}, clip_grad_norm=2.0,
            patch_size=SEPS_PATCH_SIZE,
            source="trained from scratch (ViT + BERT) on the synthetic world's sparse and dense captions"),
)

def demo_architecture():
    """Small enough to train on a CPU, big enough to ground: 64 px, 4 px patches (16 x 16 grid).

    On the 8 x 8 grid of 8 px patches a small object covers about one patch and its map cannot be
    told from the background (generic AUROC 0.28-0.40 over 600-900 steps); the 16 x 16 grid measured
    0.56 at 600 steps, with short-caption R@1 76 % (docs/demo-zoo-choices.md).

    The image embedding pools the patch tokens, not the class token: measured on held-out scenes, a
    class-token CLIP's generic map does not tell the named object from the scene's other objects over the
    steps and object counts tried (pixel AUROC 0.31-0.43), because its last patch tokens are never trained;
    pooled patches are trained and do (0.59-0.70). It pools them by attention with position-aware keys
    (``nn.image_pool``), not by their mean, which keeps almost nothing of place (position 50-52 % against
    82 %; zoo_research/results/binding_experiment.md, part 3)."""
    from explorer.models.architecture import ClipArchitecture

    return ClipArchitecture(embed_dim=128, image_size=IMAGE_SIZE, patch_size=PATCH_SIZE, vision_width=128,
                            vision_layers=3, vision_heads=2, vision_mlp_ratio=4.0, context_length=77, vocab_size=49408,
                            text_width=128, text_layers=2, text_heads=2, text_mlp_ratio=4.0, quick_gelu=True,
                            pool=BASE_POOL)


def training_samples(scenes, captions: str = "long", local_pairs: dict | None = None, stage: str | None = None) -> list:
    """What a run trains on; the base's stages: the patches' attributes ("see"), object sentences only ("read"),
    and the world's one-attribute negatives of each caption and the patches' attributes besides ("bind"; "place"
    labels each patch with its object's cell too)."""
    from explorer.training.demo_base import (BINDING_STAGES, OCCUPANCY_TARGETS, PAIR_TARGETS, PATCH_TARGETS,
                                             READING_STAGES, STAGES, attribute_pairs, occupancy, patch_attributes)
    from explorer.training.samples import TrainingSample

    samples = []
    for scene in scenes:
        sentences = [s.text for s in scene.sentences if stage not in READING_STAGES or s.kind == "object"]
        pair = (local_pairs or {}).get(scene.id)
        extras = ({PATCH_TARGETS: patch_attributes(scene, IMAGE_SIZE // PATCH_SIZE, STAGES[stage].patch_labels)}
                  if stage in ("see", *BINDING_STAGES) else None)
        if stage == "see":
            extras.update({PAIR_TARGETS: attribute_pairs(scene), OCCUPANCY_TARGETS: occupancy(scene)})
        samples.append(TrainingSample(
            image=scene.image, caption=caption_of(scene, captions),
            short_caption=scene.short_caption, sentences=sentences, dense_caption=scene.dense_caption,
            local_box=pair[0] if pair else None, local_sentence=pair[1] if pair else None, extras=extras,
            negative_captions=[n.caption for n in scene.hard_negatives] if stage in BINDING_STAGES else None))
    return samples


def caption_of(scene, captions: str) -> str:
    """The caption a run trains on: the scene's short or long caption."""
    return scene.short_caption if captions == "short" else scene.long_caption


def twin_source(run: DemoRun, method, context, mine: Callable | None):
    """The run's batches as scenes and their counterfactual twins (``run.twins`` each); ``mine``: scenes ->
    their local pairs (GOAL), called as each batch is made."""
    from explorer.models.tokenizer import encode
    from explorer.training.twin_batches import TwinBatches

    def to_samples(scenes):
        return training_samples(scenes, run.captions, mine(scenes) if mine else None, stage=run.stage)

    return TwinBatches(context.scenes, to_samples, method.preprocess, run.batch_size, run.twins, seed=DEMO_SEED,
                       reads=lambda scene: tuple(encode(caption_of(scene, run.captions))[:method.context_length - 2]),
                       n_objects=WORLD_OBJECTS)


def mine_local_pairs(model, scenes, log: Callable[[str], None] | None = None) -> dict:
    """FLISM with ``model`` on every scene: {scene id: (box in [0, 1], sentence)} of the best pair."""
    from explorer.grounding.flism import flism

    start, pairs = time.perf_counter(), {}
    for scene in scenes:
        result = flism(model, scene.image, [s.text for s in scene.sentences])
        region = result.pair_region
        pairs[scene.id] = (tuple(float(v) for v in region.unit_box(scene.image.width, scene.image.height)),
                           result.pair_sentence)
    if log is not None:
        log(f"FLISM local pairs for {len(pairs)} scenes in {time.perf_counter() - start:.0f} s")
    return pairs


def build_method(run: DemoRun, out: Path, vocab_file: Path | None, work: Path | None = None):
    """The method (and the warm-start report, or None) a run starts from: fine-tuned from its init, or built
    from scratch by the method's own ``demo_model`` at the demo's sizes; a stage of the base in its training
    class."""
    from explorer.models.methods import get_method
    from explorer.models.methods.base import DemoSpec
    from explorer.training.demo_base import as_stage
    from explorer.training.warm_start import init_from

    if run.init is not None:
        method, report = init_from(run.method, init_file(run.init, out, work), seed=DEMO_SEED, **run.extra)
    else:
        spec = DemoSpec(demo_architecture(), patch_size=run.patch_size, seed=DEMO_SEED, vocab_file=vocab_file)
        method, report = get_method(run.method).demo_model(spec, **run.extra), None
    return (as_stage(run.stage, method) if run.stage else method), report


def init_file(name: str, out: Path, work: Path | None) -> Path:
    """Where the run ``name`` left its weights: the zoo, or the work folder's stages/ for an unpublished stage."""
    run = next((r for r in all_runs() if r.name == name), None)
    published = run is None or run.published
    return out / f"{name}.safetensors" if published or work is None else work / "stages" / f"{name}.safetensors"


def all_runs() -> tuple[DemoRun, ...]:
    """The recipe table, then a run for every other method whose class gives a ``demo_recipe`` (a plugin's:
    its name, fine-tuned from the base by default)."""
    from explorer.models.methods import discover_methods

    named = {run.name for run in RUNS}
    extra = tuple(DemoRun(name=name, method=name, **dict(cls.demo_recipe))
                  for name, cls in sorted(discover_methods().items())
                  if cls.demo_recipe is not None and name not in named)
    return RUNS + extra


def demo_run(name: str) -> DemoRun:
    return next(run for run in all_runs() if run.name == name)


def publish(method, run: DemoRun, out: Path, steps_done: int, seconds: float, options: dict | None = None,
            n_scenes: int = DEMO_SCENES, device: str = "cpu") -> Path:
    """fp16 weights + manifest in the demo zoo; its recipe's world records the scenes it was built on."""
    import torch

    from explorer.models.io.loading import save_method
    from explorer.training.checkpointing import architecture_name
    from explorer.zoo import Manifest

    weights = out / f"{run.name}.safetensors"
    half = method.to(torch.float16)
    save_method(half, weights, {"seed": DEMO_SEED, "steps": steps_done, "command": COMMAND})
    method.to(torch.float32)
    source = run.source or (f"fine-tuned from demo {run.init} with {method.title}'s losses on the synthetic "
                            "world's long captions")
    manifest = Manifest(
        name=f"demo-{run.name}", method=method.name, weights=weights.name, architecture=architecture_name(method),
        context_length=method.context_length, source=f"{source}; `{COMMAND}` (seed {DEMO_SEED})",
        format=f"explorer ({method.name})", options=dict(options or {}),
        recipe={**run.recipe(steps_done), "world": world_record(n_scenes),
                "samples_seen": steps_done * run.batch_size, "wall_minutes": round(seconds / 60, 1), "device": device},
        notes=f"{steps_done} steps, batch {run.batch_size}, {seconds / 60:.1f} min on {device}; "
              f"lr backbone {run.lr_backbone:g}, new modules {run.lr_new:g}")
    manifest.write(out / f"{run.name}.json")
    return weights


CHECKPOINT_MINUTES = 5.0  # a killed build loses at most this much of the run it was in


def build_demo(out: Path | None = None, work: Path | None = None, n_scenes: int = DEMO_SCENES, scale: float = 1.0,
               only: list[str] | None = None, progress: bool = True, log: Callable[[str], None] = print,
               min_steps: int = 10, device: str = "cpu", max_batch: int | None = None) -> list[Path]:
    """Train the demo zoo; returns the weight files written. A run trains ``scale`` times its steps, at least
    ``min_steps``, in batches of at most ``max_batch`` (a quick try of the plumbing; the manifest records both).

    Run again with the same arguments, it resumes: a published run is kept as it is, an interrupted one
    continues from its newest checkpoint (written every ``CHECKPOINT_MINUTES``), and the wall time of every
    part is summed over the calls in ``<work>/build-state.json`` and written to ``<out>/BUILD.txt``.

    ``device``: where every run trains ("cpu", the recipe's recorded minutes, or "cuda"; "auto" picks cuda
    when there is one); a GPU trains the same recipe, in fp32, in minutes."""
    from explorer.data import read_dataset

    device = _device(device)
    if max_batch is not None and max_batch < 2:  # a contrastive batch of one has no negative
        raise errors.ConfigError(f"max_batch is at least 2, not {max_batch}")
    out, work = Path(out or paths.demo_zoo_root()), Path(work or paths.demo_build_dir())
    out.mkdir(parents=True, exist_ok=True)
    state = BuildState(work / "build-state.json")
    with state.timing("world"):
        data = write_world(work, log, n_scenes)
        scenes = read_dataset(data, split="train")
        state.on_world(world_record(n_scenes), log)
    vocab_file = out / "seps-vocab.txt"
    if not vocab_file.exists():
        vocab_file.write_text("\n".join(world_vocabulary(scenes)) + "\n")
    held_out = read_dataset(data, split="test")[:CURVE_SCENES]
    context = _BuildContext(out, work, scenes, held_out, vocab_file, state, log, progress, n_scenes, device)
    written = []
    wanted = _with_stages(only) if only else None
    for run in all_runs():
        if wanted and run.name not in wanted:
            continue
        run = _scaled(run, scale, min_steps, max_batch)
        weights = out / f"{run.name}.safetensors"
        weights = weights if run.published else init_file(run.name, out, work)
        if state.finished(run) and weights.exists():
            log(f"{run.name}: built already ({state.runs[run.name]['steps']} steps); kept")
        else:
            weights = _train_run(run, context)
        if run.published:
            written.append(weights)
    (out / "BUILD.txt").write_text(json.dumps({"command": COMMAND, "seed": DEMO_SEED, "n_scenes": n_scenes,
                                               "scale": scale, "image_size": IMAGE_SIZE, **state.summary()},
                                              indent=2) + "\n")
    return written


def _with_stages(only: list[str]) -> set[str]:
    """``only`` and the unpublished stages its runs start from (they live in the work folder, not the zoo)."""
    runs = {run.name: run for run in all_runs()}
    wanted = set(only)
    for name in only:
        run = runs.get(name)
        while run is not None and run.init in runs and not runs[run.init].published:
            wanted.add(run.init)
            run = runs[run.init]
    return wanted


def _scaled(run: DemoRun, scale: float, min_steps: int, max_batch: int | None = None) -> DemoRun:
    run = replace(run, steps=max(min_steps, int(run.steps * scale)))
    run = replace(run, batch_size=max(min(run.batch_size, max_batch or run.batch_size), 1 + run.twins))  # twins fit
    if "mean_violation_steps" in run.extra:  # the warm-up keeps its share of a scaled run
        run = replace(run, extra={**run.extra, "mean_violation_steps": int(run.extra["mean_violation_steps"] * scale)})
    return run


@dataclass
class _BuildContext:
    out: Path
    work: Path
    scenes: list
    held_out: list  # the training world's test scenes the stages' learning curves are measured on
    vocab_file: Path
    state: "BuildState"
    log: Callable[[str], None]
    progress: bool
    n_scenes: int
    device: str = "cpu"
    local_pairs: dict | None = None


def _train_run(run: DemoRun, context: _BuildContext) -> Path:
    """Train (or resume) one run of the recipe table and publish it to the zoo."""
    from explorer.models.methods import get_method
    from explorer.training.loop import TrainConfig, train

    out, state, log = context.out, context.state, context.log
    method, report = build_method(run, out, context.vocab_file, context.work)
    cls = get_method(run.method)
    dataset = _run_dataset(run, method, context, cls.needs_local_pairs)
    config = TrainConfig(max_steps=run.steps, batch_size=run.batch_size, lr_backbone=run.lr_backbone,
                         lr_new=run.lr_new, warmup_ratio=WARMUP_RATIO, weight_decay=WEIGHT_DECAY,
                         clip_grad_norm=run.clip_grad_norm, seed=DEMO_SEED,
                         checkpoint_every=max(50, run.steps // 4), checkpoint_minutes=CHECKPOINT_MINUTES,
                         device=context.device, precision="fp32", name=f"demo-{run.name}",
                         command=f"{COMMAND} (run {run.name})")
    run_dir = context.work / "runs" / run.name
    if state.begin(run) and run_dir.exists():  # another recipe's folder, or one of unknown origin: start afresh
        log(f"{run.name}: {run_dir} was not trained with this recipe; training it afresh")
        shutil.rmtree(run_dir)
    resume = (run_dir / "resume").exists()  # an interrupted build continues where it stopped
    if resume:
        log(f"{run.name}: resuming {run_dir}")
    curve = stage_curve(method, run, context.held_out, run_dir) if run.stage else None
    with state.timing(run.name) as clock:
        result = train(method, dataset, config, run_dir, init=report, resume=resume, progress=context.progress,
                       on_metrics=curve)
    seconds = float((result.last or {}).get("elapsed_s", clock.seconds))  # summed over resumed calls by train
    last = result.last or {}
    log(f"{run.name}: {result.steps} steps in {seconds / 60:.1f} min, last loss {last.get('loss', float('nan')):.4f}")
    if run.stage:
        from explorer.training.demo_base import as_clip

        method = as_clip(method)
    if run.published:
        options = {"vocab_file": context.vocab_file.name} if cls.needs_word_vocabulary else None
        weights = publish(method, run, out, result.steps, seconds, options, context.n_scenes, context.device)
    else:
        from explorer.models.io.loading import save_method

        weights = save_method(method, init_file(run.name, out, context.work), {"seed": DEMO_SEED, "steps": result.steps})
    state.finish(run, result.steps, result.steps * run.batch_size, seconds, context.device)
    return weights


def _run_dataset(run: DemoRun, method, context: _BuildContext, needs_pairs: bool):
    """What ``run`` trains on: its samples over the training scenes, or twin batches made as they are
    trained on. GOAL's local pairs are mined with the init, as FAST-GOAL mines them with CLIP: for every
    training scene up front, or (twin batches) for each batch's scenes and twins."""
    from explorer.models.model import Model

    @functools.cache
    def base():
        base_file = init_file(run.init, context.out, context.work)
        return _load(base_file, context.device) if base_file.exists() else Model(
            build_method(demo_run(run.init), context.out, context.vocab_file, context.work)[0],
            device=context.device)

    if run.twins:
        return twin_source(run, method, context, (lambda scenes: mine_local_pairs(base(), scenes))
                           if needs_pairs else None)
    if needs_pairs and context.local_pairs is None:
        with context.state.timing("local pairs"):
            context.local_pairs = mine_local_pairs(base(), context.scenes, context.log)
    return training_samples(context.scenes, run.captions, context.local_pairs if needs_pairs else None,
                            stage=run.stage)


CURVE_EVERY = 250  # steps between two points of a stage's learning curve
CURVES_FILE = "curves.jsonl"
CURVE_SCENES = 200  # held-out scenes (the training world's test split) each point is measured on


def stage_curve(method, run: DemoRun, held_out: list, run_dir: Path):
    """An ``on_metrics`` hook for the base's stages: every ``CURVE_EVERY`` steps, per attribute, the patch
    accuracy of the heads ("see") or the fair hard-negative accuracy ("read") on held-out scenes, against
    the samples seen, appended to ``<run>/curves.jsonl``."""
    from explorer.training.demo_base import OCCUPANCY_TARGETS, PAIR_TARGETS, PATCH_TARGETS
    from explorer.training.metrics_log import JsonlLog

    log = JsonlLog(run_dir / CURVES_FILE)
    # the seeing stage's held-out batch: labelled and preprocessed once, not at every point
    held_out_batch = functools.cache(lambda: collate_scenes(held_out, method, stage="see"))
    started = False

    def hook(row: dict) -> None:
        nonlocal started
        if not started:  # a resumed run: drop the points logged past the checkpoint it resumes from
            started = True
            log.truncate_after_step(row["step"] - 1)
        if row["step"] % CURVE_EVERY:
            return
        training = method.training
        method.eval()
        if run.stage == "see":
            batch = held_out_batch()
            scores = method.patch_accuracy(batch.pixels, batch.extras[PATCH_TARGETS], batch.extras[PAIR_TARGETS],
                                           batch.extras[OCCUPANCY_TARGETS])
        else:
            scores = attribute_accuracy(method, held_out)
        method.train(training)
        log.write({"step": row["step"], "samples": row["step"] * run.batch_size,
                   "measure": "patch accuracy" if run.stage == "see" else "fair hard-negative accuracy", **scores})

    return hook


def collate_scenes(scenes, method, stage: str | None = None):
    from explorer.training.samples import collate

    return collate(training_samples(scenes, "short", stage=stage), method.preprocess).to(_device_of(method))


def _device_of(method) -> str:
    return str(next(method.parameters()).device)


def _device(device: str) -> str:
    """The device a build trains on ("auto" as ``Model`` resolves it); a GPU asked for where there is none is
    refused before anything runs."""
    import torch

    from explorer.models.model import resolve_device
    from explorer.training.loop import TrainingError

    if device not in ("cpu", "cuda", "auto"):
        raise TrainingError(f"the demo zoo trains on 'cpu', 'cuda' or 'auto', not {device!r}")
    resolved = resolve_device(device).type
    if resolved == "cuda" and not torch.cuda.is_available():
        raise TrainingError("--device cuda asked for, but torch sees no CUDA GPU here; use --device cpu or auto")
    return resolved


def attribute_accuracy(method, scenes) -> dict[str, float | None]:
    """The fair one-attribute hard-negative accuracy of ``method`` on ``scenes`` (``explorer eval``'s)."""
    import torch

    from explorer.evaluation.runner import encode_images, hard_negative_metrics
    from explorer.models.model import Model

    model = Model(method, name="curve", device=_device_of(method))  # the method stays where it trains
    with torch.no_grad():
        hard, _ = hard_negative_metrics(model, encode_images(model, [s.image for s in scenes]), scenes)
    return {k.split("/")[1]: v for k, v in hard.items() if k.startswith("hard_negative_acc/")}


class BuildState:
    """What a build has done so far, kept in a JSON file so that a resumed build knows it: finished runs,
    and the wall time spent in each part (world, local pairs, each run), summed over calls."""

    def __init__(self, path: Path):
        self.path = path
        try:
            saved = json.loads(path.read_text()) if path.exists() else {}
        except (OSError, ValueError) as error:
            from explorer.training.loop import TrainingError

            raise TrainingError(f"{path} cannot be read ({error}); remove it to rebuild every run, or restore "
                                "it: it is what says which runs are built") from error
        self.runs: dict = saved.get("runs", {})
        self.seconds: dict = saved.get("seconds", {})
        self.world: dict | None = saved.get("world")  # None: a state written before builds recorded it

    def on_world(self, world: dict, log: Callable[[str], None]) -> None:
        """Record the world this build trains on; runs finished on another world are not kept, nor their
        minutes (their folders are stale too: ``begin`` starts them afresh)."""
        if self.world is not None and self.world != world and self.runs:
            log(f"the world changed ({self.world} -> {world}): every run is trained again")
            self.runs, self.seconds = {}, {}
        self.world = world
        self.save()

    def finished(self, run: DemoRun) -> bool:
        done = self.runs.get(run.name)
        return bool(done) and done.get("finished", False) and done.get("recipe") == _recipe_key(run)

    def begin(self, run: DemoRun) -> bool:
        """Mark ``run`` begun with its recipe; True unless it was begun with this very recipe: a run folder
        from another recipe, or one this state never recorded, is stale (resuming it would publish the old
        weights under the new recipe)."""
        before = self.runs.get(run.name, {}).get("recipe")
        if before != _recipe_key(run):
            self.runs[run.name] = {"recipe": _recipe_key(run), "finished": False}
            self.seconds.pop(run.name, None)  # the minutes another recipe spent are not this run's
            self.save()
        return before != _recipe_key(run)

    def finish(self, run: DemoRun, steps: int, samples: int, seconds: float, device: str = "cpu") -> None:
        """``device``: where it trained (BUILD.txt says so beside its minutes; the recipe's are the 2 cores')."""
        self.runs[run.name] = {"steps": steps, "samples_seen": samples, "train_seconds": round(seconds, 1),
                               "device": device, "recipe": _recipe_key(run), "finished": True}
        self.save()

    def timing(self, part: str):
        return _Timing(self, part)

    def add(self, part: str, seconds: float) -> None:
        self.seconds[part] = round(self.seconds.get(part, 0.0) + seconds, 1)
        self.save()

    def save(self) -> None:
        from explorer.core.files import write_text_atomic

        state = {"runs": self.runs, "seconds": self.seconds, "world": self.world}
        write_text_atomic(self.path, json.dumps(state, indent=2) + "\n")

    def summary(self) -> dict:
        """For BUILD.txt: where the wall time went (minutes per part) and each run's steps and samples."""
        return {"minutes": {part: round(s / 60, 1) for part, s in self.seconds.items()},
                "total_minutes": round(sum(self.seconds.values()) / 60, 1),
                "runs": {name: {k: v for k, v in done.items() if k not in ("recipe", "finished")}
                         for name, done in self.runs.items() if done.get("finished")}}


class _Timing:
    def __init__(self, state: BuildState, part: str):
        self.state, self.part, self.seconds = state, part, 0.0

    def __enter__(self):
        self.start = time.perf_counter()
        return self

    def __exit__(self, *exc):
        self.seconds = time.perf_counter() - self.start
        self.state.add(self.part, self.seconds)  # also when interrupted: that time was spent
        return False


def _recipe_key(run: DemoRun) -> str:
    """A run counts as built only for the recipe it was built with and the recipes of the runs it starts from:
    a changed row retrains that run and every run fine-tuned from it."""
    runs = {r.name: r for r in all_runs()}
    chain = [run.recipe(run.steps)]
    while run.init in runs:
        run = runs[run.init]
        chain.append(run.recipe(run.steps))
    return json.dumps(chain, sort_keys=True)


def _load(path: Path, device: str = "cpu"):
    from explorer.models.io.loading import load_method
    from explorer.models.model import Model

    method, report = load_method(path)
    return Model(method, name=path.stem, report=report, device=device)
