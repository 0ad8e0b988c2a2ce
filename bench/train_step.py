"""What the training loop and a background job cost over bare PyTorch (a script that prints figures).

1. Loop vs bare loop, per method: the same model, losses, batch and AdamW groups; the bare loop is
   zero_grad / losses / backward / clip / step / schedule and nothing else, the library loop
   (``explorer.training.train``) adds its metrics row per step (JSONL), the ``on_metrics`` callback
   and the stop flag a job asks every step. The two run interleaved, one step each in turn (the
   bare one first on every other step), on two identical copies of the model (``paired_steps``),
   so that the load of a shared machine hits both alike; samples/s = batch / median step time
   over ``--rounds`` runs of ``--steps`` steps after ``--warmup`` warm-up steps, in wall time and
   in CPU time of the training thread (one torch thread by default: then CPU time is the work
   done, whatever else the machine runs).
   Target: loop / bare >= 0.95 (judged on CPU time; wall time is printed beside it).
2. Launch overhead of a job: ``JobManager.submit`` of a tiny CLIP run on a 12-scene synthetic world
   (CPU) until its first optimizer step is in metrics.jsonl, split into the submit call, process
   start to the worker's first line, and the worker's setup to the first step.

3. ``--profile``: where a step of the demo base goes (issue 63): the demo zoo's base CLIP (ViT width 128,
   3 layers, 64 px) stretched to 248 tokens as a long-text job starts from it, CLIP's InfoNCE on the
   synthetic world's long captions (43-160 tokens), batch 32, read from disk as a job reads it. Per phase,
   the best of ``--repeats`` (wall seconds on this machine, and CPU seconds): the data (decode and
   preprocess a batch), the towers (forward and backward of each alone; the text tower also padded to 248,
   what it cost before every path cut the padding), the loss (the whole forward and backward less the
   towers), the optimizer (zero_grad, clip, AdamW, schedule); then the whole step with torch's thread count
   and with the count a job measures (``explorer.training.threads``), alternated.

    python bench/train_step.py [--methods clip finelip] [--size tiny] [--batch 16] [--steps 60] [--rounds 4]
    python bench/train_step.py --profile [--batch 32] [--repeats 5]
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

from explorer.models.batch import example_batch
from explorer.models.methods import METHODS, discover_methods
from explorer.training.loop import TrainConfig, train
from explorer.training.optimizer import build_adamw
from explorer.training.samples import BatchList
from explorer.training.schedule import WarmupCosine, build_scheduler

TARGET = 0.95


def build(name: str, size: str, batch_size: int, seed: int = 0):
    torch.manual_seed(seed)
    method = METHODS[name].example(size, seed=seed)
    batch = example_batch(method.preprocess.image_size, batch_size=batch_size, seed=seed)
    batch.extras["chunk_generator"] = torch.Generator().manual_seed(0)  # CAFT: same chunks every step
    return method, batch


class BareStep:
    """One update with nothing else: zero_grad, losses, backward, clip, AdamW step, schedule step."""

    def __init__(self, method, batch, config: TrainConfig):
        method.train()
        self.method, self.batch, self.clip = method, batch, config.clip_grad_norm or math.inf
        self.optimizer = build_adamw(method, {"backbone": config.lr_backbone, "new": config.lr_new},
                                     config.weight_decay, betas=config.betas, eps=config.eps)
        self.scheduler = build_scheduler(self.optimizer, WarmupCosine(config.max_steps, 0, 0.0))
        self.parameters = [p for group in self.optimizer.param_groups for p in group["params"]]

    def __call__(self) -> tuple[float, float]:
        """(wall seconds, CPU seconds of this thread) of one step."""
        start, cpu = time.perf_counter(), time.thread_time()
        self.optimizer.zero_grad(set_to_none=True)
        loss = sum(self.method.losses(self.batch).values())
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.parameters, self.clip)
        self.optimizer.step()
        self.scheduler.step()
        return time.perf_counter() - start, time.thread_time() - cpu


def paired_steps(name: str, args, config: TrainConfig, out: Path) -> tuple[list[tuple], float]:
    """Library-loop steps and bare steps, interleaved one for one so that the machine's load hits both alike.

    The library loop trains one copy of the model; a bare step of a second, identical copy runs
    beside each of its steps, before it (in ``should_stop``, asked before every step) on even steps
    and after it (in ``on_metrics``) on odd ones, so neither always comes first. A loop step is
    timed from the end of one ``on_metrics`` to the start of the next (its stop check, batch,
    update, metrics row and JSONL write, checkpoint check), less the bare step run inside that
    span; a bare step around itself. Both in wall time and in CPU time of this thread (with one
    torch thread all the work is on it; CPU time does not count what other processes of a shared
    machine take). Returns [(loop wall, bare wall, loop CPU, bare CPU)] after the warm-up, and the
    wall seconds of setup + first step + final checkpoint of the library loop.
    """
    loop_model, batch = build(name, args.size, args.batch)
    bare = BareStep(build(name, args.size, args.batch)[0], batch, config)
    pairs = []
    state = {"asked": 0, "end": None, "end_cpu": None, "inside": (0.0, 0.0), "bare": (0.0, 0.0)}

    def should_stop() -> bool:  # also what a job's SIGTERM flag costs: asked before every step
        state["asked"] += 1
        if state["asked"] % 2 == 0:
            state["inside"] = state["bare"] = bare()
        return False

    def on_metrics(row: dict) -> None:
        now, cpu = time.perf_counter(), time.thread_time()
        if state["asked"] % 2 == 1:
            state["bare"] = bare()
        if state["end"] is not None and row["step"] > args.warmup:
            inside_wall, inside_cpu = state["inside"]
            pairs.append((now - state["end"] - inside_wall, state["bare"][0], cpu - state["end_cpu"] - inside_cpu,
                          state["bare"][1]))
        state["inside"] = (0.0, 0.0)
        state["end"], state["end_cpu"] = time.perf_counter(), time.thread_time()

    began = time.perf_counter()
    train(loop_model, BatchList([batch] * args.steps), config, out, progress=False, on_metrics=on_metrics,
          should_stop=should_stop)
    total = time.perf_counter() - began
    return pairs, total - sum(p[0] + p[1] for p in pairs)


def compare(name: str, args) -> dict:
    config = TrainConfig(max_steps=args.steps, batch_size=args.batch, device="cpu", precision="fp32", seed=0,
                         checkpoint_every=0, log_every=1, lr_backbone=1e-5, lr_new=1e-4)
    pairs, outside, rounds = [], [], []
    with tempfile.TemporaryDirectory() as tmp:
        for round_ in range(args.rounds):
            got, extra = paired_steps(name, args, config, Path(tmp) / f"{name}-{round_}")
            pairs += got
            outside.append(extra)
            rounds.append(round(statistics.median(p[1] for p in got) / statistics.median(p[0] for p in got), 3))
    med = [statistics.median(p[i] for p in pairs) for i in range(4)]
    return {"method": name, "bare": args.batch / med[1], "loop": args.batch / med[0], "ratio": med[1] / med[0],
            "cpu_ratio": med[3] / med[2], "bare_cpu": args.batch / med[3], "loop_cpu": args.batch / med[2],
            "outside_s": statistics.median(outside), "rounds": rounds, "steps": len(pairs)}


def launch_overhead(repeats: int) -> list[dict]:
    from explorer.data import write_dataset

    results = []
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["EXPLORER_HOME"] = str(Path(tmp) / "home")
        os.environ["EXPLORER_CHECKPOINTS"] = str(Path(tmp) / "zoo")
        from explorer.jobs import JobManager

        write_dataset(Path(tmp) / "world", 12, seed=0, image_size=64)
        jobs = JobManager(gpu_ids=[], max_running=1)
        for _ in range(repeats):
            t0 = time.time()
            run = jobs.submit("clip", Path(tmp) / "world", max_steps=2, gpus=0,
                              overrides={"size": "tiny", "batch_size": 4, "cpu_threads": 1, "evaluate": False})
            t_submitted = time.time()
            metrics = Path(run.metrics_path)
            while not (metrics.is_file() and metrics.stat().st_size > 0):
                time.sleep(0.005)
            t_first = time.time()
            done = jobs.wait(run.id, timeout=600)
            started = done.started or t_submitted
            results.append({"submit_s": t_submitted - t0, "process_start_s": started - t_submitted,
                            "setup_to_first_step_s": t_first - started, "submit_to_first_step_s": t_first - t0,
                            "status": done.status})
    return results


def demo_base_job(batch_size: int, folder: Path):
    """The demo base stretched to 248 tokens, its optimizer, and a loader over a written synthetic world."""
    from explorer.data import write_dataset
    from explorer.training.demo_world import write_samples
    from explorer.training.samples import SampleFolder, SampleLoader
    from explorer.training.warm_start import init_from

    write_dataset(folder, n_scenes=2 * batch_size, seed=0, image_size=64, split_fractions=(1.0, 0.0, 0.0),
                  n_objects=(2, 6))
    write_samples(folder)
    method, _ = init_from("longclip", Path(__file__).resolve().parents[1] / "checkpoints/demo/clip-base.safetensors")
    method.train()
    loader = SampleLoader(SampleFolder(folder), method.preprocess, batch_size, shuffle=False)
    config = TrainConfig(max_steps=10**6, batch_size=batch_size, device="cpu", precision="fp32", lr_backbone=1e-4,
                         lr_new=1e-4, clip_grad_norm=1.0)
    return method, loader, BareStep(method, next(iter(loader.batches(0))), config)


def best_of(call, repeats: int) -> tuple[float, float]:
    """(wall, CPU) seconds of the fastest of ``repeats`` calls after one warm-up; CPU is this process's."""
    call()
    runs = []
    for _ in range(repeats):
        start, cpu = time.perf_counter(), time.process_time()
        call()
        runs.append((time.perf_counter() - start, time.process_time() - cpu))
    return min(runs)


