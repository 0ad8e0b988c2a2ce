"""RefCOCO as the refer toolkit lays it out: the refs pickle read with no global resolved, polygon and RLE
masks (equal to pycocotools where it is installed), bad entries skipped with their reasons, referring
segmentation (mIoU, oIoU) and box grounding (ReCLIP's protocol) checked against hand computations,
detections as proposals, resume from the work file, the CLI and the synthetic twin."""

from __future__ import annotations

import json
import os
import pickle

import numpy as np
import pytest
from refer_fixtures import H, W, compressed, counts, rect, write_detections, write_refer

from explorer.cli import main
from explorer.data.readers import coco_masks
from explorer.data.errors import DatasetError
from explorer.data.grounding_sets import read_grounding_set, refcoco
from explorer.data.readers.plain_pickle import load_plain, loads_plain
from explorer.evaluation.metrics.boxes import BoxRule, pair_iou, pick_box
from explorer.evaluation.real_grounding import evaluate_grounding

# the map each expression gets from the fake model: 1 inside the rectangle, 0 elsewhere (Otsu: that rectangle)
MAPS = {"left square": (2, 2, 12, 12), "the small box": (20, 5, 30, 15), "middle square": (20, 5, 25, 15),
        "right square": (26, 20, 38, 28)}


class RectModel:
    """A model whose maps are known rectangles, counting its calls."""

    name, method_name, map_kinds = "rects", "fake", ("generic",)

    def __init__(self):
        self.calls = 0

    def sentence_maps(self, image, texts, kind, dense_caption=None):
        self.calls += 1
        assert image.size == (W, H)
        maps = np.stack([rect(*MAPS[text.lower()]).astype(np.float32) for text in texts])  # raw: capitalised
        return type("Maps", (), {"maps": maps})()


@pytest.fixture
def root(tmp_path):
    return write_refer(tmp_path / "refer")


# ---- the pickle -----------------------------------------------------------------------------------------


class Runs:
    def __init__(self, target):
        self.target = target

    def __reduce__(self):
        return (os.mkdir, (self.target,))


@pytest.mark.parametrize("protocol", [0, 2, 5])
def test_a_refs_pickle_with_a_global_is_refused_before_anything_runs(tmp_path, protocol):
    target = tmp_path / "ran"
    with pytest.raises(DatasetError, match="refused: it names .*mkdir.*nothing in it was run"):
        loads_plain(pickle.dumps([{"ref_id": 1}, Runs(str(target))], protocol=protocol))
    assert not target.exists()
    with pytest.raises(DatasetError, match="refused"):
        loads_plain(pickle.dumps([{"a": 1}, DatasetError], protocol=protocol))  # a class is a global too


def test_plain_data_reads_and_a_refused_refs_file_stops_the_layout(root):
    data = [{"ref_id": 1, "sentences": [{"sent": "é"}], "box": (1.5, None, True), "n": 2 ** 70}]
    assert loads_plain(pickle.dumps(data, protocol=2)) == data
    assert loads_plain(pickle.dumps(data, protocol=0)) == data
    assert load_plain(root / "refcoco" / "refs(unc).p")[0]["sentences"][1]["sent"] == "the small box"
    (root / "refcoco" / "refs(unc).p").write_bytes(pickle.dumps([Runs(str(root / "ran"))], protocol=2))
    with pytest.raises(DatasetError, match=r"refs\(unc\).p refused"):
        read_grounding_set(root, layout="refcoco")
    assert not (root / "ran").exists()
    (root / "refcoco" / "refs(unc).p").write_bytes(b"\x80\x02]q\x00(K")  # cut off
    with pytest.raises(DatasetError, match="not a readable pickle"):
        read_grounding_set(root, layout="refcoco")


# ---- masks ----------------------------------------------------------------------------------------------


def test_rle_decoders_are_exact_and_polygons_fill_pixel_centres():
    mask = rect(20, 5, 30, 15) | rect(0, 0, 1, 30)
    for segmentation in ({"size": [H, W], "counts": compressed(mask)}, {"size": [H, W], "counts": counts(mask)}):
        assert np.array_equal(coco_masks.decode(segmentation, H, W, use_pycocotools=False), mask)
    assert coco_masks.encode_rle(mask)["counts"] == compressed(mask)  # the writer agrees with the fixture's
    polygon = [[2, 2, 12, 2, 12, 12, 2, 12]]
    assert np.array_equal(coco_masks.decode(polygon, H, W, use_pycocotools=False), rect(2, 2, 12, 12))
    triangle = coco_masks.rasterize_polygons([[0, 0, 10, 0, 0, 10]], H, W)  # centre (x+.5, y+.5) under x + y < 10
    ys, xs = np.mgrid[0:H, 0:W]
    assert np.array_equal(triangle, (xs + 0.5) + (ys + 0.5) < 10)


