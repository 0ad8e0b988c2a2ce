"""``explorer eval-grounding`` and ``evaluate_grounding`` on the layout fixtures (``grounding_fixtures``):
the numbers equal an independent computation over the public API (the model's ``sentence_maps``, the
truth drawn by hand, IoU / pointing / AUROC in numpy); baselines, label-only units, resume, the CLI."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest
from grounding_fixtures import picture, rect, write_dci, write_flickr, write_iiw
from PIL import Image

from explorer.cli import main
from explorer.data.grounding_sets import read_grounding_set
from explorer.evaluation.real_grounding import evaluate_grounding
from explorer.grounding.masks import otsu_mask
from explorer.zoo import Zoo

ZOO = Path(__file__).resolve().parents[1] / "checkpoints"
KINDS = ["generic", "clearclip"]


@pytest.fixture(scope="module")
def model():
    return Zoo(ZOO).load("demo-clip-base")


def auroc(values, positive):
    """P(positive pixel outscores a negative one), ties half: every pair compared."""
    pos, neg = values[positive], values[~positive]
    if not len(pos) or not len(neg):
        return None
    return float((pos[:, None] > neg[None]).mean() + 0.5 * (pos[:, None] == neg[None]).mean())


def by_hand(model, path, texts, truths, kind, boxes):
    """[iou, hit, auroc] per unit, computed here from the public API."""
    image = Image.open(path).convert("RGB")
    maps = model.sentence_maps(image, texts, kind).maps
    out = []
    for values, truth, box in zip(maps, truths, boxes):
        iou = None if box else float((otsu_mask(values)[0] & truth).sum() / (otsu_mask(values)[0] | truth).sum())
        hit = bool(truth[values == values.max()].all())
        out.append([iou, hit, auroc(values, truth)])
    return out


def scores_of(result, name, kind):
    return [[u["scores"][name][kind][k] for k in ("iou", "pointing", "auroc")] for u in result["units"]]


def test_mask_numbers_equal_an_independent_computation(tmp_path, model):
    root = write_dci(tmp_path / "dci")
    result = evaluate_grounding({"clip": model}, read_grounding_set(root), kinds=KINDS, progress=False)
    photo = root / "densely_captioned_images" / "photos" / "sa_1.jpg"
    truths = [rect(40, 30, 2, 5, 12, 15)] * 2 + [rect(40, 30, 20, 0, 30, 30)]
    texts = ["A red box.", "It sits on the left.", "lamp"]
    for kind in KINDS:
        expected = by_hand(model, photo, texts, truths, kind, [False] * 3)
        assert np.allclose(np.array(scores_of(result, "clip", kind), dtype=float), np.array(expected, dtype=float))
        kinds = result["models"][0]["kinds"][kind]
        assert kinds["n_units"] == 2  # the label-only unit is scored apart
        assert kinds["miou"] == pytest.approx(np.mean([e[0] for e in expected[:2]]))
        assert kinds["pointing"] == pytest.approx(np.mean([e[1] for e in expected[:2]]))
        assert result["models"][0]["label_only"][kind]["n_units"] == 1
    assert [u["label_only"] for u in result["units"]] == [False, False, True]
    assert result["dataset"]["skipped"]["dangling requirement id"] == 1
    assert any("nearest-neighbour" in note for note in result["notes"])


def test_box_numbers_and_baselines(tmp_path, model):
    root = write_flickr(tmp_path / "flickr")
    result = evaluate_grounding({"clip": model}, read_grounding_set(root), kinds=["generic"], progress=False)
    first = rect(50, 40, 0, 0, 10, 20) | rect(50, 40, 20, 10, 30, 20)
    expected = by_hand(model, root / "flickr30k-images" / "100.jpg", ["A man", "a red hat"],
                       [first, rect(50, 40, 20, 10, 30, 20)], "generic", [True, True])
    for got, want in zip(scores_of(result, "clip", "generic"), expected):
        assert got[:2] == want[:2] and got[2] == pytest.approx(want[2])
    models = {m["name"]: m for m in result["models"]}
    assert models["clip"]["kinds"]["generic"]["miou"] is None  # box truth: no mIoU
    assert models["uniform"]["method"] == "baseline"
    assert models["uniform"]["kinds"]["baseline"] == {"miou": None, "oiou": None, "box_accuracy": None, "pointing": 0.0,
                                                      "auroc": 0.5, "n_units": 2}
    centre = models["centre-box"]["kinds"]["baseline"]
    # the centre of 50x40 is the pixel corner (25, 20): its four pixels, none inside either box
    assert centre["pointing"] == 0.0 and centre["n_units"] == 2


class Counting:
    """A model that counts its sentence_maps calls and can stop the run (a kill) at the n-th picture."""

    def __init__(self, model, stop_at=None):
        self.model, self.stop_at, self.calls = model, stop_at, []

    def __getattr__(self, name):
        return getattr(self.model, name)

    def sentence_maps(self, image, sentences, kind="generic", dense_caption=None):
        self.calls.append(tuple(sentences))
        if self.stop_at is not None and len(self.calls) == self.stop_at:
            raise KeyboardInterrupt
        return self.model.sentence_maps(image, sentences, kind, dense_caption=dense_caption)


def test_a_killed_run_resumes_without_redoing_a_picture(tmp_path, model):
    root = write_iiw(tmp_path / "iiw")
    picture(root / "k2.jpg", 60, 40, seed=1)  # now two pictures
    dataset = read_grounding_set(root)
    work = tmp_path / "out.json.work.jsonl"
    killed = Counting(model, stop_at=2)
    with pytest.raises(KeyboardInterrupt):
        evaluate_grounding({"clip": killed}, dataset, kinds=["generic"], work_file=work, progress=False)
    again = Counting(model)
    result = evaluate_grounding({"clip": again}, dataset, kinds=["generic"], work_file=work, progress=False)
    assert killed.calls == [("A white cup on the desk.",), ("Gone too.",)]
    assert again.calls == [("Gone too.",)]  # the first picture was not redone
    fresh = evaluate_grounding({"clip": model}, dataset, kinds=["generic"], progress=False)
    assert result["units"] == fresh["units"] and result["models"] == fresh["models"]
    with pytest.raises(Exception, match="another run"):
        evaluate_grounding({"clip": model}, read_grounding_set(write_dci(tmp_path / "dci")), work_file=work,
                           progress=False)


def test_cli_writes_the_json_contract_and_csv(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("EXPLORER_HOME", str(tmp_path / "home"))
    root = write_dci(tmp_path / "dci")
    out, table = tmp_path / "results.json", tmp_path / "table.csv"
    argv = ["--checkpoints", str(ZOO), "eval-grounding", "--model", "demo-clip-base", "--data", str(root),
            "--kind", "generic", "--out", str(out), "--csv", str(table), "--no-progress"]
    assert main(argv) == 0
    result = json.loads(out.read_text())
    assert set(result) >= {"dataset", "models", "units"}
    assert [m["name"] for m in result["models"]] == ["demo-clip-base", "centre-box", "uniform"]
    clip = result["models"][0]
    assert clip["method"] == "clip" and set(clip["kinds"]["generic"]) == {"miou", "oiou", "box_accuracy", "pointing", "auroc",
                                                                                   "n_units"}
    assert 0 <= clip["kinds"]["generic"]["miou"] <= 1 and clip["kinds"]["generic"]["n_units"] == 2
    unit = result["units"][0]
    assert unit["picture"] == "1-data" and unit["truth"] == "mask" and "generic" in unit["scores"]["demo-clip-base"]
    rows = list(csv.reader(table.open()))
    assert rows[0] == ["model", "method", "kind", "miou", "oiou", "box_accuracy", "pointing", "auroc", "n_units"]
    assert len(rows) == 4
    assert (tmp_path / "results.json.work.jsonl").is_file()
    assert "wrote" in capsys.readouterr().out
    assert main(["--checkpoints", str(ZOO), "eval-grounding", "--model", "demo-clip-base", "--data",
                 str(tmp_path), "--out", str(out)]) == 2
    assert "matches no grounding layout" in capsys.readouterr().err
