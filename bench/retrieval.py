"""Retrieval costs (issue 11): indexing throughput, query latency, IVF, and re-ranking per method.

    python bench/retrieval.py                 # the full run (1k..1M galleries, ViT-B/16 sizes)
    python bench/retrieval.py --quick         # a smoke run: small sizes, tiny re-rank models
    python bench/retrieval.py --images 512 --runs 2 --sizes 1000 100000 --ivf-data clustered

A script that prints figures (not a timed test). CPU unless --device says otherwise; torch's default
thread count. Four parts:

1. Indexing: ``EmbeddingStore.update`` against a bare open_clip forward of the same batches.
   open_clip's ViT-B-16 is built with random weights (seed 0, no download), its state dict saved as
   an OpenAI-layout .pt file and loaded through ``explorer.load`` (``quick_gelu=False``: open_clip's
   ViT-B-16 uses GELU), so both sides hold the same weights; the script checks that the store's
   vectors are the bare forward's. The same ``--images`` synthetic 224-px PNGs (written to a temporary
   folder), batches of 32 (the store's ``IMAGE_BATCH``), inference mode, fp32. Timed:
     (a) store: ``store.update()`` on an empty cache folder of a set of those pictures with no captions,
         i.e. everything it does: the lock and index read, per picture its identity (stat) and decoding
         (``load_image``), explorer's preprocessing, the forward (all tokens projected: the method's full
         ``ImageFeatures``), the shard files (safetensors, every field) and the index rewrites (fsync'd),
         and the ``status()`` it returns. Building the store (the weights hash, once per model) is
         timed apart and not counted.
     (b) bare: per batch, ``PIL.Image.open(path).convert("RGB")`` of each file, open_clip's own eval
         transform of each, ``torch.stack`` and ``model.encode_image`` (class token only; nothing written).
   One warm-up batch through each first; then ``--runs`` runs of each, interleaved (the order swapped
   every run) so that a change in machine load hits both. Target: throughput (a) / (b) >= 0.95.
2. Query latency: ``VectorIndex.search`` of one query (k = 10) over 1k .. 1M synthetic unit vectors
   (d = 512, seeded Gaussian), fp32 and fp16 storage, the kind ``auto`` picks; median of ``--queries``
   single-query searches after 3 warm-ups. Memory: ``nbytes()`` and the growth of the process's resident
   memory (``resident_gb``) across the build. Target: < 15 ms at 100k.
3. IVF: the kind ``auto`` picks past ``IVF_THRESHOLD`` (built at ``IVF_THRESHOLD + 1`` vectors unless
   --ivf-size says otherwise), its build time, ``recall_note`` and query latency. ``--ivf-data random``
   is the same unstructured gallery as part 2 (the worst case for IVF: neighbours are spread over every
   cell); ``clustered`` draws the vectors around 4,096 centres, closer to real embeddings.
4. Re-ranking: per method, ``Model.similarity(image_features of the shortlist, [one caption])`` -- the
   text -> image re-ranking of one query's shortlist (100), caption encoding included -- and
   ``Model.encode_text([caption])`` alone, median of ``--rerank-runs`` after a warm-up. The methods are
   ``Method.example("base")`` (ViT-B/16 sizes, random weights) wrapped in ``Model(method, "cpu")``;
   the shortlist's features are those of 4 encoded pictures repeated (the cost does not depend on the
   values). Median and minimum are printed: on a shared machine the minimum is the uncontended cost.
   A method whose score is the global cosine needs no re-ranking (the cosine search is its ranking);
   its time is shown for comparison.
"""

from __future__ import annotations

import argparse
import gc
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent))
from grounding_latency import picture as photo_like  # noqa: E402

import explorer  # noqa: E402
from explorer.core.compat import ensure_torchvision_importable  # noqa: E402
from explorer.core.runtime import release_freed_memory, resident_gb  # noqa: E402
from explorer.data.retrieval_sets import RetrievalSet  # noqa: E402
from explorer.retrieval import embedding_store  # noqa: E402
from explorer.retrieval.embedding_store import EmbeddingStore  # noqa: E402
from explorer.retrieval.vector_index import IVF_THRESHOLD, VectorIndex, choose_kind  # noqa: E402