@pytest.mark.parametrize("bad, reason", [({"size": [H, W], "counts": [5, 5]}, "malformed RLE"),
                                         ({"size": [H, W], "counts": "!!"}, "malformed RLE"),
                                         ({"size": [10, 10], "counts": [100]}, "mask size differs"),
                                         ([[50, 50, 60, 50, 60, 60]], "empty mask"),  # wholly outside: clipped
                                         ([[100, 100, 160, 100, 160, 160]], "polygon far outside the picture"),
                                         ({"size": [H, W], "counts": [W * H]}, "empty mask"),
                                         ([[1, 2]], "malformed polygon"), ("x", "malformed segmentation"),
                                         ({"size": [H, W], "counts": "o" * 200_000}, "a run longer than any")])
@pytest.mark.parametrize("coco", [False, None])
def test_bad_segmentations_say_why(bad, reason, coco):
    with pytest.raises(coco_masks.SegmentationIssue, match=reason):
        coco_masks.decode(bad, H, W, use_pycocotools=coco)


def test_a_picture_beyond_any_is_refused_before_allocating():
    with pytest.raises(coco_masks.SegmentationIssue, match="beyond any picture"):
        coco_masks.decode([[0, 0, 5, 0, 5, 5]], 100_000, 100_000)


def test_the_own_decoders_equal_pycocotools():
    coco = pytest.importorskip("pycocotools.mask")
    rng = np.random.default_rng(0)
    differing = area = 0
    for _ in range(40):
        height, width = (int(v) for v in rng.integers(3, 40, 2))
        mask = rng.random((height, width)) < rng.random()
        reference = coco.encode(np.asfortranarray(mask.astype(np.uint8)))
        assert coco_masks.encode_rle(mask)["counts"] == reference["counts"].decode()
        assert np.array_equal(coco_masks.decode_rle({"size": [height, width], "counts": reference["counts"]}), mask)
        n = int(rng.integers(3, 10))
        angles, radii = np.sort(rng.random(n) * 2 * np.pi), rng.random(n) * 0.45 + 0.05
        points = np.stack([width / 2 + np.cos(angles) * radii * width, height / 2 + np.sin(angles) * radii * height], 1)
        theirs = coco.decode(coco.merge(coco.frPyObjects([points.ravel().tolist()], height, width))).astype(bool)
        ours = coco_masks.rasterize_polygons([points.ravel().tolist()], height, width)
        ys, xs = np.nonzero(theirs != ours)  # pycocotools rounds the outline to a fifth of a pixel: only there
        centres = np.stack([xs + 0.5, ys + 0.5], 1)
        for centre in centres:
            gaps = [_segment_distance(centre, points[i], points[(i + 1) % n]) for i in range(n)]
            assert min(gaps) < 0.25
        differing, area = differing + len(centres), area + int(theirs.sum())
    assert differing < 0.1 * area


def _segment_distance(p, a, b) -> float:
    t = np.clip(np.dot(p - a, b - a) / max(np.dot(b - a, b - a), 1e-12), 0, 1)
    return float(np.linalg.norm(p - (a + t * (b - a))))


# ---- the layout -----------------------------------------------------------------------------------------


