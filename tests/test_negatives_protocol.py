"""FG-OVD's protocols, each against a hand computation on files in the released shapes: RoIAlign of a box on a
patch grid pooled by hand (FG-CLIP's settings: 1x1, adaptive sampling, aligned), the box scaled to the grid as
FG-CLIP scales it, a tie under each protocol, pattern and transparency regions with 1 to 10 negatives, and the
one line an unknown --region or a model without patch features gets."""

from __future__ import annotations

import importlib
import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image

from explorer.core.errors import InputError
from explorer.data.negatives_sets import read_negatives_set
from explorer.evaluation.negatives import evaluate_negatives
from explorer.models.features import ImageFeatures
from explorer.models.regions import grid_boxes, roi_pool

GRID = np.arange(16 * 2, dtype=np.float32).reshape(4, 4, 2) ** 1.5  # a 4x4 grid of 2-d patch vectors, not linear


def features() -> ImageFeatures:
    return ImageFeatures(cls=torch.zeros(1, 2), patches=torch.from_numpy(GRID.reshape(1, 16, 2)), grid_hw=(4, 4))


def bilinear(x: float, y: float) -> np.ndarray:
    """The grid's value at (x, y) in patch-centre coordinates (patch j's centre at j), by hand."""
    x0, y0 = math.floor(x), math.floor(y)
    fx, fy = x - x0, y - y0
    x1, y1 = min(x0 + 1, 3), min(y0 + 1, 3)
    top = (1 - fx) * GRID[y0, x0] + fx * GRID[y0, x1]
    bottom = (1 - fx) * GRID[y1, x0] + fx * GRID[y1, x1]
    return (1 - fy) * top + fy * bottom


def test_roi_pool_of_a_box_equals_the_hand_pooled_grid():
    # A box over patch columns 1-2 of row 1 (grid units [1, 1, 3, 2]): aligned, its 2 x 1 samples fall on the two
    # patch centres, so the pooled vector is their mean.
    box = grid_boxes([(0, 1 / 4, 1 / 4, 3 / 4, 2 / 4)], (4, 4))
    assert box.tolist() == [[0.0, 1.0, 1.0, 3.0, 2.0]]  # FG-CLIP: x / width * 14 on its 14 x 14 grid, here 4 x 4
    pooled = roi_pool(features(), box)
    assert np.allclose(pooled.numpy()[0], (GRID[1, 1] + GRID[1, 2]) / 2)
    # A box [0.5, 0.5, 2.0, 1.5]: aligned shifts it by half a patch to [0, 0, 1.5, 1]; ceil(1.5) = 2 samples
    # across at 0.375 and 1.125, ceil(1) = 1 down at 0.5; each read bilinearly between the four patch centres.
    pooled = roi_pool(features(), torch.tensor([[0.0, 0.5, 0.5, 2.0, 1.5]]))
    by_hand = (bilinear(0.375, 0.5) + bilinear(1.125, 0.5)) / 2
    assert np.allclose(pooled.numpy()[0], by_hand, atol=1e-5)


def test_roi_pool_reads_as_torchvisions_roi_align_on_boxes_in_the_picture_and_zero_outside():
    """Against torchvision's RoIAlign run eagerly (its Python form, which a CPU build without compiled ops hands
    to ``torch.compile``) on boxes a picture can hold: inside, along each border, the whole picture, with no
    width, and on the second of two pictures. Outside the picture the two part: the compiled kernels (FG-CLIP
    ran CUDA's) read nothing for a sample more than a patch outside, where the Python form clamps it to the
    border, so a box wholly outside is asserted to read zero, as the kernels read it."""
    from explorer.core.runtime import prepare_libraries

    prepare_libraries()  # torchvision's op schemas on a CPU-only build
    eager = importlib.import_module("torchvision.ops.roi_align")._roi_align
    eager = getattr(eager, "__wrapped__", eager)  # torchvision wraps it in a compiling hook
    generator = torch.Generator().manual_seed(0)
    patches = torch.randn(2, 5 * 7, 3, generator=generator)
    image = ImageFeatures(cls=torch.zeros(2, 3), patches=patches, grid_hw=(5, 7))
    inside = grid_boxes([(0, 0.03, 0.06, 0.87, 0.88), (1, 1 / 7, 1 / 5, 3 / 7, 2 / 5), (1, 0.0, 0.0, 0.31, 0.26),
                         (0, 0.79, 0.7, 1.0, 1.0), (0, 2 / 7, 0.2, 2 / 7, 0.6), (1, 0.0, 0.0, 1.0, 1.0),
                         (0, 0.99, 0.98, 1.0, 1.0)], (5, 7))
    grid = patches.reshape(2, 5, 7, 3).permute(0, 3, 1, 2)
    expected = eager(grid, inside, 1.0, 1, 1, -1, True)[:, :, 0, 0]
    assert torch.allclose(roi_pool(image, inside), expected, atol=1e-5)
    assert not torch.allclose(roi_pool(image, inside)[0], roi_pool(image, inside)[1])  # the box is read
    # just past one patch outside: above-left (samples at -1.8), below-right (at 7.4 of 7 and 5.4 of 5)
    outside = torch.tensor([[1, -1.6, -1.6, -1.0, -1.0], [0, 7.6, 5.6, 8.2, 6.2]])
    assert torch.equal(roi_pool(image, outside), torch.zeros(2, 3))
    assert roi_pool(image, inside[:0]).shape == (0, 3)


