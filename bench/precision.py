"""Inference precision (issue 50): fp32 against "auto", per method and map kind, in one run.

    python bench/precision.py                        # everything (about 30 min on a 2-core VM)
    python bench/precision.py --quick                # a smoke run: two demo models, ViT-B/16 CLIP, no ViT-L
    python bench/precision.py --parts demo retrieval # some parts only

"auto" is what ``explorer.models.precision.resolve_precision`` picks on this machine (bf16 on a CPU with
native bf16, i.e. AMX or avx512_bf16 as oneDNN reports it; fp32 elsewhere, and then every ratio is ~1).
CPU, torch's default thread count. Parts:

1. ``demo``: every model of checkpoints/demo, every map kind it offers (``model.map_kinds``: generic,
   native kinds and their per-head views, and the explainers gradcam, legrad, clearclip, naclip), on the
   four synthetic examples ``assets/synthetic-test-00000*.png`` with all the sentences of their .txt
   captions (``split_sentences``). Each model is loaded twice from its manifest
   (``explorer.load(path, precision="fp32" | "auto")``).
2. ``random``: ViT-B/16 and ViT-L/14 sizes with random weights (``get_method(name).example(size, seed=0)``)
   for clip, longclip, finelip, flair, goal; the method is built once and deep-copied for each precision, so
   both hold the same weights. The same four pictures, the first ``--sentences`` (4) sentences of each caption.
3. ``memory``: the resident memory of loaded ViT-L/14 models: one fresh subprocess per precision loads
   Long-CLIP, FineLIP, FLAIR and GOAL (random weights in each method's released layout, written once to
   ``--folder``, as bench/grounding_views.py --size large does) through ``explorer.load(file, precision=)``;
   each model's share is the growth of VmRSS across its load (after ``malloc_trim``), and VmHWM is the
   process's peak. Parameter bytes are counted too.
4. ``retrieval``: the scores' rank agreement on the held-out synthetic world ``explorer eval`` scores on
   (seed 1, its test split, the first ``--retrieval-limit`` scenes): long-caption R@1 both ways, fp32 vs
   auto, every pair scored as ``explorer eval`` and ``explorer eval-retrieval`` score them
   (``evaluation.runner.encode_images`` + ``score_captions``), the share of queries whose top-1 is the
   same, and the throughput of those two stages (images/s, captions/s). ``--eval-models``: also a whole
   ``evaluate_model`` (retrieval, hard negatives, grounding of every kind, FLISM) on ``--eval-limit`` scenes
   (grounding on the first ``--eval-grounding`` of them), fp32 vs auto, as scenes/s.

Per (model, kind), over ``--runs`` runs, fp32 and auto interleaved (the order swapped every run, so that a
change in the machine's load hits both) after one untimed warm-up each; run r draws picture r mod 4:
- time: median of the runs of ``model.sentence_maps(picture, sentences, kind)`` with the maps up-sampled to
  the picture (``.maps``), the picture's cached image features dropped first (a first Draw on a picture);
  and for the kinds that reuse a picture's features (not the explainers) the median of a caption change:
  the same call with the other sentences of the caption right after it;
- peak memory: resident memory (VmHWM of /proc/self/status, reset through /proc/self/clear_refs after
  ``malloc_trim``) above the resident size at the call's start, the largest over the runs. Not
  tracemalloc, which does not see torch's allocations; torch's CPU allocator keeps no statistics;
- fidelity, per sentence (each picture once): IoU of the Otsu masks (``grounding.masks.otsu_masks``) of
  the auto map and the fp32 map at picture size, and whether the peak (argmax over the patch grid) is the
  same cell; median and minimum per kind. Two empty masks count as IoU 1.

Writes --out (bench/results/precision-cpu.json), and its markdown tables beside it (.md) and on the screen.
Targets (each a ratio to fp32 in this run): a ViT-L/14 Grad-CAM request with 4 sentences >= 3x faster
(CLIP's is the headline; every method's is listed); four ViT-L/14 loaded in <= 55 % of fp32's resident
memory; every kind's median IoU >= 0.95 (a kind below runs in fp32 under "auto"). On a shared machine the
speed-up of the fastest run of each precision is printed beside the medians' (the least contended cost).
"""

from __future__ import annotations

import argparse
import copy
import datetime
import gc
import json
import os
import platform
import statistics
import subprocess
import sys
import time
import traceback
from pathlib import Path

import numpy as np
import torch
from PIL import Image

import explorer
from explorer.core.runtime import release_freed_memory
from explorer.core.sentences import split_sentences
from explorer.grounding.masks import otsu_masks
from explorer.models import model as model_module
from explorer.models.methods import get_method
from explorer.models.precision import cpu_has_native_bf16, resolve_precision

