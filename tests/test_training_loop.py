"""The training loop: it lowers a loss, repeats itself, schedules, accumulates, checkpoints, resumes, logs,
publishes a zoo entry, warm-starts from other methods, and has a command-line face."""

from __future__ import annotations

import argparse
import json
import math
import shutil

import pytest
import torch
from PIL import Image
from torch import nn

import explorer
from explorer.models.batch import TrainingBatch, example_batch
from explorer.models.io.loading import save_method
from explorer.models.methods.base import Method
from explorer.models.methods.clip import ClipMethod, LongClipMethod
from explorer.models.nn.positional import stretch_positions
from explorer.training import (METRIC_FIELDS, BatchList, SampleLoader, TrainConfig, TrainingError, TrainingSample,
                               WarmupCosine, add_train_arguments, init_from, optimizer_groups, read_jsonl,
                               run_train_command, train)
from explorer.zoo import Manifest, Zoo
from explorer.core.errors import ExplorerError

FAST = dict(lr_backbone=1e-4, warmup_steps=2, weight_decay=0.0)


def tiny_clip() -> ClipMethod:
    return ClipMethod.example("tiny", seed=0)


def fixed_batch(model) -> TrainingBatch:
    return example_batch(model.preprocess.image_size, batch_size=4, seed=0)


def losses_of(result) -> list[float]:
    return [row["loss"] for row in result.history]


# ---- it learns, and the same seed gives the same run -----------------------------------------------


SMOKE = TrainConfig(max_steps=2, lr_backbone=3e-4, warmup_steps=2, weight_decay=0.0, name="clip-smoke", seed=7,
                    command="explorer train --method clip")


def smoke_run(out_dir):
    """Two steps of the tiny CLIP on one fixed batch; (result, trained model, loss after training)."""
    model = tiny_clip()
    batch = fixed_batch(model)
    result = train(model, BatchList([batch]), SMOKE, out_dir, progress=False)
    with torch.no_grad():
        after = float(model.losses(batch)["contrastive"])
    return result, model, after


@pytest.fixture(scope="module")
def smoke(tmp_path_factory):
    return smoke_run(tmp_path_factory.mktemp("zoo") / "runs" / "clip-smoke")


def test_two_steps_lower_the_loss_and_repeat_exactly(smoke, tmp_path):
    result, _, after = smoke
    first = result.history
    assert [row["step"] for row in first] == [1, 2] and all(math.isfinite(row["loss"]) for row in first)
    assert first[1]["loss"] < first[0]["loss"] and after < first[0]["loss"] - 0.1, (first, after)
    again, _, after_again = smoke_run(tmp_path / "again")
    assert losses_of_rows(again.history) == losses_of_rows(first) and after_again == after  # bit-identical
    # the rate each step ran at: linear warm-up over the two steps (0.5, then 1.0 of the base rate)
    assert [row["lr/backbone"] for row in first] == pytest.approx([1.5e-4, 3e-4])
    assert "lr/new" not in first[0]  # CLIP adds no modules


def losses_of_rows(rows) -> list[float]:
    return [row["loss"] for row in rows]


# ---- schedule -------------------------------------------------------------------------------------


def test_warmup_then_cosine_by_hand():
    schedule = WarmupCosine(total_steps=10, warmup_steps=4, min_ratio=0.1)
    assert [schedule(s) for s in range(4)] == [0.25, 0.5, 0.75, 1.0]
    assert schedule(4) == 1.0  # first step after warm-up: the full rate
    assert schedule(7) == pytest.approx(0.1 + 0.9 * 0.5)  # half way through the decay
    assert schedule(10) == pytest.approx(0.1)  # the end of the cosine is the floor
    assert WarmupCosine(total_steps=5)(0) == 1.0  # no warm-up
    with pytest.raises(ExplorerError):
        WarmupCosine(total_steps=3, warmup_steps=4)


# ---- optimizer groups ------------------------------------------------------------------------------


