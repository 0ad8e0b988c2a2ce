"""The Results view's units (issue 67): a results cell's units picked from the work files as they are.

A tiny RefCOCO-layout twin is scored by two fake models whose maps are a blob placed by the expression's hash
(cheap, different per model and unit): ``--worst N`` must list exactly the N lowest IoUs of the work file for
that model and kind, ties broken by unit id; ``--wins N`` the N largest A-minus-B; a dataset that moved is
asked for (``--data``), never guessed. Negatives, zero-shot and retrieval results are written by hand in their
formats and read the same way.
"""

from __future__ import annotations

import hashlib
import json
import shutil

import numpy as np
import pytest

from explorer.cli import main
from explorer.data.grounding_sets import read_grounding_set
from explorer.data.grounding_sets.refer_twin import write_refer_twin
from explorer.evaluation.real_grounding import evaluate_grounding
from explorer.evaluation.results import write_results
from explorer.views.result_datasets import DatasetMoved, describe
from explorer.views.result_units import ResultsError, open_results, pick_units


class BlobModel:
    """A map that peaks at a place chosen by the hash of (seed, expression): known, cheap, never flat."""

    method_name, map_kinds, preferred_native_map = "fake", ("generic",), None

    def __init__(self, name: str, seed: int):
        self.name, self.seed = name, seed

    def sentence_maps(self, image, texts, kind, dense_caption=None):
        width, height = image.size
        rows, cols = np.mgrid[0:height, 0:width]
        maps = []
        for text in texts:
            digest = hashlib.sha256(f"{self.seed}:{text}".encode()).digest()
            y, x = digest[0] / 255 * height, digest[1] / 255 * width
            maps.append(np.exp(-((rows - y) ** 2 + (cols - x) ** 2) / (2 * (width / 6) ** 2)).astype(np.float32))
        return type("Maps", (), {"maps": np.stack(maps)})()


@pytest.fixture(scope="module")
def scored(tmp_path_factory):
    """(results path, twin folder): two fake models on the twin's RefCOCO testA, with the work file beside."""
    folder = tmp_path_factory.mktemp("results")
    twin = write_refer_twin(folder / "twin", n_scenes=12, image_size=64) and folder / "twin"
    dataset = read_grounding_set(twin, split="testA", layout="refcoco")
    out = folder / "refcoco.json"
    result = evaluate_grounding({"a": BlobModel("a", 1), "b": BlobModel("b", 2)}, dataset, kinds=["generic"],
                                work_file=out.with_name(out.name + ".work.jsonl"), progress=False)
    write_results(result, out)
    return out, twin


def work_ious(results_path, model: str, kind: str) -> dict[str, float]:
    """unit id ("<picture>:<position>") -> IoU, straight from the work file's records."""
    found = {}
    for line in results_path.with_name(results_path.name + ".work.jsonl").read_text().splitlines()[1:]:
        record = json.loads(line)
        if record.get("model") == model and record.get("kind") == kind:
            for position, scores in enumerate(record["scores"]):
                found[f"{record['picture']}:{position}"] = scores[0]
    return found


def listed(capsys, *argv) -> dict:
    assert main(["results", "examples", *argv]) == 0
    return json.loads(capsys.readouterr().out)


def test_worst_n_is_the_n_lowest_of_the_work_file_ties_by_unit_id(scored, capsys):
    out, _ = scored
    ious = work_ious(out, "a", "generic")
    assert len(ious) >= 6 and len(set(ious.values())) < len(ious), "the twin should give ties (IoU 0) to break"
    expected = sorted(ious, key=lambda unit: (ious[unit], unit))[:5]
    document = listed(capsys, "--results", str(out), "--model", "a", "--kind", "generic", "--metric", "iou",
                      "--worst", "5", "--list")
    assert [u["unit_id"] for u in document["units"]] == expected
    assert [u["iou"] for u in document["units"]] == pytest.approx([ious[u] for u in expected])
    assert (document["results"], document["model"], document["versus"], document["metric"]) == (str(out), "a", None, "iou")
    first = document["units"][0]
    assert {"unit_id", "picture", "text", "iou", "missing"} <= set(first) and first["missing"] is False
    best = listed(capsys, "--results", str(out), "--model", "a", "--metric", "iou", "--best", "3", "--list")
    assert [u["unit_id"] for u in best["units"]] == sorted(ious, key=lambda unit: (-ious[unit], unit))[:3]


