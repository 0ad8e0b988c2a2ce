"""FID of generated pictures against a folder of reference pictures (optional: ``pip install 'explorer[fid]'``).

FineLIP's SDXL metric is FID (Inception pool3, 2048 features) against DOCCI test images. The
Inception network comes from torch-fidelity through torchmetrics, with weights the user points to
(``pt_inception-2015-12-05-6726825d.pth``; nothing is downloaded). That library reads the file by
unpickling it, so it is first read here the safe way (``read_checkpoint``: safetensors or
``torch.load(weights_only=True)``) and only a file of plain tensors written by us is handed on.
FID from a handful of pictures is strongly biased upwards: the number of pictures is reported with it.
"""

from __future__ import annotations

import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from explorer.core.errors import ExplorerError
from explorer.core.images import load_image
from explorer.core.runtime import prepared_import
from explorer.models.io.checkpoints import read_checkpoint

PICTURE_SUFFIXES = (".png", ".jpg", ".jpeg", ".webp", ".bmp")
FID_SIZE = 299
BATCH = 32  # pictures a forward through Inception


@dataclass(frozen=True)
class FidResult:
    fid: float
    n_generated: int
    n_reference: int

    def line(self) -> str:
        return (f"FID {self.fid:.2f} ({self.n_generated} generated vs {self.n_reference} reference pictures; "
                f"few pictures bias FID upwards)")


def reference_pictures(folder: Path, limit: int | None = None) -> list:
    folder = Path(folder)
    if not folder.is_dir():
        raise ExplorerError(f"reference folder {folder} does not exist")
    files = sorted(p for p in folder.rglob("*") if p.suffix.lower() in PICTURE_SUFFIXES)[:limit]
    if len(files) < 2:
        raise ExplorerError(f"{folder} holds {len(files)} picture(s); FID needs at least 2 on each side")
    return [load_image(path).image for path in files]


def frechet_inception_distance(generated: list, reference: list, inception_weights: Path) -> FidResult:
    """FID of one set of pictures against the reference pictures."""
    return fid_of_sets({"generated": generated}, reference, inception_weights)["generated"]


def fid_of_sets(sets: Mapping[str, list], reference: list, inception_weights: Path) -> dict[str, FidResult]:
    """FID of each named set of pictures against one reference set. The network is built once and the
    reference's features computed once for every set (a column a model in ``explorer generate --compare``);
    pictures go through Inception ``BATCH`` at a time, so a reference folder of thousands is never one tensor."""
    if len(reference) < 2 or any(len(pictures) < 2 for pictures in sets.values()):
        raise ExplorerError("FID needs at least 2 generated and 2 reference pictures")
    metric = _inception_metric(inception_weights)
    for chunk in _chunks(reference):
        metric.update(_batch(chunk), real=True)
    scores = {}
    for name, generated in sets.items():
        metric.reset()  # the generated side only: the metric keeps the reference's features (reset_real_features)
        for chunk in _chunks(generated):
            metric.update(_batch(chunk), real=False)
        scores[name] = FidResult(float(metric.compute()), len(generated), len(reference))
    return scores


def _inception_metric(inception_weights: Path):
    try:
        FrechetInceptionDistance = prepared_import("torchmetrics.image.fid").FrechetInceptionDistance
    except ImportError as error:
        raise ExplorerError("FID needs the optional extra: pip install 'explorer[fid]' (torchmetrics, "
                            "torch-fidelity)") from error
    tensors = read_checkpoint(inception_weights).tensors  # refuses pickled objects
    with tempfile.TemporaryDirectory() as scratch:
        plain = Path(scratch) / "inception.pth"
        torch.save(dict(tensors), plain)  # tensors only: what the library then unpickles is ours
        try:
            return FrechetInceptionDistance(feature=2048, normalize=True, reset_real_features=False,
                                            feature_extractor_weights_path=str(plain))
        except RuntimeError as error:  # a state dict of another network
            raise ExplorerError(f"{inception_weights} is not torch-fidelity's InceptionV3 weights: "
                                f"{str(error).splitlines()[0]}") from error


def _chunks(pictures: list) -> list[list]:
    return [pictures[start:start + BATCH] for start in range(0, len(pictures), BATCH)]


def _batch(pictures: list) -> torch.Tensor:
    arrays = [np.asarray(p.convert("RGB").resize((FID_SIZE, FID_SIZE)), dtype=np.float32) / 255 for p in pictures]
    return torch.from_numpy(np.stack(arrays)).permute(0, 3, 1, 2)


def fid_per_column(result, reference: Path, inception_weights: Path) -> dict[str, FidResult]:
    """FID of each column's pictures (one per seed) of a ``GenerationResult`` against the reference folder."""
    columns = {column: [p.image for p in result.pictures if p.column == column] for column in result.settings.columns}
    return fid_of_sets(columns, reference_pictures(reference), inception_weights)