TARGET_INDEXING = 0.95
TARGET_QUERY_MS = 15.0
TARGET_QUERY_AT = 100_000
DIM = 512
METHOD_NAMES = ("clip", "longclip", "mulclip", "caft", "finelip", "flair", "goal", "seps")
MAX_BUILD_S = 120.0  # a method example slower than this to build is reported and skipped
CAPTION = (
    "A red cube sits on the left of a wooden table, and a small blue ball rests in front of it. "
    "Behind them a green cone leans against a white wall that is lit from a window at the top left. "
    "A yellow ring lies on the floor at the right, half hidden by the leg of a chair with a striped cushion. "
    "On the table there is also a glass of water, a folded newspaper and a pair of round reading glasses. "
    "The shadows fall to the right and the floor is made of pale oak boards with a narrow grey rug."
)


def median_ms(times: list[float]) -> float:
    return statistics.median(times) * 1000


def rss_now() -> float:
    gc.collect()
    release_freed_memory()
    return resident_gb() or float("nan")


# ---- 1. indexing throughput -------------------------------------------------------------------------


def write_pictures(folder: Path, n: int, size: int = 224) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for i in range(n):
        path = folder / f"{i:05d}.png"
        photo_like(size, seed=i).save(path)
        paths.append(path)
    return paths


def bench_indexing(args, workdir: Path) -> None:
    ensure_torchvision_importable()
    import open_clip
    from PIL import Image

    batch = embedding_store.IMAGE_BATCH
    torch.manual_seed(0)
    reference, _, transform = open_clip.create_model_and_transforms("ViT-B-16", pretrained=None)
    reference = reference.to(args.device).eval()
    weights = workdir / "vit-b-16-random.pt"
    torch.save(reference.state_dict(), weights)
    model = explorer.load(weights, device=args.device, options={"quick_gelu": False})
    weights.unlink()

    paths = write_pictures(workdir / "pictures", args.images)
    dataset = RetrievalSet(layout="folder", root=workdir / "pictures", split="all", images=tuple(paths),
                           captions=(), caption_image=())
    on_disk = sum(p.stat().st_size for p in paths) / len(paths) / 1024

    # Forward time inside each side, to show where the rest goes.
    forward = {"store": 0.0}
    method_encode = model.method.encode_image

    def timed_encode(pixels):
        start = time.perf_counter()
        out = method_encode(pixels)
        forward["store"] += time.perf_counter() - start
        return out

    def bare_pass() -> tuple[float, float, float, torch.Tensor]:
        start, start_cpu, inside, outputs = time.perf_counter(), time.process_time(), 0.0, []
        for first in range(0, len(paths), batch):
            pictures = []
            for path in paths[first:first + batch]:
                with Image.open(path) as opened:
                    pictures.append(opened.convert("RGB"))
            pixels = torch.stack([transform(p) for p in pictures]).to(args.device)
            clock = time.perf_counter()
            with torch.inference_mode():
                outputs.append(reference.encode_image(pixels))
            if args.device != "cpu":
                torch.cuda.synchronize()
            inside += time.perf_counter() - clock
        return time.perf_counter() - start, time.process_time() - start_cpu, inside, torch.cat(outputs).float().cpu()

    def store_pass(run: int) -> tuple[float, float, float, EmbeddingStore, float]:
        clock = time.perf_counter()
        store = EmbeddingStore(model, dataset, root=workdir / f"embeddings-{run}")
        built = time.perf_counter() - clock
        forward["store"] = 0.0
        model.method.encode_image = timed_encode
        try:
            start, start_cpu = time.perf_counter(), time.process_time()
            status = store.update()
            seconds, cpu = time.perf_counter() - start, time.process_time() - start_cpu
        finally:
            del model.method.encode_image  # back to the class's method
        assert status.complete and status.images_done == len(paths), status.line()
        return seconds, cpu, forward["store"], store, built

    # warm-up: one batch through each side (first-call kernel set-up is not what is measured)
    warm = [Image.open(p).convert("RGB") for p in paths[:batch]]
    model.encode_image(warm)
    with torch.inference_mode():
        reference.encode_image(torch.stack([transform(p) for p in warm]).to(args.device))

    bare_runs, store_runs, reference_vectors, first_store = [], [], None, None
    for run in range(args.runs):
        order = ("bare", "store") if run % 2 == 0 else ("store", "bare")
        for side in order:
            if side == "bare":
                seconds, cpu, inside, vectors = bare_pass()
                bare_runs.append((seconds, cpu, inside))
                reference_vectors = vectors if reference_vectors is None else reference_vectors
            else:
                seconds, cpu, inside, store, built = store_pass(run)
                store_runs.append((seconds, cpu, inside, built, store.status().bytes_on_disk))
                first_store = first_store or store
    ours = F.normalize(reference_vectors, dim=-1)
    theirs = first_store.image_vectors()
    diff = (ours - theirs).abs().max().item()

    n = len(paths)
    a_wall = statistics.median(r[0] for r in store_runs)
    b_wall = statistics.median(r[0] for r in bare_runs)
    a_cpu = statistics.median(r[1] for r in store_runs)
    b_cpu = statistics.median(r[1] for r in bare_runs)
    ratio = (n / a_wall) / (n / b_wall)
    paired = statistics.median(b[0] / a[0] for a, b in zip(store_runs, bare_runs))
    print("1. indexing: EmbeddingStore.update vs a bare open_clip forward (same weights, pictures, batches)")
    print(f"   torch {torch.__version__}, open_clip {open_clip.__version__}, device {args.device}, "
          f"threads {torch.get_num_threads()}; {n} PNGs of 224x224 (synthetic, {on_disk:.0f} KB each), "
          f"batch {batch}, {args.runs} run(s) each after a warm-up batch, interleaved")
    print(f"   model: open_clip ViT-B-16, random weights (seed 0); explorer side loaded as {model.method_name} "
          f"{model.method.arch.name}, quick_gelu={model.method.arch.quick_gelu}")
    print(f"   same vectors: {'yes' if diff < 1e-4 else 'NO'} (max |diff| of the unit vectors {diff:.1e})")
    for label, runs in (("(a) store.update()", store_runs), ("(b) bare forward  ", bare_runs)):
        walls = ", ".join(f"{r[0]:.1f}" for r in runs)
        seconds, inside = statistics.median(r[0] for r in runs), statistics.median(r[2] for r in runs)
        print(f"   {label}: {n / seconds:6.2f} images/s  (median {seconds:.2f} s; runs {walls} s; forward "
              f"{inside:.2f} s, the rest {seconds - inside:.2f} s = {1000 * (seconds - inside) / n:.1f} ms/image)")
    print(f"   store construction (weights hash, once per model): {store_runs[0][3]:.2f} s, not counted; "
          f"shards on disk {store_runs[0][4] / n / 1024:.0f} KB per picture (every ImageFeatures field)")
    print(f"   CPU time (all threads): (a) {a_cpu:.1f} s, (b) {b_cpu:.1f} s; throughput ratio by CPU time "
          f"{b_cpu / a_cpu:.3f}")
    print(f"   median of per-run ratios (b_i/a_i): {paired:.3f}; against the bare forward alone (no decoding or "
          f"preprocessing counted on its side): {statistics.median(r[2] for r in bare_runs) / a_wall:.3f}")
    print(f"   throughput ratio (a)/(b): {ratio:.3f}   target >= {TARGET_INDEXING}: "
          f"{'met' if ratio >= TARGET_INDEXING else 'NOT met'}", flush=True)


