"""Readers for Karpathy json, GOAL json, the synthetic world, CSV/JSONL manifests and plain folders,
each on a tiny fixture written in exactly that layout."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from PIL import Image

from explorer.data import DatasetError, read_dataset, write_dataset
from explorer.data.retrieval_sets import (LAYOUTS, detect, folder, goal_json, karpathy, manifest, read_retrieval_set,
                                          synthetic)

MODULES = (karpathy, goal_json, synthetic, manifest, folder)


def picture(path: Path, colour=(200, 30, 30)) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.new("RGB", (8, 8), colour).save(path)
    return path


def reasons(rs) -> dict[str, str]:
    return {Path(s.item.split(" (")[0]).name: s.reason for s in rs.skipped}


# -- Karpathy ----------------------------------------------------------------------------------------------

def coco(root: Path, n_captions: int = 5, with_filepath: bool = True) -> Path:
    images = []
    for i, split in enumerate(("test", "test", "val", "train", "restval")):
        name = f"COCO_{i}.jpg"
        entry = {"filename": name, "split": split, "imgid": i, "cocoid": 100 + i,
                 "sentences": [{"raw": f"image {i} caption {c}", "tokens": []} for c in range(n_captions)]}
        if with_filepath:
            entry["filepath"] = "val2014"
            picture(root / "val2014" / name)
        else:
            picture(root / name)
        images.append(entry)
    (root / "dataset_coco.json").write_text(json.dumps({"images": images, "dataset": "coco"}))
    return root


@pytest.mark.parametrize("n_captions", [5, 3])
def test_karpathy_reads_the_test_split_with_any_number_of_captions(tmp_path, n_captions):
    rs = karpathy.read(coco(tmp_path, n_captions), None)
    assert rs.layout == "karpathy" and rs.split == "test"
    assert [p.name for p in rs.images] == ["COCO_0.jpg", "COCO_1.jpg"]
    assert rs.images[0] == tmp_path / "val2014" / "COCO_0.jpg"
    assert rs.image_ids == ("100", "101")
    assert len(rs.captions) == 2 * n_captions
    assert rs.caption_image == tuple([0] * n_captions + [1] * n_captions)
    assert rs.captions[n_captions] == "image 1 caption 0"
    assert karpathy.read(tmp_path, "restval").image_ids == ("104",)
    assert len(karpathy.read(tmp_path / "dataset_coco.json", "all")) == 5


def test_karpathy_finds_images_without_filepath_and_under_images(tmp_path):
    images = [{"filename": "1.jpg", "split": "test", "imgid": 1, "sentences": [{"raw": "a dog"}]},
              {"filename": "2.jpg", "split": "test", "imgid": 2, "sentences": [{"raw": "a cat"}, {"raw": " "}]},
              {"filename": "3.jpg", "split": "test", "imgid": 3, "sentences": [{"raw": "gone"}]}]
    (tmp_path / "dataset_flickr30k.json").write_text(json.dumps({"images": images}))
    picture(tmp_path / "1.jpg")
    picture(tmp_path / "images" / "2.jpg")
    assert karpathy.matches(tmp_path) and detect(tmp_path) == "karpathy"
    rs = read_retrieval_set(tmp_path)
    assert rs.images == (tmp_path / "1.jpg", tmp_path / "images" / "2.jpg")
    assert rs.image_ids == ("1", "2") and rs.captions == ("a dog", "a cat")
    assert reasons(rs) == {"3.jpg": "image missing", "2.jpg": "caption empty"}


def test_karpathy_bad_input(tmp_path):
    coco(tmp_path, with_filepath=False)
    assert karpathy.read(tmp_path, "val").images == (tmp_path / "COCO_2.jpg",)
    with pytest.raises(DatasetError, match="restval"):
        karpathy.read(tmp_path, "dev")
    (tmp_path / "dataset_coco.json").write_text('{"images": [')
    with pytest.raises(DatasetError, match="dataset_coco.json"):
        karpathy.read(tmp_path, None)
    (tmp_path / "dataset_coco.json").write_text('{"images": [{"filename": "x.jpg"}]}')
    with pytest.raises(DatasetError, match=r"dataset_coco.json has no usable entry: 1 bad, e.g. entry images\[0\]"):
        karpathy.read(tmp_path, None)


# -- GOAL json ---------------------------------------------------------------------------------------------

def test_goal_json(tmp_path):
    entries = [{"filename": "a.jpg", "caption": "a long red caption"}, {"filename": "b.png", "caption": "blue"},
               {"filename": "a.jpg", "caption": "a second caption"}, {"filename": "c.jpg", "caption": "missing"},
               {"filename": "d.jpg", "caption": "  "}]
    (tmp_path / "docci_test.json").write_text(json.dumps(entries))
    picture(tmp_path / "a.jpg")
    picture(tmp_path / "images" / "b.png")
    picture(tmp_path / "d.jpg")
    assert goal_json.matches(tmp_path) and goal_json.matches(tmp_path / "docci_test.json")
    assert detect(tmp_path) == "goal_json"
    rs = goal_json.read(tmp_path, None)
    assert rs.split == "all" and rs.images == (tmp_path / "a.jpg", tmp_path / "images" / "b.png")
    assert rs.captions == ("a long red caption", "a second caption", "blue") and rs.caption_image == (0, 0, 1)
    assert rs.image_ids == ("a.jpg", "b.png")
    assert reasons(rs) == {"c.jpg": "image missing", "d.jpg": "caption empty"}
    assert goal_json.read(tmp_path, "test").captions == rs.captions
    with pytest.raises(DatasetError, match="no splits"):
        goal_json.read(tmp_path, "train")
    (tmp_path / "docci_test.json").write_text('[{"filename": "a.jpg", "caption": ')
    assert not goal_json.matches(tmp_path)
    with pytest.raises(DatasetError, match="docci_test.json"):
        goal_json.read(tmp_path / "docci_test.json", None)


def test_goal_json_ignores_other_json(tmp_path):
    (tmp_path / "other.json").write_text(json.dumps([{"filename": "a.jpg", "caption": "x", "id": 1}]))
    assert not goal_json.matches(tmp_path)


# -- synthetic ---------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def world(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("world")
    write_dataset(root, 8, seed=5, image_size=32, split_fractions=(0.5, 0.25, 0.25))
    return root


def test_synthetic_matches_read_dataset_order(world):
    assert synthetic.matches(world) and synthetic.matches(world / "scenes.jsonl") and detect(world) == "synthetic"
    for split in ("train", "val", "test"):
        scenes = read_dataset(world, split)
        rs = synthetic.read(world, split)
        assert rs.image_ids == tuple(s.id for s in scenes)
        assert rs.images == tuple(s.image_path for s in scenes)
        assert rs.captions == tuple(" ".join(s.long_caption.split()) for s in scenes)
        assert rs.caption_image == tuple(range(len(scenes)))
    assert synthetic.read(world, None).split == "test"
    assert synthetic.read(world, None).image_ids == tuple(s.id for s in read_dataset(world, "test"))
    with pytest.raises(DatasetError, match="train, val, test"):
        synthetic.read(world, "all")


# -- manifests ---------------------------------------------------------------------------------------------

def test_csv_manifest(tmp_path):
    picture(tmp_path / "pics" / "1.jpg")
    picture(tmp_path / "pics" / "2.jpg")
    (tmp_path / "pairs.csv").write_text("image,caption,split\npics/1.jpg,one,test\npics/2.jpg,two,train\n"
                                        "pics/1.jpg,\"one, again\",test\npics/3.jpg,three,test\npics/2.jpg,,test\n")
    assert manifest.matches(tmp_path) and detect(tmp_path) == "manifest"
    rs = manifest.read(tmp_path, None)
    assert rs.split == "all" and rs.images == (tmp_path / "pics" / "1.jpg", tmp_path / "pics" / "2.jpg")
    assert rs.captions == ("one", "one, again", "two") and rs.caption_image == (0, 0, 1)
    assert rs.image_ids == ("pics/1.jpg", "pics/2.jpg")
    assert reasons(rs) == {"3.jpg": "image missing", "2.jpg": "caption empty"}
    test = manifest.read(tmp_path / "pairs.csv", "test")
    assert test.captions == ("one", "one, again") and reasons(test)["3.jpg"] == "image missing"
    with pytest.raises(DatasetError, match="test, train"):
        manifest.read(tmp_path, "val")
    (tmp_path / "pairs.csv").write_text("image,caption\npics/1.jpg,one,extra\npics/2.jpg,two\n")
    rs = manifest.read(tmp_path, None)
    assert rs.captions == ("two",) and [(k.item, k.reason) for k in rs.skipped] == [
        (f"{tmp_path / 'pairs.csv'}:2", "bad line: 3 columns, the header has 2")]
    (tmp_path / "pairs.csv").write_text("image,caption\npics/1.jpg,one,extra\n")
    with pytest.raises(DatasetError, match="pairs.csv has no usable line: 1 bad, e.g. line 2: 3 columns"):
        manifest.read(tmp_path, None)
    (tmp_path / "pairs.csv").write_text('image,caption\npics/1.jpg,"one\n')
    with pytest.raises(DatasetError, match="pairs.csv has no usable line"):
        manifest.read(tmp_path, None)


def test_jsonl_manifest(tmp_path):
    picture(tmp_path / "a.png")
    lines = [{"image_path": "a.png", "text": "first"}, {"image_path": "a.png", "text": "second"}]
    (tmp_path / "m.jsonl").write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    rs = manifest.read(tmp_path, None)
    assert rs.images == (tmp_path / "a.png",) and rs.captions == ("first", "second")
    with pytest.raises(DatasetError, match="no split column"):
        manifest.read(tmp_path, "test")
    (tmp_path / "m.jsonl").write_text(json.dumps(lines[0]) + "\n{broken\n")
    rs = manifest.read(tmp_path, None)
    assert rs.captions == ("first",) and [(k.item, k.reason.split(" (")[0]) for k in rs.skipped] == [
        (f"{tmp_path / 'm.jsonl'}:2", "bad line: not JSON")]
    (tmp_path / "m.jsonl").write_text("{broken\n" + json.dumps({"image_path": " ", "text": "x"}) + "\n")
    assert manifest.matches(tmp_path)  # the header is the first line that is a JSON object
    with pytest.raises(DatasetError, match=r"m.jsonl has no usable line: 2 bad, e.g. line 1: not JSON"):
        manifest.read(tmp_path, None)


def test_manifest_leaves_docci_and_scenes_alone(tmp_path):
    line = json.dumps({"image": "a.jpg", "caption": "x"}) + "\n"
    for name in ("docci_descriptions.jsonlines", "scenes.jsonl", "samples.jsonl"):
        (tmp_path / name).write_text(line)
    assert not manifest.matches(tmp_path)


# -- plain folder ------------------------------------------------------------------------------------------

def test_plain_folder(tmp_path):
    picture(tmp_path / "10.jpg")
    (tmp_path / "10.txt").write_text("ten\n  lines\n")
    picture(tmp_path / "2.png")
    (tmp_path / "2.txt").write_text("two", encoding="utf-8")
    picture(tmp_path / "3.jpg")
    picture(tmp_path / "4.jpg")
    (tmp_path / "4.txt").write_bytes("caf\xe9".encode("latin-1"))
    picture(tmp_path / "5.jpg")
    (tmp_path / "5.txt").write_text("   \n")
    assert folder.matches(tmp_path) and detect(tmp_path) == "folder"
    rs = read_retrieval_set(tmp_path)
    assert rs.split == "all" and [p.name for p in rs.images] == ["2.png", "10.jpg"]
    assert rs.captions == ("two", "ten lines") and rs.image_ids == ("2", "10")
    assert reasons(rs) == {"3.jpg": "no caption file", "4.txt": "caption file is not UTF-8",
                           "5.jpg": "caption empty"}
    with pytest.raises(DatasetError, match="all"):
        folder.read(tmp_path, "test")


# -- every layout ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("module", MODULES, ids=lambda m: m.NAME)
def test_names_and_empty_folder(tmp_path, module):
    assert module.NAME == module.__name__.rsplit(".", 1)[1] and module.EXPECTS
    assert not module.matches(tmp_path)
    with pytest.raises(DatasetError):
        module.read(tmp_path, None)


def test_detect_lists_every_layout_tried(tmp_path):
    with pytest.raises(DatasetError) as error:
        detect(tmp_path)
    for name in LAYOUTS:
        assert name in str(error.value)
