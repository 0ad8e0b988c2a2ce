"""RefCOCO's box and mask protocol choices, each checked by hand against the official code's formula on
fixtures in the exact released shapes: MAttNet's detections list and ReCLIP's dict as proposals (a picture
with none gets the whole picture, as ReCLIP's main.py), ReCLIP's ``sum / area ** alpha`` box score at alpha
0.5 and 1 with its ``int()`` slice, a hit at IoU > 0.5 (0.5 itself a miss), the ``raw`` sentence field,
polygons clipped to the picture as pycocotools does, and dataset pictures read in their stored orientation
while uploads are turned by EXIF."""

from __future__ import annotations

import json

import numpy as np
import pytest
from PIL import Image
from refer_fixtures import H, TRAIN2014, W, rect, write_refer

from explorer.cli import main
from explorer.core.errors import InputError
from explorer.core.images import load_image
from explorer.data.readers import coco_masks
from explorer.data.errors import DatasetError
from explorer.data.grounding_sets import read_grounding_set
from explorer.evaluation.metrics.boxes import BoxRule, box_rule, box_scores, check_alpha, pick_box
from explorer.evaluation.real_grounding import evaluate_grounding, summary

MAPS = {"left square": (2, 2, 12, 12), "the small box": (20, 5, 30, 15), "middle square": (20, 5, 25, 15),
        "right square": (26, 20, 38, 28)}


class RectModel:
    """Maps that are 1 inside a known rectangle per expression; keeps the pictures it was given."""

    name, method_name, map_kinds = "rects", "fake", ("generic",)

    def __init__(self):
        self.seen = []

    def sentence_maps(self, image, texts, kind, dense_caption=None):
        self.seen.append(image.copy())
        maps = np.stack([rect(*MAPS[text.lower()]).astype(np.float32) for text in texts])
        return type("Maps", (), {"maps": maps})()


@pytest.fixture
def root(tmp_path):
    return write_refer(tmp_path / "refer")


# ---- proposals as released ------------------------------------------------------------------------------

# MAttNet's tools/run_detect.py writes a top-level list of exactly these keys, box = [x1, y1, x2-x1+1, y2-y1+1]
MATTNET = [{"det_id": 0, "h5_id": 0, "box": [20.0, 5.0, 10.0, 10.0], "image_id": 1, "category_id": 1,
            "category_name": "person", "score": 0.98},
           {"det_id": 1, "h5_id": 1, "box": [0.0, 0.0, 40.0, 30.0], "image_id": 1, "category_id": 62,
            "category_name": "chair", "score": 0.51},
           {"det_id": 2, "h5_id": 2, "box": [3.0, 3.0, 0.0, 5.0], "image_id": 1, "category_id": 1,
            "category_name": "person", "score": 0.2},  # zero area: skipped with its reason
           {"det_id": 3, "h5_id": 3, "box": [60.0, 40.0, 5.0, 5.0], "image_id": 1, "category_id": 1,
            "category_name": "person", "score": 0.3}]  # wholly outside the 40 x 30 picture: skipped
# ReCLIP's main.py reads a dict {image_id: [boxes]}, each box indexed box[0..3] as x, y, w, h
RECLIP = {"1": [[20, 5, 10, 10], [0, 0, 40, 30], [3, 3, 0, 5], [60, 40, 5, 5]]}


@pytest.mark.parametrize("content, shape", [(MATTNET, "mattnet"), (RECLIP, "reclip"), ({"dets": MATTNET}, "dets")])
def test_each_released_shape_gives_the_same_proposals_and_a_bare_picture_the_whole_picture(root, tmp_path, content,
                                                                                          shape):
    file = tmp_path / "dets.json"
    file.write_text(json.dumps(content))
    dataset = read_grounding_set(root, options={"proposals": file})
    first, third = dataset.pictures
    assert first.proposals == ((20, 5, 30, 15), (0, 0, 40, 30))  # [x, y, w, h] -> corners, file order
    assert third.proposals == ((0, 0, W, H),)  # picture 3 has no detection: ReCLIP's Box(0, 0, img.w, img.h)
    reasons = [s.reason for s in dataset.skipped]
    assert reasons.count("zero-area proposal box") == 1 and reasons.count("proposal outside the picture") == 1
    result = evaluate_grounding({"rects": RectModel()}, dataset, progress=False)
    assert result["protocol"]["proposals"] == shape and result["protocol"]["whole_picture_pictures"] == 1
    # picture 3's "left square" (2, 2, 12, 12) picks the whole picture: IoU 100 / 1200, a miss
    assert result["units"][-1]["scores"]["rects"]["generic"]["box_iou"] == pytest.approx(100 / (W * H))