def test_the_layout_reads_sentences_truths_targets_and_skips_with_reasons(root):
    dataset = read_grounding_set(root)  # detected
    assert dataset.layout == "refcoco" and dataset.split == "val" and dataset.extra["label"] == "RefCOCO val"
    # what scoring needs rides on the set, set by its reader: the table's name and the layout's mask reader
    assert dataset.title == "RefCOCO val" and dataset.read_masks is refcoco.picture_masks
    assert [u.text for u in dataset.units] == ["Left square", "The small box", "Middle square", "Right square",
                                               "Left square"]  # raw, as the reference codes read it
    assert [u.target for u in dataset.units][:4] == [(2, 2, 12, 12), (2, 2, 12, 12), (20, 5, 30, 15), (30, 20, 38, 28)]
    assert [u.segments for u in dataset.units] == [("1",), ("1",), ("2",), ("3",), ("7",)]
    first = dataset.pictures[0]
    assert first.proposals == ((2, 2, 12, 12), (20, 5, 30, 15), (30, 20, 38, 28), (0, 0, 5, 5))  # ann 5's: outside
    from explorer.data.grounding_sets.truth import unit_truths

    truths = unit_truths(dataset, 0, (W, H))
    for got, want in zip(truths, [rect(2, 2, 12, 12)] * 2 + [rect(20, 5, 30, 15), rect(30, 20, 38, 28)]):
        assert np.array_equal(got, want)
    assert "pictures, 5 units" in dataset.summary() and "1 empty mask" in dataset.summary()
    reasons = [s.reason for s in dataset.skipped]
    for reason in ("zero-area box", "polygon far outside the picture", "empty mask",
                   "annotation not in instances.json", "zero-area proposal box", "proposal outside the picture"):
        assert reasons.count(reason) == 1, reason
    itself = read_grounding_set(root / "refcoco")  # the dataset's own folder: its parent, that dataset
    assert dataset.root == itself.root == root / "refcoco"  # what reads this very set again
    assert [u.text for u in itself.units] == [u.text for u in dataset.units]
    lost = read_grounding_set(root, split="testA", layout="refcoco")
    assert not lost.pictures and [s.reason for s in lost.skipped] == ["picture missing"]


def test_missing_files_and_options_say_what_is_expected(root, tmp_path):
    with pytest.raises(DatasetError, match=r"refs\(google\).p"):
        read_grounding_set(root, options={"split_by": "google"})
    with pytest.raises(DatasetError, match="has splits testA, val, not 'testB'"):
        read_grounding_set(root, split="testB")
    with pytest.raises(DatasetError, match="refcoco\\+ comes split by unc"):
        read_grounding_set(root, options={"dataset": "refcoco+", "split_by": "umd"})
    with pytest.raises(DatasetError, match="refcoco\\+/ or refcocog/ holding instances.json"):
        read_grounding_set(tmp_path, layout="refcoco")
    with pytest.raises(DatasetError, match="images/mscoco/images/train2014"):
        read_grounding_set(root, options={"images": tmp_path / "nowhere"})
    with pytest.raises(DatasetError, match="takes no dataset"):
        read_grounding_set(root, layout="iiw", options={"dataset": "refcoco"})
    with pytest.raises(DatasetError, match="no detections file"):
        read_grounding_set(root, options={"proposals": tmp_path / "dets.json"})


def test_lists_of_another_type_say_so_or_skip(root):
    folder = root / "refcoco"
    refs = load_plain(folder / "refs(unc).p")
    whole = len(read_grounding_set(root).units)
    refs[0]["sentences"] = 5  # no list of sentences: that ref has none and is skipped, the rest read
    (folder / "refs(unc).p").write_bytes(pickle.dumps(refs, protocol=2))
    assert len(read_grounding_set(root).units) == whole - 2  # ref 0's two: "left square", "the small box"
    instances = json.loads((folder / "instances.json").read_text())
    (folder / "instances.json").write_text(json.dumps(dict(instances, annotations={"1": {}})))
    with pytest.raises(DatasetError, match='"annotations" should be a list, not a dict'):
        read_grounding_set(root)


# ---- the numbers ----------------------------------------------------------------------------------------


def test_miou_oiou_and_box_accuracy_equal_the_hand_computation(root):
    result = evaluate_grounding({"rects": RectModel()}, read_grounding_set(root), progress=False)
    scores = result["models"][0]["kinds"]["generic"]
    # IoUs: left square 100/100, the small box 0/200, middle square 50/100, right square 64/96, left square (3) 1
    assert scores["miou"] == pytest.approx((1 + 0 + 0.5 + 64 / 96 + 1) / 5)
    assert scores["oiou"] == pytest.approx((100 + 0 + 50 + 64 + 100) / (100 + 200 + 100 + 96 + 100))
    # picks: ann 1 (hit), ann 2 (miss: the referred box is ann 1's), ann 2 (hit), ann 3 (hit), ann 7 (hit)
    assert scores["box_accuracy"] == pytest.approx(4 / 5) and scores["n_units"] == 5
    assert [u["scores"]["rects"]["generic"]["box_iou"] for u in result["units"]] == [1.0, 0.0, 1.0, 1.0, 1.0]
    uniform = next(m for m in result["models"] if m["name"] == "uniform")["kinds"]["baseline"]
    assert uniform["box_accuracy"] == pytest.approx(3 / 5)  # a flat map picks the first proposal: ann 1 (x4), ann 7
    assert uniform["oiou"] == 0.0


