"""The page's examples are files in ``assets/`` (``explorer assets write``): the command reproduces the
committed folder, the page opens on them (and says so plainly when they are missing), the photos are
labelled as meaningless for the demo models, and real checkpoints come first in the model lists."""

from __future__ import annotations

from pathlib import Path

import gradio as gr
import numpy as np
import pytest
from PIL import Image

from explorer.cli import main
from explorer.data import generate_scenes
from explorer.data.examples import ExamplesError, read_examples
from explorer.ui import examples as page
from explorer.zoo import Manifest, Zoo

REPO = Path(__file__).resolve().parents[1]
ASSETS = REPO / "assets"


def files(folder: Path) -> dict[str, Path]:
    return {path.relative_to(folder).as_posix(): path for path in sorted(folder.rglob("*")) if path.is_file()}


def pixels(path: Path) -> tuple[str, tuple[int, int], bytes]:
    with Image.open(path) as image:
        return image.mode, image.size, image.tobytes()


def test_the_command_writes_the_committed_folder_again(tmp_path, capsys):
    """The folder cannot drift from its generator: the same files, the same text, the same pixels."""
    out = tmp_path / "assets"
    assert main(["assets", "write", "--out", str(out)]) == 0
    assert f"to {out}" in capsys.readouterr().out
    committed, written = files(ASSETS), files(out)
    assert sorted(written) == sorted(committed)
    for name, path in committed.items():
        if name.endswith(".png"):
            assert pixels(written[name]) == pixels(path), name
        else:
            assert written[name].read_text(encoding="utf-8") == path.read_text(encoding="utf-8"), name
    assert sum(path.stat().st_size for path in committed.values()) < 1_000_000  # the folder stays small


def test_a_folder_that_cannot_be_written_is_an_error_line(tmp_path, capsys):
    blocked = tmp_path / "a-file"
    blocked.write_text("not a folder")
    assert main(["assets", "write", "--out", str(blocked)]) == 2
    assert "cannot write the examples into" in capsys.readouterr().err


def test_writing_again_removes_what_the_old_manifest_listed_and_keeps_the_rest(tmp_path, monkeypatch):
    from explorer.data import examples

    out = tmp_path / "assets"
    (out / "masks").mkdir(parents=True)
    mine = out / "notes.md"
    mine.write_text("the owner's own file")
    examples.write_examples(out)
    monkeypatch.setattr(examples, "PHOTOS", {k: v for k, v in examples.PHOTOS.items() if k != "rocket"})
    examples.write_examples(out)
    assert not (out / "rocket.png").exists() and not (out / "rocket.txt").exists()
    assert mine.read_text() == "the owner's own file" and (out / "coffee.png").is_file()


def test_the_scenes_carry_the_worlds_own_truth():
    """Read back from the files, each scene is the generator's: its picture, caption, sentences and masks."""
    scenes = read_examples(ASSETS)
    synthetic = [example for example in scenes if example.kind == "synthetic"]
    assert [e.kind for e in scenes] == ["synthetic"] * len(synthetic) + ["photo"] * (len(scenes) - len(synthetic))
    for example, scene in zip(synthetic, generate_scenes(len(synthetic), seed=0, image_size=224, split="test")):
        assert example.caption == scene.long_caption and list(example.sentence_texts) == scene.sentence_texts
        assert np.array_equal(np.asarray(example.image), np.asarray(scene.image))
        assert np.array_equal(example.sentence_masks(), scene.sentence_masks())
    assert all(e.licence for e in scenes)


def test_the_page_opens_on_the_files_and_finds_their_truth(tmp_path, monkeypatch):
    from explorer.grounding.truth import find_truth

    monkeypatch.setattr(page, "truth_dir", lambda: tmp_path / "truth")
    found = page.page_examples(ASSETS)
    assert not found.problem and found.first == (ASSETS / "synthetic-test-000000.png",
                                                 (ASSETS / "synthetic-test-000000.txt").read_text().strip())
    assert [p.name for p, _ in found.photos] == ["astronaut.png", "chelsea.png", "coffee.png", "rocket.png"]
    first = read_examples(ASSETS)[0]
    truth = find_truth(first.image, list(first.sentence_texts), tmp_path / "truth")
    assert truth is not None and all(mask is not None and mask.any() for mask in truth.masks)
    assert truth.source == "synthetic scene test-000000"  # the world's own id, as the page always said