def test_weight_decay_rule_and_learning_rate_groups():
    from explorer.models.methods.finelip import FineLipMethod

    model = FineLipMethod.example("tiny", seed=0)
    groups = optimizer_groups(model, {"backbone": 1e-5, "new": 2e-4}, weight_decay=0.2)
    names = {id(p): n for n, p in model.named_parameters()}
    by_group = {g["name"]: {names[id(p)] for p in g["params"]} for g in groups}
    assert set(by_group) == {"backbone", "backbone/no_decay", "new", "new/no_decay"}
    lr = {g["name"]: (g["lr"], g["weight_decay"]) for g in groups}
    assert lr["backbone"] == (1e-5, 0.2) and lr["backbone/no_decay"] == (1e-5, 0.0)
    assert lr["new"] == (2e-4, 0.2) and lr["new/no_decay"] == (2e-4, 0.0)
    no_decay = by_group["backbone/no_decay"]
    for name in ("token_embedding.weight", "positional_embedding", "visual.positional_embedding",
                 "visual.class_embedding", "ln_final.weight", "ln_final.bias", "visual.ln_post.weight",
                 "transformer.resblocks.0.attn.in_proj_bias"):
        assert name in no_decay, name
    for name in ("transformer.resblocks.0.attn.in_proj_weight", "text_projection", "visual.proj",
                 "visual.conv1.weight", "transformer.resblocks.0.mlp.c_fc.weight"):
        assert name in by_group["backbone"], name
    assert all(n.startswith("cross_net.") for n in by_group["new"] | by_group["new/no_decay"])
    assert "logit_scale" not in set().union(*by_group.values())  # FineLIP freezes it
    clip = tiny_clip()
    clip_names = {id(p): n for n, p in clip.named_parameters()}
    clip_groups = {g["name"]: {clip_names[id(p)] for p in g["params"]}
                   for g in optimizer_groups(clip, {"backbone": 1e-5, "new": 1e-4}, 0.1)}
    assert set(clip_groups) == {"backbone", "backbone/no_decay"}  # CLIP adds no modules
    assert "logit_scale" in clip_groups["backbone/no_decay"]


# ---- gradient accumulation -------------------------------------------------------------------------


class Regression(nn.Module, Method):
    """A linear map fitted by mean squared error plus a weighted L1 term: per-sample means, no negatives."""

    name = "toy-regression"
    title = "Toy regression"
    context_length = 0
    architecture_name = "linear"

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.linear = nn.Linear(12, 3)

    def config(self) -> dict:
        return {}

    def losses(self, batch):
        prediction = self.linear(batch.pixels.flatten(1))
        target = batch.extras["target"]
        return {"mse": ((prediction - target) ** 2).mean(), "l1": 0.1 * (prediction - target).abs().mean()}


def regression_batch(x, y) -> TrainingBatch:
    return TrainingBatch(pixels=x, captions=["-"] * len(x), extras={"target": y})


def test_accumulating_two_micro_batches_equals_one_step_on_both(tmp_path):
    generator = torch.Generator().manual_seed(3)
    x = torch.randn(16, 3, 2, 2, generator=generator)
    y = torch.randn(16, 3, generator=generator)
    # two optimizer steps; micro-batches of unequal size (3 + 5) so the sample weighting matters
    whole = [regression_batch(x[:8], y[:8]), regression_batch(x[8:], y[8:])]
    split = [regression_batch(x[:3], y[:3]), regression_batch(x[3:8], y[3:8]),
             regression_batch(x[8:13], y[8:13]), regression_batch(x[13:], y[13:])]
    settings = dict(max_steps=2, lr_backbone=0.05, weight_decay=0.1, clip_grad_norm=0.5)
    one, two = Regression(), Regression()
    a = train(one, BatchList(whole), TrainConfig(accumulate=1, **settings), tmp_path / "whole", progress=False)
    b = train(two, BatchList(split), TrainConfig(accumulate=2, **settings), tmp_path / "split", progress=False)
    for row_a, row_b in zip(a.history, b.history):
        for key in ("loss", "loss/mse", "loss/l1", "grad_norm", "samples"):
            assert row_a[key] == pytest.approx(row_b[key], rel=1e-5), key
    assert a.history[0]["grad_norm"] > 0.5  # clipping was active, so the gradient's scale mattered
    for p, q in zip(one.parameters(), two.parameters()):
        torch.testing.assert_close(p, q, rtol=1e-5, atol=1e-6)


# ---- checkpoint, manifest, zoo, metrics ------------------------------------------------------------


