"""The benchmark: every model of a zoo on a held-out split of the synthetic world.

    from explorer.evaluation.benchmark import evaluate_zoo, write_results
    results = evaluate_zoo("checkpoints/", "data/synthetic", split="test")
    write_results(results, "results.json")

``evaluate_model(model, scenes)`` measures one model (anything with the public
``explorer.Model`` surface: ``encode_image``, ``encode_text``, ``similarity``,
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

Hard negatives (``hard_negative_accuracy``; a tie is a miss)
    ``hard_negative_acc``: share of scenes whose long caption outscores every one of its
    hard negatives on its own image. ``hard_negative_acc/<attribute>`` (colour, shape,
    size, texture, position): share of that attribute's negatives that the long caption
    beats. The long caption and its negatives are scored in the same call.

Grounding (``otsu_mask``, ``mask_iou``, ``pointing_hits``)
    Each OBJECT sentence (kind "object", one object) of a scene gets its map from one call
    ``model.sentence_maps(scene.image, object_sentences, kind)`` (all object sentences of
    the scene at once); the map's Otsu mask is compared with the object's mask.
    ``miou_generic`` / ``pointing_generic``: the generic map (cosine of the sentence with
    each patch). ``miou_native`` / ``pointing_native``: the method's preferred native map,
    the first of ``NATIVE_PREFERENCE`` among ``model.map_kinds`` (its name is the model's
    ``native_kind``); None when the method has none of them. Means are over sentences
    (every object sentence of every grounding scene weighs the same). Pointing is the
    strict game of ``pointing_hits``: every pixel where the map peaks must be in the mask.

FLISM (``flism``, ``flism_region_accuracy``)
    ``flism_acc``: the object sentences of a scene are matched with FLISM's regions (four
    quadrants and the centre box, no detector); a sentence is right when its region is the
    one its object's box overlaps most. Pooled over scenes: hits / scored sentences.

Every value is a share in [0, 1], or None where it is undefined (no native map, nothing
scored). ``baselines(scenes)`` gives the reference rows, computed once per dataset on the
grounding scenes (they see no text):

- ``centre-box``: every sentence's mask is the central box (pixels whose centres lie in the
  middle third of the width and of the height); its pointing map peaks at the image centre
  (the centre pixel, or the 2 or 4 pixels around the centre of an even side); for FLISM it
  always picks the centre region.
- ``uniform``: a flat map. Otsu finds no two classes in a flat map, so its mask is empty
  (``explorer.grounding.masks``): mIoU 0 against any non-empty object; its peak is the whole image,
  so it points right only when an object covers the whole image: 0.
- ``chance``: the expected value of random scores: R@K = K / N, hard negatives
  1 / (1 + negatives of the scene), FLISM (best regions) / (regions) per sentence.

Scenes are the first ``limit`` of the split, in the dataset's order (the dataset's seed
fixes them); ``seed`` seeds torch and numpy inside each model's run, so a run is repeatable.
"""

from __future__ import annotations

import json
import math
import os
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterable, Sequence

import numpy as np
import torch

from explorer.evaluation.retrieval_metrics import recall_at_k
from explorer.grounding.masks import otsu_mask
from explorer.grounding.metrics import box_iou, flism_region_accuracy, hard_negative_accuracy, mask_iou, pointing_hits

FORMAT = "explorer-eval"
VERSION = 1
DEFAULT_LIMIT = 300  # scenes for retrieval and hard negatives
DEFAULT_GROUNDING_LIMIT = 100  # the first scenes, for grounding and FLISM
DEFAULT_CAPTION_CHUNK = 64  # captions scored against all images at once
DEFAULT_IMAGE_BATCH = 32  # images encoded at once
NATIVE_PREFERENCE = ("subcaption-alpha", "attention-pool", "late-interaction", "word-max")
GENERIC_KIND = "generic"
ATTRIBUTES = ("colour", "shape", "size", "texture", "position")

RETRIEVAL_KEYS = ("long_t2i_R@1", "long_t2i_R@5", "long_i2t_R@1", "long_i2t_R@5", "short_t2i_R@1")
GROUNDING_KEYS = ("miou_generic", "pointing_generic", "miou_native", "pointing_native")
METRIC_KEYS = (*RETRIEVAL_KEYS, "hard_negative_acc", *(f"hard_negative_acc/{a}" for a in ATTRIBUTES),
               *GROUNDING_KEYS, "flism_acc")
