"""Region proposals (explorer/grounding/detectors.py): segments find a planted object, YOLOS loads from a local dir,
and every bad configuration falls back to the segments with a note that names the problem."""

from __future__ import annotations

import json

import numpy as np
import pytest
from PIL import Image

from explorer.grounding.detectors import DETECTOR_ENV, SegmentProposals, YolosDetector, load_detector
from explorer.grounding.flism import region_proposals

SQUARE = (50, 30, 90, 70)  # x0, y0, x1, y1 of the planted object


def planted_image(seed: int = 0) -> Image.Image:
    """128 x 128 of uniform dark noise with a bright, lightly textured 40 x 40 square."""
    rng = np.random.default_rng(seed)
    pixels = rng.integers(0, 128, size=(128, 128, 3), dtype=np.uint8)
    x0, y0, x1, y1 = SQUARE
    pixels[y0:y1, x0:x1] = rng.integers(200, 256, size=(y1 - y0, x1 - x0, 3), dtype=np.uint8)
    return Image.fromarray(pixels)


def iou(a, b) -> float:
    width = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
    height = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
    overlap = width * height
    return overlap / ((a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - overlap)


def assert_inside(regions, image: Image.Image) -> None:
    for region in regions:
        x0, y0, x1, y1 = region.box
        assert 0 <= x0 < x1 <= image.width and 0 <= y0 < y1 <= image.height, region


# ---- Felzenszwalb segments ----------------------------------------------------------------------


@pytest.mark.parametrize("seed", [0, 1])
def test_segments_find_the_planted_square(seed):
    image = planted_image(seed)
    regions = SegmentProposals()(image)
    assert 0 < len(regions) <= 8
    assert max(iou(region.box, SQUARE) for region in regions) > 0.8
    assert_inside(regions, image)
    assert all(region.source == "detector" and region.label.startswith("segment s=") for region in regions)


def test_segment_boxes_are_scaled_back_from_the_working_copy():
    image = planted_image().resize((512, 512), Image.Resampling.NEAREST)  # segmented at 128 px, boxes scaled x4
    regions = SegmentProposals(working_side=128)(image)
    best = max(regions, key=lambda region: iou(region.box, tuple(4 * v for v in SQUARE)))
    assert iou(best.box, tuple(4 * v for v in SQUARE)) > 0.8
    assert_inside(regions, image)


def test_segment_proposals_are_deduplicated_and_bounded():
    image = planted_image()
    regions = SegmentProposals(max_boxes=3)(image)
    assert len(regions) <= 3
    for i, first in enumerate(regions):
        for second in regions[i + 1:]:
            assert iou(first.box, second.box) <= 0.7
    # A flat picture has one segment, as large as the image: nothing to propose.
    assert SegmentProposals()(Image.new("RGB", (64, 48), (90, 90, 90))) == []
    # Greyscale input works and the proposals plug into FLISM.
    proposals = region_proposals(image.convert("L"), SegmentProposals())
    assert [r.source for r in proposals][-5:] == ["quadrant"] * 4 + ["centre"]


# ---- YOLOS from a local directory -----------------------------------------------------------------


@pytest.fixture(scope="module")
def tiny_yolos(tmp_path_factory):
    """A 1-layer YOLOS with random weights and its image processor, saved like a hub directory."""
    from explorer.core.compat import ensure_torchvision_importable

    ensure_torchvision_importable()
    import torch
    from transformers import YolosConfig, YolosForObjectDetection, YolosImageProcessor

    directory = tmp_path_factory.mktemp("tiny-yolos")
    config = YolosConfig(hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64,
                         image_size=[64, 64], patch_size=16, num_detection_tokens=5,
                         id2label={0: "thing", 1: "other"}, label2id={"thing": 0, "other": 1})
    torch.manual_seed(0)
    YolosForObjectDetection(config).save_pretrained(directory)
    YolosImageProcessor(size={"shortest_edge": 64, "longest_edge": 64}).save_pretrained(directory)
    return directory


def test_yolos_loads_from_a_local_directory_and_finds_labelled_boxes(tiny_yolos):
    detector, notes = load_detector(tiny_yolos, threshold=0.0, max_boxes=3)
    assert isinstance(detector, YolosDetector)
    assert detector.name == f"YOLOS ({tiny_yolos.name})"
    assert notes == [f"detector: YOLOS from {tiny_yolos.resolve()}"]
    image = planted_image().resize((120, 90))
    regions = detector(image)
    assert 0 < len(regions) <= 3
    assert_inside(regions, image)
    for region in regions:
        name, score = region.label.rsplit(" ", 1)
        assert region.source == "detector" and name in {"thing", "other"} and 0 <= float(score) <= 1
    # Loaded once: a second detector on the same directory shares the model.
    again, _ = load_detector(str(tiny_yolos), threshold=0.5)
    assert again.model is detector.model and again.threshold == 0.5


def test_env_var_is_honoured(tiny_yolos, monkeypatch):
    monkeypatch.setenv(DETECTOR_ENV, str(tiny_yolos))
    detector, notes = load_detector()
    assert isinstance(detector, YolosDetector) and "YOLOS from" in notes[0]
    monkeypatch.setenv(DETECTOR_ENV, "")
    detector, notes = load_detector()
    assert isinstance(detector, SegmentProposals)
    assert notes == [f"no detector configured (set {DETECTOR_ENV}=DIR for YOLOS): using {SegmentProposals.name}"]


def test_no_configuration_falls_back_quietly(monkeypatch):
    monkeypatch.delenv(DETECTOR_ENV, raising=False)
    detector, notes = load_detector(max_boxes=2)
    assert isinstance(detector, SegmentProposals) and detector.max_boxes == 2
    assert notes[0].startswith("no detector configured")


def test_missing_directory_falls_back_with_a_note(tmp_path):
    missing = tmp_path / "nowhere"
    detector, notes = load_detector(missing)
    assert isinstance(detector, SegmentProposals)
    assert len(notes) == 1 and str(missing) in notes[0] and "does not exist" in notes[0]


@pytest.mark.parametrize("files, problem", [
    ({"config.json": "{not json"}, "not valid JSON"),
    ({"config.json": json.dumps({"model_type": "bert"})}, "model_type 'bert'"),
    ({"config.json": json.dumps({"model_type": "yolos"})}, "has no weights"),
])
def test_broken_directories_fall_back_with_a_note(tmp_path, files, problem):
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    detector, notes = load_detector(tmp_path)
    assert isinstance(detector, SegmentProposals)
    assert problem in notes[0] and str(tmp_path) in notes[0] and SegmentProposals.name in notes[0]


def test_weights_that_do_not_fit_the_config_fall_back(tiny_yolos, tmp_path):
    """Past the cheap checks, transformers' own failure becomes the note."""
    for item in tiny_yolos.iterdir():
        (tmp_path / item.name).write_bytes(item.read_bytes())
    (tmp_path / "model.safetensors").write_bytes(b"garbage, not safetensors")
    detector, notes = load_detector(tmp_path)
    assert isinstance(detector, SegmentProposals)
    assert notes[0].startswith(f"cannot load YOLOS from {tmp_path.resolve()}: ")


def test_the_regions_view_uses_a_configured_yolos_directory(tiny_yolos, tmp_path):
    import explorer
    from explorer.models.methods import get_method
    from explorer.views.regions_view import compute_regions, render_regions
    from explorer.views.settings import ViewSettings

    picture = tmp_path / "planted.png"
    planted_image().save(picture)
    model = explorer.Model(get_method("clip").example("tiny"), name="tiny-clip")
    settings = ViewSettings(view="regions", image=str(picture), caption="A bright square. Some noise.",
                            models=["tiny-clip"], detector=str(tiny_yolos))
    view = compute_regions({"tiny-clip": model}.__getitem__, settings)
    assert view.detector == f"YOLOS ({tiny_yolos.name})" and any("YOLOS from" in note for note in view.notes)
    sources = [region.source for region in view.results[0].regions]
    assert sources[-5:] == ["quadrant"] * 4 + ["centre"]  # the detector's boxes (if any) come first
    assert render_regions(view, settings).caption.count("YOLOS") == 1
