"""Datasets on disk: the synthetic layout round trip, and DOCCI / Urban1k written and read in their real layouts
(read by ``explorer.data.retrieval_sets``: one reader per layout)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from explorer.core.errors import ExplorerError
from explorer.data import (DatasetError, detect_layout, export_docci, export_urban1k, generate_scene, read_dataset,
                           read_docci, read_records, read_urban1k, write_dataset)
from explorer.data.retrieval_sets import docci, urban1k

SIZE = 48


@pytest.fixture(scope="module")
def written(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("synthetic")
    counts = write_dataset(root, 12, seed=3, image_size=SIZE, split_fractions=(0.5, 0.25, 0.25))
    assert counts == {"train": 6, "val": 3, "test": 3}
    return root


def _pixels(image: Image.Image) -> np.ndarray:
    return np.asarray(image.convert("RGB"))


# -- the synthetic layout -----------------------------------------------------------------------------------

def test_write_dataset_writes_the_documented_layout(written):
    assert (written / "layout.md").read_text().startswith("# Synthetic long-caption world")
    info = json.loads((written / "info.json").read_text())
    assert info["format"] == "explorer-synthetic" and info["seed"] == 3 and info["image_size"] == SIZE
    lines = [json.loads(line) for line in (written / "scenes.jsonl").read_text().splitlines()]
    assert [r["split"] for r in lines] == ["train"] * 6 + ["val"] * 3 + ["test"] * 3
    for record in lines:
        assert record["image"] == f"images/{record['id']}.png" and record["mask"] == f"masks/{record['id']}.png"
        with Image.open(written / record["image"]) as image:
            assert image.mode == "RGB" and image.size == (SIZE, SIZE)
        with Image.open(written / record["mask"]) as mask:
            assert mask.mode == "L"
            labels = np.asarray(mask)
        assert set(np.unique(labels)) == set(range(len(record["objects"]) + 1))
        for key in ("objects", "sentences", "long_caption", "short_caption", "dense_caption", "hard_negatives",
                    "background", "seed"):
            assert record[key]
        assert all(len(o["box"]) == 4 and o["label"] == o["index"] + 1 for o in record["objects"])
        assert all(isinstance(s["objects"], list) and s["text"] for s in record["sentences"])


def test_read_dataset_round_trips_pixels_masks_and_truth(written):
    scenes = read_dataset(written)
    assert len(scenes) == 12 and len(read_dataset(written, "test")) == 3 and len(read_dataset(written, "val")) == 3
    assert [s.id for s in read_dataset(written / "scenes.jsonl", "train")] == [f"train-{i:06d}" for i in range(6)]
    for scene in scenes:
        again = generate_scene(scene.seed, SIZE)
        assert np.array_equal(_pixels(scene.image), _pixels(again.image))  # PNG is lossless
        assert np.array_equal(scene.labels, again.labels) and np.array_equal(scene.masks, again.masks)
        assert scene.objects == again.objects and scene.sentences == again.sentences
        assert scene.hard_negatives == again.hard_negatives and scene.background == again.background
        assert (scene.long_caption, scene.short_caption, scene.dense_caption) == \
            (again.long_caption, again.short_caption, again.dense_caption)


def test_the_test_split_does_not_change_when_the_dataset_grows(written, tmp_path):
    write_dataset(tmp_path, 40, seed=3, image_size=SIZE, split_fractions={"train": 0.85, "test": 0.15})
    small, large = read_dataset(written, "test"), read_dataset(tmp_path, "test")
    assert len(large) == 6 and read_dataset(tmp_path, "val") == []
    for a, b in zip(small, large):
        assert a.id == b.id and a.long_caption == b.long_caption
        assert np.array_equal(_pixels(a.image), _pixels(b.image))


def test_write_dataset_never_overwrites_silently(tmp_path):
    write_dataset(tmp_path, 2, seed=0, image_size=32)
    with pytest.raises(DatasetError, match="overwrite"):
        write_dataset(tmp_path, 2, seed=1, image_size=32)
    write_dataset(tmp_path, 3, seed=1, image_size=32, split_fractions=(1, 0, 0), overwrite=True)
    assert len(read_dataset(tmp_path)) == 3 and len(list((tmp_path / "images").iterdir())) == 3
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "scenes.jsonl").write_text("")
    (foreign / "images").mkdir()
    (foreign / "images" / "keep.png").write_bytes(b"x")
    with pytest.raises(DatasetError, match="did not write"):
        write_dataset(foreign, 1, overwrite=True)
    assert (foreign / "images" / "keep.png").exists()
    with pytest.raises(ExplorerError):
        write_dataset(tmp_path / "bad", 4, split_fractions=(0.5, 0.5, 0.5))


def test_read_dataset_reports_bad_input(tmp_path):
    with pytest.raises(DatasetError, match="no scenes.jsonl"):
        read_dataset(tmp_path)
    (tmp_path / "scenes.jsonl").write_text('{"id": "x"}\n')
    with pytest.raises(DatasetError, match="line 1"):
        read_dataset(tmp_path)
    with pytest.raises(DatasetError, match="unknown split"):
        read_dataset(tmp_path, "validation")
    assert issubclass(DatasetError, ExplorerError)


# -- DOCCI --------------------------------------------------------------------------------------------------

def test_export_docci_writes_the_docci_layout_and_reads_back(written, tmp_path):
    scenes = read_dataset(written)
    jsonlines = export_docci(scenes, tmp_path)
    assert jsonlines == tmp_path / "docci_descriptions.jsonlines"
    lines = [json.loads(line) for line in jsonlines.read_text().splitlines()]
    assert len(lines) == 12
    assert [line["split"] for line in lines] == ["train"] * 6 + ["qual_dev"] * 3 + ["test"] * 3
    assert [line["example_id"] for line in lines[:2]] == ["train_00000", "train_00001"]
    assert lines[9]["example_id"] == "test_00000"
    for line, scene in zip(lines, scenes):
        assert line["image_file"] == line["example_id"] + ".jpg" and line["description"] == scene.long_caption
        assert line["explorer_scene_id"] == scene.id
        with Image.open(tmp_path / "images" / line["image_file"]) as image:
            assert image.format == "JPEG" and image.size == (SIZE, SIZE)
            assert np.abs(_pixels(image).astype(int) - _pixels(scene.image)).mean() < 8
    records = read_docci(tmp_path, split="test")
    assert [r.long_caption for r in records] == [s.long_caption for s in scenes[9:]]
    assert all(r.split == "test" and r.source == "docci" for r in records)
    assert len(read_docci(tmp_path)) == 12 and len(read_docci(jsonlines, split="qual_dev")) == 3
    with pytest.raises(DatasetError, match="overwrite"):
        export_docci(scenes, tmp_path)


DOCCI_FIXTURE = (  # four lines as DOCCI ships them (one per split), plus a key the readers must ignore
    '{"example_id": "train_00000", "split": "train", "image_file": "train_00000.jpg", '
    '"description": "A red mailbox stands on a wooden post. Behind it, a white fence runs to the left."}\n'
    '{"example_id": "test_00000", "split": "test", "image_file": "test_00000.jpg", '
    '"description": "A close-up view of a gray cat asleep on a blue cushion. Its tail curls over its nose.", '
    '"cluster_id": "an extra key"}\n'
    '{"example_id": "qual_dev_00000", "split": "qual_dev", "image_file": "qual_dev_00000.jpg", '
    '"description": "Three green apples sit in a white bowl."}\n'
    '{"example_id": "qual_test_00000", "split": "qual_test", "image_file": "qual_test_00000.jpg", '
    '"description": "A yellow kayak rests on a pebble beach."}\n'
)


def _docci_fixture(root: Path) -> Path:
    (root / "images").mkdir(parents=True)
    (root / "docci_descriptions.jsonlines").write_text(DOCCI_FIXTURE, encoding="utf-8")
    for i, name in enumerate(("train_00000", "test_00000", "qual_dev_00000", "qual_test_00000")):
        Image.new("RGB", (40 + i, 30), (40 * i, 90, 200)).save(root / "images" / f"{name}.jpg", "JPEG")
    return root


def test_read_docci_reads_the_real_layout(tmp_path):
    root = _docci_fixture(tmp_path / "docci")
    records = read_docci(root)
    assert [r.id for r in records] == ["train_00000", "test_00000", "qual_dev_00000", "qual_test_00000"]
    assert [r.split for r in records] == ["train", "test", "qual_dev", "qual_test"]
    test = read_docci(root, split="test")
    assert len(test) == 1 and test[0].long_caption.startswith("A close-up view of a gray cat")
    assert test[0].image_path == root / "images" / "test_00000.jpg" and test[0].load_image().size == (41, 30)
    assert read_records(root, "qual_test")[0].long_caption == "A yellow kayak rests on a pebble beach."
    assert detect_layout(root) == "docci" and detect_layout(root / "docci_descriptions.jsonlines") == "docci"
    moved = tmp_path / "test_images"
    (root / "images").rename(moved)
    assert len(read_docci(root, images_dir=moved)) == 4
    with pytest.raises(DatasetError, match="no images/ folder"):
        read_docci(root)
    (moved / "test_00000.jpg").unlink()
    with pytest.raises(DatasetError, match="1 image missing.*test_00000.jpg.*missing='skip'"):
        read_docci(root, images_dir=moved)
    kept = read_docci(root, images_dir=moved, missing="skip")
    assert [r.id for r in kept] == ["train_00000", "qual_dev_00000", "qual_test_00000"]
    with pytest.raises(DatasetError, match="no split"):
        read_docci(root, split="val")


def test_read_docci_is_the_retrieval_sets_reader(tmp_path):
    """One DOCCI reader: the records are exactly what ``retrieval_sets.docci`` reads, split by split."""
    root = _docci_fixture(tmp_path / "docci")
    for split in docci.SPLITS:
        data = docci.read(root, split)
        assert [(r.id, r.image_path, r.long_caption) for r in read_docci(root, split)] == \
            list(zip(data.image_ids, data.images, data.captions))


def test_read_docci_reports_malformed_lines(tmp_path):
    (tmp_path / "images").mkdir()
    (tmp_path / "docci_descriptions.jsonlines").write_text('{"example_id": "test_00000", "split": "test", '
                                                           '"image_file": "test_00000.jpg"}\n')
    with pytest.raises(DatasetError, match="line 1.*description"):
        read_docci(tmp_path)
    Image.new("RGB", (8, 8)).save(tmp_path / "images" / "test_00001.jpg")
    with open(tmp_path / "docci_descriptions.jsonlines", "a", encoding="utf-8") as out:
        out.write('{"example_id": "test_00001", "split": "test", "image_file": "test_00001.jpg", '
                  '"description": "kept"}\n')
    with pytest.raises(DatasetError, match=r"1 bad line.*jsonlines:1 \(bad line: no description"):
        read_docci(tmp_path)
    assert [r.long_caption for r in read_docci(tmp_path, missing="skip")] == ["kept"]
    (tmp_path / "docci_descriptions.jsonlines").write_text("not json\n")
    with pytest.raises(DatasetError, match="line 1"):
        read_docci(tmp_path)
    with pytest.raises(DatasetError, match="no docci_descriptions"):
        read_docci(tmp_path / "elsewhere")


# -- Urban1k ------------------------------------------------------------------------------------------------

def test_export_urban1k_writes_the_urban1k_layout_and_reads_back(written, tmp_path):
    scenes = read_dataset(written, "test")
    root = export_urban1k(scenes, tmp_path / "Urban1k")
    assert sorted(p.name for p in (root / "image").iterdir()) == ["1.jpg", "2.jpg", "3.jpg"]
    assert sorted(p.name for p in (root / "caption").iterdir()) == ["1.txt", "2.txt", "3.txt"]
    assert (root / "caption" / "2.txt").read_text(encoding="utf-8") == scenes[1].long_caption
    with Image.open(root / "image" / "1.jpg") as image:
        assert image.format == "JPEG"
    records = read_urban1k(root)
    assert [r.id for r in records] == ["1", "2", "3"]
    assert [r.long_caption for r in records] == [s.long_caption for s in scenes]
    assert all(r.split == "test" and r.source == "urban1k" for r in records)
    with pytest.raises(DatasetError, match="overwrite"):
        export_urban1k(scenes, root)
    export_urban1k(scenes[:2], root, overwrite=True)
    assert len(read_urban1k(root)) == 2


def _urban1k_fixture(root: Path) -> Path:
    (root / "image").mkdir(parents=True)
    (root / "caption").mkdir()
    captions = {"1": "The image shows a busy street at dusk. Cars wait at a red light.\n",
                "2": "A narrow alley with laundry hanging between brick buildings.",
                "10": "A wide square in front of a cathedral. Pigeons gather near a fountain.\n"}
    for stem, text in captions.items():
        (root / "caption" / f"{stem}.txt").write_text(text, encoding="utf-8")
        Image.new("RGB", (32, 24), (120, 120, int(stem) * 10)).save(root / "image" / f"{stem}.jpg", "JPEG")
    return root


def test_read_urban1k_reads_the_real_layout(tmp_path):
    root = _urban1k_fixture(tmp_path / "Urban1k")
    records = read_urban1k(root)
    assert [r.id for r in records] == ["1", "2", "10"]  # numeric order, not 1, 10, 2
    assert records[0].long_caption == "The image shows a busy street at dusk. Cars wait at a red light."
    assert records[2].image_path == root / "image" / "10.jpg" and records[2].load_image().size == (32, 24)
    assert detect_layout(root) == "urban1k" and len(read_records(root)) == 3
    with pytest.raises(DatasetError, match="only split is 'test'"):
        read_urban1k(root, split="train")
    (root / "image" / "2.jpg").unlink()
    with pytest.raises(DatasetError, match="1 image missing"):
        read_urban1k(root)
    assert [r.id for r in read_urban1k(root, missing="skip")] == ["1", "10"]
    (root / "caption" / "1.txt").write_text("  \n")
    with pytest.raises(DatasetError, match="caption empty"):
        read_urban1k(root)
    assert [r.id for r in read_urban1k(root, missing="skip")] == ["10"]
    with pytest.raises(DatasetError, match="not an Urban1k folder"):
        read_urban1k(tmp_path)


def test_read_urban1k_is_the_retrieval_sets_reader(tmp_path):
    """One Urban1k reader: the first line of each caption file (as the official scripts), and a
    caption file that is not UTF-8 is reported, not read with replacement characters."""
    root = _urban1k_fixture(tmp_path / "Urban1k")
    (root / "caption" / "2.txt").write_text("First line.\nA second line the official scripts never read.\n")
    (root / "caption" / "10.txt").write_bytes("Caf\xe9 on a corner.".encode("latin-1"))
    with pytest.raises(DatasetError, match=r"10\.txt \(caption file is not UTF-8\)"):
        read_urban1k(root)
    records = read_urban1k(root, missing="skip")
    assert [(r.id, r.long_caption) for r in records] == [
        ("1", "The image shows a busy street at dusk. Cars wait at a red light."), ("2", "First line.")]
    data = urban1k.read(root)
    assert [(r.id, r.image_path, r.long_caption) for r in records] == \
        list(zip(data.image_ids, data.images, data.captions))


def test_read_records_detects_each_layout(written, tmp_path):
    records = read_records(written, "val")
    assert len(records) == 3 and all(r.source == "synthetic" and r.split == "val" for r in records)
    assert records[0].load_image().size == (SIZE, SIZE)
    assert records[0].long_caption == read_dataset(written, "val")[0].long_caption
    assert detect_layout(written) == "synthetic"
    assert len(read_records(written)) == 12  # None: every split of the synthetic world
    with pytest.raises(DatasetError, match="matches no dataset layout. Tried: docci"):
        read_records(tmp_path)
    folder = tmp_path / "plain"  # any layout retrieval_sets reads, e.g. a plain folder
    folder.mkdir()
    Image.new("RGB", (8, 8)).save(folder / "a.jpg")
    (folder / "a.txt").write_text("a plain caption")
    assert detect_layout(folder) == "folder"
    assert [(r.id, r.long_caption, r.split, r.source) for r in read_records(folder)] == \
        [("a", "a plain caption", "all", "folder")]