@pytest.mark.parametrize("content", [[1, 2], {"1": 5}, {"dets": {"box": [0, 0, 1, 1]}}, "boxes"])
def test_a_file_in_none_of_the_shapes_names_the_shapes_read(root, tmp_path, content):
    file = tmp_path / "dets.json"
    file.write_text(json.dumps(content))
    with pytest.raises(DatasetError) as caught:
        read_grounding_set(root, options={"proposals": file})
    message = str(caught.value)
    assert "\n" not in message and "MAttNet's list" in message and "ReCLIP's dict" in message and '"dets"' in message


# ---- the box score: ReCLIP's sum / area ** alpha ----------------------------------------------------------


def test_alpha_half_and_one_by_hand():
    values = np.full((10, 10), 0.2)
    values[0:2, 0:2] = 1.0
    small, whole = (0, 0, 2, 2), (0, 0, 10, 10)
    total = 4 * 1.0 + 96 * 0.2  # the whole picture's sum: 23.2
    assert box_scores(values, [small, whole], (10, 10), alpha=0.5) == pytest.approx([4 / 2, total / 10])
    assert box_scores(values, [small, whole], (10, 10), alpha=1) == pytest.approx([4 / 4, total / 100])
    every = BoxRule(alpha=0.5, min_area=0)  # the small box (4% of the picture) may answer too
    assert pick_box(values, [small, whole], (10, 10), every) == 1  # alpha 0.5: 2.32 beats 2
    assert pick_box(values, [small, whole], (10, 10), BoxRule(alpha=1, min_area=0)) == 0  # the mean: 1 beats 0.232


def test_reclips_area_threshold_lets_only_a_box_over_five_percent_answer():
    values = np.zeros((10, 10))
    values[0:2, 0:3] = 1.0
    exactly, above, whole = (0, 0, 1, 5), (0, 0, 2, 3), (0, 0, 10, 10)  # 5%, 6%, 100% of 100 px
    reclip = BoxRule(0.5, 0.05)  # --min-box-area 0.05: box_area / image_area > 0.05 (Environment.filter_area)
    assert pick_box(values, [exactly, whole], (10, 10), reclip) == 1  # 2 / 5**.5 = 0.89 beats 6 / 10, but is out
    assert pick_box(values, [exactly, whole], (10, 10)) == 0  # by default every box may answer
    assert pick_box(values, [above, whole], (10, 10), reclip) == 0  # 4 / 6**.5 = 1.63 beats 0.6
    assert pick_box(values, [exactly, (5, 5, 6, 6)], (10, 10), reclip) == 0  # none passes: every box competes


def test_the_box_pixels_are_reclips_int_slice_scaled_to_the_map():
    values = np.arange(100, dtype=np.float64).reshape(10, 10)
    # map[int(0.6):int(2.6), int(1.5):int(4.7)]: rows 0-1, columns 1-3; area 3.2 x 2 (not the pixel count, 6)
    inside = values[0:2, 1:4].sum()
    assert box_scores(values, [(1.5, 0.6, 4.7, 2.6)], (10, 10)) == pytest.approx([inside / 6.4 ** 0.5])
    # a frame twice the map's size: the box (4, 4, 12, 8) is (2, 2, 6, 4) on the map, area 8 there
    assert box_scores(values, [(4, 4, 12, 8)], (20, 20)) == pytest.approx([values[2:4, 2:6].sum() / 8 ** 0.5])


