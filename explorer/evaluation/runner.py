"""The benchmark: every model of a zoo on a held-out split of the synthetic world.

    from explorer.evaluation.runner import evaluate_zoo
    from explorer.evaluation.results import write_results
    results = evaluate_zoo("checkpoints/", "data/synthetic", split="test")
    write_results(results, "results.json")

``evaluate_model(model, scenes)`` measures one model (anything with the public
``explorer.Model`` surface: ``encode_image``, ``encode_text``, ``similarity``, ``ids_read``,
``sentence_maps``, ``map_kinds``, ``method_name``, ``context_length``). What it
computes, on the scenes given (retrieval) and on the first ``grounding_limit``
of them (grounding and FLISM):

Retrieval (``recall_at_k``; ties count against the model)
    ``long_t2i_R@1``, ``long_t2i_R@5``, ``long_i2t_R@1``, ``long_i2t_R@5``: images vs
    their long captions, one caption per image. Images are encoded once, in batches of
    ``image_batch``; captions are scored against all images ``caption_chunk`` at a time
    (``model.similarity(image_features, captions)``, i.e. the method's own caption score,
    e.g. CAFT++ over chunks for CAFT), so memory stays at [n_images, caption_chunk].
    ``short_t2i_R@1``: the same with the short captions, text -> image.

Hard negatives (``hard_negative_accuracy``; a tie is a miss), the fair test
    A negative (the long caption with one attribute changed) is scored only when it is within
    the model's reach: the token ids the model reads for it (``model.ids_read``, after its cut
    at ``context_length``, or CAFT's chunks) differ from the long caption's. A change past the
    cut reads as the caption itself, would tie and count as a miss, and says nothing of the model.
    ``hard_negative_acc/<attribute>`` (colour, shape, size, texture, position): share of that
    attribute's negatives within reach that the long caption beats; ``hard_negative_unseen/<attribute>``:
    share of that attribute's negatives out of reach (left out). ``hard_negative_acc77/<attribute>``:
    the same accuracy over the negatives whose change lies within CLIP's first 77 tokens
    (``SHARED_CONTEXT``): the same negatives for every model that reads that far, so a long-context
    model and a 77-token one are compared on like captions (a change deep in a long caption is
    harder to see). ``hard_negative_acc``: share of
    the scenes whose negatives are all within reach (``counts["hard_negative_scenes_in_reach"]``)
    whose long caption outscores every one of them on its own image. The long caption and its
    negatives are scored in the same call.

Grounding (``miou_*``, ``pointing_*``) and FLISM (``flism_acc``)
    ``explorer.evaluation.grounding_eval``.

Every value is a share in [0, 1], or None where it is undefined (no native map, nothing
scored); the keys and the results file are ``explorer.evaluation.results``. The reference
rows (centre box, uniform map, chance) are ``explorer.evaluation.baselines``.

Scenes are the first ``limit`` of the split, in the dataset's order (the dataset's seed
fixes them); ``seed`` seeds torch and numpy inside each model's run, so a run is repeatable.
"""

from __future__ import annotations

import json
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterable, Sequence

import numpy as np
import torch

from explorer.core.errors import InputError
from explorer.evaluation.baselines import baselines
from explorer.evaluation.grounding_eval import (flism_metrics, grounding_metrics, native_kind,
                                                object_sentences)
from explorer.evaluation.progress import progress as progress_bar
from explorer.evaluation.results import ATTRIBUTES, DEFAULT_LIMIT, FORMAT, METRIC_KEYS, VERSION, finite_or_none
from explorer.evaluation.metrics.retrieval import recall_at_k
from explorer.evaluation.metrics.classification import hard_negative_accuracy

DEFAULT_GROUNDING_LIMIT = 100  # the first scenes, for grounding and FLISM
DEFAULT_CAPTION_CHUNK = 64  # captions scored against all images at once
DEFAULT_IMAGE_BATCH = 32  # images encoded at once


# ---- one model --------------------------------------------------------------------------------------


