"""explorer.grounding.truth: ground truth from scenes and mask files, per-sentence scores, the example registry."""

from __future__ import annotations

import logging

import numpy as np
import pytest
from PIL import Image

from explorer.core.errors import ExplorerError
from explorer.data import generate_scenes
from explorer.evaluation.metrics.maps import SentenceScore, mask_iou, score_maps, score_sentences
from explorer.grounding.truth import (MaskError, Truth, find_truth, normalise_sentence, save_scene_truth,
                                      truth_from_mask_file, truth_from_scene, truth_path)


@pytest.fixture(scope="module")
def scenes():
    return list(generate_scenes(2, seed=0, image_size=64, split="test"))


def _labels(width: int = 8, height: int = 6) -> np.ndarray:
    """Labels 1, 2, 3 in three vertical bands on a 0 background row."""
    labels = np.zeros((height, width), dtype=np.uint8)
    labels[1:, 0:2] = 1
    labels[1:, 3:5] = 2
    labels[1:, 6:8] = 3
    return labels


def _save(array: np.ndarray, path, mode: str | None = None):
    image = Image.fromarray(array)
    if mode is not None:
        image = image.convert(mode)
    image.save(path)
    return path


# ---- sentences --------------------------------------------------------------------------------------


def test_normalise_sentence_folds_case_and_white_space():
    assert normalise_sentence("  The  Red\tSquare\n is BIG. ") == "the red square is big."
    assert normalise_sentence("Straße") == normalise_sentence("STRASSE")


# ---- scenes -----------------------------------------------------------------------------------------


def test_scene_truth_matches_sentences_by_text(scenes):
    scene = scenes[0]
    expected = scene.sentence_masks()
    sentences = list(scene.sentence_texts)
    sentences[2] = sentences[2].upper().replace(" ", "  ")  # same sentence, other case and spacing
    sentences[3] = "A purple elephant dances in the corner."  # an edited sentence
    sentences = [sentences[1], sentences[0], sentences[2], sentences[3]]  # and another order
    truth = truth_from_scene(scene, sentences, scene.image.size)
    assert truth.source == f"synthetic scene {scene.id}"
    assert truth.available
    assert np.array_equal(truth.masks[0], expected[1])
    assert np.array_equal(truth.masks[1], expected[0])
    assert np.array_equal(truth.masks[2], expected[2])
    assert truth.masks[3] is None
    assert truth.masks[0].dtype == bool
    assert any("sentence 4 has no ground truth" in note for note in truth.notes)
    assert not any("resized" in note for note in truth.notes)


def test_scene_truth_with_no_matching_sentence_is_unavailable(scenes):
    truth = truth_from_scene(scenes[0], ["Something else entirely.", "And more."], (64, 64))
    assert not truth.available
    assert truth.masks == [None, None]
    assert any("sentences 1, 2 have no ground truth" in note for note in truth.notes)


def test_scene_truth_is_resized_to_the_working_picture(scenes):
    scene = scenes[1]
    truth = truth_from_scene(scene, scene.sentence_texts, (32, 32))
    assert all(mask.shape == (32, 32) for mask in truth.masks)
    assert "masks resized from 64x64 to 32x32 (nearest)" in truth.notes
    # nearest sampling of pixel centres: every second pixel, starting at the second
    assert np.array_equal(truth.masks[0], scene.sentence_masks()[0][1::2, 1::2])


# ---- mask files -------------------------------------------------------------------------------------


def test_label_mask_gives_one_mask_per_sentence(tmp_path):
    labels = _labels()
    path = _save(labels, tmp_path / "labels.png")
    truth = truth_from_mask_file(path, ["One.", "Two.", "Three.", "Four."], (8, 6))
    assert truth.source == "mask file labels.png"
    for k in (1, 2, 3):
        assert np.array_equal(truth.masks[k - 1], labels == k)
    assert truth.masks[3] is None
    assert any("sentence 4 has no ground truth" in note for note in truth.notes)
    assert not any("resized" in note for note in truth.notes)


def test_labels_without_a_sentence_are_noted(tmp_path):
    labels = _labels()
    labels[0, 0], labels[0, 1] = 7, 9
    path = _save(labels, tmp_path / "labels.png")
    truth = truth_from_mask_file(path, ["One.", "Two.", "Three."], (8, 6))
    assert any("label(s) 7, 9 have no sentence" in note for note in truth.notes)
    assert all(mask is not None for mask in truth.masks)


