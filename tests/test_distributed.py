"""Training on many processes (DDP, 2 CPU processes with Gloo) is training on the global batch.

- the helpers of ``models.nn.distributed`` are identities in one process and offset by rank in two;
- every method's loss over a global batch split over 2 ranks (features gathered with gradients)
  equals the single-process loss of that batch: the mean over ranks of each rank's terms is the
  single-process term, and the gradients averaged over ranks (what DDP applies) are the
  single-process gradients, in float64 (terms a method computes in float32 to float32 precision);
- the loop under DDP (``training.ddp``) trains exactly as one process with the global batch: same
  logged losses, same weights; only rank 0 writes; a stop asked on one rank stops both at one step,
  rank 0 saves, and the run resumes to the weights of the uninterrupted run.
"""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from explorer.models.batch import example_batch
from explorer.models.methods import METHODS, discover_methods
from explorer.models.nn.distributed import batch_offset, gather_features, gather_with_grad, global_mean, world
from explorer.models.nn.losses import diagonal_positives
from explorer.training.ddp import shard_batch
from once import once_per_run

discover_methods()
WORLD = 2
GLOBAL_BATCH = 4
# (method, options, what the case checks); float32 terms where the method casts to float32 itself
CASES = {
    "clip": ("clip", {}),  # InfoNCE
    "longclip": ("longclip", {}),
    "goal": ("goal", {}),  # InfoNCE x 2 + TSL, a sentence missing on one rank (uneven TSL counts)
    "goal-matrix": ("goal", {"tsl_form": "matrix"}),
    "flair": ("flair", {}),  # sigmoid
    "flair-sub-captions": ("flair", {"loss_texts": "sub-captions"}),  # sigmoid, 5 texts on rank 0, 9 on rank 1
    "mulclip": ("mulclip", {}),  # sigmoid + per-image sub loss, an image without sentences
    "mulclip-sentences": ("mulclip", {"sub_loss": "sentences"}),  # + every rank's sentences as negatives
    "caft": ("caft", {}),
    "finelip": ("finelip", {}),  # hinge, hardest negatives
    "seps": ("seps", {}),  # hinge on token-level scores, caption lengths differ per rank
    "seps-dense-for-image": ("seps", {}),
    "seps-warm-up": ("seps", {"mean_violation_steps": 1}),  # the hinge summed over every negative
}
FLOAT64_CASES = {"clip", "longclip", "goal", "goal-matrix"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def build_case(key: str):
    """(model in float64, eval mode: no dropout; the global batch) of a case, the same in every process."""
    name, options = CASES[key]
    method = METHODS[name].example("tiny", seed=0, **options).double().eval()
    batch = example_batch(method.preprocess.image_size, batch_size=GLOBAL_BATCH, seed=0)
    batch.pixels, batch.local_pixels = batch.pixels.double(), batch.local_pixels.double()
    if name == "caft":  # 4 sentences for 4 chunks: the chunking draws nothing, so every process chunks alike
        batch.sentences = [(parts * 4)[:4] for parts in batch.sentences]
        batch.captions = [" ".join(parts) for parts in batch.sentences]
    if name == "goal":  # the last caption's local sentence falls past the context: no TSL text term for it
        batch.captions[3] = " ".join(["A small grey pebble lies on the sandy ground."] * 40 + [batch.captions[3]])
    if name == "mulclip":
        batch.sentences[3] = [" "]
    if key == "seps-dense-for-image":
        batch.extras["dense_for"] = "image"
    if key == "seps-warm-up":
        batch.extras["step"] = 0
    return method, batch


def losses_and_gradients(method, batch) -> tuple[dict, dict]:
    method.zero_grad(set_to_none=True)
    terms = method.losses(batch)
    sum(terms.values()).backward()
    grads = {name: (p.grad if p.grad is not None else torch.zeros_like(p)).detach().clone()
             for name, p in method.named_parameters() if p.requires_grad}
    return {k: v.detach().double() for k, v in terms.items()}, grads


def _ranks_worker(rank: int, port: int, keys: list[str], folder: str) -> None:
    """One of the 2 processes both module fixtures read: the losses of every case, then the DDP runs. One
    spawn for both: starting a process imports torch and every method (most of a fixture's time)."""
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=WORLD)
    try:
        torch.set_num_threads(1)
        _losses(rank, keys, str(Path(folder) / "losses.pt"))
        dist.barrier()
        _train(rank, str(Path(folder) / "ddp-runs"))
    finally:
        dist.destroy_process_group()