# ---- 2. query latency, 3. IVF -----------------------------------------------------------------------


def gallery(n: int, kind: str, seed: int = 0) -> torch.Tensor:
    """[n, DIM] float32 unit vectors: Gaussian ("random") or around 4,096 centres ("clustered")."""
    generator = torch.Generator().manual_seed(seed)
    if kind == "random":
        vectors = torch.randn(n, DIM, generator=generator)
    else:
        centres = F.normalize(torch.randn(4096, DIM, generator=generator), dim=-1)
        vectors = centres[torch.randint(0, len(centres), (n,), generator=generator)]
        vectors += 0.05 * torch.randn(n, DIM, generator=generator)  # noise of norm ~1.1: cos to centre ~0.7
    return F.normalize(vectors, dim=-1)


def latency(index: VectorIndex, queries: torch.Tensor) -> list[float]:
    for q in queries[:3]:  # warm-up
        index.search(q, 10)
    times = []
    for q in queries[3:]:
        start = time.perf_counter()
        index.search(q, 10)
        times.append(time.perf_counter() - start)
    return times


def bench_queries(args, vectors: torch.Tensor) -> None:
    generator = torch.Generator().manual_seed(1)
    queries = F.normalize(torch.randn(args.queries + 3, DIM, generator=generator), dim=-1)
    print(f"2. query latency: VectorIndex.search, one query, k = 10, d = {DIM} (synthetic unit vectors), kind auto; "
          f"median of {args.queries} after 3 warm-ups; threads {torch.get_num_threads()}")
    print(f"   {'n':>9s} {'storage':>7s} {'kind':>6s} {'build s':>8s} {'median ms':>10s} {'min ms':>7s} "
          f"{'nbytes MB':>10s} {'RSS growth GB':>14s}")
    verdicts = []
    for n in args.sizes:
        for storage in ("fp32", "fp16"):
            before = rss_now()
            start = time.perf_counter()
            index = VectorIndex(vectors[:n], kind="auto", storage=storage)
            built = time.perf_counter() - start
            grown = rss_now() - before
            times = latency(index, queries)
            assert index.kind == choose_kind(n, storage), (index.kind, index.describe())
            ms = median_ms(times)
            print(f"   {n:>9,d} {storage:>7s} {index.kind:>6s} {built:8.2f} {ms:10.2f} {min(times) * 1000:7.2f} "
                  f"{index.nbytes() / 2 ** 20:10.1f} {grown:14.3f}", flush=True)
            if n == TARGET_QUERY_AT:
                verdicts.append(f"{storage} ({index.kind}) {ms:.1f} ms: {'met' if ms < TARGET_QUERY_MS else 'NOT met'}")
            del index
    if verdicts:
        print(f"   target < {TARGET_QUERY_MS:.0f} ms at {TARGET_QUERY_AT:,}: " + "; ".join(verdicts))