BASELINES = ("centre-box", "uniform", "chance")


# ---- one model --------------------------------------------------------------------------------------


def evaluate_model(model, scenes: Sequence, *, grounding_limit: int | None = DEFAULT_GROUNDING_LIMIT,
                   caption_chunk: int = DEFAULT_CAPTION_CHUNK, image_batch: int = DEFAULT_IMAGE_BATCH,
                   seed: int = 0, progress: bool = False) -> dict:
    """Every metric of the module docstring for ``model`` on ``scenes`` (all of them for retrieval,
    the first ``grounding_limit`` for grounding and FLISM; None = all).

    Returns {"name", "method", "context_length", "trained", "native_kind", "metrics", "counts",
    "seconds"}; ``metrics`` has exactly the keys of ``METRIC_KEYS``.
    """
    scenes = list(scenes)
    if not scenes:
        raise ValueError("there are no scenes to evaluate on")
    if caption_chunk < 1 or image_batch < 1:
        raise ValueError("caption_chunk and image_batch must be at least 1")
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
        hard, n_hard = hard_negative_metrics(model, features, scenes, caption_chunk)
        metrics.update(hard)
        counts["hard_negative_scenes"] = n_hard
        seconds["hard_negatives"] = time.perf_counter() - clock
        del features

        clock = time.perf_counter()
        grounding, n_sentences = grounding_metrics(model, grounding_scenes, native, progress)
        metrics.update(grounding)
        counts["object_sentences"] = n_sentences
        seconds["grounding"] = time.perf_counter() - clock

        clock = time.perf_counter()
        metrics["flism_acc"], counts["flism_scored"] = flism_metrics(model, grounding_scenes, progress)
        seconds["flism"] = time.perf_counter() - clock
    seconds["total"] = time.perf_counter() - started
    return {"name": getattr(model, "name", ""), "method": getattr(model, "method_name", ""),
            "context_length": int(getattr(model, "context_length", 0) or 0),
            "trained": bool(getattr(model, "trained", True)), "native_kind": native,
            "metrics": {key: _clean(metrics.get(key)) for key in METRIC_KEYS}, "counts": counts,
            "seconds": {key: round(value, 3) for key, value in seconds.items()}}


def native_kind(model) -> str | None:
    """The method's preferred native map: the first of ``NATIVE_PREFERENCE`` it offers, or None."""
    kinds = tuple(getattr(model, "map_kinds", ()) or ())
    return next((kind for kind in NATIVE_PREFERENCE if kind in kinds), None)


def encode_images(model, images: Sequence, batch: int = DEFAULT_IMAGE_BATCH, progress: bool = False):
    """``model.encode_image`` over ``images`` in batches, concatenated (method-specific fields kept)."""
    from explorer.models.features import concat_features

    parts = []
    for start in _progress(range(0, len(images), batch), progress, "encode images", unit="batch"):
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


def hard_negative_metrics(model, image_features, scenes: Sequence, chunk: int = DEFAULT_CAPTION_CHUNK
                          ) -> tuple[dict[str, float | None], int]:
    """Overall and per-attribute hard-negative accuracy; also the number of scenes that have negatives.

    Scenes are scored in groups whose captions (long caption + negatives) fit in ``chunk``; each
    scene's captions are read off its own image's row of the group's score matrix.
    """
    items = [i for i, scene in enumerate(scenes) if scene.hard_negatives]
    positives, negatives = [], []
    per_attribute: dict[str, list[bool]] = {a: [] for a in ATTRIBUTES}
    group: list[int] = []

    def flush():
        if not group:
            return
        captions, spans = [], []
        for i in group:
            spans.append(len(captions))
            captions.append(scenes[i].long_caption)
            captions.extend(n.caption for n in scenes[i].hard_negatives)
        rows = torch.as_tensor(group)
        scores = score_captions(model, image_features[rows], captions, max(chunk, len(captions)))
        for row, (i, start) in enumerate(zip(group, spans)):
            scene = scenes[i]
            own = scores[row, start:start + 1 + len(scene.hard_negatives)].double().numpy()
            positives.append(own[0])
            negatives.append(own[1:])
            for negative, score in zip(scene.hard_negatives, own[1:]):
                per_attribute.setdefault(negative.attribute, []).append(bool(own[0] > score))
        group.clear()

    size = 0
    for i in items:
        need = 1 + len(scenes[i].hard_negatives)
        if group and size + need > chunk:
            flush()
            size = 0
        group.append(i)
        size += need
    flush()

    metrics: dict[str, float | None] = {f"hard_negative_acc/{a}": None for a in ATTRIBUTES}
    if not positives:
        metrics["hard_negative_acc"] = None
        return metrics, 0
    width = max(len(n) for n in negatives)
    padded = np.full((len(negatives), width), -np.inf)  # a missing negative loses to anything
    for row, values in enumerate(negatives):
        padded[row, :len(values)] = values
    metrics["hard_negative_acc"] = hard_negative_accuracy(np.asarray(positives), padded)
    for attribute, wins in per_attribute.items():
        if wins:
            metrics[f"hard_negative_acc/{attribute}"] = float(np.mean(wins))
    return metrics, len(positives)


