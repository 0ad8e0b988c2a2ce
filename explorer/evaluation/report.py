"""Benchmark results as Markdown: a table, and the README section that holds it.

    from explorer.evaluation.report import results_markdown, update_readme
    update_readme("README.md", results_markdown(results))

``results_table(results)`` takes what ``explorer.evaluation.runner.evaluate_zoo`` returns
(or one ``evaluate_model`` result, or a list of them) and writes one row per model, then one
per baseline; values are percentages with one decimal, "—" where a metric does not apply.
``update_readme`` replaces the text between ``<!-- eval-table:start -->`` and
``<!-- eval-table:end -->`` and nothing else; a README without the markers gets the section
appended at its end. The file is replaced atomically.
"""

from __future__ import annotations

import re
from pathlib import Path

from explorer.core.errors import InputError
from explorer.core.files import atomic_write
from explorer.evaluation.results import ATTRIBUTES

DASH = "—"
HEADINGS = "## Evaluation"

# (header, metric key) in column order, after model / method / ctx
COLUMNS = (
    ("long T2I R@1", "long_t2i_R@1"), ("long T2I R@5", "long_t2i_R@5"),
    ("long I2T R@1", "long_i2t_R@1"), ("long I2T R@5", "long_i2t_R@5"),
    ("short T2I R@1", "short_t2i_R@1"), ("hard-neg acc", "hard_negative_acc"),
    ("mIoU generic", "miou_generic"), ("mIoU native (kind)", "miou_native"),
    ("pointing generic", "pointing_generic"), ("pointing native", "pointing_native"),
    ("AUROC generic", "auroc_generic"), ("AUROC native", "auroc_native"),
    ("AUROC generic vs others", "auroc_generic_others"), ("AUROC native vs others", "auroc_native_others"),
    ("FLISM acc", "flism_acc"),
)
BASELINE_NAMES = {"centre-box": "baseline: centre box", "uniform": "baseline: uniform map", "chance": "chance"}


def results_table(results) -> str:
    """A Markdown table: one row per model (failed models say so), then the baselines."""
    models, baselines, errors = _parts(results)
    header = ["model", "method", "ctx", *(title for title, _ in COLUMNS), "score"]
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(["---"] * 3 + ["---:"] * len(COLUMNS) + ["---"]) + "|"]
    for model in models:
        name = model.get("name") or "?"
        if model.get("trained") is False:
            name += " (untrained)"
        metrics = model.get("metrics", {})
        cells = [_escape(name), _escape(model.get("method") or DASH), str(model.get("context_length") or DASH)]
        for _, key in COLUMNS:
            value = _percent(metrics.get(key))
            if key == "miou_native" and value != DASH and model.get("native_kind"):
                value += f" ({_escape(model['native_kind'])})"
            cells.append(value)
        cells.append(_escape(model.get("score") or DASH))  # what the retrieval columns ranked by
        lines.append("| " + " | ".join(cells) + " |")
    for name, message in errors.items():
        cells = [_escape(name), DASH, DASH] + [DASH] * (len(COLUMNS) + 1)
        cells[1] = _escape(f"failed: {message}")
        lines.append("| " + " | ".join(cells) + " |")
    for key, baseline in baselines.items():
        metrics = baseline.get("metrics", {})
        cells = [_escape(BASELINE_NAMES.get(key, f"baseline: {key}")), DASH, DASH]
        cells += [_percent(metrics.get(column)) for _, column in COLUMNS] + [DASH]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def hard_negatives_table(results) -> str:
    """A Markdown table of the fair hard-negative test: per model, the all-five accuracy with the scenes it
    is over, each attribute's accuracy within reach and the share of its negatives out of reach; then chance."""
    if not _parts(results)[0]:
        return ""
    header = ["model", "ctx", "all five (scenes)", *ATTRIBUTES, *(f"unseen {a}" for a in ATTRIBUTES)]
    lines = ["| " + " | ".join(header) + " |", "|---|---|" + "---:|" * (len(header) - 2)]
    for name, ctx, metrics, scenes in _hard_negative_rows(results):
        every = _percent(metrics.get("hard_negative_acc")) + (f" ({scenes})" if scenes is not None else "")
        cells = [_escape(name), ctx, every, *(_percent(metrics.get(f"hard_negative_acc/{a}")) for a in ATTRIBUTES),
                 *(_percent(metrics.get(f"hard_negative_unseen/{a}")) for a in ATTRIBUTES)]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def _hard_negative_rows(results) -> list[tuple]:
    """(name, ctx, metrics, scenes in reach) per model, then chance's row (scenes None)."""
    models, baselines, _ = _parts(results)
    rows = [(model.get("name") or "?", str(model.get("context_length") or DASH), model.get("metrics", {}),
             model.get("counts", {}).get("hard_negative_scenes_in_reach")) for model in models]
    if "chance" in baselines:
        rows.append((BASELINE_NAMES["chance"], DASH, baselines["chance"].get("metrics", {}), None))
    return rows


