"""Zero-shot classification (CIFAR-10/100, ImageNet-V2, ImageNet-O, a folder of classes): top-1 and top-5.

Each class is read as prompts, a template a time ("a photo of a {}." with the class name in place of ``{}``):
by default the set's own templates, as CLIP and clip_benchmark read it (CIFAR-10/100: CLIP's 18 CIFAR
templates; ImageNet-V2, ImageNet-O and a folder: CLIP's 80 ImageNet templates). For a method whose score is
the cosine of the global embeddings (``Model.global_score``) the class is CLIP's zero-shot classifier: each
prompt's text embedding normalised, the mean over the templates, normalised again; a picture's class scores
are the cosines of its normalised image embedding with those. For a method with a score of its own (FineLIP,
SEPS, CAFT, FLAIR: ``Model.similarity``), a class's score is that score averaged over the class's prompts, as
no single class embedding exists.

Pictures are read with the method's own preprocessing (``encode_image``: resize, centre crop) in
batches of ``BATCH``; each picture's five best classes go to a work file as its batch finishes, so a
rerun scores only what is missing. A picture that does not open is skipped with its reason.

The returned dict (the JSON ``explorer eval-zeroshot`` writes): ``format``, ``dataset`` (layout, root,
classes, where the names and templates came from, what was left out and why, notes), ``models``
([{name, method, score, top1, top5, n}], fractions; ``n`` the pictures scored), ``protocol`` (the template
set that ran and the set's default, the classes and the class set they came from), ``skipped_pictures``
({reason: count}) and ``timing`` ({model: {pictures, seconds}} for this run).
"""

from __future__ import annotations

import hashlib
import json
import os
import time

import numpy as np
import torch

from explorer.core.errors import ExplorerError
from explorer.data.class_sets import ClassSet, read_class_set
from explorer.data.class_sets.names import TEMPLATE_SETS
from explorer.data.class_sets.names import templates as read_templates
from explorer.data.retrieval_sets.base import skipped_by_reason
from explorer.evaluation.pace import Pace
from explorer.core.prefetch import AHEAD, prefetched
from explorer.evaluation.progress import progress as progress_bar
from explorer.evaluation.results import aligned_text
from explorer.evaluation.work_file import MemoryWork, WorkFile, skip_reasons

FORMAT = "explorer-zeroshot/1"
SKIPPED = "*"
BATCH = 32  # pictures per image forward
TEXT_CHUNK = 256  # prompts per text forward (or per similarity call)
TOP = 5


def prompts(classnames, templates) -> list[str]:
    """Every class's prompts, class by class, templates in order."""
    return [template.replace("{}", name) for name in classnames for template in templates]


def class_scorer(model, classnames, templates):
    """A function: ``ImageFeatures`` of N pictures -> [N, classes] float64 class scores (module docstring)."""
    texts, n_classes, n_templates = prompts(classnames, templates), len(classnames), len(templates)
    if model.global_score:
        parts = [torch.nn.functional.normalize(model.encode_text(texts[i:i + TEXT_CHUNK]).eot.float(), dim=-1)
                 for i in range(0, len(texts), TEXT_CHUNK)]
        mean = torch.cat(parts).reshape(n_classes, n_templates, -1).mean(dim=1)
        weights = torch.nn.functional.normalize(mean, dim=-1).cpu()

        def cosine(features):
            image = torch.nn.functional.normalize(features.cls.float().cpu(), dim=-1)
            return (image @ weights.T).double().numpy()
        return cosine

    def own_score(features):
        columns = [model.similarity(features, texts[i:i + TEXT_CHUNK]) for i in range(0, len(texts), TEXT_CHUNK)]
        scores = torch.cat(columns, dim=1).double().numpy()
        return scores.reshape(len(features), n_classes, n_templates).mean(axis=2)
    return own_score


