"""The benchmark's grounding and FLISM metrics: a model's maps and regions against the scenes' truth.

Grounding (``grounding_metrics``; scoring: ``explorer.evaluation.metrics.maps.score_maps``)
    Each OBJECT sentence (kind "object", one object) of a scene gets its map from one call
    ``model.sentence_maps(scene.image, object_sentences, kind)`` (all object sentences of
    the scene at once); the map's Otsu mask is compared with the object's mask.
    ``miou_generic`` / ``pointing_generic``: the generic map (cosine of the sentence with
    each patch). ``miou_native`` / ``pointing_native``: the method's preferred native map
    (``model.preferred_native_map``, said by its class, when ``model.map_kinds`` has it; its name
    is the model's ``native_kind``); None when the method has none. Means are over sentences
    (every object sentence of every grounding scene weighs the same). Pointing is the
    strict game of ``pointing_hits``: every pixel where the map peaks must be in the mask.
    NaN pixels, maps with no finite value and flat maps score as ``score_maps`` decides.
    ``auroc_generic`` / ``auroc_native``: the pixel AUROC (``pixel_auroc``) of each map, the
    named object's pixels against the background's (pixels of no object);
    ``auroc_generic_others`` / ``auroc_native_others``: against the pixels of the scene's other
    objects (sentences of scenes with one object are left out). A map that lights every object
    up alike for every sentence scores high on the first and 0.5 on the second; threshold-free,
    these say whether the map knows where the object is even when its Otsu mask misses.

FLISM (``flism_metrics``; ``flism``, ``flism_region_accuracy``)
    ``flism_acc``: the object sentences of a scene are matched with FLISM's regions (four
    quadrants and the centre box, no detector); a sentence is right when its region is the
    one its object's box overlaps most. Pooled over scenes: hits / scored sentences.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from explorer.evaluation.progress import progress as progress_bar
from explorer.evaluation.results import GROUNDING_KEYS
from explorer.evaluation.metrics.boxes import flism_region_accuracy
from explorer.evaluation.metrics.maps import pixel_auroc, score_maps

GENERIC_KIND = "generic"


def native_kind(model) -> str | None:
    """The method's preferred native map (its class says which) when the model offers it, or None."""
    kind = getattr(model, "preferred_native_map", None)
    return kind if kind and kind in tuple(getattr(model, "map_kinds", ()) or ()) else None


def object_sentences(scene) -> list:
    """The scene's sentences about exactly one object (kind "object"), in caption order."""
    return [s for s in scene.sentences if s.kind == "object" and len(s.objects) == 1]


def object_masks(scene, sentences) -> np.ndarray:
    """bool [M, H, W]: the mask of each (object) sentence's object."""
    return np.stack([scene.mask(s.objects[0]) for s in sentences])


def sentence_boxes(scene, sentences) -> np.ndarray:
    """float [M, 4]: the box (x0, y0, x1, y1) of each (object) sentence's object, in pixels."""
    return np.array([scene.objects[s.objects[0]].box for s in sentences], dtype=np.float64)


def map_aurocs(maps: np.ndarray, truth: np.ndarray) -> tuple[list[float | None], list[float | None]]:
    """Per sentence: (AUROC object vs background, AUROC object vs the other objects) of its map.

    ``truth`` [M, H, W] holds the masks of ALL the scene's objects' sentences, in the order of ``maps``;
    the background is every pixel in none of them. Only object sentences reach here, so objects without
    a sentence of their own count as background (the world writes one per object, so there are none).
    """
    objects = truth.any(axis=0)
    background = ~objects
    by_background, by_others = [], []
    for values, mask in zip(maps, truth):
        by_background.append(pixel_auroc(values, mask, background))
        by_others.append(pixel_auroc(values, mask, objects & ~mask))
    return by_background, by_others