def object_sentences(scene) -> list:
    """The scene's sentences about exactly one object (kind "object"), in caption order."""
    return [s for s in scene.sentences if s.kind == "object" and len(s.objects) == 1]


def grounding_metrics(model, scenes: Sequence, native: str | None = None, progress: bool = False
                      ) -> tuple[dict[str, float | None], int]:
    """mIoU and pointing of the generic map and of ``native`` (if any), pooled over object sentences."""
    kinds = [GENERIC_KIND] + ([native] if native and native != GENERIC_KIND else [])
    ious: dict[str, list[float]] = {k: [] for k in kinds}
    hits: dict[str, list[bool]] = {k: [] for k in kinds}
    n_sentences = 0
    for scene in _progress(scenes, progress, "grounding", unit="scene"):
        sentences = object_sentences(scene)
        if not sentences:
            continue
        n_sentences += len(sentences)
        truth = np.stack([scene.mask(s.objects[0]) for s in sentences])
        for kind in kinds:
            maps = np.asarray(model.sentence_maps(scene.image, [s.text for s in sentences], kind).maps)
            if maps.shape != truth.shape:
                raise ValueError(f"{kind} maps of scene {scene.id} are {maps.shape}, its masks {truth.shape}")
            ious[kind].extend(map_ious(maps, truth))
            hits[kind].extend(map_pointing(maps, truth))
    metrics: dict[str, float | None] = {key: None for key in GROUNDING_KEYS}
    for kind in kinds:
        slot = "generic" if kind == GENERIC_KIND else "native"
        if ious[kind]:
            metrics[f"miou_{slot}"] = float(np.mean(ious[kind]))
            metrics[f"pointing_{slot}"] = float(np.mean(hits[kind]))
    return metrics, n_sentences


def map_ious(maps, truth) -> list[float]:
    """IoU of each map's Otsu mask with its true mask (a map with no finite value selects nothing)."""
    out = []
    for one, mask in zip(maps, truth):
        try:
            predicted, _ = otsu_mask(one)
        except ValueError:
            predicted = np.zeros(mask.shape, dtype=bool)
        out.append(mask_iou(predicted, mask))
    return out


def map_pointing(maps, truth) -> list[bool]:
    """Pointing-game hit of each map (NaN pixels never count as the peak)."""
    values = np.nan_to_num(np.asarray(maps, dtype=np.float64), nan=-np.inf)
    return [bool(h) for h in pointing_hits(values, truth)]


def flism_metrics(model, scenes: Sequence, progress: bool = False) -> tuple[float | None, int]:
    """(accuracy, scored sentences) of FLISM's sentence -> region choices, pooled over scenes."""
    from explorer.grounding.flism import flism

    hit_total = scored_total = 0
    for scene in _progress(scenes, progress, "FLISM", unit="scene"):
        sentences = object_sentences(scene)
        if not sentences:
            continue
        result = flism(model, scene.image, [s.text for s in sentences])
        accuracy = flism_region_accuracy(result.best_region.numpy(), _sentence_boxes(scene, sentences),
                                         [r.box for r in result.regions])
        hit_total += accuracy.hits
        scored_total += accuracy.scored
    return (hit_total / scored_total if scored_total else None), scored_total


def _sentence_boxes(scene, sentences) -> np.ndarray:
    return np.array([scene.objects[s.objects[0]].box for s in sentences], dtype=np.float64)


