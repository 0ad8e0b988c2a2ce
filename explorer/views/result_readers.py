"""One reader per evaluation family: a results document (and its work file) as table rows, cells and units.

Each reader gives the long rows ``results_table.results_frame`` reads (model, dataset, task, metric, value:
the table as ``explorer results table`` shapes it), the cells that open units, and the units as one frame
built column by column (no frame row by row: a 50,000-unit result is a few list appends per unit).
Work files are read as they are, line by line (``core.jsonl``); their headers name the dataset's layout
options (RefCOCO's dataset and split_by), the results files their root.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from explorer.core.jsonl import read_jsonl
from explorer.views.result_cells import (BENCHMARK, GROUNDING, GROUNDING_METRICS, GROUNDING_UNIT_METRIC, NEGATIVES,
                                         PAST_TOP, RETRIEVAL, RIGHT_AT, ZEROSHOT, Cell, Part, loads,
                                         column_name)

WORK_SUFFIX = ".work.jsonl"  # ``explorer eval-*``'s: beside --out
JOB_WORK = {GROUNDING: "grounding-work.jsonl", NEGATIVES: "negatives-work.jsonl",
            ZEROSHOT: "zeroshot-work.jsonl"}  # an evaluation job's, in its run folder


@dataclass
class Read:
    rows: list = field(default_factory=list)  # long table rows
    units: pd.DataFrame | None = None
    parts: list = field(default_factory=list)
    cells: dict = field(default_factory=dict)
    notes: list = field(default_factory=list)


def work_file(path: Path | None, family: str, refcoco: tuple[str, str] | None = None) -> Path | None:
    """Where the work file of the results at ``path`` is: ``<path>.work.jsonl``, else the job's in its folder
    (``refcoco``: (dataset, split) of a referring job's part), else None."""
    if path is None:
        return None
    beside = path.with_name(path.name + WORK_SUFFIX)
    if beside.is_file():
        return beside
    name = f"refcoco-{refcoco[0]}-{refcoco[1]}-work.jsonl" if refcoco else JOB_WORK.get(family)
    job = path.with_name(name) if name else None
    return job if job is not None and job.is_file() else None


def work_records(path: Path | None):
    """(header, records) of a work file; (None, []) when there is none."""
    if path is None:
        return None, []
    lines = [line for line in Path(path).read_bytes().splitlines() if line.strip()]
    try:  # one parse of the whole file as an array: a 100,000-line file in a fraction of a line-by-line read
        values = loads(b"[" + b",".join(lines) + b"]")
    except ValueError:  # a line torn by a kill (the evaluation drops it when it resumes), or worse: said by line
        values = [record for _, record in read_jsonl(path, skip_torn_tail=True)]
    first = values[0] if values else None
    header = first.get("header") if isinstance(first, dict) else None
    return header, [record for record in values[1:] if isinstance(record, dict) and "key" in record]


def header_of(path: Path | None) -> dict | None:
    """A work file's header (its first line) without reading the rest."""
    if path is None:
        return None
    with open(path, encoding="utf-8") as lines:
        first = lines.readline()
    try:
        return json.loads(first).get("header")
    except (ValueError, AttributeError):
        return None


def frame(columns: dict) -> pd.DataFrame:
    """A units frame from equal-length columns (the readers give the id columns as strings)."""
    return pd.DataFrame(columns)


def number(value) -> float:
    return np.nan if value is None else float(value)


# ---- grounding: eval-grounding (any layout), and a referring job's several (dataset, split) -------------------


def read_grounding(path: Path | None, document: dict) -> Read:
    read = Read(notes=[f"grounding units: {GROUNDING_METRICS_NOTE}"])
    if document.get("format") == "explorer-referring/1":
        pieces = list((document.get("results") or {}).items())
    else:
        pieces = [(None, document)]
    blocks = []
    for label, piece in pieces:
        block = piece.get("dataset") or {}
        refcoco = None
        if label is not None:
            refcoco = _refcoco_part(label, block)
        work = work_file(path, GROUNDING, refcoco)
        header = header_of(work) or {}
        options = dict(header.get("options") or {})
        label = label or options.get("label") or " ".join(str(v) for v in (block.get("layout"), block.get("split")) if v)
        read.parts.append(Part(label, str(block.get("layout") or ""), str(block.get("root") or ""), block.get("split"),
                               block.get("units"), options, {"work": str(work) if work else None}))
        for model in piece.get("models") or []:
            for kind, scores in (model.get("kinds") or {}).items():
                for metric in ("miou", "oiou", "box_accuracy", "pointing", "auroc"):
                    if scores.get(metric) is None:
                        continue
                    column = f"{kind}/{metric}"
                    read.rows.append({"model": model["name"], "dataset": label, "task": GROUNDING, "metric": column,
                                      "value": scores[metric]})
                    unit_metric = GROUNDING_UNIT_METRIC[metric]
                    read.cells[(model["name"], column_name(label, column))] = Cell(
                        model["name"], column_name(label, column), label, kind, unit_metric,
                        right_at=RIGHT_AT[unit_metric])
        pairs = [(model["name"], kind) for model in piece.get("models") or [] for kind in model.get("kinds") or {}]
        blocks.append(_grounding_units(piece.get("units") or [], label, pairs))
    read.units = pd.concat(blocks, ignore_index=True) if len(blocks) > 1 else blocks[0] if blocks else \
        pd.DataFrame(columns=list(GROUNDING_COLUMNS))
    return read


GROUNDING_METRICS_NOTE = ("IoU of the Otsu mask with the truth mask, pointing hit (1 or 0), pixel AUROC, and the "
                          "IoU of the picked box with the referred one")


def _refcoco_part(label: str, block: dict) -> tuple[str, str] | None:
    """(dataset folder name, split) of a referring part: its root's folder name and the split."""
    root, split = block.get("root"), block.get("split")
    return (Path(root).name, split) if root and split else None


def _grounding_units(units: list, label: str, pairs: list[tuple[str, str]]) -> pd.DataFrame:
    """A row per (unit, model, kind) with a score; the unit id is "<picture>:<position among the picture's
    units>", as the work file keeps each picture's units in a list. Built a column at a time (comprehensions
    over the units, one (model, kind) at a time): 50,000 units of two models and two kinds are 200,000 rows."""
    units = [unit for unit in units if not unit.get("label_only")]  # scored apart, not in the table's numbers
    pictures = [str(unit.get("picture")) for unit in units]
    positions, last, position = [], None, 0
    for picture in pictures:
        position = position + 1 if picture == last else 0
        positions.append(position)
        last = picture
    base = pd.DataFrame({"unit_id": [f"{p}:{n}" for p, n in zip(pictures, positions)], "dataset": label,
                         "picture": pictures, "text": [str(unit.get("text") or "") for unit in units],
                         "picture_index": [unit.get("picture_index") for unit in units], "position": positions})
    blocks = []
    for model, kind in pairs:
        scores = [(unit.get("scores") or {}).get(model, {}).get(kind) for unit in units]
        kept = np.array([s is not None for s in scores], dtype=bool)
        if not kept.any():
            continue
        scores = [s for s in scores if s is not None]
        block = base[kept].assign(model=model, kind=kind)
        for name in ("iou", "auroc", "box_iou"):
            block[name] = np.array([s.get(name) for s in scores], dtype=float)  # None -> NaN
        block["pointing"] = np.array([None if s.get("pointing") is None else bool(s["pointing"]) for s in scores],
                                     dtype=float)
        blocks.append(block)
    if not blocks:
        return pd.DataFrame(columns=list(GROUNDING_COLUMNS))
    return pd.concat(blocks, ignore_index=True)[list(GROUNDING_COLUMNS)]


GROUNDING_COLUMNS = ("unit_id", "dataset", "model", "kind", "picture", "text", "picture_index", "position",
                     *GROUNDING_METRICS)


# ---- negatives: eval-negatives, from its work file ---------------------------------------------------------


def read_negatives(path: Path | None, document: dict) -> Read:
    block = document.get("dataset") or {}
    label = str(block.get("layout") or "negatives")
    work = work_file(path, NEGATIVES)
    read = Read(parts=[Part(label, label, str(block.get("root") or ""), None, None,
                            {"splits": sorted(block.get("splits") or {})},
                            {"work": str(work) if work else None})])
    ties_hit = (document.get("protocol") or {}).get("ties") == "hit"  # earlier runs counted a tie as a miss
    for model in document.get("models") or []:
        for split, value in (model.get("accuracy") or {}).items():
            if value is None:
                continue
            column = f"accuracy/{split}"
            read.rows.append({"model": model["name"], "dataset": label, "task": NEGATIVES, "metric": column,
                              "value": value})
            read.cells[(model["name"], column_name(label, column))] = Cell(
                model["name"], column_name(label, column), label, split, "margin", right_at=RIGHT_AT["margin"],
                strict=not ties_hit)
    _, records = work_records(work)
    if work is None:
        read.notes.append("no work file beside these results (<out>.work.jsonl): the table opens, its units do not")
    columns = {name: [] for name in ("unit_id", "dataset", "model", "kind", "picture", "text", "margin", "correct",
                                     "positive_score", "negative_score", "negative")}
    for record in records:
        scores = record.get("scores")
        if "model" not in record or not scores or len(scores) < 2:
            continue
        beaten = int(np.argmax(scores[1:]))
        columns["unit_id"].append(record["item"])
        columns["dataset"].append(label)
        columns["model"].append(record["model"])
        columns["kind"].append(record.get("split", ""))
        columns["picture"].append("")
        columns["text"].append("")
        columns["margin"].append(float(scores[0]) - float(scores[1 + beaten]))
        columns["correct"].append(float(bool(record.get("correct"))))
        columns["positive_score"].append(float(scores[0]))
        columns["negative_score"].append(float(scores[1 + beaten]))
        columns["negative"].append(beaten)
    read.units = frame(columns)
    return read


# ---- zero-shot: eval-zeroshot, from its work file ----------------------------------------------------------


def read_zeroshot(path: Path | None, document: dict) -> Read:
    block = document.get("dataset") or {}
    label = str(block.get("layout") or "zeroshot")
    work = work_file(path, ZEROSHOT)
    read = Read(parts=[Part(label, label, str(block.get("root") or ""), None, None, {},
                            {"work": str(work) if work else None, "classes": block.get("classes")})])
    for model in document.get("models") or []:
        for metric, k in (("top1", 1), ("top5", 5)):
            if model.get(metric) is None:
                continue
            read.rows.append({"model": model["name"], "dataset": label, "task": ZEROSHOT, "metric": metric,
                              "value": model[metric]})
            read.cells[(model["name"], column_name(label, metric))] = Cell(
                model["name"], column_name(label, metric), label, "", "rank", right_at=k)
    _, records = work_records(work)
    if work is None:
        read.notes.append("no work file beside these results (<out>.work.jsonl): the table opens, its units do not")
    columns = {name: [] for name in ("unit_id", "dataset", "model", "kind", "picture", "text", "rank", "label",
                                     "predicted", "top")}
    for record in records:
        top = record.get("top")
        if "model" not in record or not top:
            continue
        label_id = int(record.get("label", -1))
        columns["unit_id"].append(record["picture"])
        columns["dataset"].append(label)
        columns["model"].append(record["model"])
        columns["kind"].append("")
        columns["picture"].append(record["picture"])
        columns["text"].append("")
        columns["rank"].append(float(top.index(label_id) + 1 if label_id in top else PAST_TOP))
        columns["label"].append(label_id)
        columns["predicted"].append(int(top[0]))
        columns["top"].append(list(top))
    read.units = frame(columns)
    return read


# ---- retrieval: eval-retrieval's per-query records -----------------------------------------------------------


def read_retrieval(path: Path | None, document: dict) -> Read:
    block = document.get("dataset") or {}
    label = " ".join(str(v) for v in (block.get("layout"), block.get("split")) if v) or "retrieval"
    read = Read(parts=[Part(label, str(block.get("layout") or ""), str(block.get("root") or ""), block.get("split"),
                            None, {}, {})])
    columns = {name: [] for name in ("unit_id", "dataset", "model", "kind", "picture", "text", "rank", "query",
                                     "answer", "top")}
    for name, entry in (document.get("models") or {}).items():
        for key, value in entry.items():
            direction = key.split("_", 1)[0]
            if direction not in ("t2i", "i2t") or not isinstance(value, (int, float)):
                continue
            read.rows.append({"model": name, "dataset": label, "task": RETRIEVAL, "metric": key, "value": value})
            k = int(key.split("@")[1]) if "_R@" in key else 1
            read.cells[(name, column_name(label, key))] = Cell(name, column_name(label, key), label, direction,
                                                               "rank", right_at=k)
        if "rsum" in entry:
            read.rows.append({"model": name, "dataset": label, "task": RETRIEVAL, "metric": "rsum",
                              "value": entry["rsum"]})
            read.cells[(name, column_name(label, "rsum"))] = Cell(name, column_name(label, "rsum"), label, None, "rank")
        queries = entry.get("queries") or {}
        for record in queries.get("t2i", []):
            _query_row(columns, label, name, "t2i", f"t2i:{record['caption']:08d}", record["caption"],
                       [record["image"]], record)
        for record in queries.get("i2t", []):
            _query_row(columns, label, name, "i2t", f"i2t:{record['image']:08d}", record["image"],
                       record.get("captions", []), record)
        if entry and not queries:
            read.notes.append(f"{name}: no per-query records (--no-queries): its cells list nothing")
    read.units = frame(columns)
    return read


def _query_row(columns, label, name, direction, unit_id, query, answers, record) -> None:
    columns["unit_id"].append(unit_id)
    columns["dataset"].append(label)
    columns["model"].append(name)
    columns["kind"].append(direction)
    columns["picture"].append("")
    columns["text"].append("")
    columns["rank"].append(float(record["rank"]))
    columns["query"].append(int(query))
    columns["answer"].append(list(answers))
    columns["top"].append(record.get("top") or [])


# ---- explorer eval: means only ---------------------------------------------------------------------------


def read_benchmark(path: Path | None, document: dict) -> Read:
    label = str((document.get("dataset") or {}).get("split") or "synthetic")
    read = Read(notes=["explorer eval keeps only its means: for units, run eval-grounding or eval-negatives "
                       "on the synthetic twin (explorer data refer-twin, negatives-twin)"])
    for model in document.get("models") or []:
        for metric, value in (model.get("metrics") or {}).items():
            if value is None:
                continue
            read.rows.append({"model": model["name"], "dataset": label, "task": BENCHMARK, "metric": metric,
                              "value": value})
            read.cells[(model["name"], column_name(label, metric))] = Cell(model["name"], column_name(label, metric),
                                                                          label, None, metric)
    read.units = frame({name: [] for name in ("unit_id", "dataset", "model", "kind", "picture", "text")})
    return read


READERS = {GROUNDING: read_grounding, NEGATIVES: read_negatives, ZEROSHOT: read_zeroshot,
           RETRIEVAL: read_retrieval, BENCHMARK: read_benchmark}


__all__ = ["READERS", "Read", "header_of", "work_file", "work_records"]
