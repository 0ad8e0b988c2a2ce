"""`explorer eval` says what it will score and about how long it takes before it starts, and `--quick` scores a
documented smaller share (issue 58, part 9). A tiny world and the built-in tiny model, made in code."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from explorer.cli import main
from explorer.data import write_dataset
from explorer.evaluation.estimate import QUICK_GROUNDING_LIMIT, QUICK_LIMIT, EvalPlan, plan_eval

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def world(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("world") / "world"
    write_dataset(folder, n_scenes=40, seed=3, image_size=32, split_fractions={"train": 0.0, "val": 0.0, "test": 1.0})
    return folder


@pytest.fixture(scope="module")
def zoo(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("zoo")
    manifest = json.loads((REPO / "checkpoints" / "tiny-untrained.json").read_text())
    (root / "tiny.json").write_text(json.dumps({**manifest, "name": "tiny"}))
    return root


def test_the_plan_counts_what_the_run_scores_and_grows_with_it(world, zoo):
    plan = plan_eval(zoo, world, "test", limit=300, grounding_limit=80)
    assert plan.models == ["tiny"] and plan.retrieval_scenes == 40 and plan.grounding_scenes == 40
    assert plan.picture_forwards == 40 and plan.text_forwards > 2 * 40  # long, short, long again + its negatives
    assert f"({plan.picture_forwards} picture and at most {plan.text_forwards} text forwards a model" in plan.line()
    quick = plan_eval(zoo, world, "test", limit=12, grounding_limit=3, quick=True)
    assert (quick.retrieval_scenes, quick.grounding_scenes) == (12, 3) and "--quick" in quick.line()
    assert quick.seconds < plan.seconds
    two = EvalPlan(models=["a", "b"], retrieval_scenes=QUICK_LIMIT, grounding_scenes=QUICK_GROUNDING_LIMIT, quick=True)
    assert two.seconds < 120, "--quick of two demo-size models is meant to take under 2 minutes on 2 cores"
    full = EvalPlan(models=["a", "b"], retrieval_scenes=300, grounding_scenes=80)
    assert 7 * 60 < full.seconds < 12 * 60  # the full run of two demo models was measured at 9.2 min
    assert "about 9 min" in full.line()


@pytest.mark.slow
def test_eval_prints_the_plan_before_it_starts_and_quick_scores_its_share(world, zoo, tmp_path, capsys):
    out = tmp_path / "results.json"
    assert main(["--checkpoints", str(zoo), "eval", "--data", str(world), "--quick", "--grounding-limit", "1",
                 "--no-progress", "--device", "cpu", "--out", str(out)]) == 0
    first = capsys.readouterr().out.splitlines()[0]
    assert first.startswith("scoring 1 model(s) (tiny) on 40 scenes") and "first 1 for grounding" in first
    assert "estimate about" in first
    dataset = json.loads(out.read_text())["dataset"]
    assert (dataset["retrieval_scenes"], dataset["grounding_scenes"]) == (min(40, QUICK_LIMIT), 1)
