"""The evaluation a finished run records: its checkpoint on data it did not train on.

- Synthetic world: ``explorer eval``'s measures (``explorer.evaluation.runner.evaluate_model``) on the
  first ``eval_limit`` scenes of the ``test`` split, grounding and FLISM on the first
  ``eval_grounding_limit`` of them: the same numbers as the demo zoo's table (docs/demo-zoo.md) for a zoo model.
- A retrieval layout with a ``test`` split it did not train on: Recall@1/5/10 both ways
  (``explorer.evaluation.metrics.retrieval``) on its first ``eval_limit`` images and their
  captions, scored with the method's own caption score (``model.similarity``).
- Otherwise (a sample folder, a set with one split): nothing is held out, and the record says so
  rather than scoring the training data.

The result is a plain dict stored with the run (``Run.evaluation``) and appended to ``run.jsonl``
as an "evaluation" event: {"kind", "split", "metrics", "counts", "seconds"} or {"skipped": why}.
"""

from __future__ import annotations

import time
from pathlib import Path

from explorer.jobs.training_data import DataPlan


def evaluate_checkpoint(manifest: str | Path, plan: DataPlan, config: dict, device: str = "cpu") -> dict:
    """Evaluate the model of ``manifest`` as ``plan`` allows (module docstring)."""
    if not config.get("evaluate", True):
        return {"skipped": "evaluate is off in the run's settings"}
    if plan.eval_kind is None:
        return {"skipped": f"{plan.kind} data holds nothing back for evaluation ({plan.describe()})"}
    limit = int(config.get("eval_limit") or 0)
    if limit < 1:
        return {"skipped": "eval_limit is 0"}
    from explorer.zoo import Manifest, load_manifest

    model = load_manifest(Manifest.read(manifest), device=device)
    started = time.perf_counter()
    if plan.eval_kind == "synthetic":
        result = _synthetic(model, plan, limit, int(config.get("eval_grounding_limit") or 0))
    else:
        result = _retrieval(model, plan, limit)
    result["seconds_total"] = round(time.perf_counter() - started, 3)
    return result


def _synthetic(model, plan: DataPlan, limit: int, grounding_limit: int) -> dict:
    from explorer.data import read_dataset
    from explorer.evaluation.runner import evaluate_model

    scenes = read_dataset(plan.path, plan.eval_split)[:limit]
    result = evaluate_model(model, scenes, grounding_limit=min(grounding_limit, len(scenes)))
    return {"kind": "synthetic", "split": plan.eval_split, "measures": "explorer eval (evaluate_model)",
            "metrics": result["metrics"], "counts": result["counts"], "seconds": result["seconds"],
            "score": result.get("score"), "native_kind": result.get("native_kind")}


def _retrieval(model, plan: DataPlan, limit: int) -> dict:
    from PIL import Image

    from explorer.data.retrieval_sets import read_retrieval_set
    from explorer.evaluation.metrics.retrieval import recall_at_k
    from explorer.evaluation.runner import encode_images, score_captions

    data = read_retrieval_set(plan.path, plan.eval_split, layout=plan.kind)
    images = list(data.images[:limit])
    kept = [(caption, owner) for caption, owner in zip(data.captions, data.caption_image) if owner < len(images)]
    started = time.perf_counter()
    pictures = []
    for path in images:
        with Image.open(path) as opened:
            pictures.append(opened.convert("RGB"))
    features = encode_images(model, pictures)
    scores = score_captions(model, features, [caption for caption, _ in kept])
    recall = recall_at_k(scores, text_to_image=[owner for _, owner in kept], ks=(1, 5, 10))
    metrics = {f"t2i_R@{k}": v for k, v in recall.text_to_image.items()}
    metrics.update({f"i2t_R@{k}": v for k, v in recall.image_to_text.items()})
    return {"kind": "retrieval", "split": plan.eval_split, "layout": plan.kind,
            "measures": "Recall@K both ways (explorer.evaluation.metrics.retrieval)", "metrics": metrics,
            "counts": {"images": len(images), "captions": len(kept)},
            "seconds": {"retrieval": round(time.perf_counter() - started, 3)},
            "score": str(getattr(model, "score_label", "") or "")}


__all__ = ["evaluate_checkpoint"]
