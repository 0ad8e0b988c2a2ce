"""The demo zoo on the synthetic twins of the papers' tables: one table per task, items per second per model.

    python bench/seed_tables.py                      # every demo model, the default sizes (~25 min on 2 busy cores)
    python bench/seed_tables.py --limit 10 --models demo-clip-base demo-finelip

Writes the twins once under --work (``explorer data negatives-twin``, ``classes-twin`` and, where this build
has it, ``refer-twin``), then for each model of the demo zoo:

- FG-OVD's twin (``eval-negatives --layout fg-ovd``, --region roi and --ties hit unless given): accuracy per
  split, the first --limit regions of each;
- the class folders (``eval-zeroshot --layout folder``, open_clip's 7 simple templates): top-1 and top-5;
- the refer twin (``eval-grounding --layout refcoco``, RefCOCO testA): mIoU, oIoU and box accuracy of the
  model's headline map (its native map, else generic), the first --limit pictures, under the default
  protocol (ReCLIP's) or the one --text, --box-alpha and --min-box-area set.

Items per second count what each model scored in this run (regions, pictures, expressions) over the wall
time of its scoring (model loading left out). Results: bench/results/seed-tables.json and .md (the tables
docs/benchmarks.md shows).
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from datetime import date
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def twins(work: Path, scenes: int, per_class: int) -> dict:
    from explorer.data.class_sets.synthetic import write_classes_twin
    from explorer.data.negatives_sets.synthetic import write_twin

    made = {}
    if not (work / "fg-ovd" / "benchmarks").is_dir():
        write_twin(work / "fg-ovd", n_scenes=scenes)
    made["negatives"] = work / "fg-ovd"
    if not (work / "classes").is_dir():
        write_classes_twin(work / "classes", per_class=per_class)
    made["zeroshot"] = work / "classes"
    try:
        from explorer.data.grounding_sets.refer_twin import write_refer_twin
    except ImportError:
        return made
    if not (work / "refer").is_dir():
        write_refer_twin(work / "refer", n_scenes=scenes // 4)
    made["refcoco"] = work / "refer"
    return made


def negatives(model, name: str, root: Path, limit: int, protocol: dict | None = None) -> tuple[dict, float, int]:
    from explorer.evaluation.negatives import evaluate_negatives

    chosen = {k: v for k, v in (protocol or {}).items() if v is not None}  # region, ties: the defaults otherwise
    started = time.perf_counter()
    result = evaluate_negatives({name: model}, root, progress=False, layout="fg-ovd", limit=limit, **chosen)
    entry = result["models"][0]
    return {k: v for k, v in entry["accuracy"].items()}, time.perf_counter() - started, sum(entry["n"].values())


def zeroshot(model, name: str, root: Path, limit: int | None) -> tuple[dict, float, int]:
    from explorer.evaluation.zeroshot import evaluate_zeroshot

    started = time.perf_counter()
    result = evaluate_zeroshot({name: model}, root, templates="simple", progress=False, layout="folder",
                               limit=limit)
    entry = result["models"][0]
    return {"top1": entry["top1"], "top5": entry["top5"]}, time.perf_counter() - started, entry["n"]


def refcoco(model, name: str, root: Path, limit: int, protocol: dict | None = None) -> tuple[dict, float, int]:
    from explorer.data.grounding_sets import read_grounding_set
    from explorer.evaluation.grounding_eval import native_kind
    from explorer.evaluation.real_grounding import evaluate_grounding

    given = {key: value for key, value in (protocol or {}).items() if value is not None}
    dataset = read_grounding_set(root, split="testA", layout="refcoco", limit=limit,
                                 options={"dataset": "refcoco", **{k: given[k] for k in ("text",) if k in given}})
    kind = native_kind(model) or "generic"
    started = time.perf_counter()
    result = evaluate_grounding({name: model}, dataset, kinds=[kind], progress=False,
                                **{k: given[k] for k in ("box_alpha", "min_box_area") if k in given})
    scores = result["models"][0]["kinds"][kind]
    return ({"kind": kind, **{k: scores.get(k) for k in ("miou", "oiou", "box_accuracy")}},
            time.perf_counter() - started, scores["n_units"])


TASKS = {"negatives": negatives, "zeroshot": zeroshot, "refcoco": refcoco}
UNITS = {"negatives": "regions", "zeroshot": "pictures", "refcoco": "expressions"}


def markdown(document: dict) -> str:
    def pct(value):
        return "--" if value is None else f"{100 * value:.1f}"

    lines = []
    rows = document["rows"]
    for task, unit in UNITS.items():
        mine = [r for r in rows if r["task"] == task]
        if not mine:
            continue
        keys = [k for k in mine[0]["scores"] if k != "kind"]
        head = ["model", *(["kind"] if task == "refcoco" else []), *keys, f"{unit}/s", "n"]
        lines += [f"**{document['titles'][task]}**", "", "| " + " | ".join(head) + " |",
                  "|" + "|".join(["---"] * (2 if task == "refcoco" else 1) + ["---:"] * (len(head) - (2 if task ==
                                                                                                   "refcoco" else 1)))
                  + "|"]
        for r in mine:
            kind = [r["scores"]["kind"]] if task == "refcoco" else []
            lines.append("| " + " | ".join([r["model"], *kind, *(pct(r["scores"][k]) for k in keys),
                                            f"{r['items_per_s']:.1f}", str(r["n"])]) + " |")
        lines.append("")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", type=Path, default=Path.home() / ".cache" / "explorer" / "seed-tables")
    parser.add_argument("--models", nargs="+", help="demo zoo names (default: all)")
    parser.add_argument("--limit", type=int, default=50, help="regions per FG-OVD split, refer pictures (default 50)")
    parser.add_argument("--pictures", type=int, help="class-folder pictures (default: all, 80 classes x 3)")
    parser.add_argument("--scenes", type=int, default=120, help="scenes of the FG-OVD twin (the refer twin: a quarter)")
    parser.add_argument("--tasks", nargs="+", choices=list(TASKS), default=list(TASKS))
    parser.add_argument("--text", choices=("raw", "sent"), help="refcoco: the sentence field (default raw)")
    parser.add_argument("--box-alpha", type=float, help="refcoco: the box score's alpha (default ReCLIP's 0.5)")
    parser.add_argument("--min-box-area", type=float, help="refcoco: the share a box exceeds to answer (default 0)")
    parser.add_argument("--region", choices=("roi", "crop"), help="negatives: how a box is read (default roi)")
    parser.add_argument("--ties", choices=("hit", "miss"), help="negatives: a tie with the best negative (default hit)")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "seed-tables")
    args = parser.parse_args()

    from explorer.core.runtime import prepare_process

    prepare_process()
    import torch

    from explorer.zoo import Zoo

    torch.manual_seed(0)
    made = twins(args.work, args.scenes, 3)
    zoo = Zoo(ROOT / "checkpoints" / "demo")
    names = args.models or [m.name for m in zoo.manifests()]
    rows = []
    for name in names:
        model = zoo.load(name)
        for task in args.tasks:
            if task not in made:
                print(f"{task}: no twin in this build, left out", file=sys.stderr)
                continue
            limit = args.pictures if task == "zeroshot" else args.limit
            extra = {"protocol": {"text": args.text, "box_alpha": args.box_alpha,
                                  "min_box_area": args.min_box_area}} if task == "refcoco" else {}
            if task == "negatives":
                extra = {"protocol": {"region": args.region, "ties": args.ties}}
            scores, seconds, n = TASKS[task](model, name, made[task], limit, **extra)
            rows.append({"model": name, "method": model.method_name, "task": task, "scores": scores, "n": n,
                         "seconds": round(seconds, 2), "items_per_s": n / seconds if seconds else 0.0})
            print(f"{name} {task}: {scores} ({n} {UNITS[task]}, {n / seconds:.1f}/s)", flush=True)
    document = {"date": date.today().isoformat(), "machine": f"{platform.machine()}, {torch.get_num_threads()} "
                                                              f"threads, {platform.processor() or 'cpu'}",
                "settings": vars(args) | {"work": str(args.work), "out": str(args.out)},
                "titles": {"negatives": "FG-OVD twin: accuracy (%) per split",
                           "zeroshot": "Class folders (80 colour-shape classes): zero-shot top-1 / top-5 (%)",
                           "refcoco": "Refer twin, RefCOCO testA: the headline map's mIoU, oIoU, box accuracy (%)"},
                "rows": rows}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.with_suffix(".json").write_text(json.dumps(document, indent=2, default=str) + "\n")
    text = markdown(document)
    args.out.with_suffix(".md").write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