def test_checkpoint_manifest_metrics_and_zoo(smoke):
    result, model, _ = smoke
    zoo_root = result.out_dir.parent.parent
    manifest = Manifest.read(result.manifest)
    assert (manifest.name, manifest.method, manifest.context_length) == ("clip-smoke", "clip", 77)
    assert manifest.source == "trained by explorer: explorer train --method clip"
    assert manifest.weights_path() == result.weights and manifest.trained
    loaded = explorer.load(result.manifest, device="cpu")
    assert loaded.key_report.ok, loaded.key_report.summary()
    for key, value in model.state_dict().items():
        torch.testing.assert_close(loaded.method.state_dict()[key], value, rtol=0, atol=0)
    entries = Zoo(zoo_root).entries()
    assert [(e.manifest.name, e.status.startswith("loads")) for e in entries] == [("clip-smoke", True)]

    rows = read_jsonl(result.metrics_path)
    assert [row["step"] for row in rows] == [1, 2]
    for row in rows:
        assert set(METRIC_FIELDS) <= set(row), row
        assert {"loss/contrastive", "lr/backbone"} <= set(row)
        assert row["loss"] == pytest.approx(row["loss/contrastive"])
        assert row["samples_per_s"] > 0 and row["elapsed_s"] > 0 and row["epoch"] == row["step"] - 1
    events = read_jsonl(result.run_log_path)
    assert [e["event"] for e in events] == ["start", "finish"]
    assert events[0]["seed"] == 7 and events[0]["config"]["max_steps"] == 2 and events[0]["device"] == "cpu"

    with pytest.raises(TrainingError, match="already holds a run"):  # never restarts a run silently
        train(tiny_clip(), BatchList([fixed_batch(model)]), SMOKE, result.out_dir, progress=False)


# ---- resume ----------------------------------------------------------------------------------------


def picture(i: int) -> Image.Image:
    generator = torch.Generator().manual_seed(100 + i)
    pixels = (torch.rand(40, 48, 3, generator=generator) * 255).to(torch.uint8).numpy()
    return Image.fromarray(pixels)


SAMPLES = [TrainingSample(image=picture(i), caption=f"A {c} cube sits on the left. The floor is grey.")
           for i, c in enumerate(("red", "green", "blue", "yellow", "purple", "orange"))]


def test_resume_gives_the_losses_of_an_uninterrupted_run(tmp_path):
    # 6 samples in batches of 2, shuffled per epoch: 3 steps an epoch. The run stops after step 2, so
    # the resumed run starts mid-epoch (epoch 0, batch 2) and then crosses into epoch 1.
    config = TrainConfig(max_steps=4, batch_size=2, checkpoint_every=2, keep_checkpoints=2, **FAST)
    whole_model = tiny_clip()
    whole = train(whole_model, SAMPLES, config, tmp_path / "whole", progress=False)
    assert sorted(p.name for p in (whole.out_dir / "resume").glob("step-*")) == ["step-00000002", "step-00000004"]

    with pytest.raises(TrainingError, match="Nothing to resume"):
        train(tiny_clip(), SAMPLES, config, tmp_path / "empty", resume=True, progress=False)
    # A run that stopped after its step-2 checkpoint: the same folder with LATEST still at step 2
    # (its logs run on to step 4, as a crash after logging would leave them).
    cut = tmp_path / "cut"
    shutil.copytree(whole.out_dir, cut)
    shutil.rmtree(cut / "resume" / "step-00000004")
    (cut / "resume" / "LATEST").write_text("step-00000002\n")
    fresh = ClipMethod.example("tiny", seed=123)  # other weights: they must come from the checkpoint
    resumed = train(fresh, SAMPLES, config, cut, resume=True, progress=False)

    assert resumed.resumed_from == 2 and resumed.steps == 4
    assert [(row["step"], row["epoch"]) for row in resumed.history] == [(3, 0), (4, 1)]
    assert losses_of(resumed) == losses_of(whole)[2:]
    assert [r["lr/backbone"] for r in resumed.history] == [r["lr/backbone"] for r in whole.history[2:]]
    assert [row["step"] for row in read_jsonl(resumed.metrics_path)] == [1, 2, 3, 4]  # no step logged twice
    # the resumed update used the saved optimizer and scheduler state: the final weights agree exactly
    final_whole = whole_model.state_dict()
    for key, value in fresh.state_dict().items():
        torch.testing.assert_close(value, final_whole[key], rtol=0, atol=0)
    events = [e["event"] for e in read_jsonl(resumed.run_log_path)]
    assert events == ["start", "checkpoint", "finish", "resume", "finish"]