def bench_ivf(args, vectors: torch.Tensor | None) -> None:
    n = args.ivf_size
    if args.ivf_data == "clustered" or vectors is None or len(vectors) < n:
        vectors = gallery(n, args.ivf_data)
    generator = torch.Generator().manual_seed(2)
    queries = F.normalize(torch.randn(args.queries + 3, DIM, generator=generator), dim=-1)
    kind = "auto" if n > IVF_THRESHOLD else "ivf"
    print(f"3. IVF: {n:,} {args.ivf_data} vectors, {args.ivf_storage} storage, kind {kind} "
          f"(auto picks ivf past {IVF_THRESHOLD:,})")
    before = rss_now()
    start = time.perf_counter()
    index = VectorIndex(vectors[:n], kind=kind, storage=args.ivf_storage)
    built = time.perf_counter() - start
    grown = rss_now() - before
    times = latency(index, queries)
    print(f"   kind {index.kind}; build {built:.1f} s (k-means on a sample, adding every vector, tuning nprobe)")
    print(f"   {index.describe()}")
    print(f"   query (one, k = 10): median {median_ms(times):.2f} ms, min {min(times) * 1000:.2f} ms; "
          f"nbytes {index.nbytes() / 2 ** 20:.1f} MB, RSS growth {grown:.3f} GB", flush=True)


# ---- 4. re-ranking cost -------------------------------------------------------------------------------


def bench_rerank(args) -> None:
    from explorer.models.methods import METHODS, discover_methods
    from explorer.models.model import Model

    discover_methods()
    pictures = [photo_like(224, seed=100 + i) for i in range(4)]
    print(f"4. re-ranking: Model.similarity(features of {args.shortlist} pictures, [one caption]) per query "
          f"(text -> image), {args.rerank_size} examples, random weights, device {args.device}; median of "
          f"{args.rerank_runs} after a warm-up")
    print(f"   {'method':9s} {'params M':>8s} {'build s':>7s} {'tokens':>6s} {'re-rank':>8s} "
          f"{'similarity ms (median/min)':>26s} {'encode_text ms (median/min)':>27s} {'score':s}")
    for name in args.methods:
        if name not in METHODS:
            print(f"   {name:9s} skipped: no such method (known: {', '.join(sorted(METHODS))})")
            continue
        torch.manual_seed(0)
        start = time.perf_counter()
        try:
            method = METHODS[name].example(args.rerank_size)
        except Exception as error:  # a method whose example cannot be built is reported, the others go on
            print(f"   {name:9s} skipped: its {args.rerank_size!r} example could not be built "
                  f"({type(error).__name__}: {error})")
            continue
        built = time.perf_counter() - start
        if built > MAX_BUILD_S:
            print(f"   {name:9s} skipped: building its {args.rerank_size!r} example took {built:.0f} s "
                  f"(> {MAX_BUILD_S:.0f} s)")
            continue
        model = Model(method, device=args.device)
        params = sum(p.numel() for p in method.parameters()) / 1e6
        features = model.encode_image(pictures)
        shortlist = features[torch.arange(args.shortlist) % len(pictures)]
        tokens = model.token_counter.budget(CAPTION, model.context_length).n_tokens

        def similarity():
            model.similarity(shortlist, [CAPTION])

        def encode_text():
            model.encode_text([CAPTION])

        sim, text = [], []
        similarity(), encode_text()  # warm-up
        for _ in range(args.rerank_runs):  # interleaved
            for fn, times in ((similarity, sim), (encode_text, text)):
                start = time.perf_counter()
                fn()
                if args.device != "cpu":
                    torch.cuda.synchronize()
                times.append(time.perf_counter() - start)
        needed = "no" if model.global_score else "yes"
        print(f"   {name:9s} {params:8.1f} {built:7.1f} {tokens:6d} {needed:>8s} "
              f"{median_ms(sim):17.1f} / {min(sim) * 1000:6.1f} {median_ms(text):18.1f} / {min(text) * 1000:6.1f} "
              f"{model.score_label}", flush=True)
        gc.collect()


