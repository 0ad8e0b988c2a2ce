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
    if len(generated) < 2 or len(reference) < 2:
        raise ExplorerError("FID needs at least 2 generated and 2 reference pictures")
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
            metric = FrechetInceptionDistance(feature=2048, normalize=True,
                                              feature_extractor_weights_path=str(plain))
        except RuntimeError as error:  # a state dict of another network
            raise ExplorerError(f"{inception_weights} is not torch-fidelity's InceptionV3 weights: "
                                f"{str(error).splitlines()[0]}") from error
    metric.update(_batch(reference), real=True)
    metric.update(_batch(generated), real=False)
    return FidResult(float(metric.compute()), len(generated), len(reference))


def _batch(pictures: list) -> torch.Tensor:
    arrays = [np.asarray(p.convert("RGB").resize((FID_SIZE, FID_SIZE)), dtype=np.float32) / 255 for p in pictures]
    return torch.from_numpy(np.stack(arrays)).permute(0, 3, 1, 2)


def fid_per_column(result, reference: Path, inception_weights: Path) -> dict[str, FidResult]:
    """FID of each column's pictures (one per seed) of a ``GenerationResult`` against the reference folder."""
    pictures = reference_pictures(reference)
    return {column: frechet_inception_distance([p.image for p in result.pictures if p.column == column], pictures,
                                               inception_weights)
            for column in result.settings.columns}
