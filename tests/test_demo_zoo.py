"""The demo-zoo recipe end to end, at a tiny scale: world, base CLIP, a FLISM-mined GOAL, SEPS."""

from __future__ import annotations

import json
import re

import pytest

import explorer
from explorer.data.counterfactual import ATTRIBUTES
from explorer.training.demo_world import world_vocabulary
from explorer.training.demo_zoo import build_demo
from explorer.training.twin_batches import TwinBatches
from explorer.zoo import Zoo

pytestmark = pytest.mark.slow(reason="builds demo models: writes a world and trains them, one in a background process")


def test_build_demo_writes_loadable_small_models(tmp_path, monkeypatch):
    out, work = tmp_path / "demo", tmp_path / "work"
    trained_on = []  # the pictures of each twin batch (GOAL's row trains on scenes and their twins)
    batch_scenes = TwinBatches.batch_scenes
    monkeypatch.setattr(TwinBatches, "batch_scenes",
                        lambda self, epoch, b: trained_on.append(batch_scenes(self, epoch, b)) or trained_on[-1])
    # Two steps a run of batches of 4 (the recipe's are 16-32: a backward of 32 took 1.4 s): the loop steps, the
    # optimizer updates and the weights are published; the assertions are about the recipe's plumbing (files,
    # manifests, loading), which longer runs and bigger batches do not exercise more.
    written = build_demo(out=out, work=work, n_scenes=40, scale=0.001, only=["clip-base", "goal", "seps"],
                         progress=False, log=lambda _: None, min_steps=2, max_batch=4)
    assert [p.name for p in written] == ["clip-base.safetensors", "goal.safetensors", "seps.safetensors"]
    for path in written:
        assert path.stat().st_size < 25 * 2**20
    names = {m.name: m for m in Zoo(out).manifests()}
    assert set(names) == {"demo-clip-base", "demo-goal", "demo-seps"}
    assert names["demo-goal"].context_length == 248 and names["demo-clip-base"].context_length == 77
    assert "seed 0" in names["demo-goal"].source and "build-demo" in names["demo-goal"].source
    assert all(m.recipe["steps"] == 2 for m in names.values())  # the steps trained are the steps recorded
    assert all(m.recipe["batch_size"] == 4 for m in names.values())  # and the batch (capped: max_batch)
    assert all(m.recipe["world"]["scenes"] == 40 for m in names.values())  # and the world they trained on
    for name in names:
        model = explorer.load(out / f"{name.removeprefix('demo-')}.json", device="cpu")
        assert model.key_report.ok and model.trained
        assert model.similarity([_picture()], ["a red square."]).shape == (1, 1)
    build = json.loads((out / "BUILD.txt").read_text())
    assert build["seed"] == 0
    assert {run["device"] for run in build["runs"].values()} == {"cpu"}  # where each run's minutes were spent
    assert "min on cpu" in names["demo-goal"].notes and names["demo-goal"].recipe["device"] == "cpu"
    # GOAL trained on twin batches (its local pairs mined for the twins too), and its manifest says so
    assert names["demo-goal"].recipe["twins"] == 1 and "twins" not in names["demo-clip-base"].recipe
    twin_ids = [[s.id for s in b if s.id.rsplit("-", 1)[-1].rstrip("0123456789") in ATTRIBUTES] for b in trained_on]
    assert len(trained_on) == 2 and all(twin_ids)


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


def test_build_demo_resumes_and_keeps_what_it_built(tmp_path):
    """Run again, a build keeps the runs it finished (same recipe) and records where its time went; a killed
    run resumes from its checkpoint (``train``'s own resume, tested in test_training_loop)."""
    out, work = tmp_path / "demo", tmp_path / "work"
    logged = []
    kwargs = dict(out=out, work=work, n_scenes=40, scale=0.001, only=["clip-base"], progress=False, min_steps=2,
                  max_batch=4)
    build_demo(**kwargs, log=logged.append)
    first = (out / "clip-base.safetensors").stat().st_mtime_ns
    build_demo(**kwargs, log=logged.append)
    assert (out / "clip-base.safetensors").stat().st_mtime_ns == first
    assert any("built already" in line for line in logged)
    build = json.loads((out / "BUILD.txt").read_text())
    assert build["runs"]["clip-base"]["steps"] == 2 and build["runs"]["clip-base"]["samples_seen"] == 8
    assert {"world", "clip-base"} <= set(build["minutes"])
    manifest = json.loads((out / "clip-base.json").read_text())
    assert manifest["recipe"]["samples_seen"] == 8 and "wall_minutes" in manifest["recipe"]
    # a changed recipe row is not "built already", and the minutes of the recipe before are not its own
    state_file = work / "build-state.json"
    state = json.loads(state_file.read_text())
    state_file.write_text(json.dumps({**state, "seconds": {**state["seconds"], "clip-base": 36000.0}}))
    build_demo(**{**kwargs, "min_steps": 3}, log=logged.append)
    build = json.loads((out / "BUILD.txt").read_text())
    assert build["runs"]["clip-base"]["steps"] == 3 and build["minutes"]["clip-base"] < 60