def test_no_patch_grid_gives_none():
    flat = ImageFeatures(cls=torch.zeros(1, 2), patches=torch.zeros(1, 0, 2), grid_hw=(0, 0))
    assert roi_pool(flat, torch.tensor([[0.0, 0, 0, 1, 1]])) is None


def save_picture(path: Path, width: int, height: int) -> None:
    """A COCO-like JPEG whose EXIF says to turn it a quarter (orientation 6): its boxes are in the stored frame."""
    path.parent.mkdir(parents=True, exist_ok=True)
    exif = Image.Exif()
    exif[0x0112] = 6
    Image.fromarray(np.full((height, width, 3), 128, np.uint8)).save(path, exif=exif)


def released_file(regions: list, word: str, image_id: int = 239627) -> dict:
    """A benchmark file as FG-OVD's ``benchmarks/pattern.json`` holds one: every field of the release (the
    images' own neg_category_ids, not_exhaustive_category_ids, coco_url; categories' synset, frequency...);
    ``regions``: (id, bbox, negatives), captions named after ``word``."""
    categories, annotations, next_id = [], [], 110
    for number, (region_id, bbox, n_negatives) in enumerate(regions):
        ids = list(range(next_id, next_id + 1 + n_negatives))
        next_id += 1 + n_negatives
        categories += [{"name": f"a {word} region {number}, caption {k}", "id": i, "synset": "", "synonyms": [], "def": "",
                        "frequency": "f", "instance_count": int(k == 0), "image_count": int(k == 0)}
                       for k, i in enumerate(ids)]
        annotations.append({"bbox": bbox, "area": bbox[2] * bbox[3], "category_id": ids[0],
                            "neg_category_ids": ids[1:], "image_id": image_id, "needs_revision": False,
                            "id": region_id})
    image = {"id": image_id, "width": 64, "height": 48, "license": 1,
             "coco_url": f"http://images.cocodataset.org/val2017/{image_id:012d}.jpg",
             "flickr_url": "http://farm2.staticflickr.com/x.jpg", "file_name": f"val2017/{image_id:012d}.jpg",
             "neg_category_ids": [c["id"] for c in categories[1:5]], "not_exhaustive_category_ids": [110],
             "checked": True}
    return {"images": [image], "annotations": annotations, "categories": categories}


PATTERN = [7, 8, 10]  # the released pattern.json: 320 regions with 7 negatives, 137 with 8, 10 with 10
TRANSPARENCY = [1, 2, 4, 6, 8]  # transparency.json: 1, 377, 19, 5 and 7 regions


@pytest.fixture
def fg_ovd(tmp_path) -> Path:
    root = tmp_path / "FG-OVD"
    save_picture(root / "val2017" / "000000239627.jpg", 64, 48)
    (root / "benchmarks").mkdir(parents=True)
    boxes = [[8.0, 4.0, 16.0, 12.0], [32.5, 0.0, 20.25, 30.0], [0.0, 24.0, 64.0, 24.0], [10.0, 10.0, 30.0, 30.0],
             [40.0, 20.0, 20.0, 20.0]]
    for name, counts in (("pattern.json", PATTERN), ("transparency.json", TRANSPARENCY)):
        regions = [(20 + k, boxes[k], n) for k, n in enumerate(counts)]
        (root / "benchmarks" / name).write_text(json.dumps(released_file(regions, name[:-5])))
    return root


class FakeRegions:
    """A model that reads every region as the same vector and every caption through ``table`` (a caption's
    score is its cosine with that vector: ``table[caption]`` as the first coordinate of a unit vector); it
    remembers the pictures and boxes it was given."""

    method_name, score_label, name = "fake", "cosine", "fake"

    def __init__(self, table, has_grid=True):
        self.table, self.has_grid, self.seen, self.crops = table, has_grid, [], []

    def region_features(self, images, boxes):
        self.seen.append(([image.size for image in images], [tuple(b) for b in boxes]))
        return torch.tensor([[1.0, 0.0]] * len(boxes)) if self.has_grid else None

    def encode_text(self, captions):
        class Text:
            eot = torch.tensor([[self.table[c], math.sqrt(1 - self.table[c] ** 2)] for c in captions])
        return Text()

    def encode_image(self, images):
        self.crops += [image.size for image in images]
        return torch.zeros(len(images), 1)

    def similarity(self, features, captions):
        return torch.tensor([[self.table[c] for c in captions]] * len(features))