def shared_context_table(results) -> str:
    """A Markdown table: per model, each attribute's hard-negative accuracy over the changes within CLIP's
    first 77 tokens (``hard_negative_acc77/<attribute>``: the same negatives for every model); then chance."""
    models, _, _ = _parts(results)
    if not any(model.get("metrics", {}).get(f"hard_negative_acc77/{a}") is not None
               for model in models for a in ATTRIBUTES):
        return ""
    lines = ["| model | ctx | " + " | ".join(ATTRIBUTES) + " |", "|---|---|" + "---:|" * len(ATTRIBUTES)]
    for name, ctx, metrics, _ in _hard_negative_rows(results):
        cells = [_escape(name), ctx, *(_percent(metrics.get(f"hard_negative_acc77/{a}")) for a in ATTRIBUTES)]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


SHARED_CONTEXT_LEGEND = (
    "The same test over the changes within CLIP's first 77 tokens only: the same negatives for every model "
    "that reads that far, so a long-context model is compared with a 77-token one on like changes (the table "
    "above scores each model on every change it reads, and a change deep in a long caption is harder to see).")


KIND_COLUMNS = (("mIoU", "miou"), ("pointing", "pointing"), ("AUROC", "auroc"), ("AUROC vs others", "auroc_others"))


def kinds_table(results) -> str:
    """A Markdown table: a row per model and map kind it was scored on (generic, native, explainers), the
    model's best kind by mIoU in bold; empty when the results carry no per-kind scores."""
    models, _, _ = _parts(results)
    lines = ["| model | map kind | " + " | ".join(title for title, _ in KIND_COLUMNS) + " |",
             "|---|---|" + "---:|" * len(KIND_COLUMNS)]
    for model in models:
        kinds = model.get("map_kinds") or {}
        scored = {kind: values for kind, values in kinds.items() if values.get("miou") is not None}
        best = max(scored, key=lambda kind: scored[kind]["miou"]) if scored else None
        for kind, values in kinds.items():
            label = f"**{_escape(kind)}**" if kind == best else _escape(kind)
            cells = [_escape(model.get("name") or "?"), label, *(_percent(values.get(key)) for _, key in KIND_COLUMNS)]
            lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n" if len(lines) > 2 else ""


HARD_NEGATIVE_LEGEND = (
    "Hard negatives, the fair test: each scene's long caption against its five one-attribute changes, on its "
    "own image. A change is scored only when it is within the model's reach: the token ids the model reads for "
    "it, after its cut at ctx tokens (or CAFT's 77-token chunks), differ from the caption's. A change past the "
    "cut reads as the caption itself; it would tie, and a tie counts as a miss, so it is left out and counted "
    "as unseen. Per attribute: the share of changes within reach that the caption outscores (chance 50); "
    "unseen: the share left out; all five: the caption outscores all five, over the scenes (count in brackets) "
    "whose five changes are all within reach.")