def test_palette_mask_reads_indices_as_labels(tmp_path):
    labels = _labels()
    image = Image.fromarray(labels, "L").convert("P")
    image.putpalette([0, 0, 0, 255, 0, 0, 0, 255, 0, 0, 0, 255] + [0] * (256 * 3 - 12))
    image.putdata(labels.ravel().tolist())
    image.save(tmp_path / "palette.png")
    truth = truth_from_mask_file(tmp_path / "palette.png", ["One.", "Two.", "Three."], (8, 6))
    assert np.array_equal(truth.masks[1], labels == 2)


def test_binary_255_mask_applies_to_every_sentence(tmp_path):
    mask = np.zeros((6, 8), dtype=np.uint8)
    mask[2:5, 3:7] = 255
    path = _save(mask, tmp_path / "object.png")
    truth = truth_from_mask_file(path, ["One.", "Two.", "Three."], (8, 6))
    assert len(truth.masks) == 3
    for one in truth.masks:
        assert np.array_equal(one, mask == 255)
    assert any("every sentence" in note for note in truth.notes)


def test_one_bit_mask_applies_to_every_sentence(tmp_path):
    mask = np.zeros((6, 8), dtype=bool)
    mask[1:3, 1:4] = True
    Image.fromarray(mask).save(tmp_path / "bits.png")
    assert Image.open(tmp_path / "bits.png").mode == "1"
    truth = truth_from_mask_file(tmp_path / "bits.png", ["One.", "Two."], (8, 6))
    assert all(np.array_equal(one, mask) for one in truth.masks)
    assert any("every sentence" in note for note in truth.notes)


def test_sixteen_bit_labels_are_read(tmp_path):
    labels = _labels().astype(np.uint16)
    Image.fromarray(labels).save(tmp_path / "deep.png")
    truth = truth_from_mask_file(tmp_path / "deep.png", ["One.", "Two.", "Three."], (8, 6))
    assert np.array_equal(truth.masks[2], labels == 3)


def test_rgb_mask_with_equal_channels_is_accepted(tmp_path):
    labels = _labels()
    for mode in ("RGB", "RGBA"):
        path = _save(labels, tmp_path / f"grey-{mode}.png", mode)
        assert Image.open(path).mode == mode
        truth = truth_from_mask_file(path, ["One.", "Two.", "Three."], (8, 6))
        assert np.array_equal(truth.masks[0], labels == 1)
        assert any("equal channels" in note for note in truth.notes)


def test_coloured_rgb_mask_is_refused(tmp_path):
    colour = np.zeros((6, 8, 3), dtype=np.uint8)
    colour[1:, :4] = (255, 0, 0)
    colour[1:, 4:] = (0, 255, 0)
    Image.fromarray(colour).save(tmp_path / "colour.png")
    with pytest.raises(MaskError) as info:
        truth_from_mask_file(tmp_path / "colour.png", ["One."], (8, 6))
    assert "single-channel label image" in str(info.value) and "colour.png" in str(info.value)
    assert isinstance(info.value, ExplorerError)


def test_mask_of_another_aspect_ratio_is_refused_naming_both_sizes(tmp_path):
    path = _save(np.zeros((30, 60), dtype=np.uint8), tmp_path / "wide.png")
    with pytest.raises(MaskError) as info:
        truth_from_mask_file(path, ["One."], (64, 64))
    message = str(info.value)
    assert "60x30" in message and "64x64" in message


def test_mask_of_the_same_aspect_ratio_is_resized_with_a_note(tmp_path):
    labels = _labels(8, 6)
    big = np.repeat(np.repeat(labels, 4, axis=0), 4, axis=1)  # 32x24, the upload before shrinking
    path = _save(big, tmp_path / "big.png")
    truth = truth_from_mask_file(path, ["One.", "Two.", "Three."], (8, 6))
    assert "mask resized from 32x24 to 8x6 (nearest)" in truth.notes
    for k in (1, 2, 3):
        assert np.array_equal(truth.masks[k - 1], labels == k)


