"""A GPU run, prepared (issue 63, part 5): what this tool does on one GPU, in one script, under 8 minutes.

    python bench/gpu_check.py [--out bench/results/gpu-check] [--steps 150]

Writes ``<out>.json`` and ``<out>.md`` (a Markdown table) with, on ``cuda:0``:
  1. training: a job through the jobs runner (``JobManager.submit``, its own process, as the Jobs tab starts it)
     against a bare loop of the same model in this process (the same batches read from disk, the same AdamW
     and autocast, nothing else), and the same run under ``torchrun --nproc_per_node 1`` (``explorer train``):
     steps/s after the first ``WARMUP`` steps, and the peak GPU memory of each. The model is the demo zoo's
     base CLIP stretched to 248 tokens, CLIP's InfoNCE on the synthetic world's long captions, batch 32.
  2. the page's first Draw of four ViT-L/14 models (Long-CLIP, FineLIP, FLAIR, GOAL; random weights in their
     released layouts, ``bench/grounding_views.py --size large``'s files) in fp32, bf16 and fp16: the maps of the
     four models and the board, the first Draw (after loading) and a caption change; peak GPU memory.
  3. the evaluations' throughput: ``evaluate_model`` (retrieval, hard negatives, grounding, FLISM) of two demo
     models on the held-out synthetic world, scenes/s of each phase.
  4. SDXL conditioning (a tiny SDXL built in code, ``explorer.generation.tiny_sdxl``): a long prompt through a
     Long-CLIP tower in the text_encoder slot beside the stretched bigG, first call and warm median.
Each part is timed and its errors are recorded in the JSON, so one failure does not lose the rest; parts are
skipped once the script has run ``BUDGET_S``.

On a machine without CUDA it prints one line and exits 0. ``--device cpu --quick`` runs every part small on the
CPU (a few steps, the demo models instead of the ViT-L files): a check of the script itself, not a figure.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
BUDGET_S = 7 * 60  # parts past this are skipped: the whole script stays under 8 minutes
WARMUP = 5  # steps left out of steps/s (CUDA kernels chosen, memory pools filled)
BATCH = 32
DEMO_BASE = ROOT / "checkpoints" / "demo" / "clip-base.safetensors"
DRAW_PRECISIONS = ("fp32", "bf16", "fp16")
QUICK_DRAW = ["demo-clip-base", "demo-finelip", "demo-flair", "demo-goal"]


def no_cuda_line() -> str:
    return (f"bench/gpu_check.py: no CUDA device on this machine (torch {torch.__version__}, "
            f"torch.cuda.is_available() is False): nothing measured, nothing written.")


class Report:
    """Rows of the table (part, what, value, unit, note) and each part's seconds and error."""

    def __init__(self, device: str):
        self.device, self.rows, self.parts, self.started = device, [], {}, time.perf_counter()

    def add(self, part: str, what: str, value, unit: str = "", note: str = "") -> None:
        self.rows.append({"part": part, "what": what, "value": value, "unit": unit, "note": note})
        print(f"  {part:<10} {what:<58} {_shown(value):>10} {unit:<8} {note}", flush=True)

    def run(self, part: str, call, *args) -> None:
        spent = time.perf_counter() - self.started
        if spent > BUDGET_S and self.device == "cuda":  # the CPU check of the script runs every part
            self.parts[part] = {"skipped": f"the script had run {spent:.0f} s (budget {BUDGET_S} s)"}
            return
        print(f"{part} ...", flush=True)
        began = time.perf_counter()
        try:
            call(self, *args)
            self.parts[part] = {"seconds": round(time.perf_counter() - began, 1)}
        except Exception as error:  # noqa: BLE001 - a part that fails is recorded; the others still run
            traceback.print_exc()
            self.parts[part] = {"seconds": round(time.perf_counter() - began, 1),
                                "error": f"{type(error).__name__}: {error}"}
        finally:
            _release(self.device)

    def write(self, out: Path) -> None:
        machine = {"gpu": torch.cuda.get_device_name(0) if self.device == "cuda" else platform.processor() or "CPU",
                   "torch": torch.__version__, "cuda": torch.version.cuda, "python": platform.python_version(),
                   "cpu_threads": torch.get_num_threads(), "device": self.device,
                   "total_s": round(time.perf_counter() - self.started, 1)}
        out.parent.mkdir(parents=True, exist_ok=True)
        out.with_suffix(".json").write_text(json.dumps({"machine": machine, "parts": self.parts, "rows": self.rows},
                                                       indent=1))
        lines = [f"GPU check on {machine['gpu']} (torch {machine['torch']}, CUDA {machine['cuda']}), "
                 f"{machine['total_s']} s in all", "", "| part | what | value | unit | note |", "|---|---|---:|---|---|"]
        lines += [f"| {r['part']} | {r['what']} | {_shown(r['value'])} | {r['unit']} | {r['note']} |" for r in self.rows]
        failed = {p: v for p, v in self.parts.items() if "error" in v or "skipped" in v}
        lines += [""] + [f"- {part}: {v.get('error') or v.get('skipped')}" for part, v in failed.items()]
        out.with_suffix(".md").write_text("\n".join(lines) + "\n")
        print(f"wrote {out.with_suffix('.json')} and {out.with_suffix('.md')}")