def _losses(rank: int, keys: list[str], out: str) -> None:
    checks = helper_checks(rank)
    results = {}
    for key in keys:
        method, batch = build_case(key)
        terms, grads = losses_and_gradients(method, shard_batch(batch, rank, WORLD))
        for tensor in [*terms.values(), *grads.values()]:  # DDP's average over ranks
            dist.all_reduce(tensor)
            tensor /= WORLD
        results[key] = (terms, grads)
    if rank == 0:
        torch.save({"results": results, "checks": checks}, out)


def helper_checks(rank: int) -> dict:
    """What the helpers give on each rank (gathered to compare in the test)."""
    x = (torch.arange(3.0) + 10 * rank).requires_grad_()
    gathered = gather_with_grad(x)
    (gathered * torch.arange(6.0)).sum().backward()  # rank k's loss weights global element j by j
    uneven = gather_with_grad(torch.full((rank + 1, 2), float(rank)), uneven=True)
    spread = global_mean(torch.full((2 * rank + 1,), float(rank + 1)))  # 1 value on rank 0, 3 on rank 1
    spread_sum = spread.clone()
    dist.all_reduce(spread_sum)
    mask = gather_features(torch.tensor([True, rank == 1]))
    row = torch.tensor([[world()[0], world()[1], batch_offset(3)]])
    rows = [torch.zeros_like(row) for _ in range(WORLD)]
    dist.all_gather(rows, row)
    return {"world": [r.tolist()[0] for r in rows], "gathered": gathered.tolist(), "x_grad": x.grad.tolist(),
            "uneven": uneven.tolist(), "global_mean": float(spread_sum) / WORLD, "mask": mask.tolist(),
            "positives": diagonal_positives(2, 4).tolist()}


@pytest.fixture(scope="session")
def spawned(tmp_path_factory) -> Path:
    """The folder the 2 processes of ``_ranks_worker`` wrote (the losses, then the DDP runs): once a run
    (``once.once_per_run``), not once a module or a worker: work stealing spreads this module's tests over both
    workers and interleaves them with others' (CI ran these two ranks three times, 30-38 s each)."""
    def spawn(folder: Path) -> None:
        (folder / "ddp-runs").mkdir()
        mp.spawn(_ranks_worker, args=(free_port(), list(CASES), str(folder)), nprocs=WORLD, join=True)

    return once_per_run(tmp_path_factory, "two-ranks", spawn)


@pytest.fixture(scope="module")
def two_ranks(spawned):
    return torch.load(spawned / "losses.pt", weights_only=False)


# ---- one process: the helpers are identities -------------------------------------------------


def test_the_helpers_are_identities_in_one_process():
    assert world() == (0, 1) and batch_offset(7) == 0
    x = torch.randn(3, 4, requires_grad=True)
    assert gather_with_grad(x) is x and gather_with_grad(x, uneven=True) is x and gather_features(x) is x
    values = torch.randn(5)
    assert torch.equal(global_mean(values), values.mean())
    assert torch.equal(diagonal_positives(3, 3), torch.eye(3, dtype=torch.bool))
    from explorer.models.features import TextFeatures
    from explorer.models.nn.distributed import same_token_length

    text = TextFeatures(eot=torch.randn(2, 4), tokens=torch.randn(2, 5, 4), mask=torch.ones(2, 5, dtype=torch.bool))
    assert same_token_length(text) is text  # (two ranks: the SEPS case pads through it, test below)


# ---- two processes ------------------------------------------------------------------------------


@pytest.mark.slow(reason="two gloo ranks in child processes (the two_ranks fixture starts them)")
def test_targets_are_offset_by_rank_and_gathers_carry_gradients(two_ranks):
    checks = two_ranks["checks"]  # rank 0's view, and rank 0's and rank 1's answers where gathered
    assert checks["world"] == [[0, 2, 0], [1, 2, 3]]  # (rank, world, offset of a local batch of 3)
    assert checks["gathered"] == [0, 1, 2, 10, 11, 12]
    # both ranks' losses weight global element j by j; rank 0's slice is elements 0..2: 2 * (0, 1, 2)
    assert checks["x_grad"] == [0.0, 2.0, 4.0]
    assert checks["uneven"] == [[0, 0], [1, 1], [1, 1]]
    assert checks["global_mean"] == pytest.approx((1 * 1 + 3 * 2) / 4)  # mean over the 4 values of both ranks
    assert checks["mask"] == [True, False, True, True]
    assert checks["positives"] == [[True, False, False, False], [False, True, False, False]]  # rank 0: cols 0, 1


