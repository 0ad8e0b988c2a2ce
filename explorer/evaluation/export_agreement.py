"""How far an exported folder keeps the method's own ranking: ``explorer export`` measures it on a probe set
the project makes in code, and says so (issue 58, part 8).

The probe set (``probe_set``): the first ``PROBE_SCENES`` test-split scenes of the synthetic world (seed 7,
224 px; the demo models' world, held out from their training) and, for each, its long caption and the long
captions of its counterfactual twins with one object's colour, shape or size changed (each false of the
picture by one word). Every picture is scored against every caption (8 x 32), by explorer (``Model.similarity``:
the method's own score) and by the exported folder read back with its library's own loader, preprocessing and
tokenizer (transformers ``CLIPModel``, open_clip ``local-dir:``): the cosine of its global embeddings.

Per picture, the 32 captions are ranked by each score: ``pairwise`` is the share of caption pairs the two put in
the same order (pairs explorer scores alike left out), ``spearman`` the mean rank correlation. A whole export of
a CLIP gives 1.0 up to the libraries' pixel rounding; a backbone whose method pooled the patches its own way
ranks at chance (0.5). Below ``AGREEMENT_FLOOR`` the command warns and exits non-zero unless told to accept it.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from explorer.core.errors import ExportError

AGREEMENT_FLOOR = 0.9
PROBE_SCENES = 8
PROBE_SEED = 7
TWIN_ATTRIBUTES = ("colour", "shape", "size")
PROBE_NAME = (f"{PROBE_SCENES} held-out synthetic scenes (seed {PROBE_SEED}, test split, 224 px), each scored against "
              f"all {PROBE_SCENES * (1 + len(TWIN_ATTRIBUTES))} long captions: its own and its twins' with one "
              "colour, shape or size changed")


@dataclass(frozen=True)
class Agreement:
    """The exported folder's ranking against the method's, on the probe set."""

    pairwise: float  # share of caption pairs ranked in the same order, per picture, averaged
    spearman: float  # mean Spearman rank correlation of the two scores over each picture's captions
    pictures: int
    captions: int
    probe: str = PROBE_NAME

    @property
    def keeps_ranking(self) -> bool:
        return self.pairwise >= AGREEMENT_FLOOR

    def to_dict(self) -> dict:
        return {**asdict(self), "floor": AGREEMENT_FLOOR, "keeps_ranking": self.keeps_ranking}

    def line(self) -> str:
        return (f"ranking agreement with explorer's own score: {100 * self.pairwise:.1f} % of caption pairs in the "
                f"same order, Spearman {self.spearman:.2f} ({self.pictures} pictures x {self.captions} captions)")


def probe_set() -> tuple[list, list[str]]:
    """(pictures, captions): the probe scenes' pictures, then their captions and their twins' (deterministic)."""
    from explorer.data.counterfactual import counterfactual_twin
    from explorer.data.synthetic import generate_scenes

    scenes = list(generate_scenes(PROBE_SCENES, seed=PROBE_SEED, image_size=224, split="test"))
    captions = []
    for scene in scenes:
        captions.append(scene.long_caption)
        for attribute in TWIN_ATTRIBUTES:
            twin = counterfactual_twin(scene, attribute, 0, np.random.default_rng(PROBE_SEED))
            # no other value allowed (rare): the scene's short caption keeps the count of captions fixed
            captions.append(twin.long_caption if twin is not None else scene.short_caption)
    return [scene.image for scene in scenes], captions


def measure_agreement(model, folder: str | Path, fmt: str) -> Agreement:
    """The folder's ranking (read back with the ``fmt`` library) against ``model``'s own on the probe set."""
    import torch

    pictures, captions = probe_set()
    with torch.no_grad():
        ours = model.similarity(pictures, captions).float().cpu().numpy()
    theirs = exported_scores(Path(folder), fmt, pictures, captions)
    return compare_rankings(ours, theirs)


def exported_scores(folder: Path, fmt: str, pictures, captions) -> np.ndarray:
    """[pictures, captions] cosines of the folder's model, through its library's own loader and preprocessing."""
    import torch
    import torch.nn.functional as F

    from explorer.core.runtime import prepared_import

    with torch.no_grad():
        if fmt == "transformers":
            transformers = prepared_import("transformers")
            model = transformers.CLIPModel.from_pretrained(folder).eval()
            processor = transformers.CLIPProcessor.from_pretrained(folder)
            pixels = torch.as_tensor(np.asarray(processor(images=pictures, return_tensors="np")["pixel_values"]))
            tokens = processor.tokenizer(captions, padding="max_length", truncation=True, return_tensors="pt")
            image = _features(model.get_image_features(pixel_values=pixels))
            text = _features(model.get_text_features(input_ids=tokens.input_ids, attention_mask=tokens.attention_mask))
        else:
            open_clip = prepared_import("open_clip")
            model, _, transform = open_clip.create_model_and_transforms(f"local-dir:{folder}")
            tokenizer = open_clip.get_tokenizer(f"local-dir:{folder}")
            model.eval()
            image = model.encode_image(torch.stack([transform(p) for p in pictures]))
            text = model.encode_text(tokenizer(captions))
        return (F.normalize(image.float(), dim=-1) @ F.normalize(text.float(), dim=-1).T).numpy()


def _features(output):
    """transformers 5 returns a model output whose ``pooler_output`` is the projected embedding; 4, a tensor."""
    return getattr(output, "pooler_output", output)


def compare_rankings(ours: np.ndarray, theirs: np.ndarray) -> Agreement:
    """Pairwise order agreement and Spearman of two [pictures, captions] score tables, per picture, averaged."""
    from scipy.stats import spearmanr

    ours, theirs = np.asarray(ours, dtype=np.float64), np.asarray(theirs, dtype=np.float64)
    if ours.shape != theirs.shape or ours.ndim != 2:
        raise ExportError(f"cannot compare score tables of shapes {ours.shape} and {theirs.shape}: both must be "
                          "[pictures, captions] over the same probe set")
    shares, rhos = [], []
    upper = np.triu_indices(ours.shape[1], k=1)
    for a, b in zip(ours, theirs):
        da = np.sign(a[:, None] - a[None, :])[upper]
        db = np.sign(b[:, None] - b[None, :])[upper]
        kept = da != 0  # a pair explorer scores alike has no order to keep
        shares.append(float(np.mean(da[kept] == db[kept])) if kept.any() else 1.0)
        rho = spearmanr(a, b).statistic
        rhos.append(0.0 if np.isnan(rho) else float(rho))  # a constant score ranks nothing
    return Agreement(pairwise=float(np.mean(shares)), spearman=float(np.mean(rhos)), pictures=ours.shape[0],
                     captions=ours.shape[1])


__all__ = ["AGREEMENT_FLOOR", "Agreement", "compare_rankings", "exported_scores", "measure_agreement", "probe_set"]
