"""``explorer eval-negatives``: FG-OVD's and SugarCrepe's files written here in their released layouts, the
synthetic twin, each accuracy against a hand computation (a fake model whose scores are known; the demo
CLIP against its own public API on hand-cut crops), the bad input counted and skipped, resume, the CLI."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from explorer.cli import main
from explorer.core.errors import ExplorerError
from explorer.data.errors import DatasetError
from explorer.data.negatives_sets import read_negatives_set
from explorer.data.negatives_sets import synthetic as twin
from explorer.evaluation.negatives import evaluate_negatives

ZOO = Path(__file__).resolve().parents[1] / "checkpoints"


def picture(path: Path, width: int, height: int, seed: int = 0) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    pixels = np.random.default_rng(seed).integers(0, 255, (height, width, 3), dtype=np.uint8)
    Image.fromarray(pixels).save(path)
    return path


def write_fg_ovd(root: Path) -> Path:
    """``benchmarks/1_attributes.json`` (hard) and ``shuffle_negatives.json`` (trivial) as FG-OVD releases
    them, COCO pictures under ``val2017/``; the hard file holds one region of each bad kind."""
    picture(root / "val2017" / "000000000001.jpg", 40, 30)
    picture(root / "val2017" / "000000000002.jpg", 20, 20, seed=1)
    cats = [{"id": i, "name": f"caption {i}"} for i in range(1, 13)]
    images = [{"id": 1, "file_name": "val2017/000000000001.jpg", "width": 40, "height": 30},
              {"id": 2, "file_name": "val2017/000000000002.jpg", "width": 20, "height": 20},
              {"id": 3, "file_name": "val2017/000000000003.jpg", "width": 20, "height": 20}]  # not on disk
    negs = list(range(2, 12))

    def ann(i, image, bbox, pos=1, neg=None):
        return {"id": i, "image_id": image, "bbox": bbox, "category_id": pos, "area": 1,
                "neg_category_ids": negs if neg is None else neg}
    hard = [ann(10, 1, [4, 3, 20, 15]), ann(11, 2, [0, 0, 20, 20], pos=12),
            ann(12, 1, [0, 0, 10, 10], neg=[2, 99]),  # a negative the file does not hold
            ann(13, 1, [5, 5, 0, 8]),  # zero-area box
            ann(14, 1, [5, 5, 1, 8]),  # one-pixel crop
            ann(15, 3, [0, 0, 5, 5]),  # picture missing
            ann(16, 1, [0, 0, 5, 5], neg=[])]  # no negatives at all
    trivial = [ann(20, 2, [2, 2, 10, 10], pos=3)]
    folder = root / "benchmarks"
    folder.mkdir(parents=True)
    for name, anns in (("1_attributes.json", hard), ("shuffle_negatives.json", trivial)):
        (folder / name).write_text(json.dumps({"images": images, "categories": cats, "annotations": anns}))
    return root


def write_sugarcrepe(root: Path) -> Path:
    picture(root / "val2017" / "000000000005.jpg", 16, 16)
    root.mkdir(parents=True, exist_ok=True)
    (root / "replace_obj.json").write_text(json.dumps({
        "0": {"filename": "000000000005.jpg", "caption": "a dog", "negative_caption": "a cat"},
        "1": {"filename": "000000000005.jpg", "caption": "a red car"},  # its negative is missing
        "2": {"filename": "000000000404.jpg", "caption": "x", "negative_caption": "y"}}))
    (root / "swap_att.json").write_text(json.dumps({
        "7": {"filename": "000000000005.jpg", "caption": "a big dog", "negative_caption": "a dog big"}}))
    return root


class Fake:
    """A model whose score of a caption is ``table[caption]`` whatever the picture; it remembers the crops."""

    method_name, score_label = "fake", "cosine"

    def __init__(self, table):
        self.table, self.crops, self.calls = table, [], 0

    def encode_image(self, images):
        self.crops += [image.size for image in images]
        return torch.zeros(len(images), 1)

    def similarity(self, features, captions):
        self.calls += 1
        return torch.tensor([[self.table[c] for c in captions]] * len(features), dtype=torch.float32)


def test_fg_ovd_layout_read_with_each_bad_region_skipped(tmp_path):
    found = read_negatives_set(write_fg_ovd(tmp_path / "fg"), layout="fg-ovd")
    assert found.counts() == {"hard": 2, "trivial": 1}
    assert found.title == "FG-OVD"  # the set carries the name the tables print: no lookup by layout name
    first = found.items[0]
    assert (first.positive, first.negatives[0], len(first.negatives)) == ("caption 1", "caption 2", 10)
    assert first.box == (4.0, 3.0, 20.0, 15.0) and first.picture.name == "000000000001.jpg"
    reasons = {s.item: s.reason.split(":")[0] for s in found.skipped}
    assert reasons == {"hard/12": "negatives missing", "hard/13": "zero-area box", "hard/14": "one-pixel crop",
                       "hard/15": "picture missing", "hard/16": "negatives missing"}
    only = read_negatives_set(tmp_path / "fg", layout="fg-ovd", splits=["trivial"])
    assert list(only.splits) == ["trivial"]
    with pytest.raises(DatasetError, match="1_attributes.json, 2_attributes.json"):
        read_negatives_set(tmp_path, layout="fg-ovd")  # the folder holds no benchmark file: say which it expects
    with pytest.raises(DatasetError, match="medium.*does not exist"):
        read_negatives_set(tmp_path / "fg", layout="fg-ovd", splits=["medium"])


def test_fg_ovd_ids_that_cannot_be_keys_and_a_size_that_is_no_number_skip_or_pass(tmp_path):
    root = write_fg_ovd(tmp_path / "fg")
    file = root / "benchmarks" / "1_attributes.json"
    data = json.loads(file.read_text())
    data["images"][0]["width"] = "wide"  # no number: the box is left unclamped, the region still read
    data["annotations"] += [dict(data["annotations"][0], id=17, category_id=[1]),
                            dict(data["annotations"][0], id=18, image_id=[1])]
    file.write_text(json.dumps(data))
    found = read_negatives_set(root, layout="fg-ovd", splits=["hard"])
    assert found.counts() == {"hard": 2}
    reasons = {s.item: s.reason.split(":")[0] for s in found.skipped}
    assert (reasons["hard/17"], reasons["hard/18"]) == ("positive missing", "picture missing")


def test_accuracy_per_split_equals_a_hand_count(tmp_path):
    dataset = read_negatives_set(write_fg_ovd(tmp_path / "fg"), layout="fg-ovd")
    table = {f"caption {i}": 0.5 for i in range(1, 13)}
    table.update({"caption 1": 0.9, "caption 12": 0.1, "caption 3": 0.9})
    model = Fake(table)
    result = evaluate_negatives({"fake": model}, dataset, progress=False, region="crop", ties="miss")
    entry = result["models"][0]
    # hard/10: caption 1 (0.9) against captions 2..11, where caption 3 also scores 0.9: a tie is a miss;
    # hard/11: caption 12 (0.1) against 0.5: a miss; trivial/20: caption 3 against 2..11, which hold it: a tie
    assert entry["accuracy"] == {"hard": 0.0, "trivial": 0.0} and entry["n"] == {"hard": 2, "trivial": 1}
    hits = evaluate_negatives({"fake": Fake(table)}, dataset, progress=False, region="crop", ties="hit")
    assert hits["models"][0]["accuracy"] == {"hard": 0.5, "trivial": 1.0}  # the two ties count as right
    table["caption 3"] = 0.2  # now hard/10 wins (0.9 > 0.5); trivial/20 (0.2) loses to 0.5
    result = evaluate_negatives({"fake": Fake(table)}, dataset, progress=False, region="crop")
    assert result["models"][0]["accuracy"] == {"hard": 0.5, "trivial": 0.0}
    assert set(result["models"][0]) >= {"name", "method", "accuracy", "n"}
    assert result["dataset"]["skipped"] == {"negatives missing": 2, "zero-area box": 1, "one-pixel crop": 1,
                                            "picture missing": 1}
    assert model.crops[:2] == [(20, 15), (20, 20)]  # the regions' crops, not the pictures


def test_demo_clip_matches_its_own_scores_on_hand_cut_crops(tmp_path):
    from explorer.zoo import Zoo

    model = Zoo(ZOO).load("demo-clip-base")
    dataset = read_negatives_set(write_fg_ovd(tmp_path / "fg"), layout="fg-ovd")
    result = evaluate_negatives({"clip": model}, dataset, progress=False, region="crop", ties="miss")
    right = []
    for item in dataset.items:
        x, y, w, h = (int(v) for v in item.box)
        crop = Image.open(item.picture).convert("RGB").crop((x, y, x + w, y + h))
        scores = model.similarity([crop], [item.positive, *item.negatives])[0]
        right.append(bool(scores[0] > scores[1:].max()))
    by_hand = {"hard": float(np.mean(right[:2])), "trivial": float(right[2])}
    assert result["models"][0]["accuracy"] == pytest.approx(by_hand)


def test_sugarcrepe_layout(tmp_path):
    found = read_negatives_set(write_sugarcrepe(tmp_path / "sc"), layout="sugarcrepe")
    assert found.counts() == {"replace_obj": 1, "swap_att": 1} and found.title == "SugarCrepe"
    assert [(i.positive, i.negatives, i.box) for i in found.items] == [("a dog", ("a cat",), None),
                                                                       ("a big dog", ("a dog big",), None)]
    assert {s.item: s.reason.split(":")[0] for s in found.skipped} == {"replace_obj/1": "negatives missing",
                                                                       "replace_obj/2": "picture missing"}
    (tmp_path / "sc" / "swap_ent.json").write_text(json.dumps([{"filename": "000000000005.jpg", "caption": "a",
                                                                "negative_caption": "b"}]))  # an early name
    assert read_negatives_set(tmp_path / "sc", layout="sugarcrepe", splits=["swap_obj"]).items[0].id == "swap_obj/0"
    result = evaluate_negatives({"fake": Fake({"a dog": 1.0, "a cat": 0.0, "a big dog": 0.0, "a dog big": 0.5})},
                                found, progress=False)
    assert result["models"][0]["accuracy"] == {"replace_obj": 1.0, "swap_att": 0.0}
    assert found.items[0].picture == tmp_path / "sc" / "val2017" / "000000000005.jpg"


def test_synthetic_negatives_change_the_attribute_words_they_say(world):
    dataset = read_negatives_set(world, layout="synthetic", limit=3)
    for item in dataset.items:
        own = item.positive.split()[1:]  # size, colour, texture, shape
        assert len(set(item.negatives)) == len(item.negatives)
        for negative in item.negatives:
            changed = [i for i, (a, b) in enumerate(zip(own, negative.split()[1:])) if a != b]
            if item.split in twin.CHANGES:  # hard 1, medium 2, easy 3 attribute words; the shape kept
                assert len(changed) == twin.CHANGES[item.split] and 3 not in changed
            elif item.split == "trivial":
                assert 3 in changed
            else:  # color / pattern: that word alone
                assert changed == [{"color": 1, "pattern": 2}[item.split]]
    counts = dataset.counts()
    assert set(counts) == set(twin.SPLITS) and all(n == 3 for n in counts.values())
    assert {len(i.negatives) for i in dataset.items if i.split == "hard"} == {10}


def test_resume_scores_only_what_the_work_file_lacks(tmp_path):
    dataset = read_negatives_set(write_fg_ovd(tmp_path / "fg"), layout="fg-ovd")
    work = tmp_path / "out.json.work.jsonl"
    table = {f"caption {i}": 0.0 for i in range(1, 13)} | {"caption 1": 1.0}

    class Killed(Fake):
        def similarity(self, features, captions):
            if self.calls == 1:
                raise KeyboardInterrupt  # killed after the first group
            return super().similarity(features, captions)

    with pytest.raises(KeyboardInterrupt):
        evaluate_negatives({"m": Killed(table)}, dataset, work_file=work, progress=False, group=1, region="crop")
    again = Fake(table)
    result = evaluate_negatives({"m": again}, dataset, work_file=work, progress=False, group=1, region="crop",
                                ties="miss")
    assert again.calls == 2  # the two items left, not the one already written
    assert result["models"][0]["n"] == {"hard": 2, "trivial": 1}
    assert result["models"][0]["accuracy"]["hard"] == 0.5  # hard/11 ties (0 = 0): a miss under ties="miss"
    with pytest.raises(ExplorerError, match="another run"):  # the scores were read by crops, not RoI
        evaluate_negatives({"m": again}, dataset, work_file=work, progress=False, region="roi")


@pytest.mark.slow(reason="the command end to end on the FG-OVD twin: demo models, RoI pooling and crops")
def test_cli_on_the_synthetic_twin(tmp_path, capsys):
    out = tmp_path / "twin"
    assert main(["data", "negatives-twin", str(out), "--n", "2", "--size", "64"]) == 0
    assert (out / "benchmarks" / "1_attributes.json").is_file() and any((out / "val2017").iterdir())
    results = tmp_path / "neg.json"
    code = main(["--checkpoints", str(ZOO / "demo"), "eval-negatives", "--data", str(out), "--layout", "fg-ovd",
                 "--model", "demo-clip-base", "--split", "hard", "--split", "color", "--limit", "2",
                 "--out", str(results), "--csv", str(tmp_path / "neg.csv"), "--no-progress"])
    assert code == 0
    data = json.loads(results.read_text())
    entry = data["models"][0]
    assert entry["name"] == "demo-clip-base" and entry["n"] == {"hard": 2, "color": 2}
    assert set(entry["accuracy"]) == {"hard", "color"}
    assert (tmp_path / "neg.json.work.jsonl").is_file()
    assert "hard" in capsys.readouterr().out
    assert main(["eval-negatives", "--data", str(tmp_path / "nowhere"), "--layout", "fg-ovd", "--model", "x",
                 "--out", str(results)]) == 2