def test_background_build_runs_alone_and_reports(tmp_path):
    import os
    import signal
    import subprocess
    import sys
    import time

    from explorer.jobs import demo_build

    out, work = tmp_path / "demo", tmp_path / "work"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    args = ["zoo", "build-demo", "--out", str(out), "--work", str(work), "--scenes", "40", "--scale", "0.001",
            "--only", "clip-base", "--min-steps", "3", "--max-batch", "4"]  # not the defaults (10, the recipe's
    # batch): the steps and batch recorded show they reached the background build
    started = subprocess.run([sys.executable, "-m", "explorer.cli", *args, "--background"], env=env,
                             capture_output=True, text=True, timeout=120)
    assert started.returncode == 0 and "build.log" in started.stdout, started.stderr
    first = demo_build.running(work)
    assert first is not None
    os.kill(first, signal.SIGSTOP)  # held (still alive) while a second build is asked for: no race with its end
    try:
        again = subprocess.run([sys.executable, "-m", "explorer.cli", *args, "--background"], env=env,
                               capture_output=True, text=True, timeout=120)
    finally:
        os.kill(first, signal.SIGCONT)
    assert again.returncode != 0 and "already running" in (again.stdout + again.stderr)
    deadline = time.monotonic() + 240
    while demo_build.running(work) is not None and time.monotonic() < deadline:
        time.sleep(0.5)
    assert demo_build.running(work) is None and (out / "clip-base.safetensors").exists()
    status = demo_build.status(work)
    assert "not running" in status and "clip-base: built" in status
    recipe = json.loads((out / "clip-base.json").read_text())["recipe"]
    assert recipe["steps"] == 3 and recipe["batch_size"] == 4  # --min-steps and --max-batch reached the run


def test_a_gpu_asked_for_where_there_is_none_is_refused_before_anything_runs(tmp_path, monkeypatch):
    import torch

    from explorer.core.errors import ConfigError
    from explorer.training.loop import TrainingError

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(TrainingError, match="no CUDA GPU"):
        build_demo(out=tmp_path / "demo", work=tmp_path / "work", n_scenes=12, device="cuda", progress=False,
                   log=lambda _: None)
    assert not (tmp_path / "work").exists()  # refused before the world is written
    with pytest.raises(TrainingError, match="not 'tpu'"):
        build_demo(out=tmp_path / "demo", work=tmp_path / "work", n_scenes=12, device="tpu", progress=False)
    with pytest.raises(ConfigError, match="max_batch is at least 2"):
        build_demo(out=tmp_path / "demo", work=tmp_path / "work", n_scenes=12, max_batch=1, progress=False)
    assert not (tmp_path / "work").exists()
    from explorer.cli import main

    assert main(["zoo", "build-demo", "--out", str(tmp_path / "demo"), "--max-batch", "1"]) == 2


@pytest.mark.skipif(not __import__("torch").cuda.is_available(), reason="needs a CUDA GPU")
def test_the_stages_learning_curves_are_measured_where_the_model_trains(tmp_path, monkeypatch):
    """On a GPU the base's stages train there, and their curve hooks score the model where it is."""
    monkeypatch.setattr("explorer.training.demo_zoo.CURVE_EVERY", 1)
    build_demo(out=tmp_path / "demo", work=tmp_path / "work", n_scenes=40, scale=0.001, only=["clip-base"],
               progress=False, log=lambda _: None, min_steps=2, device="cuda")
    build = json.loads((tmp_path / "demo" / "BUILD.txt").read_text())
    assert {run["device"] for run in build["runs"].values()} == {"cuda"}
    for stage in ("clip-see", "clip-base"):  # a point at every step (CURVE_EVERY 1), each scored on the GPU
        points = (tmp_path / "work" / "runs" / stage / "curves.jsonl").read_text().splitlines()
        assert [json.loads(point)["step"] for point in points] == list(range(1, build["runs"][stage]["steps"] + 1))