def test_detections_replace_the_coco_boxes(root, tmp_path):
    dets = write_detections(tmp_path / "dets.json")
    dataset = read_grounding_set(root, options={"proposals": dets})
    assert dataset.pictures[0].proposals == ((20, 5, 30, 15), (0, 0, 40, 30))
    reasons = [s.reason for s in dataset.skipped]
    assert reasons.count("malformed detection") == reasons.count("zero-area proposal box") == 1
    result = evaluate_grounding({"rects": RectModel()}, dataset, progress=False)
    # left square: the whole picture (100/1200 inside vs 0) -> IoU 100/1200; the small box: det 1 -> 0;
    # middle square: det 1 -> 1; right square: the whole picture -> 64/1200; picture 3: its one det -> 1
    got = [u["scores"]["rects"]["generic"]["box_iou"] for u in result["units"]]
    assert got == pytest.approx([100 / 1200, 0.0, 1.0, 64 / 1200, 1.0])
    assert result["models"][0]["kinds"]["generic"]["box_accuracy"] == pytest.approx(2 / 5)


MEAN = BoxRule(alpha=1, min_area=0)  # the mean over the box, every box may answer


def test_box_iou_and_pick_by_hand():
    assert pair_iou((0, 0, 10, 10), (5, 0, 15, 10)) == pytest.approx(50 / 150)
    values = np.zeros((10, 10))
    values[0:2, 0:2] = 1.0
    values[5:10, 5:10] = 0.5
    assert pick_box(values, [(5, 5, 10, 10), (0, 0, 4, 4)], (10, 10), MEAN) == 0  # means 0.5 vs 4/16
    values[5, 5] = np.nan  # left out of its box's sum: 12 / 25
    assert pick_box(values, [(5, 5, 10, 10), (0, 0, 2, 2)], (10, 10), MEAN) == 1
    assert pick_box(values, [], (10, 10)) is None


def test_a_killed_run_resumes_from_its_work_file(root, tmp_path):
    work = tmp_path / "out.work.jsonl"
    first = evaluate_grounding({"rects": RectModel()}, read_grounding_set(root), work_file=work, progress=False)
    lines = work.read_text().splitlines()
    kept = [lines[0]] + [line for line in lines[1:] if json.loads(line)["picture"] == "1"]
    work.write_text("\n".join(kept) + "\n" + '{"key": "torn')  # killed while writing picture 3's record
    again = RectModel()
    second = evaluate_grounding({"rects": again}, read_grounding_set(root), work_file=work, progress=False)
    assert again.calls == 1  # only picture 3 was drawn again
    assert second["models"] == first["models"]
    with pytest.raises(Exception, match="another run"):  # another dataset's run never mixes in
        evaluate_grounding({"rects": RectModel()}, read_grounding_set(root, split="testA"), work_file=work,
                           progress=False)


# ---- the command line and the twin ----------------------------------------------------------------------


def test_refer_twin_reads_back_and_the_cli_refuses_options_of_other_layouts(tmp_path, capsys):
    twin = tmp_path / "twin"
    assert main(["data", "refer-twin", str(twin), "--n", "3", "--size", "64"]) == 0
    for dataset, split in (("refcoco", "testB"), ("refcoco+", "val"), ("refcocog", "test")):
        loaded = read_grounding_set(twin, split=split, options={"dataset": dataset})
        assert loaded.units and all(u.target and u.segments for u in loaded.units), dataset
        assert not loaded.skipped
    kinds = {type(a["segmentation"]).__name__ + type(a["segmentation"].get("counts", "")).__name__
             if isinstance(a["segmentation"], dict) else "polygon"
             for a in json.loads((twin / "refcoco" / "instances.json").read_text())["annotations"]}
    assert "polygon" in kinds
    assert main(["data", "refer-twin", str(twin), "--n", "1"]) == 2  # not replaced without --overwrite
    assert main(["eval-grounding", "--data", str(twin), "--layout", "iiw", "--dataset", "refcoco", "--model", "x",
                 "--out", str(tmp_path / "r.json")]) == 2
    assert "takes no dataset" in capsys.readouterr().err