def tower_pass(encode):
    """Forward and backward of one tower alone (the gradient of a fixed weighting of its output)."""
    def run():
        output = encode()
        output.float().square().mean().backward()
    return run


def profile_step(args) -> int:
    from explorer.models.unpadded import padding_kept
    from explorer.training.threads import measure_threads

    default_threads = torch.get_num_threads()
    with tempfile.TemporaryDirectory() as tmp:
        method, loader, step = demo_base_job(args.batch, Path(tmp) / "world")
        batch = step.batch
        ids = method.tokenize(batch.captions)
        longest = max(ids.n_tokens)
        print(f"demo base at {method.context_length} tokens (ViT width {method.arch.vision_width}, "
              f"{method.arch.vision_layers} layers, {method.arch.image_size} px, {method.grid_hw[0] ** 2} patches), "
              f"batch {args.batch}, longest caption {longest} tokens; torch {torch.__version__}, "
              f"{default_threads} threads, load average {' '.join(f'{x:.1f}' for x in os.getloadavg())}")
        print("best of", args.repeats, "(wall s | CPU s); a machine shared with other work stretches the wall time")
        pixels = batch.pixels

        def losses_pass():
            sum(method.losses(batch).values()).backward()

        def padded_text():
            with padding_kept():
                return method.encode_text(ids.ids).eot

        phases = {
            "data (decode + preprocess a batch)": lambda: next(iter(loader.batches(0))),
            "tokenize the captions": lambda: method.tokenize(batch.captions),
            "image tower, forward + backward": tower_pass(lambda: method.encode_image(pixels).cls),
            "text tower, forward + backward": tower_pass(lambda: method.encode_captions(batch.captions).eot),
            "text tower padded to 248 (before)": tower_pass(padded_text),
            "whole forward + backward": losses_pass,
            "optimizer (zero_grad, clip, AdamW, schedule)": lambda: (
                step.optimizer.step(), step.scheduler.step(), step.optimizer.zero_grad(set_to_none=False)),
        }
        measured = {}
        for label, call in phases.items():
            if not label.startswith("optimizer"):  # the optimizer steps on the gradients the last pass left
                method.zero_grad(set_to_none=True)
            measured[label] = best_of(call, args.repeats)
        towers = [measured[k] for k in ("image tower, forward + backward", "text tower, forward + backward")]
        whole = measured["whole forward + backward"]
        measured["loss (whole less the towers)"] = tuple(max(0.0, whole[i] - towers[0][i] - towers[1][i])
                                                         for i in (0, 1))
        for label, (wall, cpu) in measured.items():
            print(f"  {label:<48} {wall:7.3f} | {cpu:6.3f}")

        choice = measure_threads(tuple(dict.fromkeys((default_threads, 1))))
        print(f"  {choice.line()}")

        def whole_step():
            step.batch = next(iter(loader.batches(0)))
            step()

        steps = {}
        for threads in [default_threads, choice.threads] * 2:  # alternated: the load moves under both alike
            torch.set_num_threads(threads)
            steps.setdefault(threads, []).append(best_of(whole_step, args.repeats))
        torch.set_num_threads(default_threads)
        for threads, runs in steps.items():
            wall = min(r[0] for r in runs)
            print(f"  whole step (data + update), {threads} thread(s): {wall:.2f} s wall, "
                  f"{min(r[1] for r in runs):.2f} s CPU")
    return 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--methods", nargs="+", default=["clip", "finelip"])
    parser.add_argument("--size", default="tiny", choices=("tiny", "base"))
    parser.add_argument("--batch", type=int, default=None, help="16; --profile: 32, the demo zoo's batch")
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--threads", type=int, default=1, help="torch threads (0: torch's default); 1 keeps a "
                                                                 "shared machine's other work from skewing steps")
    parser.add_argument("--launches", type=int, default=3, help="jobs timed for the launch overhead (0: skip)")
    parser.add_argument("--profile", action="store_true", help="where a step of the demo base at 248 tokens goes")
    parser.add_argument("--repeats", type=int, default=5, help="--profile: runs of each phase (the best is kept)")
    args = parser.parse_args(argv)
    args.batch = args.batch or (32 if args.profile else 16)
    if args.profile:
        return profile_step(args)
    if args.threads:
        torch.set_num_threads(args.threads)
    discover_methods()
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, CPU, load average "
          f"{' '.join(f'{x:.1f}' for x in os.getloadavg())}; size {args.size}, batch {args.batch}, "
          f"{args.steps} steps ({args.warmup} warm-up), {args.rounds} rounds")
    print("samples/s = batch / median step time; wall time, and CPU time of the training thread")
    print(f"{'method':<10} {'bare wall':>10} {'loop wall':>10} {'ratio':>6}   {'bare CPU':>9} {'loop CPU':>9} "
          f"{'ratio':>6}   wall ratio per round   setup+1st step+final ckpt")
    worst = math.inf
    for name in args.methods:
        r = compare(name, args)
        worst = min(worst, r["cpu_ratio"])
        print(f"{name:<10} {r['bare']:>10.1f} {r['loop']:>10.1f} {r['ratio']:>6.3f}   {r['bare_cpu']:>9.1f} "
              f"{r['loop_cpu']:>9.1f} {r['cpu_ratio']:>6.3f}   {r['rounds']}   {r['outside_s']:.2f} s")
    print(f"target loop/bare >= {TARGET} (CPU time): {'met' if worst >= TARGET else 'NOT met'} (worst {worst:.3f})")
    if args.launches:
        rows = launch_overhead(args.launches)
        print("job launch (tiny CLIP, 12-scene world, CPU): submit() | process start | setup -> first step | "
              "submit -> first step")
        for row in rows:
            print(f"  {row['submit_s']:.2f} s | {row['process_start_s']:.2f} s | {row['setup_to_first_step_s']:.2f} s"
                  f" | {row['submit_to_first_step_s']:.2f} s  ({row['status']})")
        print(f"median submit -> first step: {statistics.median(r['submit_to_first_step_s'] for r in rows):.2f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