def test_wins_n_is_the_largest_a_minus_b(scored, capsys, tmp_path):
    out, _ = scored
    a, b = work_ious(out, "a", "generic"), work_ious(out, "b", "generic")
    margins = {unit: a[unit] - b[unit] for unit in a}
    expected = sorted(margins, key=lambda unit: (-margins[unit], unit))[:4]
    target = tmp_path / "wins.json"
    assert main(["results", "examples", "--results", str(out), "--model", "a", "--versus", "b", "--metric", "iou",
                 "--wins", "4", "--out", str(target)]) == 0
    document = json.loads(target.read_text())
    assert [u["unit_id"] for u in document["units"]] == expected
    assert [u["a_minus_b"] for u in document["units"]] == pytest.approx([margins[u] for u in expected])
    assert document["versus"] == "b" and all("versus_iou" in u for u in document["units"])
    assert main(["results", "examples", "--results", str(out), "--model", "a", "--wins", "4", "--list"]) == 2
    assert "--versus" in capsys.readouterr().err


def test_filters_keep_a_right_b_wrong_and_both_wrong(scored):
    results = open_results(scored[0])
    cell = results.cell("a", "RefCOCO testA generic/miou")
    both = pick_units(results, cell, versus="b")
    wins = pick_units(results, cell, versus="b", keep="a_right_b_wrong")
    lost = pick_units(results, cell, versus="b", keep="both_wrong")
    assert set(wins["unit_id"]) == set(both[(both["iou"] >= 0.5) & (both["versus_iou"] < 0.5)]["unit_id"])
    assert set(lost["unit_id"]) == set(both[(both["iou"] < 0.5) & (both["versus_iou"] < 0.5)]["unit_id"])
    with pytest.raises(ResultsError, match="versus"):
        pick_units(results, cell, keep="both_wrong")


def test_a_moved_dataset_asks_for_its_folder(scored, tmp_path, capsys):
    out, twin = scored
    moved_results = tmp_path / "refcoco.json"
    shutil.copytree(twin, tmp_path / "twin-elsewhere")
    # The results and their work file as an evaluation of a twin at twin-gone/ wrote them (moved since).
    gone = str(tmp_path / "twin-gone")
    moved_results.write_text(out.read_text().replace(str(twin), gone))
    work = out.with_name(out.name + ".work.jsonl").read_text()
    (tmp_path / "refcoco.json.work.jsonl").write_text(work.replace(str(twin), gone))
    results = open_results(moved_results)  # the numbers open without the dataset
    cell = results.cell("a", "RefCOCO testA generic/miou")
    with pytest.raises(DatasetMoved, match="give its folder"):
        describe(results, pick_units(results, cell, n=2))
    assert main(["results", "examples", "--results", str(moved_results), "--model", "a", "--worst", "2",
                 "--list"]) == 2
    assert "give its folder" in capsys.readouterr().err
    document = listed(capsys, "--results", str(moved_results), "--model", "a", "--worst", "2", "--list",
                      "--data", str(tmp_path / "twin-elsewhere" / "refcoco"))
    assert len(document["units"]) == 2 and not any(u["missing"] for u in document["units"])
    assert all(u["path"].startswith(str(tmp_path / "twin-elsewhere")) for u in document["units"])


def test_a_missing_picture_is_listed_as_missing(scored, tmp_path):
    out, twin = scored
    copy = tmp_path / "twin"
    shutil.copytree(twin, copy)
    results = open_results(out)
    cell = results.cell("a", "RefCOCO testA generic/miou")
    picked = pick_units(results, cell)
    victim = describe(results, picked.iloc[:1])
    (copy / victim["path"].iloc[0][len(str(twin)) + 1:]).unlink()
    described = describe(results, picked, copy / "refcoco")
    assert len(described) == len(picked)  # listed, not dropped
    assert described["missing"].tolist() == (described["picture"] == victim["picture"].iloc[0]).tolist()


