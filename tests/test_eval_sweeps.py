"""Evaluation sweeps as jobs (explorer/jobs/sweeps.py, explorer/evaluation/tasks/, eval_child.py) and their results
table (explorer/views/results_table.py, compare_view.py, `explorer results table`, the Compare board).

Most tests run each child's worker in this process (``run_job``, as the queue would start it); some start
real processes, torchrun with 2 CPU ranks (Gloo) among them. Those over 5 s are marked slow. Datasets: two tiny synthetic
worlds (train split); models: the repository's demo zoo.
"""

from __future__ import annotations

import json
import re
import signal
import tempfile
from pathlib import Path

import pandas as pd
import pytest
import torch

from explorer.cli import main
from explorer.data import write_dataset
from explorer.jobs import JobManager, launcher
from explorer.jobs.queue import claim_runs
from explorer.jobs.sweeps import children
from explorer.jobs.worker import run_job
from explorer.views import results_table as rt
from explorer.core.errors import ExplorerError

ZOO = Path(__file__).resolve().parents[1] / "checkpoints"
MODELS = ["demo-longclip", "demo-clip-base"]
SPLIT = {"split": "train"}


@pytest.fixture(scope="module")
def worlds(tmp_path_factory) -> list[Path]:
    root = tmp_path_factory.mktemp("sweep-data")
    write_dataset(root / "alpha", 20, seed=8, image_size=64)  # seeds on which the demo models still err
    write_dataset(root / "beta", 20, seed=3, image_size=64)
    return [root / "alpha", root / "beta"]


@pytest.fixture
def jobs(isolated_home):
    manager = JobManager(zoo_root=ZOO, gpu_ids=[], max_running=1, grace_s=60, subreaper=False)
    yield manager
    for run in manager.list(reconcile=False):
        if run.pgid and run.status == "running":
            launcher.signal_group(run.pgid, signal.SIGKILL)
            launcher.end_ranks(run.out_dir)
    launcher.wait_children(10)


def run_queued(jobs, limit: int | None = None) -> list[str]:
    """Start queued children as the queue would, each worker in this process; the ids run."""
    done = []
    while limit is None or len(done) < limit:
        claimed = claim_runs(jobs.store)
        if not claimed:
            break
        for run in claimed:
            run_job(run.id, jobs.root, start_next=False)
            done.append(run.id)
    return done


def foreground(tmp_path, model: str, data: Path) -> dict:
    out = tmp_path / f"fg-{model}-{data.name}.json"
    assert main(["--checkpoints", str(ZOO), "eval-retrieval", "--model", model, "--data", str(data), "--split",
                 "train", "--out", str(out), "--no-progress"]) == 0
    return json.loads(out.read_text())


def without_time(entry: dict) -> dict:
    return {key: value for key, value in entry.items() if key != "seconds"}


# ---- sweeps -------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_a_sweep_of_two_models_by_two_datasets_gives_the_foreground_numbers(jobs, worlds, tmp_path, capsys):
    sweep = jobs.submit_eval(MODELS, worlds, options=SPLIT, start=False)
    kids = children(jobs.store, sweep.id)
    assert sweep.kind == "sweep" and sweep.status == "queued" and sweep.progress == (0, 4)
    assert [(k.init, Path(k.data).name, k.method) for k in kids] == [
        (m, d.name, "retrieval") for m in MODELS for d in worlds]
    assert len(run_queued(jobs)) == 4
    sweep = jobs.get(sweep.id)
    assert sweep.status == "done" and sweep.progress == (4, 4) and sweep.error is None
    rows = jobs.store.results([sweep.id])
    for kid in children(jobs.store, sweep.id):
        assert kid.status == "done", kid.error
        expected = foreground(tmp_path, kid.init, Path(kid.data))
        document = json.loads((Path(kid.out_dir) / "results.json").read_text())
        assert document["dataset"] == expected["dataset"] and document["ks"] == expected["ks"]
        assert without_time(document["models"][kid.init]) == without_time(expected["models"][kid.init])
        measured = {r["metric"]: r["value"] for r in rows if r["run_id"] == kid.id}
        entry = expected["models"][kid.init]
        assert measured["t2i_R@1"] == entry["t2i_R@1"] and measured["rsum"] == entry["rsum"]
        assert all(measured[key] == entry[key] for key in measured)  # every number, exactly
    capsys.readouterr()
    assert main(["--checkpoints", str(ZOO), "results", "table", "--runs", sweep.id[:6], "--format", "csv"]) == 0
    table = pd.read_csv(pd.io.common.StringIO(capsys.readouterr().out), index_col=0)
    assert list(table.index) == MODELS and table.shape[1] == 12  # 2 datasets x R@1/5/10 both ways
    alpha = foreground(tmp_path, "demo-clip-base", worlds[0])["models"]["demo-clip-base"]
    assert table.loc["demo-clip-base", "alpha t2i_R@1"] == pytest.approx(round(100 * alpha["t2i_R@1"], 1))


