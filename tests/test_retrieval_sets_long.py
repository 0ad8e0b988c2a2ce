"""Long-caption retrieval readers (DOCCI, Urban1k, DCI, ShareGPT4V) on tiny fixtures in their real layouts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from PIL import Image

from explorer.data.errors import DatasetError
from explorer.data.retrieval_sets import dci, detect, docci, layout_module, sharegpt4v, urban1k


def _picture(path: Path, color=(200, 30, 30)) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.new("RGB", (8, 8), color).save(path)
    return path


def _detected(root: Path, name: str) -> None:
    for other in ("karpathy", "goal_json", "synthetic", "manifest", "folder"):
        pytest.importorskip(f"explorer.data.retrieval_sets.{other}")
    assert detect(root) == name


# -- DOCCI ------------------------------------------------------------------------------------------------

def _docci(root: Path) -> Path:
    lines = [
        {"example_id": "train_00000", "split": "train", "image_file": "train_00000.jpg", "description": "a red barn"},
        {"example_id": "test_00000", "split": "test", "image_file": "test_00000.jpg", "description": "a cat\non a mat"},
        {"example_id": "test_00001", "split": "test", "image_file": "test_00001.jpg", "description": "a dog"},
        {"example_id": "test_00002", "split": "test", "image_file": "test_00002.jpg", "description": "gone"},
        {"example_id": "test_00003", "split": "test", "image_file": "test_00003.jpg", "description": "   "},
    ]
    for line in lines:
        if line["example_id"] != "test_00002":
            _picture(root / "images" / line["image_file"])
    (root / docci.FILE).write_text("\n".join(json.dumps(x) for x in lines) + "\n", encoding="utf-8")
    return root


def test_docci_reads_the_test_split_by_default(tmp_path):
    root = _docci(tmp_path)
    assert docci.matches(root) and docci.matches(root / docci.FILE) and not docci.matches(tmp_path / "nothing")
    s = docci.read(root, None)
    assert s.layout == "docci" and s.split == "test"
    assert s.image_ids == ("test_00000", "test_00001")
    assert s.images == (root / "images/test_00000.jpg", root / "images/test_00001.jpg")
    assert s.captions == ("a cat on a mat", "a dog") and s.caption_image == (0, 1)
    reasons = {(Path(k.item).name.split(" ")[0], k.reason) for k in s.skipped}
    assert reasons == {("test_00002.jpg", "image missing"), ("test_00003.jpg", "caption empty")}
    train = docci.read(root / docci.FILE, "train")
    assert train.split == "train" and train.image_ids == ("train_00000",)


def test_docci_bad_input(tmp_path):
    root = _docci(tmp_path)
    with pytest.raises(DatasetError, match="qual_dev"):
        docci.read(root, "val")
    (root / docci.FILE).write_text('{"example_id": "x", "split": "test", "image_file": "x.jpg", "description": "a"}\n'
                                   "{not json\n", encoding="utf-8")
    s = docci.read(root, None)  # the bad line is reported, the good one read (its picture is missing)
    assert sorted((k.item, k.reason.split(" (")[0]) for k in s.skipped) == [
        (f"{root / docci.FILE}:2", "bad line: not JSON"), (str(root / "images" / "x.jpg"), "image missing")]
    (root / docci.FILE).write_text('{"example_id": "x", "split": "test"}\n{oops\n', encoding="utf-8")
    with pytest.raises(DatasetError, match=r"no usable line: 2 bad, e\.g\. line 1: no image_file, description"):
        docci.read(root, None)
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(DatasetError, match="no docci_descriptions"):
        docci.read(empty, None)


def test_docci_detected(tmp_path):
    _detected(_docci(tmp_path), "docci")


# -- Urban1k ----------------------------------------------------------------------------------------------

def _urban(root: Path) -> Path:
    for stem in (1, 2, 10, 3, 4, 5):
        if stem != 3:
            _picture(root / "image" / f"{stem}.jpg")
    (root / "caption").mkdir(parents=True)
    for stem, text in {1: "one first\nsecond line ignored", 2: "two", 10: "ten", 3: "three (no image)",
                       4: "\nonly a second line"}.items():
        (root / "caption" / f"{stem}.txt").write_text(text, encoding="utf-8")
    (root / "caption" / "5.txt").write_bytes("caf\u00e9 latin-1".encode("latin-1"))
    return root


def test_urban1k_first_line_numeric_order_and_bad_files(tmp_path):
    root = _urban(tmp_path)
    assert urban1k.matches(root) and not urban1k.matches(tmp_path / "image")
    s = urban1k.read(root, None)
    assert s.split == "test" and s.image_ids == ("1", "2", "10")
    assert s.captions == ("one first", "two", "ten") and s.caption_image == (0, 1, 2)
    assert s.images[2] == root / "image" / "10.jpg"
    assert any("first line" in n for n in s.notes)
    reasons = sorted((Path(k.item.split(" ")[0]).name, k.reason) for k in s.skipped)
    assert reasons == [("3.jpg", "image missing"), ("4.jpg", "caption empty"), ("5.txt", "caption file is not UTF-8")]
    assert urban1k.read(root, "test").image_ids == s.image_ids
    with pytest.raises(DatasetError, match="'test'"):
        urban1k.read(root, "train")
    _detected(root, "urban1k")


def test_urban1k_annotations_json(tmp_path):
    _picture(tmp_path / "pics" / "a.jpg")
    _picture(tmp_path / "pics" / "b.jpg")
    entries = [{"image_id": 7, "image": "pics/a.jpg", "caption": "first\ncaption"},
               {"image_id": 8, "image": "pics/b.jpg", "caption": "second"},
               {"image_id": 9, "image": "pics/missing.jpg", "caption": "third"}]
    (tmp_path / "annotations.json").write_text(json.dumps(entries), encoding="utf-8")
    assert urban1k.matches(tmp_path) and urban1k.matches(tmp_path / "annotations.json")
    s = urban1k.read(tmp_path / "annotations.json", None)
    assert s.image_ids == ("7", "8") and s.captions == ("first caption", "second")
    assert s.images == (tmp_path / "pics/a.jpg", tmp_path / "pics/b.jpg")
    assert [k.reason for k in s.skipped] == ["image missing"]
    _detected(tmp_path, "urban1k")
    (tmp_path / "annotations.json").write_text('[{"image": "pics/a.jpg", "caption": "x"}, {"oops": 1}]',
                                                encoding="utf-8")
    s = urban1k.read(tmp_path, None)
    assert s.captions == ("x",) and [(k.item, k.reason) for k in s.skipped] == [
        (f"{tmp_path / 'annotations.json'}[1]", "bad entry: needs image and caption (and image_id)")]
    (tmp_path / "annotations.json").write_text('[{"oops": 1}]', encoding="utf-8")
    with pytest.raises(DatasetError, match=r"annotations\.json has no usable entry: 1 bad, e\.g\. entry \[0\]"):
        urban1k.read(tmp_path, None)
    (tmp_path / "annotations.json").write_text('[{"caption": "x",', encoding="utf-8")
    with pytest.raises(DatasetError, match=r"annotations\.json is not valid JSON"):
        urban1k.read(tmp_path, None)


def test_urban1k_needs_its_folders(tmp_path):
    assert not urban1k.matches(tmp_path)
    with pytest.raises(DatasetError, match="image/ and caption/"):
        urban1k.read(tmp_path, None)


# -- DCI --------------------------------------------------------------------------------------------------

def _dci(root: Path) -> Path:
    base = root / "densely_captioned_images"
    (base / "annotations").mkdir(parents=True)
    items = {"sa_1": ("short one", "extra one"), "sa_2": ("short two", "extra two"),
             "sa_3": ("short three", ""), "sa_4": ("", ""), "sa_5": ("short five", "no photo")}
    for stem, (short, extra) in items.items():
        if stem != "sa_5":
            _picture(base / "photos" / f"{stem}.jpg")
        (base / "annotations" / f"{stem}.json").write_text(json.dumps(
            {"image": f"{stem}.jpg", "short_caption": short, "extra_caption": extra, "mask_data": {}}))
    splits = {"train": ["sa_1.json", "sa_4.json"], "valid": ["sa_2.json"], "test": ["sa_3.json", "sa_5.json",
                                                                                  "sa_9.json"]}
    (base / "splits.json").write_text(json.dumps(splits))
    return root


def test_dci_all_splits_by_default(tmp_path):
    root = _dci(tmp_path)
    base = root / "densely_captioned_images"
    assert dci.matches(root) and dci.matches(base) and dci.matches(base / "splits.json")
    s = dci.read(root, None)
    assert s.split == "all" and s.extra["splits_used"] == ["train", "valid", "test"]
    assert any("train, valid, test" in n for n in s.notes)
    assert s.image_ids == ("sa_1", "sa_2", "sa_3")
    assert s.captions == ("short one extra one", "short two extra two", "short three")
    assert s.images[0] == base / "photos" / "sa_1.jpg"
    reasons = sorted(k.reason for k in s.skipped)
    assert reasons == ["annotation missing", "caption empty", "image missing"]
    test = dci.read(base, "test")
    assert test.split == "test" and test.image_ids == ("sa_3",) and test.extra["splits_used"] == ["test"]
    _detected(root, "dci")


def test_dci_bad_input(tmp_path):
    root = _dci(tmp_path)
    base = root / "densely_captioned_images"
    with pytest.raises(DatasetError, match="train, valid, test"):
        dci.read(root, "val")
    (base / "annotations" / "sa_2.json").write_text("{broken")
    s = dci.read(root, None)  # the broken annotation is reported, the others read
    assert s.image_ids == ("sa_1", "sa_3")
    assert [(Path(k.item).name, k.reason.split(" (")[0]) for k in s.skipped if k.item.endswith("sa_2.json")] == [
        ("sa_2.json", "bad annotation: not valid JSON")]
    (base / "splits.json").write_text("[1, 2]")
    with pytest.raises(DatasetError, match=r"splits\.json"):
        dci.read(root, None)
    (tmp_path / "other").mkdir()
    assert not dci.matches(tmp_path / "other")
    with pytest.raises(DatasetError, match="lacks annotations, photos, splits.json"):
        dci.read(tmp_path / "other", None)


# -- ShareGPT4V -------------------------------------------------------------------------------------------

def _entry(n: int, image: str) -> dict:
    return {"id": f"e{n}", "image": image,
            "conversations": [{"from": "human", "value": "<image>\nDescribe."},
                              {"from": "gpt", "value": f"caption {n}\nsecond line"}]}


def _share(root: Path, name="share-captioner_coco_lcs_sam_1246k_1107.json", count=1003) -> Path:
    _picture(root / "sam" / "a.jpg")
    _picture(root / "images" / "sam" / "b.jpg")  # found under <json folder>/images/
    _picture(root / "sam" / "c.jpg")
    paths = ["sam/a.jpg", "sam/b.jpg", "sam/c.jpg"]
    entries = [_entry(n, paths[n % 3]) for n in range(count)]
    if count > 1001:
        entries[1001]["image"] = "sam/late.jpg"  # past the 1k cut: only "all" sees it (missing)
    file = root / name
    file.write_text(json.dumps(entries), encoding="utf-8")
    return file


def test_sharegpt4v_1k_is_the_first_1000_entries(tmp_path):
    file = _share(tmp_path)
    assert sharegpt4v.matches(tmp_path) and sharegpt4v.matches(file)
    s = sharegpt4v.read(tmp_path, "1k")
    assert s.split == "1k" and s.extra["entries"] == 1000 and len(s.captions) == 1000
    assert s.images == (tmp_path / "sam/a.jpg", tmp_path / "images/sam/b.jpg", tmp_path / "sam/c.jpg")
    assert s.image_ids == ("e0", "e1", "e2")  # one image per distinct path, all its captions
    assert [len(s.captions_of(i)) for i in range(3)] == [334, 333, 333]
    # captions come grouped by image (build_set's order): all of a.jpg's, then b.jpg's, ...
    assert s.captions[:2] == ("caption 0 second line", "caption 3 second line") and s.caption_image[333:335] == (0, 1)
    assert not s.skipped and any("first 1000" in n for n in s.notes)
    everything = sharegpt4v.read(file, None)
    assert everything.split == "all" and everything.extra["entries"] == 1003 and len(everything.captions) == 1002
    assert [k.reason for k in everything.skipped] == ["image missing"]
    _detected(tmp_path, "sharegpt4v")


def test_sharegpt4v_10k_prefers_the_sam_10k_file(tmp_path):
    _share(tmp_path, count=1003)
    _share(tmp_path, name=sharegpt4v.SAM_10K, count=1002)
    assert sharegpt4v.read(tmp_path, "10k").extra["entries"] == 1002
    assert sharegpt4v.read(tmp_path, "1k").extra["file"].endswith("1246k_1107.json")


def test_sharegpt4v_bad_input(tmp_path):
    file = _share(tmp_path, count=5)
    with pytest.raises(DatasetError, match="1k, 10k, all"):
        sharegpt4v.read(tmp_path, "test")
    entries = json.loads(file.read_text())
    entries[3]["conversations"] = [entries[3]["conversations"][0]]
    file.write_text(json.dumps(entries))
    s = sharegpt4v.read(tmp_path, None)
    assert len(s.captions) == 4 and [(k.item, k.reason) for k in s.skipped] == [
        (f"{file}[3]", "bad entry: needs image and conversations[1].value")]
    file.write_text(json.dumps([{"image": "a.jpg", "conversations": []}]))
    with pytest.raises(DatasetError, match=r"1107\.json has no usable entry"):
        sharegpt4v.read(tmp_path, None)
    file.write_text('[{"image": "a.jpg", "conversations": [')
    with pytest.raises(DatasetError, match=r"1107\.json is not valid JSON"):
        sharegpt4v.read(file, None)
    (tmp_path / "empty").mkdir()
    with pytest.raises(DatasetError, match="no share-captioner json"):
        sharegpt4v.read(tmp_path / "empty", None)


# -- all four ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", ["docci", "urban1k", "dci", "sharegpt4v"])
def test_each_layout_names_itself_and_rejects_an_empty_folder(tmp_path, name):
    module = layout_module(name)
    assert module.NAME == name and module.EXPECTS
    assert not module.matches(tmp_path)
