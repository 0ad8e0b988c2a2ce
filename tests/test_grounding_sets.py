"""The grounding readers on tiny fixtures in each released layout (``tests/grounding_fixtures.py``): the units
and truths asserted by hand, and every awkward case skipped and counted by reason, never a crash."""

from __future__ import annotations

import numpy as np
import pytest

from explorer.data.errors import DatasetError
from explorer.data.grounding_sets import detect, read_grounding_set
from explorer.data.grounding_sets.base import skipped_by_reason
from explorer.data.grounding_sets.truth import box_mask, unit_truths
from grounding_fixtures import SKY_ID, rect, write_dci, write_flickr, write_iiw, write_png


def texts(dataset):
    return [u.text for u in dataset.units]


def test_dci_units_masks_and_skips(tmp_path):
    dataset = read_grounding_set(write_dci(tmp_path / "dci"))
    assert dataset.layout == "dci" and dataset.split == "all" and len(dataset.pictures) == 1
    assert texts(dataset) == ["A red box.", "It sits on the left.", "lamp"]
    assert [u.label_only for u in dataset.units] == [False, False, True]
    assert [u.segments for u in dataset.units] == [("0",), ("0",), ("1",)]
    assert dataset.pictures[0].caption == "A box and a lamp. Indoors." and dataset.pictures[0].size == (40, 30)
    assert skipped_by_reason(dataset.skipped) == {"dangling requirement id": 1, "bad mask (mask_quality 2)": 1,
                                                  "mask undecodable": 1, "caption empty": 1, "picture missing": 1}
    truths = unit_truths(dataset, 0, (40, 30))
    assert (truths[0] == rect(40, 30, 2, 5, 12, 15)).all() and (truths[2] == rect(40, 30, 20, 0, 30, 30)).all()
    # nearest neighbour at half size: pixel i samples source pixel 2i + 1 (its centre), so the rows 5..14
    # keep i = 2..6 and the columns 2..11 keep i = 1..5
    half = unit_truths(dataset, 0, (20, 15))[0]
    assert (half == rect(20, 15, 1, 2, 6, 7)).all()
    assert "+1 label-only" in dataset.summary()


def test_dci_complete_folder_and_splits(tmp_path):
    root = write_dci(tmp_path / "dci", folder="complete")
    assert detect(root) == "dci"
    assert texts(read_grounding_set(root, split="test")) == ["A red box.", "It sits on the left.", "lamp"]
    assert read_grounding_set(root, split="train").pictures == ()
    with pytest.raises(DatasetError, match="no split 'dev'"):
        read_grounding_set(root, split="dev")


def test_png_sentence_and_phrase_units(tmp_path):
    root = write_png(tmp_path / "png")
    dataset = read_grounding_set(root)
    assert dataset.layout == "png" and dataset.split == "val" and dataset.pictures[0].id == "139"
    assert texts(dataset) == ["A dog sits here.", "The sky is blue and a cat."]
    assert [u.segments for u in dataset.units] == [("5",), (str(SKY_ID),)]
    assert skipped_by_reason(dataset.skipped) == {"dangling segment id": 1, "picture missing": 1}
    left, right = unit_truths(dataset, 0, (20, 10))
    assert (left == rect(20, 10, 0, 0, 10, 10)).all() and (right == rect(20, 10, 10, 0, 20, 10)).all()
    phrases = read_grounding_set(root, units="phrase")
    assert texts(phrases) == ["A dog", "The sky"] and phrases.units[1].segments == (str(SKY_ID),)
    with pytest.raises(DatasetError, match="sentence and phrase"):
        read_grounding_set(root, units="word")


def test_flickr30k_entities_phrases_and_boxes(tmp_path):
    dataset = read_grounding_set(write_flickr(tmp_path / "flickr"))
    assert dataset.layout == "flickr30k_entities" and dataset.units_kind == "phrase"
    assert texts(dataset) == ["A man", "a red hat"]
    # 1-based inclusive boxes -> 0-based with exclusive ends; chain 1 holds both boxes (the second lists it too)
    assert dataset.units[0].boxes == ((0, 0, 10, 20), (20, 10, 30, 20))
    assert dataset.units[1].boxes == ((20, 10, 30, 20),)
    assert dataset.pictures[0].caption == "A man in a red hat looks at something . The beach is empty ."
    assert skipped_by_reason(dataset.skipped) == {"chain 0 (not visual)": 1, "no box": 1,
                                                  "malformed sentence line": 1, "picture missing": 1}
    truth = unit_truths(dataset, 0, (50, 40))[0]
    assert truth.sum() == 10 * 20 + 10 * 10 and truth[0, 0] and truth[19, 29] and not truth[20, 29]


def test_iiw_boxes_and_bad_lines(tmp_path):
    dataset = read_grounding_set(write_iiw(tmp_path / "iiw"))
    assert dataset.layout == "iiw" and texts(dataset) == ["A white cup on the desk."]
    assert dataset.units[0].boxes == ((20.0, 5.0, 60.0, 25.0),)  # [y0, x0, y1, x1] / 1000 * (100 x 50)
    assert dataset.pictures[0].caption == "A desk with a cup. The wall is white."
    assert skipped_by_reason(dataset.skipped) == {"bad normalized_coords": 1, "malformed line": 1,
                                                  "picture missing": 1}


def test_box_mask_keeps_tiny_boxes_and_scales():
    assert (box_mask([(20, 10, 30, 20)], (50, 40), (25, 20)) == rect(25, 20, 10, 5, 15, 10)).all()
    tiny = box_mask([(10.2, 10.2, 10.4, 10.4)], (50, 40), (50, 40))
    assert tiny.sum() == 1 and tiny[10, 10]


def test_detect_names_what_it_looks_for(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(DatasetError) as error:
        detect(tmp_path / "empty")
    for wanted in ("dci", "png_coco", "Sentences", "data.jsonl"):
        assert wanted in str(error.value)


def test_limit_reads_only_the_first_pictures(tmp_path):
    root = write_iiw(tmp_path / "iiw")
    assert len(read_grounding_set(root, limit=1).pictures) == 1
    with pytest.raises(DatasetError, match="at least 1"):
        read_grounding_set(root, limit=0)