def _shown(value) -> str:
    return f"{value:.3g}" if isinstance(value, float) else str(value)


def _release(device: str) -> None:
    import gc

    gc.collect()
    if device == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()


def peak_gb(device: str) -> float:
    return torch.cuda.max_memory_allocated() / 2**30 if device == "cuda" else float("nan")


# ---- 1. training ---------------------------------------------------------------------------------


def steps_per_s(metrics: Path) -> tuple[float, float]:
    """(steps/s after ``WARMUP`` steps, peak GPU GB) from a run's metrics.jsonl (elapsed_s per step)."""
    rows = [json.loads(line) for line in metrics.read_text().splitlines() if line.strip()]
    timed = [r for r in rows if r["step"] > WARMUP]
    if len(timed) < 2:
        raise RuntimeError(f"{metrics}: only {len(rows)} steps logged")
    rate = (len(timed) - 1) / (timed[-1]["elapsed_s"] - timed[0]["elapsed_s"])
    return rate, max((r.get("gpu_mem_gb") or 0.0) for r in rows)


def training(report: Report, args, work: Path) -> None:
    from explorer.training.demo_world import write_samples

    from explorer.data import write_dataset

    world = work / "world"
    write_dataset(world, n_scenes=4 * BATCH, seed=0, image_size=64, split_fractions=(1.0, 0.0, 0.0), n_objects=(2, 6))
    write_samples(world)
    gpus = 1 if report.device == "cuda" else 0
    job_rate, job_peak = job_run(world, work, args.steps, gpus)
    report.add("training", "job through the jobs runner (steps/s)", job_rate, "steps/s",
               f"batch {BATCH}, {args.steps} steps, demo base at 248 tokens")
    bare_rate, bare_peak = bare_loop(world, args.steps, report.device)
    report.add("training", "bare loop, same model and batches (steps/s)", bare_rate, "steps/s")
    report.add("training", "job / bare", job_rate / bare_rate, "", "target >= 0.95")
    torchrun_rate, torchrun_peak = torchrun_run(world, work, args.steps, report.device)
    report.add("training", "torchrun --nproc_per_node 1, explorer train (steps/s)", torchrun_rate, "steps/s")
    report.add("training", "peak GPU memory: job / bare / torchrun (GB)",
               f"{job_peak:.2f} / {bare_peak:.2f} / {torchrun_peak:.2f}", "GB")


def job_run(world: Path, work: Path, steps: int, gpus: int) -> tuple[float, float]:
    from explorer.jobs import JobManager

    jobs = JobManager(work / "home", zoo_root=work / "zoo", gpu_ids=[0] if gpus else [], max_running=1)
    run = jobs.submit("longclip", world, init=DEMO_BASE, max_steps=steps, gpus=gpus,
                      overrides={"batch_size": BATCH, "evaluate": False, "log_every": 1, "checkpoint_every": 0})
    done = jobs.wait(run.id, timeout=240)
    if done.status != "done":
        raise RuntimeError(f"the job ended {done.status}: {done.error} (log {done.log_path})")
    return steps_per_s(Path(done.metrics_path))