def evaluate_zeroshot(models: dict, class_set, templates=None, work_file: str | os.PathLike | None = None,
                      progress: bool = True, batch: int = BATCH, say=None, ahead: int = AHEAD, **read) -> dict:
    """The module docstring's results for ``models`` ({name: loaded Model}) on ``class_set`` (a ``ClassSet``,
    or a folder read with ``read``: layout, limit, allow_pickle, classnames, class_set). ``templates``: None (the
    set's own: CLIP's 18 for CIFAR, its 80 ImageNet ones otherwise), "openai", "simple", "cifar", a file, or a list
    of strings with ``{}``. ``say``: where the forwards and the time estimate go (``pace``); ``ahead``: batches
    decoded in a background thread while the model runs (``prefetch``; 0: none)."""
    dataset = class_set if isinstance(class_set, ClassSet) else read_class_set(class_set, **read)
    if isinstance(templates, (list, tuple)):
        chosen, source, template_set = list(templates), f"given ({len(templates)})", "given"
    else:
        template_set = templates or dataset.templates
        chosen, source = read_templates(template_set)
    digest = hashlib.sha256(json.dumps([dataset.classnames, chosen]).encode()).hexdigest()[:16]
    header = {"format": FORMAT, "layout": dataset.layout, "root": str(dataset.root), "classes": digest}
    work = WorkFile(work_file, header) if work_file else MemoryWork(header)
    timing = {}
    for name, model in models.items():
        todo = [p for p in dataset.pictures if key(name, p.id) not in work and key(SKIPPED, p.id) not in work]
        started = time.perf_counter()
        if todo:
            batches = [todo[start:start + batch] for start in range(0, len(todo), batch)]
            pace, prompts_made = Pace(f"{name}: zero-shot", say), len(dataset.classnames) * len(chosen)
            per_batch = 0 if model.global_score else prompts_made  # own score: the prompts beside every batch
            pace.start(len(todo) + (prompts_made if model.global_score else per_batch * len(batches)),
                       f"{len(todo)} pictures in {len(batches)} batches, {prompts_made} prompts "
                       + ("encoded once" if model.global_score else "read beside each batch"))
            scorer = class_scorer(model, dataset.classnames, chosen)
            if model.global_score:
                pace.batch_done(prompts_made)
            for pictures, decoded in prefetched(progress_bar(batches, progress, f"{name}: zero-shot", unit="batch"),
                                                read_batch, ahead):
                score_batch(name, model, scorer, pictures, work, decoded)
                pace.batch_done(len(pictures) + per_batch)
        timing[name] = {"pictures": len(todo), "seconds": round(time.perf_counter() - started, 3)}
    protocol = {"templates": template_set if template_set in TEMPLATE_SETS + ("given",) else "file",
                "templates_default": dataset.templates, "classes": len(dataset.classnames),
                "classnames_from": dataset.names_from}
    return results(models, dataset, work, source, len(chosen), timing, protocol)


def key(model: str, picture: str) -> str:
    return json.dumps([model, picture])


def read_batch(pictures) -> tuple[list, list, list]:
    """(images, the pictures they are, skip records of those that do not open): the decode half of a batch."""
    images, kept, records = [], [], []
    for picture in pictures:
        try:
            images.append(picture.image())
            kept.append(picture)
        except (ExplorerError, OSError, ValueError) as error:
            reason = str(error) if isinstance(error, ExplorerError) else f"picture unreadable: {error}"
            records.append({"key": key(SKIPPED, picture.id), "picture": picture.id, "skipped": reason})
    return images, kept, records


def score_batch(name: str, model, scorer, pictures, work, decoded=None) -> None:
    images, kept, records = decoded if decoded is not None else read_batch(pictures)
    if kept:
        scores = scorer(model.encode_image(images))
        best = np.argsort(-scores, axis=1, kind="stable")[:, :TOP]
        records += [{"key": key(name, p.id), "model": name, "picture": p.id, "label": p.label,
                     "top": [int(c) for c in row]} for p, row in zip(kept, best)]
    work.add(*records)  # one write per batch: a kill loses at most this batch


def results(models: dict, dataset: ClassSet, work, templates_from: str, n_templates: int, timing: dict,
            protocol: dict | None = None) -> dict:
    skipped = skip_reasons(work, (key(SKIPPED, picture.id) for picture in dataset.pictures))
    entries = []
    for name, model in models.items():
        found = [work.records[key(name, p.id)] for p in dataset.pictures if key(name, p.id) in work]
        top1 = [r["top"][0] == r["label"] for r in found]
        top5 = [r["label"] in r["top"][:TOP] for r in found]
        entries.append({"name": name, "method": getattr(model, "method_name", "?"),
                        "score": str(getattr(model, "score_label", "") or ""),
                        "top1": float(np.mean(top1)) if found else None,
                        "top5": float(np.mean(top5)) if found else None, "n": len(found)})
    return {"format": FORMAT, "protocol": protocol or {},
            "dataset": {"layout": dataset.layout, "root": str(dataset.root), "classes": len(dataset.classnames),
                        "classnames_from": dataset.names_from, "templates_from": templates_from,
                        "templates": n_templates, "pictures": len(dataset.pictures),
                        "skipped": skipped_by_reason(dataset.skipped),
                        "skipped_examples": [[s.item, s.reason] for s in dataset.skipped[:20]],
                        "notes": list(dataset.notes)},
            "models": entries, "skipped_pictures": skipped, "timing": timing}


def csv_rows(result: dict) -> list[list]:
    rows = [["model", "method", "top1", "top5", "n"]]
    rows += [[m["name"], m["method"], m["top1"], m["top5"], m["n"]] for m in result["models"]]
    return rows


def table(result: dict) -> str:
    rows = [["model", "method", "top-1", "top-5", "n"]]
    rows += [[m["name"], m["method"], *("-" if m[k] is None else f"{100 * m[k]:.1f}" for k in ("top1", "top5")),
              str(m["n"])] for m in result["models"]]
    return aligned_text(rows)


__all__ = ["BATCH", "FORMAT", "class_scorer", "csv_rows", "evaluate_zeroshot", "prompts", "results", "table"]
