"""FLISM: Fast Local Image-Sentence Matching (FAST-GOAL, papers/fast-goal.txt, Sec. III-A).

Given an image and the sentences of its long caption, FLISM proposes local
regions, embeds every region crop and every sentence with CLIP, lets every
sentence take its most similar region, and keeps the single most similar
(sentence, region) pair as the local training pair (I_l, T_l).

Region proposals (in this order):
- detector boxes (the paper uses YOLOS). The detector is pluggable: any
  callable ``detector(image) -> list[Region]``; the default (None) proposes
  no detector boxes, so nothing is downloaded;
- the four quadrants of the image (w/2 x h/2 each);
- one centre box formed by the quadrants' midpoints:
  (w/4, h/4, 3w/4, 3h/4).

Similarities are cosines of L2-normalised CLIP embeddings (the class-token
embedding of each crop, the EOT embedding of each sentence). Ties go to the
first maximum (lowest sentence index, then lowest region index).

Everything here is a plain function (no UI code): ``spatial_regions`` and
``match_similarity`` are pure; ``flism`` wires them to a loaded model.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Protocol, Sequence

import torch
import torch.nn.functional as F
from PIL import Image

from explorer.core.errors import CaptionError
from explorer.core.regions import Box, Region, clip_box, pixel_box, spatial_regions

if TYPE_CHECKING:  # the public model wrapper; only named in annotations
    from explorer.models.model import Model

class Detector(Protocol):
    """An object detector: boxes (with labels) for one RGB picture. Its regions' source is "detector"."""

    def __call__(self, image: Image.Image) -> list[Region]: ...


@dataclass
class FlismResult:
    similarity: torch.Tensor  # [M, R] cosine of sentence i with region j
    best_region: torch.Tensor  # [M] long: the region each sentence takes (argmax of its row)
    best_pair: tuple[int, int]  # (sentence_index, region_index) of the highest similarity overall
    regions: list[Region] | None = None  # the R regions, when FLISM proposed them
    sentences: list[str] | None = None  # the M sentences, when given as text

    @property
    def best_score(self) -> float:
        i, j = self.best_pair
        return float(self.similarity[i, j])

    @property
    def pair_region(self) -> Region | None:
        return None if self.regions is None else self.regions[self.best_pair[1]]

    @property
    def pair_sentence(self) -> str | None:
        return None if self.sentences is None else self.sentences[self.best_pair[0]]


# ---- proposals ----------------------------------------------------------------------------------


def region_proposals(image: Image.Image, detector: Detector | None = None) -> list[Region]:
    """Detector boxes (kept inside the image, labelled source="detector"), then the 5 spatial regions."""
    width, height = image.size
    regions: list[Region] = []
    for found in (detector(image) if detector is not None else []):
        box = clip_box(found.box, width, height)
        if box is not None:  # a box wholly outside the picture proposes nothing
            regions.append(replace(found, box=box, source="detector"))
    return regions + spatial_regions(width, height)


def crop_regions(image: Image.Image, regions: Sequence[Region]) -> list[Image.Image]:
    width, height = image.size
    return [image.crop(pixel_box(region.box, width, height)) for region in regions]


# ---- matching -----------------------------------------------------------------------------------


def match_similarity(similarity: torch.Tensor) -> FlismResult:
    """Every sentence (row) takes its best region (column); the single highest entry is the pair."""
    if similarity.ndim != 2 or 0 in similarity.shape:
        raise ValueError(f"FLISM matches M sentences x R regions (both > 0), got shape {tuple(similarity.shape)}")
    similarity = similarity.detach().float().cpu()
    best_region = similarity.argmax(dim=1)
    flat = int(similarity.flatten().argmax())
    n_regions = similarity.shape[1]
    return FlismResult(similarity=similarity, best_region=best_region,
                       best_pair=(flat // n_regions, flat % n_regions))


def match_sentences(region_embeddings: torch.Tensor, sentence_embeddings: torch.Tensor) -> FlismResult:
    """``region_embeddings`` [R, d], ``sentence_embeddings`` [M, d] -> cosine [M, R] and the matches."""
    sentences = F.normalize(sentence_embeddings.detach().float(), dim=-1)
    regions = F.normalize(region_embeddings.detach().float(), dim=-1)
    return match_similarity(sentences @ regions.T)


def flism(model: "Model", image, sentences: Sequence[str], detector: Detector | None = None,
          fit: str = "crop") -> FlismResult:
    """Propose regions on ``image``, embed their crops and the sentences with ``model``, and match.

    ``model`` is the public ``explorer.Model`` (anything with ``encode_image(list of PIL)`` and
    ``encode_text(list of str)`` returning explorer features). Each crop is preprocessed as the
    model's own inputs are (``fit="crop"``: resize the short side, centre crop, as CLIP's
    preprocessing does in the official pipeline; ``"squash"`` keeps the whole crop).
    """
    from explorer.core.images import load_image

    sentences = list(sentences)  # indices in the result are indices into this list: nothing is dropped
    if not any(s and s.strip() for s in sentences):
        raise CaptionError("FLISM needs at least one sentence to match.")
    picture = image if isinstance(image, Image.Image) and image.mode == "RGB" else load_image(image).image
    regions = region_proposals(picture, detector)
    crops = crop_regions(picture, regions)
    region_embeddings = model.encode_image(crops, fit=fit).cls
    sentence_embeddings = model.encode_text(sentences).eot
    result = match_sentences(region_embeddings, sentence_embeddings)
    result.regions, result.sentences = regions, sentences
    return result


__all__ = ["Box", "Detector", "FlismResult", "Region", "clip_box", "crop_regions", "flism", "match_sentences",
           "match_similarity", "pixel_box", "region_proposals", "spatial_regions"]
