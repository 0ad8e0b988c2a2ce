"""explorer.jobs without spawning runs: settings, refusals before launch, the store, the queue, data
folders, the loop's clean stop, atomic checkpoints, and the worker run in this process (disk full, a
bad record, delete)."""

from __future__ import annotations

import errno
import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import explorer
from explorer.jobs import JobError, JobManager, Run, RunStore
from explorer.jobs.configs import KEYS, TRAIN_TYPES, fixed_value_in_code, known_methods, method_defaults, resolve_config
from explorer.jobs.queue import claim_runs, set_gpu_pool, set_max_running
from explorer.jobs.training_data import inspect_data, read_samples
from explorer.jobs.worker import run_job
from explorer.models.methods import METHODS, discover_methods
from explorer.training.checkpointing import latest_checkpoint, load_checkpoint
from explorer.training.loop import TrainConfig, train
from explorer.training.metrics_log import JsonlLog, read_jsonl
from explorer.training.samples import BatchList

TINY = {"size": "tiny", "batch_size": 4, "evaluate": False}


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    from explorer.data import write_dataset

    root = tmp_path_factory.mktemp("world")
    write_dataset(root, 12, seed=0, image_size=64)
    return root


@pytest.fixture
def jobs(tmp_path, monkeypatch):
    monkeypatch.setenv("EXPLORER_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("EXPLORER_CHECKPOINTS", str(tmp_path / "zoo"))
    return JobManager(gpu_ids=[], max_running=2, subreaper=False)


def run_here(jobs, run) -> Run:
    """Take ``run`` from the queue and run its worker in this process (no child process)."""
    assert [claimed.id for claimed in claim_runs(jobs.store)] == [run.id]
    run_job(run.id, jobs.root, start_next=False)
    return jobs.get(run.id)


# ---- settings --------------------------------------------------------------------------------------


def test_every_method_has_a_config_with_each_papers_numbers():
    from explorer.jobs.configs import CONFIG_DIR
    from explorer.models.methods import BUILT_IN, SOURCES

    discover_methods()
    assert known_methods() == sorted(METHODS)
    # every built-in has its YAML (the names the page lists before the methods are imported), and only they
    assert {path.stem for path in CONFIG_DIR.glob("*.yaml")} == {n for n, s in SOURCES.items() if s == BUILT_IN}
    values = {m: method_defaults(m).values for m in known_methods()}
    mulclip = values["mulclip"]
    assert (mulclip["lr_backbone"], mulclip["lr_new"], mulclip["weight_decay"], mulclip["warmup_steps"]) == (
        1e-5, 2e-4, 0.05, 200)
    assert method_defaults("mulclip").fixed["lambda_short"]["value"] == 0.5
    assert (values["finelip"]["lr_backbone"], values["finelip"]["lr_new"]) == (1e-6, 2e-4)
    goal = method_defaults("goal").fixed
    assert [goal[k]["value"] for k in ("lambda_global", "lambda_local", "lambda_tsl")] == [1.0, 0.5, 1.0]
    longclip = values["longclip"]
    assert (longclip["batch_size"], longclip["lr_backbone"], longclip["epochs"]) == (2048, 1e-6, 6)
    for method in known_methods():
        defaults = method_defaults(method)
        assert set(defaults.values) == set(KEYS)
        for key, source in defaults.sources.items():
            assert source and "no source given" not in source, (method, key)
        for name, entry in defaults.fixed.items():  # what the YAML shows is what the code does
            assert entry["source"], (method, name)
            if "code" in entry:
                assert math.isclose(fixed_value_in_code(entry), entry["value"]), (method, name)
        assert TrainConfig(**{k: defaults.values[k] for k in TRAIN_TYPES})  # the loop takes them


def test_overrides_convert_text_and_refuse_what_is_wrong():
    config = resolve_config("mulclip", {"lr_new": "3e-4", "shuffle": "false", "betas": "[0.9, 0.99]",
                                        "context_length": "none", "batch_size": "8"}, max_steps=5)
    assert config.values["lr_new"] == 3e-4 and config.values["shuffle"] is False
    assert config.values["betas"] == (0.9, 0.99) and config.values["context_length"] is None
    assert config.values["batch_size"] == 8 and config.values["max_steps"] == 5
    assert config.sources["lr_new"] == "override" and "MulCLIP" in config.sources["lr_backbone"]
    cases = [("nosuch", {}, "unknown method"), ("clip", {"learning_rate": 1}, "unknown setting 'learning_rate'"),
             ("clip", {"batch_size": "many"}, "batch_size must be a int"), ("clip", {"batch_size": 2.5}, "int"),
             ("clip", {"accumulate": 0}, "bad training settings"), ("clip", {"size": "huge"}, "size must be"),
             ("clip", {"device": "cuda"}, "set by the job"),
             ("mulclip", {"lambda_short": 1.0}, "fixed in mulclip's code"),
             ("clip", {"precision": "fp8"}, "bad training settings")]
    for method, overrides, message in cases:
        with pytest.raises(JobError, match=message):
            resolve_config(method, overrides)


DEMO_CLIP = Path(__file__).resolve().parents[1] / "checkpoints" / "demo" / "clip-base.json"


def test_a_bad_config_or_missing_dataset_is_refused_before_anything_is_launched(jobs, world, tmp_path):
    (tmp_path / "empty").mkdir()
    refused = [
        (dict(method="clip", data=tmp_path / "nowhere"), "no data at"),
        (dict(method="clip", data=tmp_path / "empty"), "matches no dataset layout"),
        (dict(method="longclip", data=world, overrides={"size": "tiny"}), "fewer than the 2048 samples"),
        (dict(method="clip", data=world, overrides={**TINY, "warmup_ratio": 2}), "warmup_ratio"),
        (dict(method="clip", data=world, overrides=TINY, gpus=2), "torchrun"),
        (dict(method="clip", data=world, overrides=TINY, gpus=1), "lends 0 GPU"),
        (dict(method="clip", data=world, overrides=TINY, init="no-such-model"), "init no-such-model"),
        (dict(method="goal", data=world, overrides=TINY), "GOAL trains on FLISM local pairs"),
        (dict(method="seps", data=world, overrides={**TINY, "batch_size": 2}, init=DEMO_CLIP),
         "SEPS starts only from a seps checkpoint; .*clip-base.json is a clip model"),  # SepsMethod.init_methods
        (dict(method="nosuch", data=world), "unknown method"),
    ]
    for kwargs, message in refused:
        with pytest.raises(JobError, match=message):
            jobs.submit(**kwargs)
    assert jobs.list() == [] and not (jobs.root / "runs").exists()


# ---- the store and the queue -----------------------------------------------------------------------


def test_the_store_is_shared_by_processes_and_survives_a_new_object(tmp_path):
    store = RunStore(tmp_path)
    run = store.insert(Run(id=store.new_id(), name="x", method="clip", data="/d"))
    writer = ("import sys\nfrom explorer.jobs.run_store import RunStore\nstore = RunStore(sys.argv[1])\n"
              "for i in range(40):\n    store.update(sys.argv[2], step=i, notes=[sys.argv[3], i])\n"
              "    store.set_setting('k' + sys.argv[3], i)\n")
    procs = [subprocess.Popen([sys.executable, "-c", writer, str(tmp_path), run.id, str(n)]) for n in range(4)]
    assert [p.wait(timeout=120) for p in procs] == [0, 0, 0, 0]  # no "database is locked"
    again = RunStore(tmp_path)
    assert again.get(run.id[:4]).step == 39 and [again.get_setting(f"k{n}") for n in range(4)] == [39] * 4
    import sqlite3

    assert sqlite3.connect(again.path).execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert again.update_if(run.id, ("running",), status="done") is None  # it is queued: nothing written
    with pytest.raises(JobError, match="no run with id"):
        again.get("zzzzzzzz")


def test_the_queue_caps_runs_gives_each_its_gpu_and_keeps_order(tmp_path):
    store = RunStore(tmp_path)
    set_gpu_pool(store, [0, 1])
    set_max_running(store, 3)

    def queued(name, gpus, at):
        return store.insert(Run(id=store.new_id(), name=name, method="clip", data="/d", gpus=gpus, created=at,
                                queued_at=at))

    a, b, c, d = queued("a", 1, 1.0), queued("b", 1, 2.0), queued("c", 1, 3.0), queued("d", 0, 4.0)
    first = claim_runs(store)
    assert [(r.name, r.devices) for r in first] == [("a", ["0"]), ("b", ["1"])]  # c waits for a GPU, d waits behind c
    assert {r.status for r in store.list()} == {"running", "queued"} and store.get(c.id).status == "queued"
    store.update(a.id, status="done")
    assert [(r.name, r.devices) for r in claim_runs(store)] == [("c", ["0"]), ("d", [])]
    store.update(b.id, status="done")
    store.update(c.id, status="done")
    e = queued("e", 0, 5.0)
    f = queued("f", 0, 6.0)
    set_max_running(store, 2)  # d runs: one slot left
    assert [r.name for r in claim_runs(store)] == ["e"] and store.get(f.id).status == "queued"
    assert store.get(d.id).devices == [] and store.get(e.id).launcher_pid


def test_cancel_a_queued_run_and_what_cannot_be_resumed_or_deleted(jobs, world):
    run = jobs.submit("clip", world, max_steps=2, overrides=TINY, start=False)
    assert run.status == "queued" and jobs.queue_position(run.id) == 1
    cancelled = jobs.cancel(run.id)
    assert cancelled.status == "cancelled" and cancelled.pid is None and cancelled.finished
    with pytest.raises(JobError, match="only a queued or running run can be cancelled"):
        jobs.cancel(run.id)
    other = jobs.submit("clip", world, max_steps=2, overrides=TINY, start=False)
    with pytest.raises(JobError, match="cancel it before deleting"):
        jobs.delete(other.id)
    with pytest.raises(JobError, match="only a failed or cancelled run can be resumed"):
        jobs.resume(other.id)
    same = jobs.submit("clip", world, max_steps=2, name=other.name, overrides=TINY, start=False)
    assert same.id != other.id and same.out_dir != other.out_dir and same.name == other.name


# ---- data --------------------------------------------------------------------------------------------


def test_any_retrieval_layout_is_training_data_and_says_what_it_holds_back(world, tmp_path):
    from explorer.data import export_docci, export_urban1k, read_dataset

    synthetic = inspect_data(world)
    assert (synthetic.kind, synthetic.split, synthetic.count, synthetic.eval_kind) == ("synthetic", "train", 10,
                                                                                          "synthetic")
    sample = read_samples(synthetic)[0]
    assert sample.image.size == (64, 64) and sample.sentences and sample.short_caption and sample.dense_caption

    scenes = read_dataset(world)
    docci = inspect_data(export_docci(scenes, tmp_path / "docci").parent)
    assert (docci.kind, docci.split, docci.count, docci.eval_split) == ("docci", "train", 10, "test")
    item = read_samples(docci)[3]
    assert item.caption and item.sentences and item.image.size == (64, 64)

    urban = inspect_data(export_urban1k(scenes, tmp_path / "urban"))
    assert urban.kind == "urban1k" and urban.split == "test" and urban.count == 12 and urban.eval_kind is None
    assert any("no 'train' split" in note for note in urban.notes)


# ---- the loop: clean stop, atomic checkpoints --------------------------------------------------------


def tiny_setup():
    from explorer.models.batch import example_batch
    from explorer.models.methods.clip import ClipMethod

    model = ClipMethod.example("tiny", seed=0)
    return model, BatchList([example_batch(model.preprocess.image_size, batch_size=4, seed=s) for s in range(3)])


FAST = dict(lr_backbone=1e-3, lr_new=1e-3, device="cpu", precision="fp32", seed=0)


def test_should_stop_saves_a_checkpoint_and_the_resumed_run_equals_an_uninterrupted_one(tmp_path):
    config = TrainConfig(max_steps=5, **FAST)
    whole_model, batches = tiny_setup()
    whole = train(whole_model, batches, config, tmp_path / "whole", progress=False)

    model, batches = tiny_setup()
    asked = iter(range(100))  # asked before every step: yes before the third
    stopped = train(model, batches, config, tmp_path / "cut", progress=False, should_stop=lambda: next(asked) >= 2)
    assert stopped.stopped and stopped.steps == 2 and latest_checkpoint(tmp_path / "cut").name == "step-00000002"
    events = read_jsonl(stopped.run_log_path)
    assert [e["event"] for e in events] == ["start", "checkpoint", "stop"] and events[-1]["step"] == 2
    model, batches = tiny_setup()
    resumed = train(model, batches, config, tmp_path / "cut", resume=True, progress=False)
    assert not resumed.stopped and resumed.resumed_from == 2 and resumed.steps == 5
    for key, value in model.state_dict().items():
        torch.testing.assert_close(value, whole_model.state_dict()[key], rtol=0, atol=0)
    assert [r["step"] for r in read_jsonl(resumed.metrics_path)] == [1, 2, 3, 4, 5]
    assert [r["loss"] for r in whole.history[2:]] == [r["loss"] for r in resumed.history]


@pytest.mark.parametrize("part", ["weights", "state"])
def test_a_checkpoint_write_that_fails_half_way_leaves_no_torn_file(tmp_path, monkeypatch, part):
    import safetensors.torch

    model, batches = tiny_setup()
    out = tmp_path / "run"
    config = TrainConfig(max_steps=3, checkpoint_every=1, **FAST)
    asked = iter(range(100))
    train(model, batches, config, out, progress=False, should_stop=lambda: next(asked) >= 1)  # stops after step 1
    before = {p: p.read_bytes() for p in out.rglob("*") if p.is_file() and p.suffix != ".jsonl"}

    def half(path):
        Path(path).write_bytes(b"\x00" * 100)  # half a file, then the disk gives up
        raise OSError(errno.EIO, "I/O error", str(path))

    with monkeypatch.context() as patch:  # undoes only this patch
        if part == "weights":
            patch.setattr(safetensors.torch, "save_file", lambda tensors, path, metadata=None: half(path))
        else:
            patch.setattr(torch, "save", lambda obj, path, *a, **k: half(path))
        with pytest.raises(OSError, match="I/O error"):
            train(model, batches, config, out, resume=True, progress=False)  # its step-2 checkpoint fails
    assert not [p for p in out.rglob("*") if p.name.endswith(".tmp")]  # no temporary left behind
    for path, content in before.items():  # every published file is the old one, whole
        assert path.read_bytes() == content, path
    folder = latest_checkpoint(out)
    assert folder.name == "step-00000001"
    assert load_checkpoint(folder, tiny_setup()[0]).step == 1
    assert explorer.load(out / "run.json", device="cpu").key_report.ok


# ---- the worker, in this process ------------------------------------------------------------------


def test_disk_full_while_writing_metrics_stops_the_run_and_says_so(jobs, world, monkeypatch):
    run = jobs.submit("clip", world, max_steps=6, overrides={**TINY, "checkpoint_every": 1}, start=False)
    real_write = JsonlLog.write

    def write(self, row):
        if self.path.name == "metrics.jsonl" and row.get("step", 0) >= 3:
            raise OSError(errno.ENOSPC, "No space left on device", str(self.path))
        real_write(self, row)

    monkeypatch.setattr(JsonlLog, "write", write)
    failed = run_here(jobs, run)
    assert failed.status == "failed" and failed.exit_code == 28
    assert "disk full" in failed.error and "metrics.jsonl" in failed.error and "resume" in failed.error
    assert "after step 2" in failed.error and "last checkpoint is step-00000002" in failed.error
    assert latest_checkpoint(Path(failed.out_dir)).name == "step-00000002"  # the state before the failed write
    assert [r["step"] for r in jobs.metrics(run.id)] == [1, 2] and failed.step == 2


def test_a_record_that_fails_at_start_gets_the_error(jobs, world):
    run = jobs.submit("clip", world, max_steps=2, overrides=TINY, start=False)
    jobs.store.update(run.id, config={**run.config, "batch_size": 0})  # a record no submit would write
    failed = run_here(jobs, run)
    assert failed.status == "failed" and failed.exit_code == 1 and "batch_size" in failed.error


def test_a_finished_run_is_in_the_zoo_and_delete_keeps_or_removes_its_checkpoint(jobs, world):
    kept = run_here(jobs, jobs.submit("clip", world, max_steps=2, overrides=TINY, start=False))
    gone = run_here(jobs, jobs.submit("clip", world, max_steps=2, overrides=TINY, start=False))
    assert kept.status == gone.status == "done" and kept.zoo_name == "clip-" + world.name
    assert gone.zoo_name == f"clip-{world.name}-{gone.id}" and Path(gone.zoo_manifest).is_file()
    assert kept.evaluation == {"skipped": "evaluate is off in the run's settings"}

    report = jobs.delete(kept.id, keep_checkpoint=True)
    assert kept.out_dir in report["kept"] and kept.zoo_manifest in report["kept"]
    assert explorer.load(kept.zoo_manifest, device="cpu").key_report.ok  # the zoo entry still loads
    assert not (Path(kept.out_dir) / "resume").exists()
    report = jobs.delete(gone.id, keep_checkpoint=False)
    assert gone.zoo_manifest in report["removed"] and not Path(gone.out_dir).exists()
    assert jobs.list() == []
    json.dumps(report)


def test_the_gpu_pool_is_what_cuda_visible_devices_names(monkeypatch):
    from explorer.jobs.launcher import child_environment
    from explorer.jobs.queue import detect_gpus

    for visible, pool in (("0,2", ["0", "2"]), ("GPU-5f1c,MIG-1", ["GPU-5f1c", "MIG-1"]), ("3,-1,4", ["3"]),
                          ("", [])):
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
        assert detect_gpus() == pool
    assert child_environment(["2"])["CUDA_VISIBLE_DEVICES"] == "2"
    assert child_environment([])["CUDA_VISIBLE_DEVICES"] == ""  # a CPU run sees no GPU


def test_an_attempt_with_no_checkpoint_starts_over_without_stale_metrics(jobs, world, monkeypatch):
    run = jobs.submit("clip", world, max_steps=4, overrides={**TINY, "checkpoint_every": 1000}, start=False)
    real_write = JsonlLog.write

    def write(self, row):
        if self.path.name == "metrics.jsonl" and row.get("step", 0) >= 3:
            raise OSError(errno.ENOSPC, "No space left on device", str(self.path))
        real_write(self, row)

    with monkeypatch.context() as patch:  # undoes only this patch, not the fixture's EXPLORER_* variables
        patch.setattr(JsonlLog, "write", write)
        failed = run_here(jobs, run)
    assert failed.exit_code == 28 and "it has no checkpoint yet" in failed.error
    jobs.store.update(run.id, status="queued", error=None, exit_code=None)  # what resume does, without a process
    done = run_here(jobs, run)
    assert done.status == "done" and [r["step"] for r in jobs.metrics(run.id)] == [1, 2, 3, 4]


def test_the_end_of_an_earlier_attempt_does_not_touch_a_resumed_run(jobs, world):
    run = jobs.submit("clip", world, max_steps=2, overrides=TINY, start=False)
    current = jobs.store.update(run.id, status="running", pid=4242, pgid=None)  # no group: nothing is signalled
    assert jobs._record_end(current, 4141, -9) == current  # attempt 1's process, reaped late
    assert jobs.get(run.id).status == "running"
    ended = jobs._record_end(current, 4242, -9)
    assert ended.status == "failed" and ended.exit_code == -9 and "SIGKILL" in ended.error


def test_goal_mines_its_flism_local_pairs_with_the_init_and_keeps_them(jobs, world, tmp_path):
    from explorer.models.io.loading import save_method
    from explorer.models.methods.clip import ClipMethod

    init = save_method(ClipMethod.example("tiny", seed=0), tmp_path / "clip-tiny.safetensors")
    run = run_here(jobs, jobs.submit("goal", world, init=init, max_steps=2, overrides={**TINY, "batch_size": 2},
                                     start=False))
    assert run.status == "done", run.error
    pairs = [json.loads(line) for line in (Path(run.out_dir) / "local_pairs.jsonl").read_text().splitlines()]
    assert len(pairs) == 10 and all(len(p["local_box"]) == 4 and p["local_sentence"] for p in pairs)
    assert explorer.load(run.checkpoint, device="cpu").method_name == "goal"


def test_a_run_on_a_retrieval_layout_is_evaluated_on_its_held_out_split(jobs, world, tmp_path):
    from explorer.data import export_docci, read_dataset

    docci = export_docci(read_dataset(world), tmp_path / "docci").parent
    run = run_here(jobs, jobs.submit("clip", docci, max_steps=2, overrides={**TINY, "evaluate": True, "eval_limit": 5},
                                     start=False))
    assert run.status == "done", run.error
    evaluation = run.evaluation
    assert (evaluation["kind"], evaluation["split"], evaluation["layout"]) == ("retrieval", "test", "docci")
    assert evaluation["counts"] == {"images": 1, "captions": 1} and evaluation["metrics"]["t2i_R@1"] == 1.0
    events = read_jsonl(Path(run.out_dir) / "run.jsonl")
    assert events[-1]["event"] == "evaluation" and events[-1]["kind"] == "retrieval"


def test_two_runs_of_one_name_published_at_once_keep_both_entries(tmp_path, monkeypatch):
    """Two runs named alike that finish together: each gets a name of its own and both manifests stay (the
    name was chosen, then written, and a second run choosing in between took the same one and replaced it)."""
    import threading
    import time

    from explorer.jobs import publish as publishing
    from explorer.zoo import Manifest, Zoo

    own = Manifest(name="own", method="clip", weights="builtin:tiny-clip").write(tmp_path / "own.json")
    runs = [Run(id=f"run{i}", name="same", method="clip", data=str(tmp_path)) for i in range(2)]
    taken = publishing._taken

    def slow_check(*args):  # the window between choosing a name and writing it, widened
        free = taken(*args)
        time.sleep(0.3)
        return free

    monkeypatch.setattr(publishing, "_taken", slow_check)
    names = []
    threads = [threading.Thread(target=lambda run=run: names.append(publishing.publish(run, own, tmp_path / "zoo")[0]))
               for run in runs]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(names) in (["same", "same-run0"], ["same", "same-run1"]), names
    later = max(names)
    assert {m.name for m in Zoo(tmp_path / "zoo").manifests()} == {"same", later}