@pytest.mark.parametrize("alpha", [0, -1, 2.5, "x", float("nan")])
def test_an_alpha_out_of_range_is_one_line_naming_it(alpha):
    with pytest.raises(InputError, match=r"--box-alpha must lie in \(0, 2\]"):
        check_alpha(alpha)
    assert check_alpha(2) == 2.0 and check_alpha("0.5") == 0.5
    with pytest.raises(InputError, match=r"--min-box-area must lie in \[0, 1\)"):
        box_rule(0.5, 1)
    assert box_rule(1, 0) == BoxRule(1.0, 0.0)


def test_the_cli_refuses_a_bad_alpha_and_a_bad_text(root, tmp_path, capsys):
    out = str(tmp_path / "r.json")
    assert main(["eval-grounding", "--data", str(root), "--model", "x", "--out", out, "--box-alpha", "3"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "(0, 2]" in err
    # the declaration checks it (evaluation.tasks.grounding): one line naming the choices
    assert main(["eval-grounding", "--data", str(root), "--model", "x", "--out", out, "--text", "tokens"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "raw, sent" in err
    with pytest.raises(DatasetError, match="raw, sent"):
        read_grounding_set(root, options={"text": "tokens"})


# ---- the hit: IoU > 0.5 ----------------------------------------------------------------------------------


def test_an_iou_of_exactly_one_half_is_a_miss():
    row = [None, True, None, None, None]
    assert summary([(*row, 0.5)])["box_accuracy"] == 0.0  # ReCLIP: iou(...) > 0.5
    assert summary([(*row, 0.5 + 1e-9)])["box_accuracy"] == 1.0
    from explorer.evaluation.metrics.boxes import pair_iou

    assert pair_iou((0, 0, 10, 5), (0, 0, 10, 10)) == 0.5  # the pick that ties the threshold, exactly


# ---- the text field, the polygons, the orientation ---------------------------------------------------------


def test_raw_by_default_and_sent_on_request(root):
    raw = read_grounding_set(root)
    sent = read_grounding_set(root, options={"text": "sent"})
    assert [u.text for u in raw.units][:2] == ["Left square", "The small box"]  # the fixture's raw: capitalised
    assert [u.text for u in sent.units][:2] == ["left square", "the small box"]
    result = evaluate_grounding({"rects": RectModel()}, raw, progress=False)
    assert result["protocol"]["text"] == "raw" and result["protocol"]["lowercased"] is False
    assert result["protocol"]["box_alpha"] == 0.5 and result["protocol"]["hit"] == "iou > 0.5"
    assert result["protocol"]["min_box_area"] == 0.0


@pytest.mark.parametrize("coco", [False, None])  # the own rasterizer, and pycocotools where installed
def test_a_polygon_past_the_edge_is_clipped_to_the_picture(coco):
    # columns 30..49, rows 5..14 drawn on a 40 x 30 picture: pycocotools' frPyObjects keeps columns 30..39
    mask = coco_masks.decode([[30, 5, 50, 5, 50, 15, 30, 15]], H, W, use_pycocotools=coco)
    assert np.array_equal(mask, rect(30, 5, 40, 15))


def _rotated_jpeg(path):
    """A 40 x 30 JPEG, stored left half red and right half blue, whose EXIF says: turn 90 degrees (6)."""
    pixels = np.zeros((H, W, 3), dtype=np.uint8)
    pixels[:, : W // 2] = (255, 0, 0)
    pixels[:, W // 2:] = (0, 0, 255)
    exif = Image.Exif()
    exif[0x0112] = 6
    Image.fromarray(pixels).save(path, exif=exif, quality=95)


def test_a_coco_picture_is_read_as_stored_and_an_upload_turned_by_exif(root):
    path = root / TRAIN2014 / "COCO_train2014_000000000001.jpg"
    _rotated_jpeg(path)
    assert load_image(path).image.size == (H, W)  # an upload: turned upright, 30 x 40
    model = RectModel()
    result = evaluate_grounding({"rects": model}, read_grounding_set(root), progress=False)
    seen = np.asarray(model.seen[0])
    assert seen.shape == (H, W, 3)  # the annotations' frame: no EXIF turn, so nothing is skipped
    assert seen[H // 2, 2, 0] > 200 and seen[H // 2, W - 3, 2] > 200  # red left, blue right: as stored
    assert not result["skipped_units"] and result["protocol"]["orientation"] == "stored"