def test_mask_at_the_original_upload_size_is_resized(tmp_path):
    # 1000x3 shrunk to 768 on the long side is 768x2: the aspect ratios differ by 15 %,
    # but the mask has exactly the size of the upload, so it fits.
    labels = np.zeros((3, 1000), dtype=np.uint8)
    labels[:, 500:] = 1
    path = _save(labels, tmp_path / "strip.png")
    with pytest.raises(MaskError):
        truth_from_mask_file(path, ["One."], (768, 2))
    truth = truth_from_mask_file(path, ["One."], (768, 2), original_size=(1000, 3))
    assert truth.masks[0].shape == (2, 768)
    assert truth.masks[0][:, -1].all() and not truth.masks[0][:, 0].any()


def test_corrupt_missing_and_jpeg_masks_are_refused(tmp_path):
    corrupt = tmp_path / "broken.png"
    corrupt.write_bytes(np.random.default_rng(0).integers(0, 256, 2048, dtype=np.uint8).tobytes())
    with pytest.raises(MaskError, match="broken.png"):
        truth_from_mask_file(corrupt, ["One."], (8, 6))
    with pytest.raises(MaskError, match="No image file"):
        truth_from_mask_file(tmp_path / "absent.png", ["One."], (8, 6))
    Image.fromarray(_labels()).save(tmp_path / "lossy.jpg")
    with pytest.raises(MaskError, match="JPEG"):
        truth_from_mask_file(tmp_path / "lossy.jpg", ["One."], (8, 6))