def test_a_child_that_cannot_load_or_read_fails_alone(jobs, worlds, tmp_path):
    sweep = jobs.submit_eval(["demo-longclip", "no-such-model"], [worlds[0], tmp_path / "missing"], options=SPLIT,
                             start=False)
    run_queued(jobs)
    kids = {kid.name: kid for kid in children(jobs.store, sweep.id)}
    assert kids["demo-longclip@alpha"].status == "done"
    assert kids["demo-longclip@missing"].status == "failed" and "no dataset at" in kids["demo-longclip@missing"].error
    assert kids["no-such-model@alpha"].status == "failed" and "No model named 'no-such-model'" in \
        kids["no-such-model@alpha"].error
    sweep = jobs.get(sweep.id)
    assert sweep.status == "failed" and sweep.progress == (4, 4)
    assert "no-such-model@alpha: No model named" in sweep.error and "does not exist" in sweep.error
    assert {r["model"] for r in jobs.store.results([sweep.id])} == {"demo-longclip"}


@pytest.mark.slow
def test_a_cancelled_sweep_resumes_without_redoing_finished_children(jobs, worlds):
    sweep = jobs.submit_eval(MODELS, worlds, options=SPLIT, start=False)
    first = run_queued(jobs, limit=1)  # one child done, then the sweep is cancelled
    results = Path(jobs.get(first[0]).out_dir) / "results.json"
    stamp, started = results.stat().st_mtime_ns, jobs.get(first[0]).started
    cancelled = jobs.cancel(sweep.id)
    assert cancelled.status == "cancelled" and cancelled.progress == (4, 4)
    assert sorted(k.status for k in children(jobs.store, sweep.id)) == ["cancelled"] * 3 + ["done"]

    resumed = jobs.resume(sweep.id, start=False)
    assert resumed.status == "queued" and resumed.progress == (1, 4)
    assert first[0] not in run_queued(jobs) and jobs.get(sweep.id).status == "done"
    again = jobs.get(first[0])
    assert again.started == started and results.stat().st_mtime_ns == stamp  # never run again
    assert len({r["run_id"] for r in jobs.store.results([sweep.id])}) == 4
    report = jobs.delete(sweep.id)
    assert jobs.list() == [] and jobs.store.results([sweep.id]) == [] and report["id"] == sweep.id


@pytest.mark.slow(reason="a grounding child and eval-grounding each draw two map kinds on the same data")
def test_a_grounding_child_scores_what_eval_grounding_scores(jobs, tmp_path):
    from grounding_fixtures import write_dci

    data = write_dci(tmp_path / "dci")
    kinds = ["generic", "gradcam"]
    sweep = jobs.submit_eval(["demo-longclip"], [data], task="grounding", options={"kinds": kinds}, start=False)
    run_queued(jobs)
    (kid,) = children(jobs.store, sweep.id)
    assert kid.status == "done", kid.error
    rows = {row["metric"]: row["value"] for row in jobs.store.results([sweep.id])}
    out = tmp_path / "fg.json"
    assert main(["--checkpoints", str(ZOO), "eval-grounding", "--model", "demo-longclip", "--data", str(data),
                 "--kind", *kinds[:1], "--kind", kinds[1], "--out", str(out), "--no-progress"]) == 0
    foreground = {entry["name"]: entry["kinds"] for entry in json.loads(out.read_text())["models"]}
    for kind in kinds:
        for metric in ("miou", "pointing", "auroc", "n_units"):
            assert rows[f"{kind}/{metric}"] == pytest.approx(foreground["demo-longclip"][kind][metric], abs=1e-12)
    assert rows["centre-box/pointing"] == foreground["centre-box"]["baseline"]["pointing"]  # the floor, beside it
    assert rows["generic/n_units"] > 0