def scored_kinds(model, native: str | None) -> list[str]:
    """The map kinds an evaluation scores: the generic map, the native one, then every other kind the model
    offers (its other native maps, the explainers), less the per-head variants."""
    offered = tuple(getattr(model, "map_kinds", ()) or ())
    heads = set(getattr(getattr(model, "method", None), "head_map_kinds", ()) or ())
    kinds = [GENERIC_KIND] + ([native] if native and native != GENERIC_KIND else [])
    return kinds + [kind for kind in offered if kind not in kinds and kind not in heads]


def grounding_metrics(model, scenes: Sequence, native: str | None = None, progress: bool = False
                      ) -> tuple[dict[str, float | None], int, dict[str, dict[str, float | None]]]:
    """(flat metrics, object sentences, per kind): mIoU, pointing and AUROCs pooled over object sentences, of
    the generic map and of ``native`` (the flat ``GROUNDING_KEYS``), and of every kind ``scored_kinds``
    names ({kind: {"miou", "pointing", "auroc", "auroc_others"}})."""
    kinds = scored_kinds(model, native)
    ious: dict[str, list[float]] = {k: [] for k in kinds}
    hits: dict[str, list[bool]] = {k: [] for k in kinds}
    aurocs: dict[str, list[float]] = {k: [] for k in kinds}
    aurocs_others: dict[str, list[float]] = {k: [] for k in kinds}
    n_sentences = 0
    for scene in progress_bar(scenes, progress, "grounding", unit="scene"):
        sentences = object_sentences(scene)
        if not sentences:
            continue
        n_sentences += len(sentences)
        truth = object_masks(scene, sentences)
        for kind in kinds:
            maps = np.asarray(model.sentence_maps(scene.image, [s.text for s in sentences], kind).maps)
            if maps.shape != truth.shape:
                raise ValueError(f"{kind} maps of scene {scene.id} are {maps.shape}, its masks {truth.shape}")
            scene_ious, scene_hits = score_maps(maps, truth)
            ious[kind].extend(scene_ious)
            hits[kind].extend(scene_hits)
            by_background, by_others = map_aurocs(maps, truth)
            aurocs[kind].extend(a for a in by_background if a is not None)
            aurocs_others[kind].extend(a for a in by_others if a is not None)

    def mean(values) -> float | None:
        return float(np.mean(values)) if values else None

    per_kind = {kind: {"miou": mean(ious[kind]), "pointing": mean(hits[kind]), "auroc": mean(aurocs[kind]),
                       "auroc_others": mean(aurocs_others[kind])} for kind in kinds}
    metrics: dict[str, float | None] = {key: None for key in GROUNDING_KEYS}
    for slot, kind in (("generic", GENERIC_KIND), ("native", native)):
        if kind not in per_kind:
            continue
        scores = per_kind[kind]
        metrics.update({f"miou_{slot}": scores["miou"], f"pointing_{slot}": scores["pointing"],
                        f"auroc_{slot}": scores["auroc"], f"auroc_{slot}_others": scores["auroc_others"]})
    return metrics, n_sentences, per_kind


def flism_metrics(model, scenes: Sequence, progress: bool = False) -> tuple[float | None, int]:
    """(accuracy, scored sentences) of FLISM's sentence -> region choices, pooled over scenes."""
    from explorer.grounding.flism import flism

    hit_total = scored_total = 0
    for scene in progress_bar(scenes, progress, "FLISM", unit="scene"):
        sentences = object_sentences(scene)
        if not sentences:
            continue
        result = flism(model, scene.image, [s.text for s in sentences])
        accuracy = flism_region_accuracy(result.best_region.numpy(), sentence_boxes(scene, sentences),
                                         [r.box for r in result.regions])
        hit_total += accuracy.hits
        scored_total += accuracy.scored
    return (hit_total / scored_total if scored_total else None), scored_total


__all__ = ["GENERIC_KIND", "flism_metrics", "grounding_metrics", "map_aurocs", "native_kind",
           "object_masks", "object_sentences", "sentence_boxes"]