ROOT = Path(__file__).resolve().parent.parent
PICTURES = sorted((ROOT / "assets").glob("synthetic-test-00000*.png"))
DEMO = ROOT / "checkpoints" / "demo"
RANDOM_METHODS = ("clip", "longclip", "finelip", "flair", "goal")
PRECISIONS = ("fp32", "auto")
TARGET_GRADCAM_SPEEDUP = 3.0
TARGET_MEMORY_SHARE = 0.55
TARGET_IOU = 0.95


# ---- memory -------------------------------------------------------------------------------------------


def status_kb(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise KeyError(field)


def reset_peak() -> int:
    """Give freed heap back, reset VmHWM to the current resident size; returns that size (kB)."""
    gc.collect()
    release_freed_memory()
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        pass
    return status_kb("VmRSS")


def parameter_bytes(model) -> int:
    tensors = list(model.method.parameters()) + list(model.method.buffers())
    return sum(t.numel() * t.element_size() for t in tensors)


# ---- one kind, fp32 against auto ----------------------------------------------------------------------


def forget_picture_features() -> None:
    cache = getattr(model_module, "PICTURE_FEATURES", None)
    if cache is not None:
        cache.clear()


def request(model, picture, sentences, kind):
    """(seconds, peak MB above the start, SentenceMaps) of a first request on ``picture``."""
    forget_picture_features()
    start_kb = reset_peak()
    began = time.perf_counter()
    out = model.sentence_maps(picture, sentences, kind)
    out.maps  # noqa: B018  (the up-sampling to the picture is part of the request)
    seconds = time.perf_counter() - began
    return seconds, max(0, status_kb("VmHWM") - start_kb) / 1024, out


def caption_change(model, picture, sentences, kind) -> float:
    began = time.perf_counter()
    model.sentence_maps(picture, sentences, kind).maps  # noqa: B018
    return time.perf_counter() - began


def compare_kind(models: dict, kind: str, examples: list, runs: int, reuses_features: bool) -> dict:
    """fp32 against auto on one kind: the row of the module docstring."""
    times = {p: [] for p in PRECISIONS}
    changes = {p: [] for p in PRECISIONS}
    peaks = {p: 0.0 for p in PRECISIONS}
    ious, peaks_equal = [], []
    picture, sentences, _ = examples[0]
    for p in PRECISIONS:  # warm-up: oneDNN builds its kernels on a shape's first call
        models[p].sentence_maps(picture, sentences[:1], kind)
    seen = set()
    for run in range(runs):
        index = run % len(examples)
        picture, sentences, others = examples[index]
        maps = {}
        for p in (PRECISIONS if run % 2 == 0 else PRECISIONS[::-1]):
            seconds, peak, out = request(models[p], picture, sentences, kind)
            times[p].append(seconds)
            peaks[p] = max(peaks[p], peak)
            maps[p] = out
            if reuses_features and others:
                changes[p].append(caption_change(models[p], picture, others, kind))
        if index in seen:
            continue
        seen.add(index)
        reference, low = maps["fp32"], maps["auto"]
        masks_a, _ = otsu_masks(reference.maps)
        masks_b, _ = otsu_masks(low.maps)
        for a, b, grid_a, grid_b in zip(masks_a, masks_b, reference.grid, low.grid):
            union = int((a | b).sum())
            ious.append(1.0 if union == 0 else int((a & b).sum()) / union)
            peaks_equal.append(bool(np.argmax(grid_a) == np.argmax(grid_b)))
    row = {"kind": kind, "explainer": not reuses_features, "runs": runs,
           "fp32_s": statistics.median(times["fp32"]), "auto_s": statistics.median(times["auto"]),
           "fp32_peak_mb": round(peaks["fp32"], 1), "auto_peak_mb": round(peaks["auto"], 1),
           "iou_median": float(np.median(ious)), "iou_min": float(np.min(ious)),
           "peaks_equal": int(sum(peaks_equal)), "sentences": len(ious),
           "fp32_times": times["fp32"], "auto_times": times["auto"]}
    row["speedup"] = row["fp32_s"] / row["auto_s"]
    row["speedup_of_minima"] = min(times["fp32"]) / min(times["auto"])  # the least contended run of each
    if changes["fp32"]:
        row["fp32_caption_change_s"] = statistics.median(changes["fp32"])
        row["auto_caption_change_s"] = statistics.median(changes["auto"])
    return row


def compare_model(models: dict, label: dict, examples: list, runs: int, kinds=None, log=print) -> list[dict]:
    rows = []
    for kind in kinds or models["fp32"].map_kinds:
        began = time.perf_counter()
        try:
            reuses = kind not in models["fp32"].method.explainer_kinds
            row = compare_kind(models, kind, examples, runs, reuses_features=reuses)
        except Exception as error:  # one kind's failure is a result too, and the others go on
            row = {"kind": kind, "error": f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}"}
            traceback.print_exc(limit=3)
        row = {**label, **row}
        rows.append(row)
        log(line(row) + f"   [{time.perf_counter() - began:.0f} s]")
    return rows


def line(row: dict) -> str:
    name = f"{row['model']} {row.get('size', '')}".strip()
    if "error" in row:
        return f"  {name:22s} {row['kind']:24s} ERROR {row['error']}"
    return (f"  {name:22s} {row['kind']:24s} fp32 {row['fp32_s']:7.3f} s  auto {row['auto_s']:7.3f} s  "
            f"x{row['speedup']:5.2f}  peak {row['fp32_peak_mb']:7.1f} / {row['auto_peak_mb']:7.1f} MB  "
            f"IoU med {row['iou_median']:.3f} min {row['iou_min']:.3f}  peaks {row['peaks_equal']}/{row['sentences']}")


# ---- the parts ----------------------------------------------------------------------------------------


def read_examples(n_sentences: int | None) -> list:
    """[(picture, sentences, the caption's other sentences)] of the synthetic examples."""
    examples = []
    for path in PICTURES:
        sentences = split_sentences(path.with_suffix(".txt").read_text())
        chosen = sentences if n_sentences is None else sentences[:n_sentences]
        others = sentences[len(chosen):] or sentences[::-1]
        examples.append((Image.open(path).convert("RGB"), chosen, others))
    return examples


def auto_label(model) -> dict:
    """What "auto" chose for a model: its precision (fp32 for a method it keeps wholly in fp32), the format its
    weights are held in, the kinds whose own head computes in fp32."""
    return {"auto_precision": model.precision, "auto_weights": model.weights_precision,
            "auto_fp32_heads": sorted(model.fp32_heads)}


def demo_part(args, log) -> list[dict]:
    examples = read_examples(None)
    rows = []
    manifests = sorted(DEMO.glob("*.json"))
    if args.quick:
        manifests = [m for m in manifests if m.stem in ("clip-base", "flair")]
    for manifest in manifests:
        models = {p: explorer.load(manifest, device="cpu", precision=p) for p in PRECISIONS}
        label = {"group": "demo", "model": f"demo-{manifest.stem}", "method": models["fp32"].method_name,
                 "size": "demo", **auto_label(models["auto"]),
                 "param_mb": {p: round(parameter_bytes(m) / 2**20, 2) for p, m in models.items()}}
        rows += compare_model(models, label, examples, args.runs, log=log)
        del models
    return rows


def random_part(args, log) -> list[dict]:
    examples = read_examples(args.sentences)
    rows = []
    sizes = ("base",) if args.quick or args.no_large else args.sizes
    methods = ("clip",) if args.quick else args.methods
    for size in sizes:
        for name in methods:
            method = get_method(name).example(size, seed=0)
            models = {p: explorer.Model(copy.deepcopy(method), name=f"{name}-{size}-random", device="cpu",
                                        precision=p) for p in PRECISIONS}
            del method
            label = {"group": "random", "model": name, "method": name,
                     "size": {"base": "ViT-B/16", "large": "ViT-L/14"}[size],
                     **auto_label(models["auto"]),
                     "param_mb": {p: round(parameter_bytes(m) / 2**20, 1) for p, m in models.items()}}
            runs = args.large_runs if size == "large" else args.runs
            kinds = [k for k in models["fp32"].map_kinds if not args.kinds or k in args.kinds]
            rows += compare_model(models, label, examples, runs, kinds=kinds, log=log)
            del models
            gc.collect()
    return rows


def large_files(folder: Path) -> dict[str, Path]:
    """The four ViT-L/14 files of bench/grounding_views.py --size large (written once, shared with it)."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from grounding_views import large_files as written

    return written(folder)


def memory_child(precision: str, files: list[str]) -> None:
    """In a fresh process: load each file in turn, print a JSON line of what each added.

    ``explorer.load`` may map a file's tensors from disk (mmap) and then nothing is resident until a request
    reads them; so each model's weights are all read once (``tensor.sum()``, what a first request does to
    them) before its resident size is taken. ``after_load_mb`` is the size before that read."""
    baseline = reset_peak()
    out = {"precision": precision, "baseline_mb": baseline / 1024, "models": []}
    held = []
    for file in files:
        before = reset_peak()
        began = time.perf_counter()
        name = Path(file).stem.split("-")[0]
        model = explorer.load(file, device="cpu", precision=precision, method=name)
        seconds = time.perf_counter() - began
        load_peak = status_kb("VmHWM")
        loaded = reset_peak()
        began = time.perf_counter()
        with torch.no_grad():
            for tensor in [*model.method.parameters(), *model.method.buffers()]:
                tensor.sum()
        read_s = time.perf_counter() - began
        peak = status_kb("VmHWM")
        after = reset_peak()
        held.append(model)
        out["models"].append({"file": Path(file).name, "method": model.method_name, "precision": model.precision,
                              "load_s": round(seconds, 2), "read_s": round(read_s, 2),
                              "after_load_mb": (loaded - before) / 1024,
                              "resident_mb": (after - before) / 1024, "load_peak_mb": (load_peak - before) / 1024,
                              "read_peak_mb": (peak - before) / 1024,
                              "param_mb": parameter_bytes(model) / 2**20})
    out["resident_mb"] = (reset_peak() - baseline) / 1024
    out["rss_anon_mb"], out["rss_file_mb"] = status_kb("RssAnon") / 1024, status_kb("RssFile") / 1024
    print("MEMORY " + json.dumps(out), flush=True)


def memory_part(args, log) -> dict:
    files = large_files(args.folder)
    results = {}
    for precision in PRECISIONS:
        command = [sys.executable, __file__, "--memory-child", precision, *map(str, files.values())]
        done = subprocess.run(command, capture_output=True, text=True, check=False)
        found = [ln for ln in done.stdout.splitlines() if ln.startswith("MEMORY ")]
        if done.returncode or not found:
            results[precision] = {"error": (done.stderr or done.stdout)[-2000:]}
            log(f"  memory {precision}: failed\n{done.stderr[-2000:]}")
            continue
        results[precision] = json.loads(found[0][len("MEMORY "):])
        log(f"  memory {precision}: four ViT-L/14 resident {results[precision]['resident_mb']:.0f} MB "
            + ", ".join(f"{m['method']} {m['resident_mb']:.0f} MB (after load {m['after_load_mb']:.0f}, load peak "
                        f"{m['load_peak_mb']:.0f}, load {m['load_s']:.1f} s)"
                        for m in results[precision]["models"]))
    if all("resident_mb" in results.get(p, {}) for p in PRECISIONS):
        results["share"] = results["auto"]["resident_mb"] / results["fp32"]["resident_mb"]
        results["per_model_share"] = {
            a["method"]: a["resident_mb"] / b["resident_mb"]
            for a, b in zip(results["auto"]["models"], results["fp32"]["models"])}
    return results


def retrieval_part(args, log) -> dict:
    from explorer.core import paths
    from explorer.data import read_dataset
    from explorer.evaluation.metrics.retrieval import recall_at_k
    from explorer.evaluation.runner import encode_images, evaluate_model, score_captions
    from explorer.training.demo_world import write_eval_world

    data = write_eval_world(paths.demo_build_dir(), lambda _: None)
    scenes = read_dataset(data, "test")
    chosen = scenes[:args.retrieval_limit]
    images, captions = [s.image for s in chosen], [s.long_caption for s in chosen]
    rows = []
    manifests = sorted(DEMO.glob("*.json"))
    if args.quick:
        manifests = [m for m in manifests if m.stem in ("clip-base", "flair")]
    for manifest in manifests:
        models = {p: explorer.load(manifest, device="cpu", precision=p) for p in PRECISIONS}
        row = {"model": f"demo-{manifest.stem}", "method": models["fp32"].method_name, "scenes": len(chosen)}
        try:
            scores, encode_s, score_s = {}, {p: [] for p in PRECISIONS}, {p: [] for p in PRECISIONS}
            for run in range(args.retrieval_runs):
                for p in (PRECISIONS if run % 2 == 0 else PRECISIONS[::-1]):
                    began = time.perf_counter()
                    features = encode_images(models[p], images)
                    encode_s[p].append(time.perf_counter() - began)
                    began = time.perf_counter()
                    scores[p] = score_captions(models[p], features, captions)
                    score_s[p].append(time.perf_counter() - began)
            for p in PRECISIONS:
                recall = recall_at_k(scores[p], ks=(1,))
                row[f"{p}_t2i_R@1"] = recall.text_to_image[1]
                row[f"{p}_i2t_R@1"] = recall.image_to_text[1]
                row[f"{p}_images_per_s"] = len(images) / statistics.median(encode_s[p])
                row[f"{p}_captions_per_s"] = len(captions) / statistics.median(score_s[p])
            row["t2i_top1_same"] = float((scores["fp32"].argmax(0) == scores["auto"].argmax(0)).float().mean())
            row["i2t_top1_same"] = float((scores["fp32"].argmax(1) == scores["auto"].argmax(1)).float().mean())
            row["max_points_off"] = 100 * max(abs(row["fp32_t2i_R@1"] - row["auto_t2i_R@1"]),
                                              abs(row["fp32_i2t_R@1"] - row["auto_i2t_R@1"]))
            log(f"  {row['model']:22s} R@1 t2i {row['fp32_t2i_R@1']:.3f} / {row['auto_t2i_R@1']:.3f}  "
                f"i2t {row['fp32_i2t_R@1']:.3f} / {row['auto_i2t_R@1']:.3f}  top-1 same {row['t2i_top1_same']:.3f}"
                f" / {row['i2t_top1_same']:.3f}  images/s {row['fp32_images_per_s']:.0f} / "
                f"{row['auto_images_per_s']:.0f}  captions/s {row['fp32_captions_per_s']:.0f} / "
                f"{row['auto_captions_per_s']:.0f}")
        except Exception as error:
            row["error"] = f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}"
            log(f"  {row['model']:22s} ERROR {row['error']}")
        rows.append(row)
    evals = []
    eval_scenes = scenes[:args.eval_limit]
    for name in ([] if args.quick else args.eval_models):
        models = {p: explorer.load(DEMO / f"{name}.json", device="cpu", precision=p) for p in PRECISIONS}
        row = {"model": f"demo-{name}", "scenes": len(eval_scenes), "grounding_scenes": args.eval_grounding}
        for p in PRECISIONS:
            try:
                result = evaluate_model(models[p], eval_scenes, grounding_limit=args.eval_grounding)
                row[f"{p}_seconds"] = result["seconds"]
                row[f"{p}_scenes_per_s"] = len(eval_scenes) / result["seconds"]["total"]
            except Exception as error:
                row[f"{p}_error"] = f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}"
        log(f"  evaluate_model {name}: " + json.dumps({k: v for k, v in row.items() if "per_s" in k or "error" in k}))
        evals.append(row)
    return {"data": str(data), "split": "test", "scenes": len(chosen), "runs": args.retrieval_runs,
            "models": rows, "evaluate_model": evals}


# ---- report -------------------------------------------------------------------------------------------


def machine() -> dict:
    flags, name = set(), ""
    try:
        for ln in Path("/proc/cpuinfo").read_text().splitlines():
            if ln.startswith("flags") and not flags:
                flags = set(ln.split(":", 1)[1].split())
            if ln.startswith("model name") and not name:
                name = ln.split(":", 1)[1].strip()
    except OSError:
        pass
    return {"cpu": name or platform.processor(), "cpus": os.cpu_count(), "torch_threads": torch.get_num_threads(),
            "bf16_flags": sorted(f for f in flags if "bf16" in f or f.startswith("amx")),
            "cpu_has_native_bf16": cpu_has_native_bf16(),
            "auto_resolves_to": resolve_precision("auto", torch.device("cpu"))[0],
            "torch": torch.__version__, "python": platform.python_version(),
            "date": datetime.date.today().isoformat(), "commit": _commit()}


def ceiling(runs: int = 5) -> dict:
    """What this machine's low format can give at best, fp32 against auto: one ViT-L/14 MLP-sized matrix product
    ([257, 1024] x [1024, 4096]) and a ViT-L/14 image tower alone (random weights, 224 px; under auto its
    weights in the low format), inference only.
    A request's speed-up is bounded by these (AMX Xeons reach ~8x on the tower; avx512_bf16 alone ~2x)."""
    chosen, _ = resolve_precision("auto", torch.device("cpu"))
    low = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(chosen)
    if low is None:
        return {"auto": chosen}

    def best(function) -> float:
        function()
        times = []
        for _ in range(runs):
            began = time.perf_counter()
            function()
            times.append(time.perf_counter() - began)
        return min(times)

    a, b = torch.randn(257, 1024), torch.randn(1024, 4096)
    matmul = best(lambda: a @ b) / best(lambda: a.to(low) @ b.to(low))
    tower = get_method("clip").example("large", seed=0).eval()
    pixels = torch.randn(1, 3, 224, 224)
    with torch.inference_mode():
        fp32 = best(lambda: tower.encode_image(pixels))
        tower.to(low)  # as a Model under auto holds it: weights in the low format, the pass under autocast
        with torch.autocast("cpu", dtype=low):
            auto = best(lambda: tower.encode_image(pixels.to(low)))
    return {"auto": chosen, "matmul_speedup": round(matmul, 2), "vitl_tower_fp32_s": round(fp32, 3),
            "vitl_tower_auto_s": round(auto, 3), "vitl_tower_speedup": round(fp32 / auto, 2)}