def test_what_a_sweep_refuses_is_said_before_anything_is_recorded(jobs, worlds, capsys):
    from explorer.jobs import JobError

    for kwargs, message in [(dict(models=[], datasets=worlds), "at least one model"),
                            (dict(models=MODELS, datasets=worlds, task="captioning"), "unknown evaluation task"),
                            (dict(models=MODELS, datasets=worlds, options={"ks": [0]}), "at least 1"),
                            (dict(models=MODELS, datasets=worlds, gpus=2), "lends 0 GPU")]:
        with pytest.raises(JobError, match=message):
            jobs.submit_eval(**kwargs)
    assert jobs.list() == []
    assert main(["--checkpoints", str(ZOO), "jobs", "submit-eval", "--model", *MODELS, "--data", str(worlds[0]),
                 "--split", "train", "--processes", "2", "--no-start", "--json"]) == 0
    brief = json.loads(capsys.readouterr().out)
    assert brief["kind"] == "sweep" and len(brief["children"]) == 2
    assert all(kid["processes"] == 2 and kid["status"] == "queued" for kid in brief["children"])


# ---- many processes -----------------------------------------------------------------------------------


@pytest.mark.slow
def test_two_processes_embed_one_dataset_as_one_process_does_to_the_bit(jobs, tmp_path):
    import explorer
    from explorer.data.retrieval_sets import read_retrieval_set
    from explorer.retrieval.embedding_store import EmbeddingStore, embeddings_root

    write_dataset(tmp_path / "big", 90, seed=2, image_size=64)  # 72 train pictures: 3 batches of 32, 2 ranks
    sweep = jobs.submit_eval(["demo-longclip"], [tmp_path / "big"], options=SPLIT, processes=2)
    kid = children(jobs.store, sweep.id)[0]
    assert "torch.distributed.run" in kid.command
    done = jobs.wait(kid.id, timeout=240)
    assert done.status == "done", (done.error, jobs.logs(kid.id, tail=40))
    model = explorer.load("demo-longclip", device="cpu", zoo_root=ZOO)
    dataset = read_retrieval_set(tmp_path / "big", "train")
    shared = EmbeddingStore(model, dataset)  # the cache the two ranks filled
    index = json.loads((shared.folder / "index.json").read_text())
    assert len(index["images"]) == 2  # a shard from each rank, merged into one index
    single = EmbeddingStore(model, dataset, root=tmp_path / "one")
    single.update()
    assert shared.folder.parent == embeddings_root()
    assert torch.equal(shared.image_vectors(), single.image_vectors())
    assert torch.equal(shared.image_features().patches, single.image_features().patches)
    assert torch.equal(shared.caption_vectors(), single.caption_vectors())
    expected = foreground(tmp_path, "demo-longclip", tmp_path / "big")["models"]["demo-longclip"]
    measured = {r["metric"]: r["value"] for r in jobs.store.results([kid.id])}
    assert all(measured[key] == expected[key] for key in measured)


@pytest.mark.slow
def test_real_processes_run_a_sweep_and_a_bad_child_does_not_stop_it(jobs, worlds, tmp_path):
    sweep = jobs.submit_eval(["demo-longclip", str(tmp_path / "broken.safetensors")], [worlds[0]], options=SPLIT)
    (tmp_path / "broken.safetensors").write_bytes(b"not a checkpoint")
    final = jobs.wait(sweep.id, timeout=240)  # a sweep is waited on as a run is
    kids = {kid.name: kid for kid in children(jobs.store, sweep.id)}
    assert kids["demo-longclip@alpha"].status == "done" and kids["broken@alpha"].status == "failed"
    assert final.status == "failed" and "broken@alpha" in final.error