def bare_loop(world: Path, steps: int, device: str) -> tuple[float, float]:
    """zero_grad / losses / backward / clip / step on the same batches, under the job's autocast."""
    from explorer.training.loop import AMP_DTYPES, resolve_precision
    from explorer.training.optimizer import build_adamw
    from explorer.training.samples import SampleFolder, SampleLoader
    from explorer.training.warm_start import init_from

    method, _ = init_from("longclip", DEMO_BASE)
    method.to(device).train()
    precision = resolve_precision("auto", torch.device(device), [])
    optimizer = build_adamw(method, {"backbone": 1e-5, "new": 1e-4}, 0.1)
    loader = SampleLoader(SampleFolder(world), method.preprocess, BATCH)
    parameters = [p for group in optimizer.param_groups for p in group["params"]]
    scaler = torch.amp.GradScaler(device, enabled=precision == "fp16")
    times, done, epoch = [], 0, 0
    _release(device)
    while done < steps:
        for batch in loader.batches(epoch):
            start = time.perf_counter()
            optimizer.zero_grad(set_to_none=True)
            with torch.autocast(device, dtype=AMP_DTYPES[precision]) if precision in AMP_DTYPES else _nothing():
                loss = sum(method.losses(batch.to(device)).values())
            scaler.scale(loss).backward()
            scaler.unscale_(optimizer)
            torch.nn.utils.clip_grad_norm_(parameters, 1.0)
            scaler.step(optimizer)
            scaler.update()
            float(loss.detach())  # the loop reads its loss every step too (a device sync)
            times.append(time.perf_counter() - start)
            done += 1
            if done == steps:
                break
        epoch += 1
    return 1 / statistics.mean(times[WARMUP:]), peak_gb(device)


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def torchrun_run(world: Path, work: Path, steps: int, device: str) -> tuple[float, float]:
    out = work / "torchrun-run"
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "1",
               "-m", "explorer.cli", "train", "--method", "longclip", "--data", str(world), "--init", str(DEMO_BASE),
               "--out", str(out), "--max-steps", str(steps), "--batch-size", str(BATCH), "--device", device,
               "--log-every", "1", "--checkpoint-every", "0", "--no-progress"]
    threads = {"OMP_NUM_THREADS": str(torch.get_num_threads())}  # the CPU check: the count this process runs
    subprocess.run(command, check=True, timeout=240 if device == "cuda" else 1800, cwd=ROOT, capture_output=True,
                   env={**os.environ, **threads})
    return steps_per_s(out / "metrics.jsonl")


# ---- 2. the first Draw of four ViT-L/14 models -------------------------------------------------------


def draw(report: Report, args, work: Path) -> None:
    from grounding_latency import SENTENCES, picture
    from grounding_views import large_files

    from explorer.grounding.sentence_maps import MapCache
    from explorer.ui.maps_board import board_html
    from explorer.views.maps_view import compute_maps
    from explorer.views.settings import ViewSettings
    from explorer.zoo import Zoo

    files = {} if args.quick else large_files(args.large_folder)
    image = work / "kitchen.png"
    picture(768).save(image)
    caption, other = " ".join(SENTENCES[:4]), " ".join(SENTENCES[4:8]) or "A different caption."
    fp32 = None
    for precision in DRAW_PRECISIONS:
        if args.quick:  # the demo zoo's four models: the script checked, not the figure
            zoo, names = Zoo(ROOT / "checkpoints", device=report.device, precision=precision), QUICK_DRAW
        else:
            zoo = Zoo(work / f"zoo-{precision}", device=report.device, precision=precision)
            names = [zoo.add(path, name=f"{stem}-{precision}").name for stem, path in files.items()]
        began = time.perf_counter()
        for name in names:
            zoo.load(name)
        loads = time.perf_counter() - began
        settings = ViewSettings(image=str(image), caption=caption, models=names)
        cache = MapCache()
        began = time.perf_counter()
        board_html(compute_maps(zoo.load, settings, cache, truth_dir=work / "no-truth"), settings)
        first = time.perf_counter() - began
        again = ViewSettings(**{**vars(settings), "caption": other})
        began = time.perf_counter()
        board_html(compute_maps(zoo.load, again, cache, truth_dir=work / "no-truth"), again)
        change = time.perf_counter() - began
        ran = zoo.load(names[0]).precision
        fp32 = first if precision == "fp32" else fp32
        note = f"ran {ran}; loads {loads:.1f} s" + (f"; {fp32 / first:.2f}x fp32" if fp32 and precision != "fp32"
                                                   else "")
        report.add("draw", f"first Draw, 4 models, {precision} (s)", first, "s", note)
        report.add("draw", f"caption change, 4 models, {precision} (s)", change, "s")
        report.add("draw", f"peak GPU memory, {precision} (GB)", peak_gb(report.device), "GB")
        del zoo
        _release(report.device)