def scores_for(dataset, winner_negative: dict) -> dict:
    """Positive 0.5, negatives 0.25, except the negative at index ``winner_negative[region]`` (0.75)."""
    table = {}
    for item in dataset.items:
        table[item.positive] = 0.5
        for k, text in enumerate(item.negatives):
            table[text] = 0.75 if winner_negative.get(item.id) == k else 0.25
    return table


def test_pattern_and_transparency_read_with_every_negative_the_file_lists(fg_ovd):
    dataset = read_negatives_set(fg_ovd, layout="fg-ovd")
    assert dataset.counts() == {"pattern": 3, "transparency": 5} and not dataset.skipped
    assert [len(i.negatives) for i in dataset.items] == PATTERN + TRANSPARENCY
    # The last negative of the 10-negative and the 8-negative regions beats the positive: wrong only if read.
    table = scores_for(dataset, {"pattern/22": 9, "transparency/24": 7, "transparency/20": 0})
    result = evaluate_negatives({"fake": FakeRegions(table)}, dataset, progress=False)
    entry = result["models"][0]
    assert entry["accuracy"] == {"pattern": pytest.approx(2 / 3), "transparency": pytest.approx(3 / 5)}
    assert entry["n"] == {"pattern": 3, "transparency": 5}
    assert result["dataset"]["negatives_per_split"] == {"pattern": {"7": 1, "8": 1, "10": 1},
                                                        "transparency": {"1": 1, "2": 1, "4": 1, "6": 1, "8": 1}}
    assert result["dataset"]["negatives_per_item"] == [1, 10]
    assert result["protocol"]["region"] == "roi" and entry["score"] == "cosine (RoI box features)"


def test_roi_reads_the_whole_picture_and_scales_the_box_as_fg_clip(fg_ovd):
    dataset = read_negatives_set(fg_ovd, layout="fg-ovd", splits=["pattern"])
    model = FakeRegions(scores_for(dataset, {}))
    evaluate_negatives({"fake": model}, dataset, progress=False)
    sizes, boxes = model.seen[0]
    assert sizes == [(64, 48)]  # the picture, once, whole (no crop), as stored (not EXIF-turned to 48 x 64)
    # FG-CLIP: (x / W, y / H, (x + w) / W, (y + h) / H), later times the grid's side
    assert boxes[1] == pytest.approx((0, 32.5 / 64, 0 / 48, 52.75 / 64, 30 / 48))
    crop_model = FakeRegions(scores_for(dataset, {}))
    evaluate_negatives({"fake": crop_model}, dataset, progress=False, region="crop")
    assert not crop_model.seen and crop_model.crops[1] == (21, 30)  # floor(32.5)..ceil(52.75) = 32..53


@pytest.mark.parametrize("region", ["roi", "crop"])
def test_a_tie_under_each_protocol(fg_ovd, region):
    dataset = read_negatives_set(fg_ovd, layout="fg-ovd", splits=["transparency"])
    table = scores_for(dataset, {})
    table[dataset.items[0].negatives[0]] = 0.5  # the 1-negative region: its negative ties its positive
    hit = evaluate_negatives({"fake": FakeRegions(table)}, dataset, progress=False, region=region)
    miss = evaluate_negatives({"fake": FakeRegions(table)}, dataset, progress=False, region=region, ties="miss")
    assert hit["models"][0]["accuracy"]["transparency"] == 1.0  # FG-CLIP's and Bianchi et al.'s: first best wins
    assert miss["models"][0]["accuracy"]["transparency"] == pytest.approx(4 / 5)
    assert (hit["protocol"]["ties"], miss["protocol"]["ties"]) == ("hit", "miss")


def test_unknown_region_and_a_model_without_patch_features(fg_ovd, capsys):
    dataset = read_negatives_set(fg_ovd, layout="fg-ovd", splits=["pattern"])
    with pytest.raises(InputError, match=r"^unknown --region 'box'; the choices are roi, crop$"):
        evaluate_negatives({}, dataset, region="box")
    with pytest.raises(InputError, match="--ties.*hit, miss"):
        evaluate_negatives({}, dataset, ties="never")
    result = evaluate_negatives({"flat": FakeRegions(scores_for(dataset, {}), has_grid=False)}, dataset,
                                progress=False)
    entry = result["models"][0]
    assert entry["accuracy"] == {"pattern": None} and "has no patch features" in entry["notes"][0]

    from explorer.cli import main

    assert main(["eval-negatives", "--data", str(fg_ovd), "--model", "x", "--region", "box",
                 "--out", str(fg_ovd / "out.json")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "roi, crop" in err[0]