# ---- the table for papers ----------------------------------------------------------------------------


def rows_of(values: dict) -> list[dict]:
    return [{"run_id": f"{m}{d}", "sweep": "s", "model": m, "dataset": d, "task": "retrieval", "metric": k, "value": v}
            for (m, d), metrics in values.items() for k, v in metrics.items()]


RESULTS = rows_of({
    ("clip_b", "urban1k"): {"t2i_R@1": 0.5234, "i2t_R@1": 0.61, "t2i_median_rank": 2.0, "rsum": 410.2},
    ("longclip", "urban1k"): {"t2i_R@1": 0.7812, "i2t_R@1": 0.59, "t2i_median_rank": 1.0, "rsum": 480.9},
    ("clip_b", "docci"): {"t2i_R@1": 0.401, "i2t_R@1": 0.45, "t2i_median_rank": 3.0, "rsum": 350.0},
    ("longclip", "docci"): {"t2i_R@1": 0.655, "i2t_R@1": 0.66, "t2i_median_rank": 2.0, "rsum": 450.5}})


def test_the_latex_table_is_compile_shaped_bolds_the_best_and_round_trips_its_numbers():
    frame = rt.results_frame(RESULTS)
    metrics = ["i2t_R@1", "t2i_R@1", "t2i_median_rank"]  # chosen, in this order
    table = rt.pivot(frame, metrics, ["docci", "urban1k"])
    text = rt.export(table, "latex")
    assert text.count("{") == text.count("}") and text.index("\\toprule") < text.index("\\midrule") < text.index(
        "\\bottomrule")
    assert text.startswith("\\begin{tabular}{lrrrrrr}") and text.rstrip().endswith("\\end{tabular}")
    assert "\\multicolumn{3}{c}{docci}" in text and "clip\\_b" in text and "i2t\\_R@1" in text
    body = text[text.index("\\midrule"):text.index("\\bottomrule")].splitlines()[1:]
    parsed = {}
    for line in body:
        cells = [c.strip() for c in line.rstrip("\\ ").split("&")]
        parsed[cells[0].replace("\\_", "_")] = cells[1:]
    assert list(parsed) == ["clip_b", "longclip"]
    for model, cells in parsed.items():
        numbers = [float(re.sub(r"\\textbf\{(.*)\}", r"\1", c)) for c in cells]
        assert numbers == [round(v, 1) for v in table.loc[model]]  # every number back, as printed
    # the best of each column in bold: longclip's recalls, the lower median rank (ties: both)
    assert parsed["longclip"][:2] == ["\\textbf{66.0}", "\\textbf{65.5}"] and parsed["clip_b"][0] == "45.0"
    assert parsed["longclip"][2] == "\\textbf{2.0}" and parsed["clip_b"][2] == "3.0"
    assert parsed["clip_b"][3] == "\\textbf{61.0}" and parsed["longclip"][3] == "59.0"
    assert parsed["longclip"][5] == "\\textbf{1.0}" and parsed["clip_b"][5] == "2.0"


def test_csv_and_markdown_carry_the_same_numbers():
    table = rt.pivot(rt.results_frame(RESULTS), ["t2i_R@1", "rsum"])
    csv = pd.read_csv(pd.io.common.StringIO(rt.export(table, "csv")), index_col=0)
    assert csv.loc["longclip", "urban1k t2i_R@1"] == 78.1 and csv.loc["clip_b", "docci rsum"] == 350.0
    markdown = rt.export(table, "markdown")
    assert "| longclip | **78.1** | **480.9** | **65.5** | **450.5** |" in markdown
    assert markdown.splitlines()[1].startswith("| --- |")
    with pytest.raises(ExplorerError, match="format must be one of"):
        rt.export(table, "html")