def results_markdown(results) -> str:
    """The table with a line saying what it was computed on, and a legend: what the README section holds."""
    dataset = results.get("dataset", {}) if isinstance(results, dict) else {}
    settings = results.get("settings", {}) if isinstance(results, dict) else {}
    parts = []
    if dataset:
        parts.append(
            f"Synthetic world, `{dataset.get('split', '?')}` split (dataset seed {dataset.get('seed', '?')}, "
            f"{dataset.get('image_size', '?')} px): retrieval and hard negatives on "
            f"{dataset.get('retrieval_scenes', '?')} scenes, grounding and FLISM on the first "
            f"{dataset.get('grounding_scenes', '?')} ({dataset.get('object_sentences', '?')} object sentences)"
            + (f"; seed {settings['seed']}." if "seed" in settings else "."))
    parts.append(results_table(results).rstrip("\n"))
    parts.append(
        "Percentages. Retrieval: images vs long (or short) captions, ties count against the model. "
        "Hard-neg acc: the long caption outscores all of its one-attribute-changed negatives, over the scenes "
        "whose negatives are all within the model's reach (the fair test, below). mIoU: Otsu mask "
        "of each object sentence's map vs the object's mask; pointing: the map's peak lies in the object. "
        "AUROC: the chance that a pixel of the named object outscores a background pixel (vs others: a pixel "
        "of another object of the scene); 50 = no preference. "
        "Native: the map the method names as its own (`Method.preferred_native_map`, in brackets; — where it names none). "
        "FLISM acc: each object sentence's region (4 quadrants + centre) is the one its box overlaps most. "
        "Score: what the model's retrieval ranked by (FineLIP*, CAFT++, SEPS's late interaction, a cosine...). "
        "Written by `explorer eval`.")
    hard = hard_negatives_table(results)
    if hard:
        parts.append(HARD_NEGATIVE_LEGEND)
        parts.append(hard.rstrip("\n"))
    shared = shared_context_table(results)
    if shared:
        parts.append(SHARED_CONTEXT_LEGEND)
        parts.append(shared.rstrip("\n"))
    kinds = kinds_table(results)
    if kinds:
        parts.append("Every map kind each model offers, on the same object sentences (bold: the model's best mIoU). "
                     "gradcam, legrad, clearclip and naclip are the training-free explainers "
                     "(`explorer/models/explainers.py`); the per-head variants are left out; a map that is the "
                     "same for every sentence (GOAL's self-attention) is scored as it is.")
        parts.append(kinds.rstrip("\n"))
    return "\n\n".join(parts) + "\n"


def update_readme(readme_path, table: str, marker: str = "eval-table", heading: str = HEADINGS) -> bool:
    """Put ``table`` between ``<!-- {marker}:start -->`` and ``<!-- {marker}:end -->`` in the file.

    Only the text between the markers changes. Without the markers, ``heading`` and the marked
    section are appended at the end (a missing file is created). Markers that are unpaired,
    repeated or out of order are an error (nothing is written). Returns whether the file changed.
    """
    path = Path(readme_path)
    start, end = f"<!-- {marker}:start -->", f"<!-- {marker}:end -->"
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raw = b""
    text = raw.decode("utf-8")
    newline = "\r\n" if "\r\n" in text else "\n"
    body = newline + newline.join(table.strip("\n").splitlines()) + newline
    starts, ends = text.count(start), text.count(end)
    if starts == 0 and ends == 0:
        if not text or text.endswith(newline * 2):
            lead = ""
        else:
            lead = newline if text.endswith(newline) else newline * 2
        section = (heading + newline * 2 if heading else "") + start + body + end + newline
        updated = text + lead + section
    elif starts == 1 and ends == 1 and text.index(start) < text.index(end):
        head, rest = text.split(start, 1)
        _, tail = rest.split(end, 1)
        updated = head + start + body + end + tail
    else:
        raise InputError(f"{path}: expected one {start} before one {end}, found {starts} start and {ends} end "
                         "marker(s); fix them by hand")
    if updated == text:
        return False
    with atomic_write(path, binary=True) as out:  # bytes: the file's own line ends are kept
        out.write(updated.encode("utf-8"))
    return True


def _parts(results) -> tuple[list[dict], dict, dict]:
    if isinstance(results, list):
        return results, {}, {}
    if "metrics" in results:  # one evaluate_model result
        return [results], {}, {}
    return list(results.get("models", [])), dict(results.get("baselines", {})), dict(results.get("errors", {}))


def _percent(value) -> str:
    if value is None:
        return DASH
    try:
        number = float(value)
    except (TypeError, ValueError):
        return DASH
    if number != number:  # NaN
        return DASH
    return f"{100 * number:.1f}"


def _escape(text) -> str:
    return re.sub(r"\s+", " ", str(text)).replace("|", "\\|")


__all__ = ["COLUMNS", "hard_negatives_table", "results_markdown", "results_table", "shared_context_table",
           "update_readme"]
