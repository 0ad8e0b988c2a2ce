"""Exports that say what they keep (issue 58, part 8): `explorer export` reads the folder back with its library,
compares its ranking with explorer's own score on the probe set made in code (pairwise agreement, Spearman),
writes both into README.md and explorer_export.json, and below 90 % warns and exits 3 unless
--accept-disagreement. A whole CLIP export keeps the ranking; a backbone whose method pools its own way does not.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from test_export import tiny

from explorer.cli import main
from explorer.evaluation.export_agreement import AGREEMENT_FLOOR, compare_rankings, probe_set
from explorer.models.export import ABOUT, README
from explorer.models.io.loading import save_method


def test_rankings_agree_fully_when_alike_and_not_at_all_when_reversed():
    scores = np.array([[0.3, 0.1, 0.2, 0.5], [0.9, 0.8, 0.1, 0.2]])
    same = compare_rankings(scores, scores * 2 + 1)  # any increasing map keeps every order
    assert same.pairwise == 1.0 and same.spearman == pytest.approx(1.0) and same.keeps_ranking
    reversed_ = compare_rankings(scores, -scores)
    assert reversed_.pairwise == 0.0 and reversed_.spearman == pytest.approx(-1.0) and not reversed_.keeps_ranking
    one_swap = compare_rankings(scores[:1], np.array([[0.3, 0.2, 0.1, 0.5]]))  # 1 of 6 pairs turned
    assert one_swap.pairwise == pytest.approx(5 / 6)


def test_the_probe_set_is_made_in_code_the_same_each_time():
    pictures, captions = probe_set()
    again_pictures, again = probe_set()
    assert len(pictures) == 8 and len(captions) == 32 and captions == again
    assert np.array_equal(np.asarray(pictures[3]), np.asarray(again_pictures[3]))
    assert len(set(captions)) == len(captions)  # every twin's caption differs from its scene's


def export(tmp_path, method, name: str, *flags) -> int:
    weights = save_method(method, tmp_path / f"{name}.safetensors")
    return main(["--checkpoints", str(tmp_path / "zoo"), "export", "--model", str(weights), "--format", "open_clip",
                 "--out", str(tmp_path / name), *flags])


def test_a_whole_clip_export_keeps_the_ranking_and_says_so(tmp_path, capsys):
    assert export(tmp_path, tiny("clip"), "clip") == 0
    err = capsys.readouterr().err
    assert "ranking agreement with explorer's own score" in err and "warning" not in err
    agreement = json.loads((tmp_path / "clip" / ABOUT).read_text())["agreement"]
    assert agreement["pairwise"] >= AGREEMENT_FLOOR and agreement["keeps_ranking"] and agreement["spearman"] > 0.9
    readme = (tmp_path / "clip" / README).read_text()
    assert f"{100 * agreement['pairwise']:.1f} % of caption pairs in the same order" in readme
    assert "WARNING" not in readme and "the whole model" in readme


def test_a_pooled_methods_backbone_export_warns_and_exits_non_zero_unless_accepted(tmp_path, capsys):
    """A CLIP whose image embedding is an attention pool of the patches (every demo model's base): the backbone
    goes out with the class token, whose scores rank captions nothing like the method's."""
    pooled = tiny("clip", pool="attn")
    assert export(tmp_path, pooled, "pooled", "--backbone-only") == 3
    err = capsys.readouterr().err
    assert "warning: " in err and "does not keep its ranking" in err and "--accept-disagreement" in err
    agreement = json.loads((tmp_path / "pooled" / ABOUT).read_text())["agreement"]
    assert agreement["pairwise"] < AGREEMENT_FLOOR and not agreement["keeps_ranking"]
    assert "WARNING: the exported scores do not rank captions as the method does" in (tmp_path / "pooled" /
                                                                                      README).read_text()
    assert export(tmp_path, pooled, "pooled", "--backbone-only", "--accept-disagreement") == 0
    assert "Accepted (--accept-disagreement)" in capsys.readouterr().err
