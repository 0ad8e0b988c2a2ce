"""The Grounding tab's dataset picker: a DCI fixture picture opens with its units as the caption and its
truth found by the maps view; the worst units of a results JSON lead back to the picture; paths are checked."""

from __future__ import annotations

import json

import pytest
from grounding_fixtures import write_dci
from PIL import Image

from explorer.core import paths
from explorer.data.grounding_sets import read_grounding_set
from explorer.evaluation.real_grounding import evaluate_grounding
from explorer.evaluation.results import write_results
from explorer.grounding.truth import find_truth
from explorer.ui import grounding_dataset_panel as panel
from explorer.serve.access import Access


@pytest.fixture(autouse=True)
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("EXPLORER_HOME", str(tmp_path / "home"))
    monkeypatch.setattr("explorer.ui.view_controls.EXPORT_ROOT", tmp_path / "exports")


def test_open_picture_fills_the_inputs_and_registers_the_truth(tmp_path, owner):
    root = write_dci(tmp_path / "dci")
    picture, caption, preview, note = panel.open_picture(owner, None, str(root), "", "", 0)
    assert caption == "A red box.\n\nIt sits on the left.\n\nlamp" and preview is not None
    assert "dci picture 0 (1-data): 3 units" in note
    truth = find_truth(Image.open(picture).convert("RGB"), ["A red box.", "It sits on the left.", "lamp"],
                       paths.example_truth_dir())
    assert truth is not None and [m.sum() for m in truth.masks] == [100, 100, 300]
    _, _, _, refused = panel.open_picture(owner, None, str(root), "", "", 5)
    assert "0..0" in refused


def test_worst_units_lead_to_the_picture(tmp_path, owner):
    root = write_dci(tmp_path / "dci")
    result = evaluate_grounding({}, read_grounding_set(root), progress=False)  # the baselines alone
    write_results(result, tmp_path / "r.json")
    rows, folder, split, units, note = panel.show_worst(owner, str(tmp_path / "r.json"), "centre-box", "")
    assert len(rows) == 3 and rows[0][0] == 0 and folder == json.loads((tmp_path / "r.json").read_text())[
        "dataset"]["root"] and "worst units of centre-box" in note
    assert "no units scored by 'nobody'" in panel.show_worst(owner, str(tmp_path / "r.json"), "nobody", "")[-1]


def test_paths_are_checked(tmp_path):
    root = write_dci(tmp_path / "dci")
    public = Access(roots=(tmp_path.resolve(),), public=True)
    assert "public demo" in panel.open_picture(public, None, str(root), "", "", 0)[-1]
    assert "not one of the grounding datasets" in panel.open_picture(public, str(root), "", "", "", 0)[-1]
    elsewhere = Access(roots=((tmp_path / "home").resolve(),))
    assert "not under an allowed folder" in panel.open_picture(elsewhere, None, str(root), "", "", 0)[-1]
    assert "public demo" in panel.show_worst(public, "/etc/passwd", "x", "")[-1]