# ---- baselines --------------------------------------------------------------------------------------


def centre_box_mask(height: int, width: int) -> np.ndarray:
    """bool [H, W]: pixels whose centres lie in the middle third of the width and of the height."""
    def middle(n):
        centres = np.arange(n) + 0.5
        return (centres >= n / 3) & (centres < 2 * n / 3)

    return middle(height)[:, None] & middle(width)[None, :]


def centre_point_map(height: int, width: int) -> np.ndarray:
    """float [H, W] peaking at the image centre: minus the distance of each pixel centre to it."""
    ys = np.arange(height) + 0.5 - height / 2
    xs = np.arange(width) + 0.5 - width / 2
    return -np.hypot(ys[:, None], xs[None, :])


def baselines(scenes: Sequence, retrieval_scenes: Sequence | None = None) -> dict[str, dict]:
    """The reference rows of the module docstring, on ``scenes`` (grounding, FLISM) and
    ``retrieval_scenes`` (chance retrieval and hard negatives; default: ``scenes``)."""
    from explorer.core.regions import spatial_regions

    retrieval_scenes = list(scenes if retrieval_scenes is None else retrieval_scenes)
    centre_iou, centre_hits, flat_iou, flat_hits = [], [], [], []
    centre_flism: list[bool] = []
    chance_flism: list[float] = []
    for scene in scenes:
        sentences = object_sentences(scene)
        if not sentences:
            continue
        truth = np.stack([scene.mask(s.objects[0]) for s in sentences])
        height, width = truth.shape[1:]
        box = centre_box_mask(height, width)
        centre_iou.extend(mask_iou(box, mask) for mask in truth)
        centre_hits.extend(map_pointing(np.broadcast_to(centre_point_map(height, width), truth.shape), truth))
        flat = np.zeros(truth.shape, dtype=np.float64)
        flat_iou.extend(map_ious(flat, truth))
        flat_hits.extend(map_pointing(flat, truth))
        regions = spatial_regions(width, height)
        centre = next(i for i, r in enumerate(regions) if r.source == "centre")
        boxes = _sentence_boxes(scene, sentences)
        picked = flism_region_accuracy([centre] * len(sentences), boxes, [r.box for r in regions])
        overlap = box_iou(boxes, [r.box for r in regions])
        for row, target in zip(overlap, picked.targets):
            if target >= 0:
                chance_flism.append(float((row == row.max()).sum() / len(row)))
        centre_flism.extend([True] * picked.hits + [False] * (picked.scored - picked.hits))

    def mean(values):
        return float(np.mean(values)) if len(values) else None

    empty = {key: None for key in METRIC_KEYS}
    n = len(retrieval_scenes)
    with_negatives = [s for s in retrieval_scenes if s.hard_negatives]
    chance = dict(empty)
    if n:
        chance.update({"long_t2i_R@1": 1 / n, "long_t2i_R@5": min(5, n) / n, "long_i2t_R@1": 1 / n,
                       "long_i2t_R@5": min(5, n) / n, "short_t2i_R@1": 1 / n})
    if with_negatives:
        chance["hard_negative_acc"] = float(np.mean([1 / (1 + len(s.hard_negatives)) for s in with_negatives]))
        for attribute in ATTRIBUTES:
            if any(neg.attribute == attribute for s in with_negatives for neg in s.hard_negatives):
                chance[f"hard_negative_acc/{attribute}"] = 0.5
    chance["flism_acc"] = mean(chance_flism)
    centre = {**empty, "miou_generic": mean(centre_iou), "pointing_generic": mean(centre_hits),
              "flism_acc": mean(centre_flism)}
    uniform = {**empty, "miou_generic": mean(flat_iou), "pointing_generic": mean(flat_hits)}
    return {
        "centre-box": {"metrics": {k: _clean(v) for k, v in centre.items()},
                       "about": "central box (middle third of width and height); points at the image centre; "
                                "FLISM always picks the centre region"},
        "uniform": {"metrics": {k: _clean(v) for k, v in uniform.items()},
                    "about": "flat map: Otsu finds one class, so the mask is empty; its peak is the whole image"},
        "chance": {"metrics": {k: _clean(v) for k, v in chance.items()},
                   "about": "expected value of random scores"},
    }


# ---- a zoo ------------------------------------------------------------------------------------------