def evaluate_model(model, scenes: Sequence, *, grounding_limit: int | None = DEFAULT_GROUNDING_LIMIT,
                   caption_chunk: int = DEFAULT_CAPTION_CHUNK, image_batch: int = DEFAULT_IMAGE_BATCH,
                   seed: int = 0, progress: bool = False) -> dict:
    """Every metric of the module docstring for ``model`` on ``scenes`` (all of them for retrieval,
    the first ``grounding_limit`` for grounding and FLISM; None = all).

    Returns {"name", "method", "context_length", "trained", "native_kind", "metrics", "counts",
    "map_kinds", "seconds"}; ``metrics`` has exactly the keys of ``METRIC_KEYS``; ``map_kinds`` holds
    {kind: {"miou", "pointing", "auroc", "auroc_others"}} for every map kind scored (generic, native, explainers).
    """
    scenes = list(scenes)
    if not scenes:
        raise InputError("there are no scenes to evaluate on: check the dataset folder and its split")
    if caption_chunk < 1 or image_batch < 1:
        raise InputError("caption_chunk and image_batch must be at least 1")
    grounding_scenes = scenes if grounding_limit is None else scenes[:max(0, int(grounding_limit))]
    native = native_kind(model)
    seconds: dict[str, float] = {}
    metrics: dict[str, float | None] = {}
    counts: dict[str, int] = {"retrieval_scenes": len(scenes), "grounding_scenes": len(grounding_scenes)}
    started = time.perf_counter()
    with _seeded(seed):
        clock = time.perf_counter()
        features = encode_images(model, [s.image for s in scenes], image_batch, progress)
        seconds["encode_images"] = time.perf_counter() - clock

        clock = time.perf_counter()
        long = score_captions(model, features, [s.long_caption for s in scenes], caption_chunk)
        recall = recall_at_k(long, ks=(1, 5))
        short = score_captions(model, features, [s.short_caption for s in scenes], caption_chunk)
        short_recall = recall_at_k(short, ks=(1,))
        metrics.update({"long_t2i_R@1": recall.text_to_image[1], "long_t2i_R@5": recall.text_to_image[5],
                        "long_i2t_R@1": recall.image_to_text[1], "long_i2t_R@5": recall.image_to_text[5],
                        "short_t2i_R@1": short_recall.text_to_image[1]})
        seconds["retrieval"] = time.perf_counter() - clock

        clock = time.perf_counter()
        hard, hard_counts = hard_negative_metrics(model, features, scenes, caption_chunk, own=long.diagonal())
        metrics.update(hard)
        counts.update(hard_counts)
        seconds["hard_negatives"] = time.perf_counter() - clock
        del features

        clock = time.perf_counter()
        grounding, n_sentences, per_kind = grounding_metrics(model, grounding_scenes, native, progress)
        metrics.update(grounding)
        counts["object_sentences"] = n_sentences
        seconds["grounding"] = time.perf_counter() - clock

        clock = time.perf_counter()
        metrics["flism_acc"], counts["flism_scored"] = flism_metrics(model, grounding_scenes, progress)
        seconds["flism"] = time.perf_counter() - clock
    seconds["total"] = time.perf_counter() - started
    return {"name": getattr(model, "name", ""), "method": getattr(model, "method_name", ""),
            "context_length": int(getattr(model, "context_length", 0) or 0),
            "score": str(getattr(model, "score_label", "") or ""),  # what the retrieval columns ranked by
            "trained": bool(getattr(model, "trained", True)), "native_kind": native,
            "metrics": {key: finite_or_none(metrics.get(key)) for key in METRIC_KEYS}, "counts": counts,
            "map_kinds": {kind: {key: finite_or_none(value) for key, value in scores.items()}
                          for kind, scores in per_kind.items()},
            "seconds": {key: round(value, 3) for key, value in seconds.items()}}


def encode_images(model, images: Sequence, batch: int = DEFAULT_IMAGE_BATCH, progress: bool = False):
    """``model.encode_image`` over ``images`` in batches, concatenated (method-specific fields kept)."""
    from explorer.models.features import concat_features

    parts = []
    for start in progress_bar(range(0, len(images), batch), progress, "encode images", unit="batch"):
        parts.append(model.encode_image(list(images[start:start + batch])))
    return concat_features(parts)


def score_captions(model, image_features, captions: Sequence[str], chunk: int = DEFAULT_CAPTION_CHUNK) -> torch.Tensor:
    """[n_images, n_captions] float32 on CPU: ``model.similarity`` on ``chunk`` captions at a time."""
    captions = list(captions)
    columns = [model.similarity(image_features, captions[start:start + chunk]).float().cpu()
               for start in range(0, len(captions), chunk)]
    scores = torch.cat(columns, dim=1)
    if scores.shape != (len(image_features), len(captions)):
        raise ValueError(f"similarity returned {tuple(scores.shape)} scores for {len(image_features)} images x "
                         f"{len(captions)} captions")
    return scores