@pytest.mark.slow(reason="draws the compare board's figures and exports them")
def test_the_compare_board_draws_and_exports_from_the_store(jobs, tmp_path):
    from explorer.ui import compare_tab
    from explorer.serve.access import Access

    sweep = jobs.new_record(kind="sweep", name="s", method="retrieval", data="", status="done")
    for run_id in dict.fromkeys(row["run_id"] for row in RESULTS):  # as each child writes its own
        jobs.store.put_results(run_id, [{**row, "sweep": sweep.id} for row in RESULTS if row["run_id"] == run_id])
    note, pivot, curves, bars, sets, metrics = compare_tab.show_board(jobs, [sweep.id], ["docci"], [])
    assert "2 model(s) x 2 dataset(s)" in note and list(pivot["model"]) == ["clip_b", "longclip"]
    assert list(pivot.columns)[1:] == ["docci t2i_R@1", "docci i2t_R@1"]
    assert len(curves.data) == 4 and len(bars.data) == 4  # 2 models x 2 directions; 2 metrics x 2 models
    assert [c[0] if isinstance(c, (list, tuple)) else c for c in sets["choices"]] == ["urban1k", "docci"]
    note, path = compare_tab.export_board(jobs, [sweep.id], [], ["rsum"], "latex")
    assert "\\textbf{480.9}" in Path(path).read_text()
    assert "Cannot do that" in compare_tab.show_board(jobs, ["nope"], [], [])[0]
    access = Access(roots=(Path(tempfile.gettempdir()).resolve(),))
    refused = compare_tab.submit_sweep(access, jobs, jobs_zoo(), ["demo-longclip"], "", "/etc", "retrieval", 0,
                                       *[None] * len(compare_tab.FORM_OPTIONS))
    assert "not under an allowed folder" in refused and len(jobs.list()) == 1


def jobs_zoo():
    from explorer.zoo import Zoo

    return Zoo(ZOO)


@pytest.mark.slow(reason="a sweep child process embeds, is cancelled, and a second child resumes from its cache")
def test_a_child_cancelled_while_embedding_resumes_from_its_cache(jobs, tmp_path, wait_for):
    from explorer.jobs.eval_child import RESULTS_FILE

    write_dataset(tmp_path / "large", 700, seed=4, image_size=64)  # 560 train pictures: shards of 256
    sweep = jobs.submit_eval(["demo-longclip"], [tmp_path / "large"], options={**SPLIT, "queries": False})
    kid = children(jobs.store, sweep.id)[0]
    caches = lambda: list((jobs.root.parent / "embeddings").glob("*/images-*.safetensors"))  # noqa: E731
    wait_for(lambda: caches() or jobs.get(kid.id).status != "running", timeout=240, what="a first shard")
    cancelled = jobs.cancel(sweep.id)
    kid = jobs.get(kid.id)
    assert cancelled.status == "cancelled" and kid.status == "cancelled" and kid.exit_code == 143, (
        kid.error, jobs.logs(kid.id, tail=30))
    assert len(caches()) >= 1 and "what was embedded stays in the cache" in jobs.logs(kid.id, tail=None)
    jobs.resume(sweep.id)
    done = jobs.wait(sweep.id, timeout=300)
    assert done.status == "done", jobs.logs(kid.id, tail=30)
    assert json.loads((Path(kid.out_dir) / RESULTS_FILE).read_text())["dataset"]["images"] == 560
    index = json.loads((caches()[0].parent / "index.json").read_text())
    assert sum(len(shard["items"]) for shard in index["images"]) == 560  # none embedded twice
    assert "resumed: the embedding cache keeps what was embedded" in jobs.logs(kid.id, tail=None)


def test_grounding_shares_print_in_percent_and_counts_as_they_are():
    frame = rt.results_frame([{"model": "m", "dataset": "d", "task": "grounding", "metric": metric, "value": value,
                               "run_id": "r", "sweep": "s"}
                              for metric, value in [("gradcam/miou", 0.25), ("gradcam/n_units", 40.0),
                                                    ("t2i_R@1", 0.5)]])
    assert dict(zip(frame["metric"], frame["value"])) == {"gradcam/miou": 25.0, "gradcam/n_units": 40.0,
                                                          "t2i_R@1": 50.0}