# ---- main ---------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes: a smoke run of every part")
    parser.add_argument("--parts", nargs="*", default=["indexing", "queries", "ivf", "rerank"],
                        choices=["indexing", "queries", "ivf", "rerank"])
    parser.add_argument("--images", type=int, default=256, help="pictures indexed (default 256; quick 32)")
    parser.add_argument("--runs", type=int, default=1, help="indexing runs of each side (default 1)")
    parser.add_argument("--sizes", type=int, nargs="*", default=None,
                        help="gallery sizes (default 1k 10k 100k 1M; quick 1k 10k)")
    parser.add_argument("--queries", type=int, default=30, help="timed single queries per size")
    parser.add_argument("--ivf-size", type=int, default=None,
                        help=f"IVF gallery (default {IVF_THRESHOLD + 1:,}, where auto switches; quick 20,000)")
    parser.add_argument("--ivf-data", choices=["random", "clustered"], default="random")
    parser.add_argument("--ivf-storage", choices=["fp32", "fp16"], default="fp16")
    parser.add_argument("--methods", nargs="*", default=list(METHOD_NAMES))
    parser.add_argument("--shortlist", type=int, default=100)
    parser.add_argument("--rerank-size", choices=["base", "tiny"], default=None, help="default base; quick tiny")
    parser.add_argument("--rerank-runs", type=int, default=5)
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args(argv)
    if args.quick:
        args.images = 32 if args.images == 256 else args.images
        args.queries = min(args.queries, 10)
        args.rerank_runs = min(args.rerank_runs, 2)
    args.sizes = args.sizes or ([1_000, 10_000] if args.quick else [1_000, 10_000, 100_000, 1_000_000])
    args.ivf_size = args.ivf_size or (20_000 if args.quick else IVF_THRESHOLD + 1)
    args.rerank_size = args.rerank_size or ("tiny" if args.quick else "base")

    started = time.perf_counter()
    print(f"retrieval benchmark{' (quick)' if args.quick else ''}: torch {torch.__version__}, "
          f"threads {torch.get_num_threads()}, numpy {np.__version__}; {os.cpu_count()} cores, load average "
          f"{os.getloadavg()[0]:.1f} at the start (other processes share the cores: compare medians with minima)",
          flush=True)
    with tempfile.TemporaryDirectory() as folder:
        if "indexing" in args.parts:
            bench_indexing(args, Path(folder))
    vectors = None
    if "queries" in args.parts or ("ivf" in args.parts and args.ivf_data == "random"):
        wanted = max([*args.sizes, args.ivf_size if "ivf" in args.parts and args.ivf_data == "random" else 0])
        vectors = gallery(wanted, "random")
    if "queries" in args.parts:
        bench_queries(args, vectors)
    if "ivf" in args.parts:
        bench_ivf(args, vectors)
    del vectors
    if "rerank" in args.parts:
        bench_rerank(args)
    print(f"total {time.perf_counter() - started:.0f} s; load average {os.getloadavg()[0]:.1f} at the end")
    return 0


if __name__ == "__main__":
    sys.exit(main())