@pytest.mark.slow
@pytest.mark.parametrize("key", list(CASES))
def test_the_gathered_loss_and_its_gradients_are_the_single_process_ones(two_ranks, key):
    method, batch = build_case(key)
    terms, grads = losses_and_gradients(method, batch)  # one process, the whole global batch
    dist_terms, dist_grads = two_ranks["results"][key]
    tight = key in FLOAT64_CASES
    assert set(dist_terms) == set(terms)
    for name, value in terms.items():
        torch.testing.assert_close(dist_terms[name], value, rtol=1e-10 if tight else 1e-5,
                                   atol=1e-12 if tight else 1e-6, msg=f"{key}: term {name}")
    scale = max(float(g.abs().max()) for g in grads.values())
    assert scale > 0
    for name, grad in grads.items():
        torch.testing.assert_close(dist_grads[name], grad, rtol=1e-8 if tight else 1e-4,
                                   atol=(1e-11 if tight else 1e-6) * scale, msg=f"{key}: gradient of {name}")


# ---- the training loop under DDP ----------------------------------------------------------------

LOOP = dict(max_steps=4, accumulate=2, lr_backbone=1e-3, lr_new=1e-3, weight_decay=0.1, warmup_steps=1, seed=0,
            device="cpu", precision="fp32", clip_grad_norm=1.0, shuffle=False, checkpoint_every=0)


def global_batches() -> list:
    """4 global batches of 4 samples (float64): 2 optimizer steps per epoch with accumulate=2."""
    size = METHODS["clip"].example("tiny").preprocess.image_size
    batches = [example_batch(size, batch_size=GLOBAL_BATCH, seed=seed) for seed in range(4)]
    for batch in batches:
        batch.pixels = batch.pixels.double()
    return batches


def tiny_clip():
    return METHODS["clip"].example("tiny", seed=0).double()


def weights(method) -> dict:
    return {k: v.detach().clone() for k, v in method.state_dict().items()}


def _train(rank: int, folder: str) -> None:
    """The loop under DDP (in ``_ranks_worker``'s process group): a whole run, a stopped one, its resume."""
    from explorer.training.loop import TrainConfig, train
    from explorer.training.samples import BatchList

    folder = Path(folder)
    out = {}
    method = tiny_clip()
    result = train(method, BatchList(global_batches()), TrainConfig(**LOOP), folder / "ddp", progress=False)
    out["run"] = {"losses": [row["loss"] for row in result.history], "samples": result.history[-1]["samples"],
                  "weights": weights(method), "rank": result.rank, "world": result.world_size}
    asked = []

    def should_stop():  # rank 1 alone asks, before the third step
        asked.append(1)
        return rank == 1 and len(asked) >= 3

    method = tiny_clip()
    result = train(method, BatchList(global_batches()), TrainConfig(**LOOP), folder / "stopped", progress=False,
                   should_stop=should_stop)
    out["stopped"] = {"steps": result.steps, "stopped": result.stopped}
    method = tiny_clip()
    result = train(method, BatchList(global_batches()), TrainConfig(**LOOP), folder / "stopped", progress=False,
                   resume=True)
    out["resumed"] = {"steps": result.steps, "weights": weights(method)}
    torch.save(out, folder / f"rank{rank}.pt")


@pytest.fixture(scope="module")
def ddp_runs(spawned):
    folder = spawned / "ddp-runs"
    return folder, [torch.load(folder / f"rank{r}.pt", weights_only=False) for r in range(WORLD)]


@pytest.mark.slow
def test_ddp_training_is_single_process_training_on_the_global_batch(ddp_runs, tmp_path):
    from explorer.training.loop import TrainConfig, train
    from explorer.training.samples import BatchList

    folder, ranks = ddp_runs
    method = tiny_clip()
    single = train(method, BatchList(global_batches()), TrainConfig(**LOOP), tmp_path / "single", progress=False)
    run0, run1 = ranks[0]["run"], ranks[1]["run"]
    assert (run0["rank"], run1["rank"], run0["world"]) == (0, 1, WORLD)
    assert run0["losses"] == pytest.approx([row["loss"] for row in single.history], rel=1e-10)
    assert run1["losses"] == run0["losses"]  # the logged loss is the global one on every rank
    assert run0["samples"] == single.history[-1]["samples"] == 4 * 2 * GLOBAL_BATCH
    for name, value in weights(method).items():
        torch.testing.assert_close(run0["weights"][name], value, rtol=1e-9, atol=1e-11, msg=name)
        assert torch.equal(run0["weights"][name], run1["weights"][name]), name  # DDP keeps the ranks equal
    # rank 0 alone wrote: one start event, one metrics row per step, the checkpoint of the end
    events = [json.loads(line)["event"] for line in (folder / "ddp" / "run.jsonl").read_text().splitlines()]
    assert events == ["start", "ddp", "finish"]
    assert len((folder / "ddp" / "metrics.jsonl").read_text().splitlines()) == LOOP["max_steps"]
    ddp_event = json.loads((folder / "ddp" / "run.jsonl").read_text().splitlines()[1])
    assert ddp_event["world_size"] == WORLD and ddp_event["find_unused_parameters"] is False