def hard_negative_metrics(model, image_features, scenes: Sequence, chunk: int = DEFAULT_CAPTION_CHUNK,
                          own: torch.Tensor | None = None) -> tuple[dict[str, float | None], dict[str, int]]:
    """Overall and per-attribute hard-negative accuracy over the negatives within the model's reach, the
    share of each attribute's negatives out of reach, and the counts: scenes with negatives
    (``hard_negative_scenes``) and scenes whose negatives are all within reach (``hard_negative_scenes_in_reach``,
    those of ``hard_negative_acc``).

    Scenes are scored in groups whose captions (long caption + negatives within reach) fit in ``chunk``;
    each scene's captions are read off its own image's row of the group's score matrix. ``own``: each scene's
    picture against its own long caption, as retrieval scored it (its score matrix's diagonal): the long
    captions are then not encoded a second time, only the negatives (issue 63: FineLIP's long captions read
    twice made the pass 1.49x its forwards).
    """
    reach = {i: in_reach(model, scene) for i, scene in enumerate(scenes) if scene.hard_negatives}
    kept = {i: [n for n, within in zip(scenes[i].hard_negatives, seen) if within] for i, seen in reach.items()}
    early = {i: [early for early, within in zip(within_shared_context(scenes[i]), seen) if within]
             for i, seen in reach.items()}  # parallel to kept: the change lies within CLIP's first 77 tokens
    positives, negatives = [], []  # the scenes whose negatives are all within reach
    per_attribute: dict[str, list[bool]] = {a: [] for a in ATTRIBUTES}
    shared: dict[str, list[bool]] = {a: [] for a in ATTRIBUTES}
    unseen: dict[str, list[bool]] = {a: [] for a in ATTRIBUTES}
    group: list[int] = []

    def flush():
        if not group:
            return
        captions, spans = [], []
        for i in group:
            spans.append(len(captions))
            if own is None:
                captions.append(scenes[i].long_caption)
            captions.extend(n.caption for n in kept[i])
        rows = torch.as_tensor(group)
        scores = score_captions(model, image_features[rows], captions, max(chunk, len(captions))).double()
        for row, (i, start) in enumerate(zip(group, spans)):
            if own is None:
                scored = scores[row, start:start + 1 + len(kept[i])].numpy()
            else:  # the long caption's score as retrieval made it, then the negatives'
                scored = np.concatenate([[float(own[i])], scores[row, start:start + len(kept[i])].numpy()])
            if all(reach[i]):
                positives.append(scored[0])
                negatives.append(scored[1:])
            for negative, score, first in zip(kept[i], scored[1:], early[i]):
                per_attribute.setdefault(negative.attribute, []).append(bool(scored[0] > score))  # a tie is a miss
                if first:
                    shared.setdefault(negative.attribute, []).append(bool(scored[0] > score))
        group.clear()

    size = 0
    for i, seen in reach.items():
        for negative, within in zip(scenes[i].hard_negatives, seen):
            unseen.setdefault(negative.attribute, []).append(not within)
        if not kept[i]:
            continue
        need = 1 + len(kept[i])
        if group and size + need > chunk:
            flush()
            size = 0
        group.append(i)
        size += need
    flush()

    metrics: dict[str, float | None] = {f"hard_negative_{kind}/{a}": None for kind in ("acc", "unseen", "acc77")
                                        for a in ATTRIBUTES}
    for attribute, left_out in unseen.items():  # every negative, within reach or not
        if left_out:
            metrics[f"hard_negative_unseen/{attribute}"] = float(np.mean(left_out))
        if per_attribute.get(attribute):
            metrics[f"hard_negative_acc/{attribute}"] = float(np.mean(per_attribute[attribute]))
        if shared.get(attribute):
            metrics[f"hard_negative_acc77/{attribute}"] = float(np.mean(shared[attribute]))
    counts = {"hard_negative_scenes": len(reach), "hard_negative_scenes_in_reach": len(positives)}
    if not positives:
        metrics["hard_negative_acc"] = None
        return metrics, counts
    width = max(len(n) for n in negatives)
    padded = np.full((len(negatives), width), -np.inf)  # a missing negative loses to anything
    for row, values in enumerate(negatives):
        padded[row, :len(values)] = values
    metrics["hard_negative_acc"] = hard_negative_accuracy(np.asarray(positives), padded)
    return metrics, counts


SHARED_CONTEXT = 77  # CLIP's context: the part of a caption every CLIP-family model reads


def within_shared_context(scene) -> list[bool]:
    """Whether each hard negative of ``scene`` changes the caption within its first ``SHARED_CONTEXT`` CLIP
    tokens (CLIP's tokenizer and cut, whatever the model's own)."""
    from explorer.models.tokenizer import tokenize

    batch = tokenize([scene.long_caption, *(n.caption for n in scene.hard_negatives)], SHARED_CONTEXT)
    return [not torch.equal(row, batch.ids[0]) for row in batch.ids[1:]]


def in_reach(model, scene) -> list[bool]:
    """Whether the model reads each hard negative of ``scene`` apart from its long caption: the token ids it
    reads differ (``model.ids_read``). A change past the model's cut reads the same and cannot be scored."""
    caption, *changed = model.ids_read([scene.long_caption, *(n.caption for n in scene.hard_negatives)])
    return [ids != caption for ids in changed]