def test_an_unreadable_build_state_is_one_clear_error(tmp_path):
    from explorer.training.demo_zoo import BuildState
    from explorer.training.loop import TrainingError

    path = tmp_path / "build-state.json"
    path.write_text("{half a file")
    with pytest.raises(TrainingError, match="remove it to rebuild"):
        BuildState(path)
    assert path.read_text() == "{half a file"  # left as it was


def test_a_kept_world_of_another_size_stops_the_build(tmp_path):
    """The world a build keeps must be the one asked for: runs kept on another world would be published as
    trained on this one."""
    from explorer.training.demo_world import write_world
    from explorer.training.loop import TrainingError

    data = write_world(tmp_path, lambda _: None, n_scenes=12)
    assert write_world(tmp_path, lambda _: None, n_scenes=12) == data  # the same world: kept
    scenes = (data / "scenes.jsonl").read_text()
    with pytest.raises(TrainingError, match="another world") as caught:
        write_world(tmp_path, lambda _: None, n_scenes=24)
    assert "12)" in str(caught.value) and "24)" in str(caught.value)  # both worlds, so the user sees which
    assert (data / "scenes.jsonl").read_text() == scenes  # nothing rewritten


def test_runs_built_on_another_world_are_not_kept(tmp_path):
    """A world written afresh at another size (its folder removed) retrains every run, and their minutes go."""
    from explorer.training.demo_world import world_record
    from explorer.training.demo_zoo import BuildState, demo_run

    state = BuildState(tmp_path / "build-state.json")
    state.on_world(world_record(12), print)
    state.finish(demo_run("clip-see"), 2, 64, 1.0)
    state.add("clip-see", 60.0)
    BuildState(tmp_path / "build-state.json").on_world(world_record(12), print)  # the same world: kept
    kept = BuildState(tmp_path / "build-state.json")
    assert kept.finished(demo_run("clip-see")) and kept.world == world_record(12)
    kept.on_world(world_record(24), print)
    again = BuildState(tmp_path / "build-state.json")  # what a resumed build reads
    assert not again.finished(demo_run("clip-see")) and again.seconds == {}
    assert again.world["scenes"] == 24


def test_a_changed_run_retrains_every_run_that_starts_from_it(monkeypatch):
    """A fine-tune counts as built only for its base's recipe too: a new base is not kept under old fine-tunes."""
    from dataclasses import replace

    from explorer.training import demo_zoo

    before = {run.name: demo_zoo._recipe_key(run) for run in demo_zoo.RUNS}
    changed = tuple(replace(run, lr_backbone=run.lr_backbone * 2) if run.name == "clip-base" else run
                    for run in demo_zoo.RUNS)
    monkeypatch.setattr(demo_zoo, "RUNS", changed)
    after = {run.name: demo_zoo._recipe_key(run) for run in demo_zoo.RUNS}
    moved = {name for name in before if before[name] != after[name]}
    # the changed stage and every fine-tune of the base; not the stage before, nor SEPS
    assert {"clip-base", "longclip", "mulclip", "goal", "flair"} <= moved
    assert "clip-see" not in moved and "seps" not in moved


def test_a_run_folder_the_build_state_never_recorded_is_not_resumed(tmp_path):
    """Resuming a folder of unknown origin would publish its old weights under the new recipe (seen when a
    state file lost its fine-tunes' records while their finished folders stayed): only a folder begun with
    this very recipe resumes."""
    from dataclasses import replace

    from explorer.training.demo_zoo import BuildState, demo_run

    state = BuildState(tmp_path / "build-state.json")
    run = demo_run("longclip")
    assert state.begin(run)  # no record: whatever folder is there is stale
    assert not BuildState(tmp_path / "build-state.json").begin(run)  # begun with this recipe: resume it
    assert state.begin(replace(run, steps=run.steps + 1))  # another recipe: stale again