def test_truncated_mask_is_refused(tmp_path):
    whole = tmp_path / "whole.png"
    rng = np.random.default_rng(1)
    Image.fromarray(rng.integers(0, 4, (64, 64), dtype=np.uint8)).save(whole)
    data = whole.read_bytes()
    cut = tmp_path / "cut.png"
    cut.write_bytes(data[: len(data) // 2])
    with pytest.raises(MaskError, match="cut.png"):
        truth_from_mask_file(cut, ["One."], (64, 64))


def test_huge_mask_is_refused_before_decoding(tmp_path, monkeypatch):
    import explorer.core.images as images

    monkeypatch.setattr(images, "MAX_DECODE_PIXELS", 100)
    path = _save(np.zeros((20, 20), dtype=np.uint8), tmp_path / "huge.png")
    with pytest.raises(MaskError, match="megapixels"):
        truth_from_mask_file(path, ["One."], (20, 20))


def test_empty_mask_gives_no_truth(tmp_path):
    path = _save(np.zeros((6, 8), dtype=np.uint8), tmp_path / "empty.png")
    truth = truth_from_mask_file(path, ["One.", "Two."], (8, 6))
    assert not truth.available
    assert any("empty" in note for note in truth.notes)


# ---- scores -----------------------------------------------------------------------------------------


def _square(y0: int, y1: int, x0: int, x1: int, shape=(10, 10)) -> np.ndarray:
    mask = np.zeros(shape, dtype=bool)
    mask[y0:y1, x0:x1] = True
    return mask


def test_scores_hits_misses_and_exact_iou():
    truth_mask = _square(2, 6, 2, 6)  # 16 pixels
    maps = np.zeros((3, 10, 10))
    maps[0, 3, 3] = 1.0  # peak inside the truth
    maps[1, 8, 8] = 1.0  # peak outside
    maps[2, 4, 4] = 1.0  # sentence without truth
    predicted = np.stack([_square(4, 8, 2, 6), _square(0, 2, 0, 2), _square(0, 1, 0, 1)])
    truth = Truth(masks=[truth_mask, truth_mask, None], source="hand-made")
    scores, summary = score_sentences(maps, predicted, truth)
    assert scores[0] == SentenceScore(index=0, iou=pytest.approx(8 / 24), hit=True)  # 8 shared, 16 + 16 - 8
    assert scores[1] == SentenceScore(index=1, iou=0.0, hit=False)
    assert scores[2] == SentenceScore(index=2, iou=None, hit=None)
    assert scores[0].iou == mask_iou(predicted[0], truth_mask)
    assert summary == {"miou": pytest.approx(4 / 24), "pointing": 0.5, "n": 2}


def test_scores_without_truth_summarise_to_none():
    maps = np.random.default_rng(0).random((2, 5, 5))
    scores, summary = score_sentences(maps, maps > 0.5, Truth(masks=[None, None], source="none"))
    assert [s.iou for s in scores] == [None, None] and [s.hit for s in scores] == [None, None]
    assert summary == {"miou": None, "pointing": None, "n": 0}


def test_scores_ignore_nan_pixels_and_check_shapes():
    truth_mask = _square(0, 2, 0, 2, (4, 4))
    maps = np.zeros((1, 4, 4))
    maps[0, 0, 0] = 1.0
    maps[0, 3, 3] = np.nan
    scores, _ = score_sentences(maps, maps > 0.5, Truth(masks=[truth_mask], source="x"))
    assert scores[0].hit is True
    with pytest.raises(ValueError):
        score_sentences(maps, maps > 0.5, Truth(masks=[truth_mask, None], source="x"))
    with pytest.raises(ValueError):
        score_sentences(maps, np.zeros((1, 3, 3), dtype=bool), Truth(masks=[truth_mask], source="x"))


def test_a_map_without_a_finite_value_is_a_miss_as_in_the_benchmark():
    truth_mask = _square(0, 2, 0, 2, (4, 4))
    maps = np.full((2, 4, 4), np.nan)
    maps[1, 0, 0] = 1.0
    predicted = np.zeros((2, 4, 4), dtype=bool)
    scores, summary = score_sentences(maps, predicted, Truth(masks=[truth_mask, truth_mask], source="x"))
    assert scores[0] == SentenceScore(index=0, iou=0.0, hit=False)  # scored, not left out of the means
    assert scores[1] == SentenceScore(index=1, iou=0.0, hit=True)
    assert summary == {"miou": 0.0, "pointing": 0.5, "n": 2}
    ious, hits = score_maps(maps, np.stack([truth_mask, truth_mask]), predicted)
    assert [s.iou for s in scores] == ious and [s.hit for s in scores] == hits


def test_scene_truth_scores_perfectly_against_itself(scenes):
    scene = scenes[0]
    truth = truth_from_scene(scene, scene.sentence_texts, scene.image.size)
    masks = scene.sentence_masks()
    scores, summary = score_sentences(masks.astype(float), masks, truth)
    assert summary == {"miou": 1.0, "pointing": 1.0, "n": len(masks)}


# ---- registry ---------------------------------------------------------------------------------------


def test_saved_truth_is_found_by_pixels(tmp_path, scenes):
    scene, other = scenes
    directory = tmp_path / "truth"
    path = save_scene_truth(scene, directory)
    assert path == truth_path(scene.image, directory) and path.suffix == ".npz"
    assert [p.name for p in directory.iterdir()] == [path.name]  # no temporary file left behind

    copy = tmp_path / "upload-7f3a.png"  # as Gradio would hand it over: another name
    scene.image.save(copy)
    with Image.open(copy) as opened:
        picture = opened.convert("RGB")
    sentences = list(scene.sentence_texts[:3]) + ["An edited sentence."]
    truth = find_truth(picture, sentences, directory)
    assert truth is not None
    assert truth.source == f"synthetic scene {scene.id}"
    expected = scene.sentence_masks()
    for i in range(3):
        assert np.array_equal(truth.masks[i], expected[i])
    assert truth.masks[3] is None

    assert find_truth(other.image, other.sentence_texts, directory) is None
    assert find_truth(scene.image, scene.sentence_texts, tmp_path / "nowhere") is None


def test_found_truth_can_be_resized(tmp_path, scenes):
    scene = scenes[0]
    save_scene_truth(scene, tmp_path)
    truth = find_truth(scene.image, scene.sentence_texts, tmp_path, size=(32, 32))
    assert truth.masks[0].shape == (32, 32)
    assert "masks resized from 64x64 to 32x32 (nearest)" in truth.notes


def test_corrupt_registry_entry_is_ignored_with_a_warning(tmp_path, scenes, caplog):
    scene = scenes[0]
    path = save_scene_truth(scene, tmp_path)
    path.write_bytes(path.read_bytes()[:40])
    with caplog.at_level(logging.WARNING, logger="explorer.grounding.truth"):
        assert find_truth(scene.image, scene.sentence_texts, tmp_path) is None
    assert any("unreadable ground truth" in record.getMessage() for record in caplog.records)

    np.savez(path, shape=np.array([1, 2, 3]))  # readable, but not a truth entry
    assert find_truth(scene.image, scene.sentence_texts, tmp_path) is None
