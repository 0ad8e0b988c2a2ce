"""The demo-zoo recipe end to end, at a tiny scale: world, base CLIP, a FLISM-mined GOAL, SEPS."""

from __future__ import annotations

import json
import re

import pytest

import explorer
from explorer.training.demo_zoo import build_demo, world_vocabulary
from explorer.zoo import Zoo

pytestmark = pytest.mark.slow


def test_build_demo_writes_loadable_small_models(tmp_path):
    out, work = tmp_path / "demo", tmp_path / "work"
    # Two steps a run: the loop steps, the optimizer updates and the weights are published; the assertions
    # are about the recipe's plumbing (files, manifests, loading), which longer runs do not exercise more.
    written = build_demo(out=out, work=work, n_scenes=40, scale=0.001, only=["clip-base", "goal", "seps"],
                         progress=False, log=lambda _: None, min_steps=2)
    assert [p.name for p in written] == ["clip-base.safetensors", "goal.safetensors", "seps.safetensors"]
    for path in written:
        assert path.stat().st_size < 25 * 2**20
    names = {m.name: m for m in Zoo(out).manifests()}
    assert set(names) == {"demo-clip-base", "demo-goal", "demo-seps"}
    assert names["demo-goal"].context_length == 248 and names["demo-clip-base"].context_length == 77
    assert "seed 0" in names["demo-goal"].source and "build-demo" in names["demo-goal"].source
    assert all(m.recipe["steps"] == 2 for m in names.values())  # the steps trained are the steps recorded
    for name in names:
        model = explorer.load(out / f"{name.removeprefix('demo-')}.json", device="cpu")
        assert model.key_report.ok and model.trained
        assert model.similarity([_picture()], ["a red square."]).shape == (1, 1)
    build = json.loads((out / "BUILD.txt").read_text())
    assert build["seed"] == 0


def _picture():
    from PIL import Image

    return Image.new("RGB", (64, 64), (200, 30, 30))


def test_world_vocabulary_covers_every_caption_word():
    from explorer.data import generate_scenes

    scenes = list(generate_scenes(5, seed=3, image_size=64))
    vocab = set(world_vocabulary(scenes))
    for scene in scenes:
        for word in re.findall(r"[a-z]+", scene.long_caption.lower()):
            assert word in vocab
