"""Truth that travels with the example (issue 58, part 7): a shipped scene's truth is found from the files
themselves (a manifest beside the picture) or by its digest from the package, on a fresh home folder where the
app never ran, by the library, the views and `explorer figure`; the demo models' "outside that world" line is
for pictures that are.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from PIL import Image

from explorer.data import example_scenes
from explorer.data.example_scenes import example_scene, scene_digests
from explorer.data.examples import SYNTHETIC
from explorer.grounding.truth import find_truth, is_known_scene
from explorer.views.maps_view import MapsView, ModelMaps, find_view_truth, picture_in_world
from explorer.views.settings import ViewSettings

REPO = Path(__file__).resolve().parents[1]
ASSETS = REPO / "assets"
SCENE = "synthetic-test-000001"


@pytest.fixture(autouse=True)
def fresh_home(monkeypatch, tmp_path) -> Path:
    """A home folder where `python app.py` never ran: no registry of the examples' truth."""
    home = tmp_path / "home"
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("EXPLORER_HOME", str(home / "explorer"))
    return home


def caption_and_sentences() -> tuple[str, list[str]]:
    manifest = json.loads((ASSETS / "manifest.json").read_text())
    entry = next(e for e in manifest["examples"] if e["name"] == SCENE)
    return entry["caption"], [s["text"] for s in entry["sentences"]]


def moved_picture(tmp_path: Path) -> Path:
    """The scene's picture copied alone into a folder of its own (an upload, a download): no manifest beside."""
    copy = tmp_path / "elsewhere" / "upload.png"
    copy.parent.mkdir()
    shutil.copy(ASSETS / f"{SCENE}.png", copy)
    return copy


def test_a_shipped_scene_is_known_by_its_digest_on_a_fresh_home_through_the_library(tmp_path):
    picture = Image.open(moved_picture(tmp_path)).convert("RGB")
    _, sentences = caption_and_sentences()
    registry = tmp_path / "home" / "explorer" / "examples" / "truth"
    assert not registry.exists()
    truth = find_truth(picture, sentences, registry)
    assert truth is not None and truth.source == "synthetic scene test-000001"
    assert all(mask is not None and mask.any() for mask in truth.masks)
    assert (registry / next(registry.iterdir()).name).suffix == ".npz"  # stored for the next look-up


def test_the_views_find_it_and_the_demo_warning_is_only_for_pictures_outside_the_world(tmp_path):
    copy = moved_picture(tmp_path)
    picture = Image.open(copy).convert("RGB")
    caption, sentences = caption_and_sentences()
    settings = ViewSettings(image=str(copy), caption=caption)
    truth, truth_file = find_view_truth(settings, picture, sentences, None)
    assert truth is not None and truth_file is not None and truth_file.is_file()
    demo = [ModelMaps(name="demo-clip-base", result=None, synthetic_only=True)]
    assert MapsView(picture=picture, sentences=sentences, models=demo, truth=truth).synthetic_warning() is None
    # an edited caption (no sentence with truth) on a scene of the world: no "outside that world" line
    edited = ["A cat sleeps on the mat."]
    assert find_view_truth(settings, picture, edited, None)[0] is None
    assert picture_in_world(settings, picture)
    assert MapsView(picture=picture, sentences=edited, models=demo, in_world=True).synthetic_warning() is None
    # a photo is outside that world: the line is there
    photo = Image.open(ASSETS / "astronaut.png").convert("RGB")
    photo_settings = ViewSettings(image=str(ASSETS / "astronaut.png"), caption="An astronaut.")
    assert not picture_in_world(photo_settings, photo) and example_scene(photo, ASSETS / "astronaut.png") is None
    warning = MapsView(picture=photo, sentences=["An astronaut."], models=demo).synthetic_warning()
    assert warning is not None and "outside that world" in warning


def test_a_scene_is_known_from_the_manifest_beside_it_without_the_package_table(tmp_path, monkeypatch):
    monkeypatch.setattr(example_scenes, "DIGESTS", tmp_path / "no-table.json")
    assert scene_digests() == {}
    copy = tmp_path / "assets"
    shutil.copytree(ASSETS, copy)
    picture = Image.open(copy / f"{SCENE}.png").convert("RGB")
    assert example_scene(picture) is None  # no table, no file: unknown
    found = example_scene(picture, copy / f"{SCENE}.png")
    assert found is not None and found.id == "test-000001"
    assert is_known_scene(picture, tmp_path / "registry", copy / f"{SCENE}.png")


def test_the_package_table_names_the_examples_scenes():
    """`explorer assets write` rewrites explorer/data/example_scenes.json; it must match the world's scenes."""
    from explorer.core.images import image_digest

    table = scene_digests()
    assert sorted(table.values()) == list(range(SYNTHETIC["count"]))
    for index in range(SYNTHETIC["count"]):
        with Image.open(ASSETS / f"synthetic-test-{index:06d}.png") as shipped:
            assert table[image_digest(shipped.convert("RGB"))] == index


@pytest.mark.slow
def test_explorer_figure_maps_finds_the_truth_on_a_fresh_home(tmp_path, capsys):
    """The figure command on the shipped example, with a demo model: IoU under the maps, no world warning."""
    from explorer.cli import main

    copy = moved_picture(tmp_path)
    caption, _ = caption_and_sentences()
    out = tmp_path / "maps.png"
    code = main(["--checkpoints", str(REPO / "checkpoints" / "demo"), "figure", "maps", str(copy), "--caption", caption,
                 "--model", "demo-clip-base", "--out", str(out), "--dpi", "50"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert "outside that world" not in captured.err
    saved = json.loads(out.with_name("maps.png.json").read_text())
    assert saved["image"] == str(copy)