def test_negatives_zeroshot_and_retrieval_units(tmp_path):
    negatives = tmp_path / "neg.json"
    negatives.write_text(json.dumps({"format": "explorer-negatives/1", "dataset": {"layout": "sugarcrepe",
                         "root": str(tmp_path), "splits": {"swap_att": "x"}},
                         "models": [{"name": m, "method": "clip", "accuracy": {"swap_att": 0.5}, "n": {"swap_att": 2}}
                                    for m in ("a", "b")]}))
    work = [{"header": {}}] + [{"key": json.dumps([m, i]), "model": m, "item": i, "split": "swap_att",
                                "scores": scores, "correct": scores[0] > max(scores[1:])}
                               for m, i, scores in [("a", "s/1", [0.3, 0.5, 0.1]), ("a", "s/2", [0.6, 0.2, 0.1]),
                                                    ("b", "s/1", [0.2, 0.4, 0.3]), ("b", "s/2", [0.1, 0.2, 0.3]),
                                                    ("a", "s/3", [0.1, 0.6, 0.2]), ("b", "s/3", [0.5, 0.2, 0.1])]]
    (tmp_path / "neg.json.work.jsonl").write_text("".join(json.dumps(r) + "\n" for r in work))
    results = open_results(negatives)
    cell = results.cell("a", "sugarcrepe accuracy/swap_att")
    picked = pick_units(results, cell)
    assert picked["unit_id"].tolist() == ["s/3", "s/1", "s/2"]
    assert picked["margin"].tolist() == pytest.approx([-0.5, -0.2, 0.4]) and picked["negative"].tolist() == [0, 0, 0]
    compared = pick_units(results, cell, versus="b")
    assert compared["margin"].tolist() == pytest.approx((compared["positive_score"] - compared["negative_score"]).tolist())
    assert compared["a_minus_b"].tolist() == pytest.approx([-0.5 - 0.3, -0.2 - -0.2, 0.4 - -0.2])  # b: 0.5-0.2, ...
    from explorer.ui.results_tab import fooling_first
    from explorer.views.result_units import fooled_by_every_model

    assert fooled_by_every_model(results, "sugarcrepe", "swap_att")["unit_id"].tolist() == ["s/1"]
    first, fooled = fooling_first(results, cell, None, "all", 10)
    assert first["unit_id"].tolist() == ["s/1", "s/3", "s/2"] and fooled == 1  # fools a and b, then a's worst

    zeroshot = tmp_path / "zs.json"
    zeroshot.write_text(json.dumps({"format": "explorer-zeroshot/1", "dataset": {"layout": "folder", "root": "/nowhere"},
                                    "models": [{"name": "a", "top1": 0.5, "top5": 1.0, "n": 2}]}))
    work = [{"header": {}}, {"key": "k1", "model": "a", "picture": "p1", "label": 2, "top": [1, 2, 0]},
            {"key": "k2", "model": "a", "picture": "p2", "label": 0, "top": [0, 1, 2]}]
    (tmp_path / "zs.json.work.jsonl").write_text("".join(json.dumps(r) + "\n" for r in work))
    results = open_results(zeroshot)
    picked = pick_units(results, results.cell("a", "folder top1"))
    assert picked["unit_id"].tolist() == ["p1", "p2"] and picked["rank"].tolist() == [2, 1]
    assert picked["predicted"].tolist() == [1, 0]

    retrieval = tmp_path / "ret.json"
    queries = {"t2i": [{"caption": 0, "image": 0, "rank": 3, "top": [[1, 0.9], [2, 0.8], [0, 0.7]]},
                       {"caption": 1, "image": 1, "rank": 1, "top": [[1, 0.9]]}], "i2t": []}
    retrieval.write_text(json.dumps({"format": "explorer-retrieval", "version": 1,
                                     "dataset": {"layout": "folder", "root": "/nowhere", "split": "test"},
                                     "models": {"a": {"t2i_R@1": 0.5, "i2t_R@1": 1.0, "rsum": 150.0,
                                                      "queries": queries}}}))
    results = open_results(retrieval)
    cell = results.cell("a", "folder test t2i_R@1")
    assert pick_units(results, cell)["unit_id"].tolist() == ["t2i:00000000", "t2i:00000001"]  # rank 3 first
    assert pick_units(results, cell, order="best")["rank"].tolist() == [1, 3]
    with pytest.raises(ResultsError, match="no units"):
        pick_units(results, results.cell("a", "folder test rsum"))



def test_a_unit_is_right_as_the_run_counted_it():
    """A picked box is right above IoU 0.5 (ReCLIP's strict rule); a tie with the best negative is right only where
    the run counted ties as hits (FG-OVD's default now), a miss in a run that did not."""
    from explorer.views.result_cells import Cell
    from explorer.views.result_units import is_right

    box = Cell("m", "RefCOCO testA box_accuracy", "refcoco", "gradcam", "box_iou")
    assert is_right(box, [0.5, 0.51]).tolist() == [False, True]
    ties_hit = Cell("m", "FG-OVD accuracy/hard", "fg-ovd", "hard", "margin", right_at=0.0, strict=False)
    ties_miss = Cell("m", "FG-OVD accuracy/hard", "fg-ovd", "hard", "margin", right_at=0.0, strict=True)
    assert is_right(ties_hit, [0.0, -0.1]).tolist() == [True, False]
    assert is_right(ties_miss, [0.0, 0.1]).tolist() == [False, True]