def test_an_error_mid_run_leaves_the_last_checkpoint_and_settings_stay(tmp_path):
    model = tiny_clip()

    def stop(row):
        if row["step"] == 1:
            raise KeyboardInterrupt

    config = TrainConfig(max_steps=3, checkpoint_every=1, **FAST)
    with pytest.raises(KeyboardInterrupt):
        train(model, BatchList([fixed_batch(model)]), config, tmp_path, progress=False, on_metrics=stop)
    assert (tmp_path / "resume" / "LATEST").read_text().strip() == "step-00000001"
    assert Manifest.read(tmp_path / f"{tmp_path.name}.json").notes.startswith("in progress: step 1 of 3")
    assert explorer.load(tmp_path / f"{tmp_path.name}.json", device="cpu").key_report.ok
    with pytest.raises(TrainingError, match="lr_backbone"):  # a resumed run keeps its settings
        train(model, BatchList([fixed_batch(model)]), TrainConfig(max_steps=3, checkpoint_every=1,
                                                                  **{**FAST, "lr_backbone": 1.0}),
              tmp_path, resume=True, progress=False)


# ---- warm start ------------------------------------------------------------------------------------


def test_init_from_a_77_token_clip_stretches_for_long_clip(tmp_path):
    clip = tiny_clip()
    path = save_method(clip, tmp_path / "clip.safetensors")
    model, report = init_from("longclip", path)
    assert isinstance(model, LongClipMethod) and model.context_length == 248
    torch.testing.assert_close(model.positional_embedding.data, stretch_positions(clip.positional_embedding.data))
    torch.testing.assert_close(model.visual.conv1.weight, clip.visual.conv1.weight)
    assert set(report.from_init) == set(model.state_dict()) and not report.kept_init and not report.unused
    assert any("stretched 77 -> 248" in note for note in report.notes), report.notes
    assert "248" in report.summary() or "stretched" in report.summary()

    finelip, finelip_report = init_from("finelip", path)
    assert finelip.context_length == 248
    assert finelip_report.kept_init and all(k.startswith("cross_net.") for k in finelip_report.kept_init)
    assert "logit_scale" in finelip_report.from_init

    flair, flair_report = init_from("flair", path)  # 77 tokens, sigmoid loss: temperature starts with its bias
    assert flair.context_length == 77 and "logit_scale" in flair_report.kept_init
    assert "logit_scale" in flair_report.unused and "logit_bias" in flair_report.kept_init

    long_path = save_method(model, tmp_path / "longclip.safetensors")
    with pytest.raises(explorer.ExplorerError, match="never cut"):
        init_from("clip", long_path)
    as_long, _ = init_from("clip", long_path, context_length=248)
    assert as_long.context_length == 248

    scratch, scratch_report = init_from("clip", size="tiny", seed=0)
    assert scratch_report.from_scratch and not scratch_report.from_init
    torch.testing.assert_close(scratch.visual.conv1.weight, clip.visual.conv1.weight)


# ---- the command-line face -------------------------------------------------------------------------


def _sample_folder(root, fields):
    """``root``/samples.jsonl over SAMPLES' pictures: ``fields(i, sample)`` gives each line beside its image."""
    (root / "images").mkdir(parents=True)
    lines = []
    for i, sample in enumerate(SAMPLES):
        sample.image.save(root / "images" / f"{i}.png")
        lines.append(json.dumps({"image": f"images/{i}.png", **fields(i, sample)}))
    (root / "samples.jsonl").write_text("\n".join(lines) + "\n")
    return root