# ---- a zoo ------------------------------------------------------------------------------------------


def evaluate_zoo(zoo_root, data_dir, split: str = "test", limit: int | None = None, seed: int = 0,
                 progress: bool = True, *, models: Iterable[str] | None = None,
                 grounding_limit: int = DEFAULT_GROUNDING_LIMIT, device: str = "auto",
                 caption_chunk: int = DEFAULT_CAPTION_CHUNK, image_batch: int = DEFAULT_IMAGE_BATCH,
                 strict: bool = False, precision: str = "fp32") -> dict:
    """Every model of the zoo at ``zoo_root`` (or those named in ``models``) on ``split`` of the
    synthetic dataset at ``data_dir``.

    ``precision``: fp32 by default (the tables go into papers); "auto" or a format for speed.
    ``limit``: scenes for retrieval and hard negatives, the first of the split (None: ``DEFAULT_LIMIT``);
    grounding and FLISM use the first ``min(limit, grounding_limit)``. A model that fails to load, or
    (unless ``strict``) to run, is recorded under ``errors`` as "load: ..." / "run: ..." and the others
    go on.
    """
    from explorer.core.errors import ExplorerError
    from explorer.data import read_dataset
    from explorer.zoo import ModelCache, Zoo

    limit = DEFAULT_LIMIT if limit is None else int(limit)
    if limit < 1 or grounding_limit < 0:
        raise ExplorerError(f"limit must be at least 1 and grounding_limit at least 0, got {limit} and "
                            f"{grounding_limit}")
    data_dir = Path(data_dir)
    split_scenes = read_dataset(data_dir, split)
    if not split_scenes:
        raise ExplorerError(f"the {split!r} split of {data_dir} has no scenes")
    scenes = split_scenes[:limit]
    grounding_scenes = scenes[:max(0, min(limit, int(grounding_limit)))]
    zoo = Zoo(zoo_root, cache_size=1, device=device, precision=precision)
    names = [m.name for m in zoo.manifests()] if models is None else list(models)
    info = _dataset_info(data_dir)
    results = {
        "format": FORMAT, "version": VERSION,
        "dataset": {"path": str(data_dir.resolve()), "split": split, "scenes_in_split": len(split_scenes),
                    "retrieval_scenes": len(scenes), "grounding_scenes": len(grounding_scenes),
                    "object_sentences": sum(len(object_sentences(s)) for s in grounding_scenes),
                    "seed": info.get("seed"), "image_size": info.get("image_size")},
        "settings": {"limit": limit, "grounding_limit": int(grounding_limit), "seed": seed, "device": device,
                     "precision": precision, "caption_chunk": caption_chunk, "image_batch": image_batch},
        "zoo": str(Path(zoo.root).resolve()),
        "models": [], "errors": {},
        "baselines": baselines(grounding_scenes, scenes),
    }
    for name in progress_bar(names, progress and len(names) > 1, "models", unit="model"):
        try:
            model = zoo.load(name)
        except (ExplorerError, OSError, RuntimeError) as error:
            results["errors"][name] = _error_text("load", error)
            continue
        try:
            result = evaluate_model(model, scenes, grounding_limit=len(grounding_scenes),
                                    caption_chunk=caption_chunk, image_batch=image_batch, seed=seed,
                                    progress=progress)
        except Exception as error:  # one model's failure must not lose the others' results
            if strict:
                raise
            results["errors"][name] = _error_text("run", error)
            continue
        finally:
            model = None
            zoo.cache = ModelCache(1)  # drop the loaded model before the next one loads
        manifest = zoo.get(name)
        result.update({"name": name, "architecture": manifest.architecture, "source": manifest.source})
        results["models"].append(result)
    return results


# ---- helpers ----------------------------------------------------------------------------------------


def _dataset_info(data_dir: Path) -> dict:
    try:
        return json.loads((data_dir / "info.json").read_text())
    except (OSError, ValueError):
        return {}


def _error_text(stage: str, error: BaseException) -> str:
    first = str(error).splitlines()[0] if str(error) else ""
    return f"{stage}: {type(error).__name__}: {first}".rstrip(": ")


@contextmanager
def _seeded(seed: int):
    """torch and numpy seeded with ``seed`` inside, the caller's random state restored after."""
    state = np.random.get_state()
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        np.random.seed(seed)
        try:
            yield
        finally:
            np.random.set_state(state)


__all__ = ["DEFAULT_CAPTION_CHUNK", "DEFAULT_GROUNDING_LIMIT", "DEFAULT_IMAGE_BATCH", "DEFAULT_LIMIT",
           "encode_images", "evaluate_model", "evaluate_zoo", "hard_negative_metrics", "in_reach", "score_captions"]