@pytest.mark.slow
def test_a_stop_on_one_rank_stops_both_at_one_step_and_the_run_resumes(ddp_runs):
    from explorer.training.checkpointing import latest_checkpoint

    folder, ranks = ddp_runs
    assert [r["stopped"] for r in ranks] == [{"steps": 2, "stopped": True}] * WORLD
    events = [json.loads(line) for line in (folder / "stopped" / "run.jsonl").read_text().splitlines()]
    assert [e["event"] for e in events] == ["start", "ddp", "checkpoint", "stop", "resume", "ddp", "finish"]
    assert latest_checkpoint(folder / "stopped").name == "step-00000004"
    for rank in ranks:
        assert rank["resumed"]["steps"] == LOOP["max_steps"]
        for name, value in ranks[0]["run"]["weights"].items():
            torch.testing.assert_close(rank["resumed"]["weights"][name], value, rtol=1e-12, atol=1e-14, msg=name)


@pytest.mark.slow
def test_a_ddp_run_resumes_only_with_its_world_size(ddp_runs, tmp_path):
    from explorer.training.loop import TrainConfig, TrainingError, train
    from explorer.training.samples import BatchList

    folder, _ = ddp_runs
    with pytest.raises(TrainingError, match="2 process"):
        train(tiny_clip(), BatchList(global_batches()), TrainConfig(**LOOP), folder / "ddp",
              resume=True, progress=False)


def test_each_rank_takes_its_slice_of_the_global_batches():
    from PIL import Image

    from explorer.training.ddp import RankSampleLoader
    from explorer.training.samples import SampleLoader, TrainingSample

    samples = [TrainingSample(image=Image.new("RGB", (8, 8), (i, 0, 0)), caption=f"caption {i}") for i in range(11)]
    preprocess = METHODS["clip"].example("tiny").preprocess
    whole = SampleLoader(samples, preprocess, batch_size=4, seed=3)
    parts = [RankSampleLoader(samples, preprocess, 2, rank=r, world=2, seed=3) for r in range(2)]
    assert len(parts[0]) == len(whole) == 2  # the epoch of the global batch size
    for epoch in range(3):
        joined = [a + b for a, b in zip(*(p.index_batches(epoch) for p in parts))]
        assert joined == whole.index_batches(epoch)
    batch = example_batch(preprocess.image_size, batch_size=4, seed=0)
    half = shard_batch(batch, 1, 2)
    assert half.captions == batch.captions[2:] and half.sentences == batch.sentences[2:]
    assert torch.equal(half.pixels, batch.pixels[2:]) and torch.equal(half.local_boxes, batch.local_boxes[2:])
    with pytest.raises(ValueError, match="equal slices"):
        shard_batch(batch, 0, 3)


@pytest.mark.slow
def test_explorer_train_under_torchrun_on_two_cpu_processes(tmp_path):
    """The command line as torchrun starts it: 2 processes, Gloo, one finished run with one checkpoint."""
    import subprocess
    import sys

    from PIL import Image

    from explorer.training.checkpointing import latest_checkpoint

    data = tmp_path / "data"
    (data / "images").mkdir(parents=True)
    lines = []
    for i, colour in enumerate(("red", "green", "blue", "yellow", "purple", "orange", "white", "black")):
        Image.new("RGB", (40, 48), (30 * i, 255 - 30 * i, 90)).save(data / "images" / f"{i}.png")
        lines.append(json.dumps({"image": f"images/{i}.png", "caption": f"A {colour} cube sits on the left."}))
    (data / "samples.jsonl").write_text("\n".join(lines) + "\n")
    out = tmp_path / "run"
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", str(WORLD),
               "-m", "explorer.cli", "train", "--method", "clip", "--data", str(data), "--out", str(out),
               "--max-steps", "2", "--batch-size", "2", "--device", "cpu", "--no-progress"]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    done = subprocess.run(command, capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert latest_checkpoint(out).name == "step-00000002"
    assert [p.name for p in (out / "resume").iterdir() if p.is_dir()] == ["step-00000002"]
    assert (out / "model.safetensors").is_file() and (out / "run.json").is_file()
    events = [json.loads(line) for line in (out / "run.jsonl").read_text().splitlines()]
    assert [e["event"] for e in events] == ["start", "ddp", "finish"]
    assert events[0]["world_size"] == WORLD and events[1]["backend"] == "gloo"
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [row["samples"] for row in rows] == [4, 8]  # 2 per rank, 4 per step