@pytest.mark.parametrize("damage", ["absent", "empty", "bad json", "missing picture"])
def test_a_missing_or_damaged_folder_is_a_line_on_the_page(tmp_path, monkeypatch, damage):
    folder = tmp_path / "assets"
    if damage != "absent":
        folder.mkdir()
    if damage == "bad json":
        (folder / "manifest.json").write_text("{not json")
    if damage == "missing picture":
        from explorer.data.examples import write_examples

        write_examples(folder)
        (folder / "chelsea.png").unlink()
    with pytest.raises(ExamplesError, match="explorer assets write"):
        read_examples(folder)
    monkeypatch.setenv("EXPLORER_ASSETS", str(folder))
    found = page.page_examples()
    assert found.problem.startswith("No examples:") and found.first is None
    with gr.Blocks() as blocks:  # the tab still builds, with no picture and the message
        from explorer.ui import grounding_tab
        from explorer.serve.access import Access

        zoo = Zoo(tmp_path / "zoo")
        grounding_tab.build(zoo, grounding_tab.MapCache(), Access.for_app(zoo.root))
    notes = [b for b in blocks.blocks.values() if getattr(b, "elem_id", None) == "examples-note"]
    assert len(notes) == 1 and "explorer assets write" in notes[0].value


def test_the_photos_say_the_demo_models_maps_mean_nothing_on_them(tmp_path, monkeypatch):
    from explorer.ui import grounding_tab
    from explorer.serve.access import Access

    monkeypatch.setattr(page, "truth_dir", lambda: tmp_path / "truth")
    zoo = Zoo(tmp_path / "zoo")
    with gr.Blocks() as blocks:
        grounding_tab.build(zoo, grounding_tab.MapCache(), Access.for_app(zoo.root))
    order = list(blocks.blocks.values())
    photos = [i for i, b in enumerate(order) if isinstance(b, gr.Dataset) and "photos" in str(b.label)]
    note = [i for i, b in enumerate(order) if getattr(b, "elem_id", None) == "photo-note"]
    assert len(photos) == 1 and len(note) == 1 and 0 < note[0] - photos[0] <= 2  # right below the photos
    text = order[note[0]].value
    assert "trained on synthetic shapes" in text and "mean nothing" in text and "real checkpoint" in text


def test_real_checkpoints_come_first_in_the_model_lists(tmp_path):
    from explorer.ui import grounding_tab, retrieval_tab

    root = tmp_path / "zoo"
    for name in ("clip-base", "mulclip"):  # the demo zoo's own manifests, in a folder that sorts first
        manifest = Manifest.read(REPO / "checkpoints" / "demo" / f"{name}.json")
        manifest.write(root / "demo" / f"{name}.json")
    Manifest(name="tiny", method="longclip", weights="builtin:tiny-clip", trained=False).write(root / "tiny.json")
    zoo = Zoo(root)
    before = ["demo-clip-base", "demo-mulclip", "tiny"]
    assert [n for _, n in grounding_tab.model_choices(zoo)] == before  # no real one: folder order
    Manifest(name="zz-openai-b16", method="clip", weights=str(tmp_path / "ViT-B-16.pt"),
             source="OpenAI CLIP ViT-B/16 release").write(root / "zz-openai-b16.json")
    for tab in (grounding_tab, retrieval_tab):
        assert [n for _, n in tab.model_choices(zoo)] == ["zz-openai-b16", *before]


def test_a_demo_model_is_told_by_its_manifest():
    demo = [Manifest.read(path) for path in sorted((REPO / "checkpoints" / "demo").glob("*.json"))]
    assert demo and all(m.is_demo and not m.is_real for m in demo)
    untrained = Manifest.read(REPO / "checkpoints" / "tiny-untrained.json")
    assert not untrained.is_demo and not untrained.is_real
    assert Manifest(name="x", method="clip", weights="x.pt", source="a release").is_real
    job = Manifest(name="j", method="clip", weights="x.safetensors", source="trained by explorer: explorer train ...")
    assert job.is_real  # a model trained here on the user's own data is not the demo's


def test_a_public_page_names_no_server_folder_when_the_examples_are_missing(tmp_path, monkeypatch):
    from explorer.ui import grounding_tab
    from explorer.serve.access import Access

    folder = tmp_path / "server" / "private" / "assets"
    monkeypatch.setenv("EXPLORER_ASSETS", str(folder))
    zoo = Zoo(tmp_path / "zoo")
    notes = {}
    for public in (False, True):
        with gr.Blocks() as blocks:
            grounding_tab.build(zoo, grounding_tab.MapCache(), Access.for_app(zoo.root, public=public))
        notes[public] = next(b.value for b in blocks.blocks.values() if getattr(b, "elem_id", None) == "examples-note")
    assert str(folder) in notes[False]  # the owner is told where it looked
    assert str(tmp_path) not in notes[True] and "explorer assets write" in notes[True]