def evaluate_zoo(zoo_root, data_dir, split: str = "test", limit: int | None = None, seed: int = 0,
                 progress: bool = True, *, models: Iterable[str] | None = None,
                 grounding_limit: int = DEFAULT_GROUNDING_LIMIT, device: str = "auto",
                 caption_chunk: int = DEFAULT_CAPTION_CHUNK, image_batch: int = DEFAULT_IMAGE_BATCH,
                 strict: bool = False) -> dict:
    """Every model of the zoo at ``zoo_root`` (or those named in ``models``) on ``split`` of the
    synthetic dataset at ``data_dir``.

    ``limit``: scenes for retrieval and hard negatives, the first of the split (None: ``DEFAULT_LIMIT``);
    grounding and FLISM use the first ``min(limit, grounding_limit)``. A model that fails to load, or
    (unless ``strict``) to run, is recorded under ``errors`` as "load: ..." / "run: ..." and the others
    go on.
    """
    from explorer.core.errors import ExplorerError
    from explorer.data import read_dataset
    from explorer.zoo.zoo import ModelCache, Zoo

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
    zoo = Zoo(zoo_root, cache_size=1, device=device)
    names = [m.name for m in zoo.manifests()] if models is None else list(models)
    info = _dataset_info(data_dir)
    results = {
        "format": FORMAT, "version": VERSION,
        "dataset": {"path": str(data_dir.resolve()), "split": split, "scenes_in_split": len(split_scenes),
                    "retrieval_scenes": len(scenes), "grounding_scenes": len(grounding_scenes),
                    "object_sentences": sum(len(object_sentences(s)) for s in grounding_scenes),
                    "seed": info.get("seed"), "image_size": info.get("image_size")},
        "settings": {"limit": limit, "grounding_limit": int(grounding_limit), "seed": seed, "device": device,
                     "caption_chunk": caption_chunk, "image_batch": image_batch,
                     "native_preference": list(NATIVE_PREFERENCE)},
        "zoo": str(Path(zoo.root).resolve()),
        "models": [], "errors": {},
        "baselines": baselines(grounding_scenes, scenes),
    }
    for name in _progress(names, progress and len(names) > 1, "models", unit="model"):
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


def write_results(results: dict, path) -> Path:
    """Write ``results`` as JSON (NaN and infinities as null), atomically; returns the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(_json_safe(results), indent=2, allow_nan=False) + "\n"
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        tmp.write_text(text, encoding="utf-8")
        tmp.replace(path)
    finally:
        tmp.unlink(missing_ok=True)
    return path


def read_results(path) -> dict:
    """Results written by ``write_results``."""
    return json.loads(Path(path).read_text(encoding="utf-8"))


# ---- helpers ----------------------------------------------------------------------------------------


def _dataset_info(data_dir: Path) -> dict:
    try:
        return json.loads((data_dir / "info.json").read_text())
    except (OSError, ValueError):
        return {}


def _error_text(stage: str, error: BaseException) -> str:
    first = str(error).splitlines()[0] if str(error) else ""
    return f"{stage}: {type(error).__name__}: {first}".rstrip(": ")


def _clean(value):
    if value is None:
        return None
    value = float(value)
    return value if math.isfinite(value) else None


def _json_safe(value):
    if isinstance(value, dict):
        return {str(k): _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    if isinstance(value, (np.integer,)):
        return int(value)
    if isinstance(value, (float, np.floating)):
        return _clean(value)
    if isinstance(value, (np.bool_,)):
        return bool(value)
    if isinstance(value, Path):
        return str(value)
    return value


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


def _progress(iterable, enabled: bool, description: str, **kwargs):
    if not enabled:
        return iterable
    try:
        from tqdm.auto import tqdm
    except ImportError:  # tqdm comes with transformers; without it, no bar
        return iterable
    return tqdm(iterable, desc=description, leave=False, **kwargs)


__all__ = ["ATTRIBUTES", "BASELINES", "DEFAULT_GROUNDING_LIMIT", "DEFAULT_LIMIT", "METRIC_KEYS", "NATIVE_PREFERENCE",
           "baselines", "centre_box_mask", "centre_point_map", "encode_images", "evaluate_model", "evaluate_zoo",
           "grounding_metrics", "hard_negative_metrics", "native_kind", "object_sentences", "read_results",
           "score_captions", "write_results"]