def _commit() -> str:
    """The checkout's commit, "+changes" when explorer/ differs from it."""
    def git(*words):
        done = subprocess.run(["git", "-C", str(ROOT), *words], capture_output=True, text=True, check=False)
        return done.stdout.strip() if done.returncode == 0 else ""

    head = git("rev-parse", "--short", "HEAD")
    return head + ("+changes" if head and git("status", "--porcelain", "--", "explorer") else "")


def kind_table(rows: list[dict]) -> str:
    out = ["| model | size | kind | fp32 s | auto s | speed-up (of the fastest runs) | caption change fp32 / auto s "
           "| peak MB fp32 / auto "
           "| IoU median | IoU min | peaks equal |",
           "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        if "error" in r:
            out.append(f"| {r['model']} | {r['size']} | {r['kind']} | error: {r['error']} | | | | | | | |")
            continue
        change = (f"{r['fp32_caption_change_s']:.3f} / {r['auto_caption_change_s']:.3f}"
                  if "fp32_caption_change_s" in r else "")
        flag = " **<0.95**" if r["iou_median"] < TARGET_IOU else ""
        kind = r["kind"] + (" (fp32 under auto)" if r.get("auto_precision") == "fp32" else
                            " (head fp32 under auto)" if r["kind"] in r.get("auto_fp32_heads", ()) else "")
        out.append(f"| {r['model']} | {r['size']} | {kind} | {r['fp32_s']:.3f} | {r['auto_s']:.3f} | "
                   f"{r['speedup']:.2f}x ({min(r['fp32_times']) / min(r['auto_times']):.2f}x) | {change} | "
                   f"{r['fp32_peak_mb']:.0f} / {r['auto_peak_mb']:.0f} | "
                   f"{r['iou_median']:.3f}{flag} | {r['iou_min']:.3f} | {r['peaks_equal']}/{r['sentences']} |")
    return "\n".join(out)


def summary_table(rows: list[dict]) -> str:
    """One line per model: the kinds' speed-ups and fidelity, the request times of the generic map and Grad-CAM."""
    out = ["| model | size | kinds | generic fp32 / auto s | gradcam fp32 / auto s | speed-up (median, range) "
           "| IoU median (lowest kind) | IoU min | peaks equal | params MB fp32 / auto |",
           "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    order = []
    for r in rows:
        if (r["model"], r["size"]) not in order:
            order.append((r["model"], r["size"]))
    for model, size in order:
        mine = [r for r in rows if (r["model"], r["size"]) == (model, size)]
        good = [r for r in mine if "error" not in r]
        errors = [r["kind"] for r in mine if "error" in r]
        by_kind = {r["kind"]: r for r in good}

        def times(kind):
            r = by_kind.get(kind)
            return f"{r['fp32_s']:.3f} / {r['auto_s']:.3f}" if r else "-"

        if good:
            speed = [r["speedup"] for r in good]
            worst = min(good, key=lambda r: r["iou_median"])
            cells = (f"{statistics.median(speed):.2f}x ({min(speed):.2f}-{max(speed):.2f})",
                     f"{worst['iou_median']:.3f} ({worst['kind']})", f"{min(r['iou_min'] for r in good):.3f}",
                     f"{sum(r['peaks_equal'] for r in good)}/{sum(r['sentences'] for r in good)}")
        else:
            cells = ("-", "-", "-", "-")
        params = mine[0]["param_mb"]
        kinds = f"{len(good)}" + (f" (errors: {', '.join(errors)})" if errors else "")
        out.append(f"| {model} | {size} | {kinds} | {times('generic')} | {times('gradcam')} | {' | '.join(cells)} | "
                   f"{params['fp32']:.0f} / {params['auto']:.0f} |")
    return "\n".join(out)


def memory_table(memory: dict) -> str:
    out = ["| ViT-L/14 from its file | resident MB fp32 / auto | share | load peak MB fp32 / auto "
           "| load + first read of the weights, s, fp32 / auto |",
           "|---|---:|---:|---:|---:|"]
    for a, b in zip(memory["fp32"]["models"], memory["auto"]["models"]):
        out.append(f"| {a['method']} ({a['file']}) | {a['resident_mb']:.0f} / {b['resident_mb']:.0f} | "
                   f"{b['resident_mb'] / a['resident_mb']:.2f} | {a['load_peak_mb']:.0f} / {b['load_peak_mb']:.0f} | "
                   f"{a['load_s'] + a['read_s']:.1f} / {b['load_s'] + b['read_s']:.1f} |")
    fp32, auto = memory["fp32"], memory["auto"]
    out.append(f"| all four | {fp32['resident_mb']:.0f} / {auto['resident_mb']:.0f} | {memory['share']:.2f} | | "
               f"{sum(m['load_s'] + m['read_s'] for m in fp32['models']):.1f} / "
               f"{sum(m['load_s'] + m['read_s'] for m in auto['models']):.1f} |")
    return "\n".join(out)


def retrieval_table(part: dict) -> str:
    out = ["| model | t2i R@1 fp32 / auto | i2t R@1 fp32 / auto | points off (max) | top-1 same t2i / i2t "
           "| images/s fp32 / auto | captions/s fp32 / auto |",
           "|---|---:|---:|---:|---:|---:|---:|"]
    for r in part["models"]:
        if "error" in r:
            out.append(f"| {r['model']} | error: {r['error']} | | | | | |")
            continue
        out.append(f"| {r['model']} | {r['fp32_t2i_R@1']:.3f} / {r['auto_t2i_R@1']:.3f} | {r['fp32_i2t_R@1']:.3f} / "
                   f"{r['auto_i2t_R@1']:.3f} | {r['max_points_off']:.1f} | {r['t2i_top1_same']:.3f} / "
                   f"{r['i2t_top1_same']:.3f} | {r['fp32_images_per_s']:.0f} / {r['auto_images_per_s']:.0f} | "
                   f"{r['fp32_captions_per_s']:.0f} / {r['auto_captions_per_s']:.0f} |")
    return "\n".join(out)


def targets(results: dict) -> dict:
    found = {}
    rows = results.get("demo", []) + results.get("random", [])
    large = [r for r in results.get("random", []) if r.get("size") == "ViT-L/14" and r["kind"] == "gradcam"
             and "error" not in r]
    if large:
        found["vitl_gradcam_speedup"] = {r["model"]: round(r["speedup"], 2) for r in large}
        clip = next((r for r in large if r["model"] == "clip"), large[0])
        found["vitl_gradcam_headline"] = {"model": clip["model"], "fp32_s": clip["fp32_s"], "auto_s": clip["auto_s"],
                                          "speedup": clip["speedup"], "target": TARGET_GRADCAM_SPEEDUP,
                                          "met": clip["speedup"] >= TARGET_GRADCAM_SPEEDUP}
    memory = results.get("memory", {})
    if "share" in memory:
        found["vitl_memory_share"] = {"four_models": memory["share"], "per_model": memory["per_model_share"],
                                      "target": TARGET_MEMORY_SHARE, "met": memory["share"] <= TARGET_MEMORY_SHARE}
    found["below_iou_target"] = [
        {"model": r["model"], "size": r["size"], "method": r["method"], "kind": r["kind"],
         "iou_median": r["iou_median"], "iou_min": r["iou_min"]}
        for r in rows if "error" not in r and r["iou_median"] < TARGET_IOU]
    found["errors"] = [{"model": r["model"], "size": r["size"], "kind": r["kind"], "error": r["error"]}
                       for r in rows if "error" in r]
    retrieval = results.get("retrieval", {}).get("models", [])
    offs = [r["max_points_off"] for r in retrieval if "max_points_off" in r]
    if offs:
        found["retrieval_max_points_off"] = {"max": max(offs), "target": 1.0, "met": max(offs) <= 1.0}
    return found


def report(results: dict) -> str:
    bound = results.get("ceiling", {})
    parts = [f"machine: {results['machine']['cpu']}, {results['machine']['cpus']} CPUs, "
             f"torch {results['machine']['torch']} ({results['machine']['torch_threads']} threads), flags "
             f"{', '.join(results['machine']['bf16_flags']) or 'none'}; auto = "
             f"{results['machine']['auto_resolves_to']}; {results['machine']['date']}, commit "
             f"{results['machine'].get('commit') or '?'}"]
    if "vitl_tower_speedup" in bound:
        parts.append(f"ceiling on this machine (inference only): a ViT-L/14 MLP matrix product "
                     f"{bound['matmul_speedup']:.2f}x, a ViT-L/14 image tower {bound['vitl_tower_fp32_s']:.2f} s -> "
                     f"{bound['vitl_tower_auto_s']:.2f} s = {bound['vitl_tower_speedup']:.2f}x")
    rows = results.get("demo", []) + results.get("random", [])
    if rows:
        parts += ["", "Per model (all kinds):", "", summary_table(rows), "", "Per kind:", "", kind_table(rows)]
    if "share" in results.get("memory", {}):
        parts += ["", "Memory of four ViT-L/14 loaded from files (each in its own process per precision; resident "
                  "after every weight was read once):", "", memory_table(results["memory"])]
    if results.get("retrieval"):
        parts += ["", f"Retrieval on the held-out synthetic world ({results['retrieval']['scenes']} test scenes, "
                  "long captions):", "", retrieval_table(results["retrieval"])]
        for row in results["retrieval"]["evaluate_model"]:
            cells = ", ".join(f"{p} {row[p + '_scenes_per_s']:.2f} scenes/s" if p + "_scenes_per_s" in row
                              else f"{p} error: {row.get(p + '_error')}" for p in PRECISIONS)
            parts.append(f"\nevaluate_model({row['model']}, {row['scenes']} scenes, grounding on "
                         f"{row['grounding_scenes']}): {cells}")
    found = results["targets"]
    parts.append("")
    if "vitl_gradcam_headline" in found:
        h = found["vitl_gradcam_headline"]
        parts.append(f"target: ViT-L/14 Grad-CAM request, 4 sentences ({h['model']}): fp32 {h['fp32_s']:.2f} s, auto "
                     f"{h['auto_s']:.2f} s, {h['speedup']:.2f}x (>= {h['target']:.0f}x: "
                     f"{'met' if h['met'] else 'missed'}); every method: {found['vitl_gradcam_speedup']}")
    if "vitl_memory_share" in found:
        m = found["vitl_memory_share"]
        parts.append(f"target: four ViT-L/14 loaded, resident memory auto / fp32 = {m['four_models']:.2f} (<= "
                     f"{m['target']:.2f}: {'met' if m['met'] else 'missed'}); per model "
                     + ", ".join(f"{k} {v:.2f}" for k, v in m["per_model"].items()))
    if "retrieval_max_points_off" in found:
        r = found["retrieval_max_points_off"]
        parts.append(f"target: retrieval R@1 within 1 point: largest difference {r['max']:.1f} points "
                     f"({'met' if r['met'] else 'missed'})")
    below = found["below_iou_target"]
    parts.append("kinds below IoU 0.95 median: " + ("none" if not below else "; ".join(
        f"{b['model']} {b['size']} {b['kind']} {b['iou_median']:.3f}" for b in below)))
    if found["errors"]:
        parts.append("errors: " + "; ".join(f"{e['model']} {e['size']} {e['kind']}: {e['error']}"
                                            for e in found["errors"]))
    return "\n".join(parts)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--parts", nargs="+", choices=("demo", "random", "memory", "retrieval"),
                        default=["demo", "random", "memory", "retrieval"])
    parser.add_argument("--runs", type=int, default=4, help="timed runs per kind and precision (demo, ViT-B/16)")
    parser.add_argument("--large-runs", type=int, default=4, help="timed runs per kind and precision (ViT-L/14)")
    parser.add_argument("--sentences", type=int, default=4, help="sentences per request for the random-weight models")
    parser.add_argument("--no-large", action="store_true", help="leave out the ViT-L/14 models")
    parser.add_argument("--sizes", nargs="+", choices=("base", "large"), default=["base", "large"],
                        help="random-weight sizes (ViT-B/16, ViT-L/14)")
    parser.add_argument("--methods", nargs="+", default=list(RANDOM_METHODS), help="random-weight methods")
    parser.add_argument("--kinds", nargs="+", help="only these map kinds of the random-weight models")
    parser.add_argument("--retrieval-limit", type=int, default=300, help="test scenes for R@1 (explorer eval: 300)")
    parser.add_argument("--retrieval-runs", type=int, default=3)
    parser.add_argument("--eval-models", nargs="*", default=["clip-base", "flair"],
                        help="demo models run through a whole evaluate_model, fp32 and auto")
    parser.add_argument("--eval-limit", type=int, default=100)
    parser.add_argument("--eval-grounding", type=int, default=20)
    parser.add_argument("--folder", type=Path, default=Path("/tmp/explorer-precision-large"),
                        help="where the ViT-L/14 files for the memory part are written (once)")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "precision-cpu.json")
    parser.add_argument("--memory-child", help=argparse.SUPPRESS)
    args, rest = parser.parse_known_args(argv)
    if args.memory_child:
        memory_child(args.memory_child, rest)
        return 0
    if rest:
        parser.error(f"unrecognised arguments: {' '.join(rest)}")
    if args.quick:
        args.runs = min(args.runs, 2)
        args.retrieval_limit = min(args.retrieval_limit, 60)
        args.retrieval_runs = 1
        args.parts = [p for p in args.parts if p != "memory"]

    def log(text: str) -> None:
        print(text, flush=True)

    results = {"machine": machine(), "settings": {k: (str(v) if isinstance(v, Path) else v)
                                                  for k, v in vars(args).items() if k != "memory_child"}}
    log(f"{results['machine']}")
    started = time.perf_counter()
    results["ceiling"] = ceiling()
    log(f"ceiling: {results['ceiling']}")
    if "demo" in args.parts:
        log("demo zoo:")
        results["demo"] = demo_part(args, log)
    if "random" in args.parts:
        log("random weights:")
        results["random"] = random_part(args, log)
    if "memory" in args.parts:
        log("memory of four ViT-L/14 loaded from files:")
        results["memory"] = memory_part(args, log)
    if "retrieval" in args.parts:
        log("retrieval on the held-out synthetic world:")
        results["retrieval"] = retrieval_part(args, log)
    results["targets"] = targets(results)
    results["seconds"] = round(time.perf_counter() - started, 1)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=1) + "\n")
    text = report(results)
    args.out.with_suffix(".md").write_text(text + "\n")
    print()
    print(text)
    print(f"\nwrote {args.out} and {args.out.with_suffix('.md').name} ({results['seconds']:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
