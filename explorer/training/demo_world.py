"""The demo zoo's synthetic worlds: the training world (seed ``DEMO_SEED``) and the held-out one ``explorer eval``
scores on (seed ``EVAL_SEED``), written once into a build's work folder and checked when a build keeps them."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Callable

from explorer.core.jsonl import write_jsonl

DEMO_SEED = 0
IMAGE_SIZE = 64
WORLD_OBJECTS = (2, 6)  # objects per scene, in the training world and the held-out one

DEMO_SCENES = 24000  # 4x the 6,000 of the builds before: the base read colour and retrieved better from it, and
# memorised less (docs/demo-zoo-choices.md; zoo_research/results/binding_experiment.md, part 6)

# The benchmark's world: another seed, so no scene, layout or caption of it was seen in training (the
# training world's own test split shares its seed). Only its test split is written.
EVAL_SEED = 1
EVAL_SCENES = 400


def world_record(n_scenes: int, seed: int = DEMO_SEED) -> dict:
    """A world of the demo (the training one by default), as manifests, the build state and a kept world's check
    record it."""
    return {"seed": seed, "image_size": IMAGE_SIZE, "objects": list(WORLD_OBJECTS), "scenes": n_scenes}


def write_world(work: Path, log: Callable[[str], None], n_scenes: int = DEMO_SCENES) -> Path:
    """The training world (seed ``DEMO_SEED``): train / val / test 90 / 2 / 8 %."""
    return _write(work / "data", log, n_scenes, DEMO_SEED, {"train": 0.9, "val": 0.02, "test": 0.08})


def write_eval_world(work: Path, log: Callable[[str], None], n_scenes: int = EVAL_SCENES) -> Path:
    """The held-out world ``explorer eval`` scores on by default: seed ``EVAL_SEED``, all of it test."""
    return _write(work / f"eval-world-seed{EVAL_SEED}", log, n_scenes, EVAL_SEED, {"train": 0.0, "val": 0.0,
                                                                                    "test": 1.0})


def _write(data: Path, log: Callable[[str], None], n_scenes: int, seed: int, fractions: dict) -> Path:
    from explorer.data import write_dataset

    if (data / "scenes.jsonl").exists():
        _check_world(data, n_scenes, seed)
        log(f"world: reusing {data}")
        return data
    start = time.perf_counter()
    counts = write_dataset(data, n_scenes=n_scenes, seed=seed, image_size=IMAGE_SIZE, split_fractions=fractions,
                           n_objects=WORLD_OBJECTS)
    log(f"world (seed {seed}): {counts} scenes at {IMAGE_SIZE} px in {time.perf_counter() - start:.0f} s -> {data}")
    return data


def _check_world(data: Path, n_scenes: int, seed: int) -> None:
    """A world kept from an earlier build must be the one asked for: runs trained on another world would be
    kept as built, and a new run would train on scenes its manifest does not describe."""
    from explorer.data.store import INFO_FILE
    from explorer.training.loop import TrainingError

    try:
        info = json.loads((data / INFO_FILE).read_text())
        found = {"seed": info["seed"], "image_size": info["image_size"], "objects": list(info["n_objects"]),
                 "scenes": sum(info["counts"].values())}
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise TrainingError(f"{data} holds a world whose {INFO_FILE} cannot be read ({error}); remove the "
                            "folder to write the world afresh, or use another folder") from error
    wanted = world_record(n_scenes, seed)
    if found != wanted:
        raise TrainingError(f"{data} holds another world (seed, image size, objects, scenes: "
                            f"{tuple(found.values())}; {tuple(wanted.values())} is asked for); use another folder, "
                            "or remove this one to write the world afresh (a build then trains every run again on it)")


def write_samples(data: Path, split: str = "train") -> Path:
    """``samples.jsonl`` beside a synthetic dataset, so ``explorer train --data`` reads it directly."""
    from explorer.data import read_dataset
    from explorer.training.samples import SAMPLES_FILE

    data = Path(data)
    records = ({"image": f"images/{scene.id}.png", "caption": scene.long_caption,
                "short_caption": scene.short_caption, "sentences": [s.text for s in scene.sentences],
                "dense_caption": scene.dense_caption} for scene in read_dataset(data, split=split))
    return write_jsonl(data / SAMPLES_FILE, records)


def world_vocabulary(scenes) -> list[str]:
    """A BERT word vocabulary that covers every word of the world's captions (for SEPS)."""
    words = set()
    for scene in scenes:
        for text in (scene.long_caption, scene.dense_caption, scene.short_caption,
                     *(n.caption for n in scene.hard_negatives)):
            words.update(re.findall(r"[a-z]+|[0-9]|[^\sa-z0-9]", text.lower()))
    return ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *sorted(words)]
