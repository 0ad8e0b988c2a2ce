"""How fast the swap probe answers once the maps board is drawn.

    python bench/swap_probe.py [--runs 5] [--parts demo,base,large] [--large longclip,flair] [--precision auto]

Three settings, each: the board drawn first (``compute_maps``: the models, the picture's features stored),
then, median of ``--runs`` (the first run printed apart: it may pay a picture's features once for a model
whose board map is an explainer's):
  - the full colour swap set (10 swaps: every other basic colour) for every model, scores only, as the
    panel's "Swap every colour" computes it; target under 0.5 s for the four demo models;
  - a swapped sentence's map per model (the original's and the swapped one's, of the board's kind, and their
    mask IoU and peak shift), as a click on a row computes it; target under 1 s per model at ViT-B/16 sizes.

Settings: the four demo models (the default example, sentence 2, "blue"); four ViT-B/16-sized models with
random weights built in code (CLIP, Long-CLIP, FineLIP, FLAIR) on a 768 px picture; ViT-L/14-sized models with
random weights (``--large``, default Long-CLIP and FLAIR: two, to stay within a shared 2-core machine's memory).
Each line also gives the median run's process CPU seconds: on a machine shared with other work the wall time
grows, and CPU time / threads is what the run would take alone.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

from explorer.core.runtime import prepare_process

prepare_process()  # as the page and the CLI run: CPU threads that sleep while they wait (set before torch loads)

import torch  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from grounding_latency import SENTENCES, picture  # noqa: E402  (the kitchen caption and picture)

import explorer  # noqa: E402
from explorer.grounding.sentence_maps import MapCache  # noqa: E402
from explorer.models.methods import get_method  # noqa: E402
from explorer.probe import swap_scores  # noqa: E402
from explorer.views.maps_view import compute_maps  # noqa: E402
from explorer.views.settings import ViewSettings  # noqa: E402
from explorer.views.swap_view import SwapSettings, map_pairs  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "assets" / "synthetic-test-000000"
DEMO = ["demo-mulclip", "demo-clip-base", "demo-caft", "demo-flair"]
BASE = ("clip", "longclip", "finelip", "flair")
TARGET_TABLE_S, TARGET_MAP_S = 0.5, 1.0


CPU_TIMES: list[float] = []  # process CPU seconds of each median run, printed beside the wall time


def timed(call, runs: int) -> tuple[float, float]:
    """(first run, median of the others) in wall seconds; the median run's process CPU seconds go to
    ``CPU_TIMES`` (on a machine shared with other work, CPU time / threads bounds the wall time alone)."""
    times, cpu = [], []
    for _ in range(runs):
        began, began_cpu = time.perf_counter(), time.process_time()
        call()
        times.append(time.perf_counter() - began)
        cpu.append(time.process_time() - began_cpu)
    CPU_TIMES.append(statistics.median(cpu[1:] or cpu))
    return times[0], statistics.median(times[1:] or times)


def measure(title: str, models, image: Path, caption: str, number: int, word: str, runs: int,
            table_target: bool = False) -> dict:
    """The board drawn with ``models`` (the board's own kinds), then the swap table and the map pairs."""
    names = {model.name: model for model in models}
    settings = ViewSettings(image=str(image), caption=caption, models=list(names))
    view = compute_maps(names.__getitem__, settings, MapCache(), truth_dir=Path(tempfile.mkdtemp()))
    sentence = view.sentences[number - 1]
    first, table = timed(lambda: swap_scores(models, view.picture, sentence, word, None, kind=None), runs)
    table_cpu = CPU_TIMES[-1]
    record = swap_scores(models, view.picture, sentence, word, None, kind=None)
    kinds = {m.name: m.kind for m in view.models}
    drawn = {m.name: m.maps[number - 1] for m in view.models}  # the board's map of the sentence, as the panel
    per_model = {}
    for model in models:
        one = SwapSettings(models=[model.name], kinds=kinds)
        per_model[model.name] = (*timed(lambda: map_pairs([model], view.picture, record, record.replacements[4],
                                                          one, originals=drawn), runs), CPU_TIMES[-1])
    precision = ", ".join(sorted({m.precision for m in models}))
    print(f"\n{title} ({precision}; {torch.get_num_threads()} threads; picture {view.picture.width}x"
          f"{view.picture.height}; sentence {number}: {sentence!r}, word {word!r}, {len(record.replacements)} swaps)")
    verdict = (f"target {TARGET_TABLE_S} s: {'under' if table < TARGET_TABLE_S else 'OVER'}" if table_target
               else "no target at this size")
    print(f"  swap table, {len(models)} models x {len(record.replacements)} swaps: {table:.3f} s median "
          f"(first {first:.3f} s; CPU {table_cpu:.3f} s); {verdict}")
    for name, (first_map, median_map, cpu) in per_model.items():
        verdict = "under" if median_map < TARGET_MAP_S else "OVER"
        print(f"  map pair, {name} ({kinds[name]}): {median_map:.3f} s median (first {first_map:.3f} s; CPU "
              f"{cpu:.3f} s); target {TARGET_MAP_S} s: {verdict}")
    return {"table_s": table, "maps_s": {n: m for n, (_, m, _) in per_model.items()}}


def demo(args) -> None:
    from explorer.zoo import Zoo

    zoo = Zoo(ROOT / "checkpoints", precision=args.precision)
    models = [zoo.load(name) for name in DEMO]
    measure("four demo models, the default example", models, EXAMPLE.with_suffix(".png"),
            EXAMPLE.with_suffix(".txt").read_text(), 2, "blue", args.runs, table_target=True)


def random_models(methods, size: str, precision: str) -> list:
    models = []
    for name in methods:
        torch.manual_seed(0)
        suffix = "B16" if size == "base" else "L14"
        models.append(explorer.Model(get_method(name).example(size), name=f"{name}-{suffix}-random", device="cpu",
                                     precision=precision, trained=False))
    return models


def kitchen(args) -> tuple[Path, str]:
    image = Path(tempfile.mkdtemp(prefix="explorer-bench-swaps-")) / "kitchen.png"
    picture(768).save(image)
    return image, " ".join(SENTENCES[:4])  # sentence 3 names "a red kettle"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--precision", default="auto", help="as the page computes (default auto)")
    parser.add_argument("--large", default="longclip,flair", help="ViT-L/14 methods (comma-separated)")
    parser.add_argument("--parts", default="demo,base,large", help="which settings to time (comma-separated)")
    parser.add_argument("--skip-large", action="store_true", help="the same as --parts demo,base")
    args = parser.parse_args(argv)
    parts = set(args.parts.split(",")) - ({"large"} if args.skip_large else set())
    if "demo" in parts:
        demo(args)
    image, caption = kitchen(args)
    if "base" in parts:
        measure("four ViT-B/16-sized models, random weights", random_models(BASE, "base", args.precision), image,
                caption, 3, "red", args.runs)
    if "large" in parts:
        large = [name.strip() for name in args.large.split(",") if name.strip()]
        measure("ViT-L/14-sized models, random weights", random_models(large, "large", args.precision), image,
                caption, 3, "red", max(2, args.runs // 2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