def test_train_command_on_a_sample_folder(tmp_path):
    data = _sample_folder(tmp_path / "data", lambda i, s: {"caption": s.caption, "sentences": s.caption.split(". "),
                                                           "local_box": [0, 0, 0.5, 0.5]})
    parser = add_train_arguments(argparse.ArgumentParser())
    argv = ["--method", "clip", "--data", str(data), "--out", str(tmp_path / "run"), "--max-steps", "1",
            "--batch-size", "2", "--lr-backbone", "1e-4", "--no-progress"]
    assert run_train_command(parser.parse_args(argv), argv=["train", *argv]) == 0
    manifest = Manifest.read(tmp_path / "run" / "run.json")
    assert manifest.method == "clip" and manifest.source.startswith("trained by explorer: explorer train --method")
    assert explorer.load(manifest.path, device="cpu").key_report.ok


def test_sample_loader_collates_every_field_and_refuses_half_filled_ones():
    loader = SampleLoader([*SAMPLES[:2]], tiny_clip().preprocess, batch_size=2, shuffle=False)
    batch = next(loader.batches(0))
    assert batch.pixels.shape == (2, 3, 64, 64) and batch.short_captions is None and batch.local_pixels is None
    with_local = [TrainingSample(image=s.image, caption=s.caption, local_box=(0.0, 0.0, 0.5, 0.5),
                                 local_sentence="A cube.") for s in SAMPLES[:2]]
    batch = next(SampleLoader(with_local, tiny_clip().preprocess, 2, shuffle=False).batches(0))
    assert batch.local_pixels.shape == (2, 3, 64, 64) and batch.local_boxes.tolist()[0] == [0, 0, 0.5, 0.5]
    mixed = [SAMPLES[0], TrainingSample(image=SAMPLES[1].image, caption="x", dense_caption="dense")]
    with pytest.raises(ExplorerError, match="dense_caption"):
        next(SampleLoader(mixed, tiny_clip().preprocess, 2, shuffle=False).batches(0))
    shuffled = SampleLoader(SAMPLES, tiny_clip().preprocess, 2, seed=1)
    assert shuffled.order(0) == shuffled.order(0) and shuffled.order(0) != shuffled.order(1)
    assert sorted(shuffled.order(3)) == list(range(6))


def test_a_sample_folder_carries_negative_captions_into_the_batch(tmp_path):
    """NegCLIP's negatives as data: ``negative_captions`` in samples.jsonl reach ``TrainingBatch``."""
    from explorer.training.samples import SampleFolder

    data = _sample_folder(tmp_path / "data", lambda i, s: {"caption": s.caption,
                                                           "negative_captions": [f"not {i}", f"never {i}"]})
    batch = next(SampleLoader(SampleFolder(data), tiny_clip().preprocess, 2, shuffle=False).batches(0))
    assert batch.negative_captions == [["not 0", "never 0"], ["not 1", "never 1"]]
    # a string where a list belongs would be read letter by letter: refused with the line that has it
    bad = _sample_folder(tmp_path / "bad", lambda i, s: {"caption": s.caption, "negative_captions": "not a list"})
    with pytest.raises(explorer.ExplorerError, match="line 1: \"negative_captions\" is a list"):
        SampleFolder(bad)


def test_checkpoint_minutes_writes_checkpoints_by_wall_time(tmp_path, monkeypatch):
    """A background build loses at most ``checkpoint_minutes`` of work: a checkpoint follows once that much
    wall time passed, whatever ``checkpoint_every`` says (0 here: only at the end)."""
    import explorer.training.loop as loop

    clock = iter(float(i) * 40 for i in range(10_000))  # every perf_counter call moves 40 s on
    monkeypatch.setattr(loop.time, "perf_counter", lambda: next(clock))
    model = tiny_clip()
    config = TrainConfig(max_steps=4, checkpoint_every=0, checkpoint_minutes=1.0, name="timed", **FAST)
    result = train(model, BatchList([fixed_batch(model)]), config, tmp_path / "run", progress=False)
    events = [e["event"] for e in read_jsonl(result.run_log_path)]
    assert events.count("checkpoint") >= 2 and events[-1] == "finish"
    untimed = train(tiny_clip(), BatchList([fixed_batch(model)]), TrainConfig(max_steps=4, name="untimed", **FAST),
                    tmp_path / "run2", progress=False)
    assert [e["event"] for e in read_jsonl(untimed.run_log_path)] == ["start", "finish"]
