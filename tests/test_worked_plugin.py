"""The worked plugin, examples/plugins/explorer-dreamlip (DreamLIP, ECCV 2024), as a plugin: CI installs it
(scripts/test.sh); where it is not installed the test puts the example's folder on the path with its entry
point. Its own tests (the formulas) are in examples/plugins/explorer-dreamlip/tests."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from explorer.cli import main
from explorer.models.methods import get_method, method_entries, plugins
from plugin_fixtures import on_path, write_dist_info  # noqa: F401  (on_path: a fixture)

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "plugins" / "explorer-dreamlip"
TINY = {"size": "tiny", "batch_size": 4, "cpu_threads": 1, "evaluate": False}


@pytest.fixture
def dreamlip(tmp_path, on_path) -> str:
    if "dreamlip" not in plugins.entry_point_names():
        write_dist_info(tmp_path / "site", "explorer-dreamlip", "0.1.0",
                        {"dreamlip": "explorer_dreamlip.method:DreamLipMethod"})
        on_path(EXAMPLE, tmp_path / "site")
    return "dreamlip"


def test_dreamlip_is_a_plugin_that_passes_the_kit(dreamlip, capsys):
    entry = next(e for e in method_entries() if e.name == dreamlip)
    assert entry.loaded and entry.source == "explorer-dreamlip 0.1.0", entry
    cls = get_method(dreamlip)
    assert cls.__module__ == "explorer_dreamlip.method" and cls.preferred_native_map == "grouping"
    assert main(["check-method", dreamlip]) == 0
    assert "11 of 11 checks pass" in capsys.readouterr().out


@pytest.mark.slow
def test_dreamlip_trains_through_jobs_on_the_sentences_of_the_world(dreamlip, jobs, world):
    from explorer.zoo import Zoo

    run = jobs.wait(jobs.submit(dreamlip, world, max_steps=2, gpus=0, overrides=TINY).id, timeout=240)
    assert run.status == "done", (run.error, jobs.logs(run.id, tail=20))
    losses = [row for row in jobs.metrics(run.id)]
    assert [row["step"] for row in losses] == [1, 2]
    assert all(key in losses[0] for key in ("loss/multi-positive", "loss/grouping")), losses[0]
    model = Zoo(os.environ["EXPLORER_CHECKPOINTS"]).load(run.zoo_name)
    assert model.method_name == dreamlip and "grouping" in model.map_kinds


@pytest.mark.slow
def test_dreamlip_joins_the_demo_zoo_by_its_class_recipe(dreamlip, tmp_path):
    import explorer
    from explorer.training.demo_zoo import build_demo, demo_run

    run = demo_run(dreamlip)  # from DreamLipMethod.demo_recipe: not in the recipe table
    assert (run.method, run.init, run.steps) == (dreamlip, "clip-base", 200)
    written = build_demo(out=tmp_path / "demo", work=tmp_path / "work", n_scenes=40, scale=0.001,
                         only=["clip-base", dreamlip], progress=False, log=lambda _: None, min_steps=2, max_batch=4)
    assert [p.name for p in written] == ["clip-base.safetensors", "dreamlip.safetensors"]
    from explorer.zoo import Manifest

    model = explorer.load(tmp_path / "demo" / "dreamlip.json", device="cpu")
    assert model.method_name == dreamlip and model.key_report.ok
    manifest = Manifest.read(tmp_path / "demo" / "dreamlip.json")
    assert "fine-tuned from demo clip-base with DreamLIP's losses" in manifest.source and manifest.recipe["steps"] == 2