# ---- 3. evaluations ----------------------------------------------------------------------------------


def evaluations(report: Report, args, work: Path) -> None:
    from explorer.data import read_dataset, write_dataset
    from explorer.evaluation.runner import evaluate_model
    from explorer.zoo import Zoo

    world = work / "eval-world"
    n = 40 if args.quick else 200
    write_dataset(world, n_scenes=n, seed=1, image_size=64, split_fractions=(0.0, 0.0, 1.0), n_objects=(2, 6))
    scenes = read_dataset(world, "test")
    zoo = Zoo(ROOT / "checkpoints", device=report.device)
    for name in ("demo-clip-base", "demo-finelip"):
        model = zoo.load(name)
        result = evaluate_model(model, scenes, grounding_limit=4 if args.quick else 20, seed=0)
        seconds, counts = result["seconds"], result["counts"]
        retrieval = seconds["encode_images"] + seconds["retrieval"] + seconds["hard_negatives"]
        report.add("eval", f"{name}: retrieval + hard negatives (scenes/s)", counts["retrieval_scenes"] / retrieval,
                   "scenes/s", f"{counts['retrieval_scenes']} scenes")
        report.add("eval", f"{name}: grounding + FLISM (scenes/s)",
                   counts["grounding_scenes"] / (seconds["grounding"] + seconds["flism"]), "scenes/s",
                   f"{counts['grounding_scenes']} scenes, every map kind")
    report.add("eval", "peak GPU memory (GB)", peak_gb(report.device), "GB")


# ---- 4. SDXL conditioning ------------------------------------------------------------------------------


def sdxl(report: Report, args, work: Path) -> None:
    from explorer.generation.generate import Generator
    from explorer.generation.settings import GenerationSettings
    from explorer.generation.tiny_sdxl import build_tiny_sdxl
    from explorer.models.methods.clip import LongClipMethod
    from explorer.models.model import Model

    folder = build_tiny_sdxl(work / "sdxl-tiny")
    models = {"tiny-longclip": Model(LongClipMethod.example(seed=1), name="tiny-longclip", device=report.device)}
    generator = Generator(load_model=models.__getitem__)
    prompt = " ".join(["A small green cone stands behind a red cube on the left of a blue ball."] * 12)
    settings = GenerationSettings(prompt=prompt, models=["tiny-longclip"], seeds=[0], steps=2, size=64,
                                  guidance=5.0, sdxl=str(folder), device=report.device)
    pipe = generator.pipeline(settings)
    began = time.perf_counter()
    generator.conditioning("tiny-longclip", pipe, settings)
    first = time.perf_counter() - began
    warm = []
    for _ in range(5):
        began = time.perf_counter()
        generator.conditioning("tiny-longclip", pipe, settings)
        if report.device == "cuda":
            torch.cuda.synchronize()
        warm.append(time.perf_counter() - began)
    report.add("sdxl", "conditioning, first call (s)", first, "s", "tiny SDXL, 248-token prompt, guidance 5")
    report.add("sdxl", "conditioning, warm median (s)", statistics.median(warm), "s")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "gpu-check")
    parser.add_argument("--steps", type=int, default=150, help="optimizer steps of each training run")
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument("--quick", action="store_true", help="every part small (with --device cpu: the script "
                                                             "checked on a machine without a GPU)")
    parser.add_argument("--large-folder", type=Path, default=Path(tempfile.gettempdir()) / "explorer-bench-large")
    args = parser.parse_args(argv)
    if args.device == "cuda" and not torch.cuda.is_available():
        print(no_cuda_line())
        return 0
    if args.quick:
        args.steps = min(args.steps, WARMUP + 4)
    if args.device == "cpu":  # a check of the script: one thread, as a CPU job on a shared machine measures
        torch.set_num_threads(1)
    import explorer  # noqa: F401  (its import guard, before torchvision)

    report = Report(args.device)
    with tempfile.TemporaryDirectory(prefix="explorer-gpu-check-") as tmp:
        work = Path(tmp)
        for part, call in (("training", training), ("draw", draw), ("eval", evaluations), ("sdxl", sdxl)):
            report.run(part, call, args, work)
    report.write(args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
