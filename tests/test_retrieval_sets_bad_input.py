"""Bad input in every retrieval layout that reads text: a clear message, the rest keeps going, nothing lost.

Each layout gets one bad item (a line or entry that is not UTF-8, not JSON, or lacks the layout's
fields) among good ones: the bad item is reported in ``skipped`` with its file and line (or entry),
every good item is read; a file where nothing at all is usable is a ``DatasetError`` naming it.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from PIL import Image

from explorer.data.errors import DatasetError
from explorer.data.retrieval_sets import (dci, detect, docci, goal_json, karpathy, manifest, read_retrieval_set,
                                          sharegpt4v, urban1k)

LATIN1 = "caf\u00e9 cr\u00e8me".encode("latin-1")  # not UTF-8


def picture(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.new("RGB", (8, 8), (10, 200, 30)).save(path)
    return path


def left_out(data) -> list[tuple[str, str]]:
    """(item, reason up to any parenthesis) for each thing the reader left out, in order."""
    return [(k.item, k.reason.split(" (")[0]) for k in data.skipped]


def jsonl(*records) -> bytes:
    return b"".join((r if isinstance(r, bytes) else json.dumps(r).encode()) + b"\n" for r in records)


# -- DOCCI --------------------------------------------------------------------------------------------------

def docci_line(n: int, split="test", **extra) -> dict:
    return {"example_id": f"{split}_{n}", "split": split, "image_file": f"{split}_{n}.jpg",
            "description": f"description {n}", **extra}


def test_docci_bad_lines_are_reported_and_the_rest_is_read(tmp_path):
    for n in range(4):
        picture(tmp_path / "images" / f"test_{n}.jpg")
    index = tmp_path / docci.FILE
    index.write_bytes(jsonl(docci_line(0),
                            b'{"example_id": "test_9", "split": "test", "image_file": "test_9.jpg", "description": "'
                            + LATIN1 + b'"}',
                            docci_line(1), b"{not json", {"example_id": "test_8", "split": "test"},
                            {"example_id": "train_8", "split": "train"},  # bad, but another split's line
                            docci_line(2), [1, 2], docci_line(3)))
    data = docci.read(tmp_path, "test")
    assert data.image_ids == ("test_0", "test_1", "test_2", "test_3")  # nothing good is lost
    assert data.captions == tuple(f"description {n}" for n in range(4))
    assert left_out(data) == [(f"{index}:2", "bad line: not UTF-8"), (f"{index}:4", "bad line: not JSON"),
                              (f"{index}:5", "bad line: no image_file, description"),
                              (f"{index}:8", "bad line: no example_id, split, image_file, description")]
    assert "4 bad line" in data.summary()
    everything = docci.read(tmp_path, "all")  # reading every split, the train line's fault is reported too
    assert (f"{index}:6", "bad line: no image_file, description") in left_out(everything)
    assert everything.extra["split_of"]["test_3"] == "test"


def test_docci_a_file_with_no_usable_line_is_an_error(tmp_path):
    (tmp_path / "images").mkdir()
    (tmp_path / docci.FILE).write_bytes(LATIN1 + b"\n" + LATIN1 + b"\n")
    with pytest.raises(DatasetError, match=r"docci_descriptions\.jsonlines has no usable line: 2 bad, "
                                           r"e\.g\. line 1: not UTF-8"):
        docci.read(tmp_path, None)


def test_docci_line_numbers_count_crlf_and_blank_lines(tmp_path):
    picture(tmp_path / "images" / "test_1.jpg")
    (tmp_path / docci.FILE).write_bytes(b"\xef\xbb\xbf" + json.dumps(docci_line(0)).encode() + b"\r\n\r\n{bad\r\n"
                                        + json.dumps(docci_line(1)).encode() + b"\r\n")
    data = docci.read(tmp_path, None)
    assert data.image_ids == ("test_1",)  # test_0's picture is missing; the BOM does not spoil line 1
    assert [k.item.rsplit(":", 1)[-1] for k in data.skipped if k.reason.startswith("bad line")] == ["3"]


# -- manifests ----------------------------------------------------------------------------------------------

def test_csv_manifest_with_a_bad_byte_keeps_the_other_rows(tmp_path):
    for n in range(3):
        picture(tmp_path / f"{n}.jpg")
    file = tmp_path / "pairs.csv"
    file.write_bytes(b"image,caption\n0.jpg,zero\n1.jpg," + LATIN1 + b'\n2.jpg,"two,\nover two lines"\n'
                     b",no image\n1.jpg,one\n")
    assert manifest.matches(tmp_path) and detect(tmp_path) == "manifest"  # a bad byte does not hide it
    data = read_retrieval_set(tmp_path)
    assert data.images == tuple(tmp_path / f"{n}.jpg" for n in (0, 2, 1))  # in the order first named
    assert data.captions == ("zero", "two, over two lines", "one")
    assert left_out(data) == [(f"{file}:3", "bad line: not UTF-8"), (f"{file}:6", "bad line: no image path")]


def test_csv_manifest_with_only_bad_rows_is_an_error(tmp_path):
    (tmp_path / "pairs.csv").write_bytes(b"image,caption\n" + LATIN1 + b",x\na.jpg\n")
    with pytest.raises(DatasetError, match=r"pairs\.csv has no usable line: 2 bad, e\.g\. line 2: not UTF-8"):
        manifest.read(tmp_path, None)


def test_jsonl_manifest_with_a_latin1_line_keeps_the_other_lines(tmp_path):
    picture(tmp_path / "a.jpg")
    file = tmp_path / "m.jsonl"
    file.write_bytes(jsonl({"image": "a.jpg", "caption": "first", "split": "test"},
                           b'{"image": "a.jpg", "caption": "' + LATIN1 + b'"}',
                           {"caption": "no image", "split": "test"}, {"caption": "no image", "split": "train"},
                           "a string", {"image": "a.jpg", "caption": "second", "split": "test"}))
    data = manifest.read(tmp_path, "test")
    assert data.captions == ("first", "second") and data.images == (tmp_path / "a.jpg",)
    assert left_out(data) == [(f"{file}:2", "bad line: not UTF-8"), (f"{file}:3", "bad line: no image path"),
                              (f"{file}:5", "bad line: not a JSON object")]


# -- DCI ----------------------------------------------------------------------------------------------------

def test_dci_annotations_with_bad_bytes_or_bad_json_are_reported(tmp_path):
    base = tmp_path / "densely_captioned_images"
    (base / "annotations").mkdir(parents=True)
    for n in range(4):
        picture(base / "photos" / f"sa_{n}.jpg")
    good = {"image": "sa_0.jpg", "short_caption": "short", "extra_caption": "extra"}
    (base / "annotations" / "sa_0.json").write_text(json.dumps(good))
    (base / "annotations" / "sa_1.json").write_bytes(b'{"image": "sa_1.jpg", "short_caption": "' + LATIN1
                                                     + b'", "extra_caption": ""}')
    (base / "annotations" / "sa_2.json").write_bytes(b"{broken")
    # bad bytes only where this reader never looks (the masks): the caption is still read
    (base / "annotations" / "sa_3.json").write_bytes(b'{"image": "sa_3.jpg", "short_caption": "three", '
                                                     b'"extra_caption": "more", "mask_data": {"label": "'
                                                     + LATIN1 + b'"}}')
    (base / "splits.json").write_text(json.dumps({"test": [f"sa_{n}.json" for n in range(4)]}))
    data = dci.read(tmp_path, None)
    assert data.image_ids == ("sa_0", "sa_3") and data.captions == ("short extra", "three more")
    annotations = base / "annotations"
    assert left_out(data) == [(str(annotations / "sa_1.json"), "bad annotation: not UTF-8"),
                              (str(annotations / "sa_2.json"), "bad annotation: not valid JSON")]


# -- Urban1k annotations.json, GOAL json, ShareGPT4V, Karpathy: one JSON document, bad entries inside ---------

def test_urban1k_annotations_entry_with_bad_bytes(tmp_path):
    picture(tmp_path / "a.jpg")
    picture(tmp_path / "b.jpg")
    file = tmp_path / "annotations.json"
    file.write_bytes(b'[{"image_id": 1, "image": "a.jpg", "caption": "kept"}, '
                     b'{"image_id": 2, "image": "b.jpg", "caption": "' + LATIN1 + b'"}, {"image": "b.jpg"}]')
    data = urban1k.read(tmp_path, None)
    assert data.captions == ("kept",)
    assert left_out(data) == [(f"{file}[1]", "bad entry: not UTF-8"),
                              (f"{file}[2]", "bad entry: needs image and caption")]


def test_goal_json_bad_entries(tmp_path):
    picture(tmp_path / "a.jpg")
    picture(tmp_path / "b.jpg")
    file = tmp_path / "eval.json"
    file.write_bytes(b'[{"filename": "a.jpg", "caption": "kept"}, {"filename": "b.jpg", "caption": "' + LATIN1
                     + b'"}, {"caption": "no file"}, {"filename": 3, "caption": "x"}, '
                       b'{"filename": "b.jpg", "caption": "also kept", "extra": 1}]')
    assert detect(tmp_path) == "goal_json"
    data = goal_json.read(tmp_path, None)
    assert data.captions == ("kept", "also kept") and data.image_ids == ("a.jpg", "b.jpg")
    assert left_out(data) == [(f"{file}[1]", "bad entry: not UTF-8"), (f"{file}[2]", "bad entry: needs 'filename'"),
                              (f"{file}[3]", "bad entry: needs 'filename'")]
    file.write_text('[{"caption": "no file"}]')
    with pytest.raises(DatasetError, match=r"eval\.json has no usable entry: 1 bad, e\.g\. entry \[0\]"):
        goal_json.read(file, None)


def test_sharegpt4v_bad_entries(tmp_path):
    picture(tmp_path / "a.jpg")
    file = tmp_path / "share-captioner_x.json"
    entry = '{{"id": "{}", "image": "a.jpg", "conversations": [{{"value": "q"}}, {{"value": "{}"}}]}}'
    file.write_bytes(b"[" + entry.format("e0", "kept").encode() + b", "
                     + entry.format("e1", "@").encode().replace(b"@", LATIN1) + b', {"id": "e2", "image": "a.jpg"}, '
                     + entry.format("e3", "also kept").encode() + b"]")
    data = sharegpt4v.read(tmp_path, None)
    assert data.captions == ("kept", "also kept")
    assert left_out(data) == [(f"{file}[1]", "bad entry: not UTF-8"),
                              (f"{file}[2]", "bad entry: needs image and conversations[1].value")]
    assert sharegpt4v.read(tmp_path, "1k").extra["entries"] == 4  # the 1k cut counts entries, bad ones too


def test_karpathy_bad_images_and_sentences(tmp_path):
    for name in ("a.jpg", "b.jpg", "c.jpg"):
        picture(tmp_path / name)
    images = [{"filename": "a.jpg", "split": "test", "imgid": 1,
               "sentences": [{"raw": "kept"}, {"raw": "@"}, {"tokens": ["from", "tokens"]}, {"oops": 1}]},
              {"filename": "b.jpg", "split": "test", "imgid": 2},  # no sentences
              {"filename": "b.jpg", "split": "train", "imgid": 3},  # another split: not this set's business
              {"split": "test", "sentences": [{"raw": "no filename"}]},
              {"filename": "c.jpg", "split": "test", "imgid": 4, "sentences": [{"raw": "also kept"}]}]
    file = tmp_path / "dataset_flickr30k.json"
    file.write_bytes(json.dumps({"images": images}).encode().replace(b'"@"', b'"' + LATIN1 + b'"'))
    data = karpathy.read(tmp_path, "test")
    assert data.image_ids == ("1", "4") and data.captions == ("kept", "from tokens", "also kept")
    assert left_out(data) == [(f"{file}:images[0].sentences[1]", "bad entry: not UTF-8"),
                              (f"{file}:images[0].sentences[3]", "bad entry: a sentence without 'raw'"),
                              (f"{file}:images[1]", "bad entry: an image entry needs 'sentences'"),
                              (f"{file}:images[3]", "bad entry: an image entry needs 'filename'")]
    assert len(karpathy.read(tmp_path, "all").skipped) == 5


@pytest.mark.parametrize("name,text", [("dataset_coco.json", '{"images": ['), ("eval.json", '[{"filename": "a", ')])
def test_a_json_index_that_is_not_json_at_all_is_an_error(tmp_path, name, text):
    (tmp_path / name).write_text(text)
    module = karpathy if name.startswith("dataset_") else goal_json
    with pytest.raises(DatasetError, match=rf"{name} is not valid JSON"):
        module.read(tmp_path / name, None)


# -- GOAL json detection is cheap ---------------------------------------------------------------------------

def test_goal_json_detection_reads_only_the_head(tmp_path, monkeypatch):
    file = tmp_path / "big.json"
    entries = [{"filename": f"{n}.jpg", "caption": "a long caption " * 20} for n in range(5000)]
    file.write_text(json.dumps(entries)[:-1] + ", {broken")  # a full parse would fail: detection must not parse
    assert file.stat().st_size > 10 * goal_json.HEAD_BYTES
    read = []

    class Spy:
        def __init__(self, *args, **kwargs):
            self.handle = open(*args, **kwargs)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.handle.close()

        def read(self, size=-1):
            data = self.handle.read(size)
            read.append(len(data))
            return data

    monkeypatch.setattr(goal_json, "open", Spy, raising=False)
    monkeypatch.setattr(goal_json, "read_json", lambda *a, **k: pytest.fail("detection parsed the whole file"))
    assert goal_json.matches(tmp_path) and goal_json.matches(file)
    assert read and max(read) <= goal_json.HEAD_BYTES
    monkeypatch.undo()
    with pytest.raises(DatasetError, match=r"big\.json is not valid JSON"):  # reading is exact
        goal_json.read(file, None)


def test_goal_json_detection_looks_at_the_first_entry(tmp_path):
    file = tmp_path / "x.json"
    file.write_text(json.dumps([{"filename": "a.jpg", "caption": "x", "id": 1}]))
    assert not goal_json.matches(tmp_path)  # not exactly {filename, caption}
    file.write_text(json.dumps({"filename": "a.jpg", "caption": "x"}))
    assert not goal_json.matches(tmp_path)  # not a list
    file.write_text("[]")
    assert not goal_json.matches(tmp_path)
    file.write_bytes(b"\xef\xbb\xbf \n [ " + json.dumps({"caption": "x", "filename": "a.jpg"}).encode() + b"]")
    assert goal_json.matches(file)


# -- the training data path keeps going too -----------------------------------------------------------------

def test_training_data_counts_only_the_good_lines(tmp_path):
    from explorer.jobs.training_data import inspect_data

    for split in ("train", "test"):
        picture(tmp_path / "images" / f"{split}_0.jpg")
    (tmp_path / docci.FILE).write_bytes(jsonl(docci_line(0, "train"), LATIN1, docci_line(0, "test")))
    plan = inspect_data(tmp_path, "train")
    assert plan.kind == "docci" and plan.count == 1 and plan.eval_split == "test"
    assert any("1 bad line" in note for note in plan.notes)
