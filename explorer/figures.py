"""Paper figures from the same results the app shows (matplotlib; PNG at 300 dpi, PDF, SVG)."""

from __future__ import annotations

import textwrap
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # no display: figures are files
import matplotlib.pyplot as plt  # noqa: E402
from PIL import Image  # noqa: E402

from .models.model import SentenceMaps  # noqa: E402
from .render import normalise  # noqa: E402

FORMATS = (".png", ".pdf", ".svg")


def sentence_maps_figure(image: Image.Image, result: SentenceMaps, out: str | Path, cmap: str = "turbo",
                         opacity: float = 0.5, columns: int = 4, title: str = "", dpi: int = 300) -> Path:
    """The image, then one overlay per sentence with the sentence wrapped under it."""
    out = Path(out)
    if out.suffix.lower() not in FORMATS:
        raise ValueError(f"figure format must be one of {FORMATS}, not {out.suffix!r}")
    panels = len(result) + 1
    columns = max(1, min(columns, panels))
    rows = -(-panels // columns)
    aspect = image.height / image.width
    fig, axes = plt.subplots(rows, columns, figsize=(2.6 * columns, 2.6 * rows * aspect + 0.7 * rows),
                             squeeze=False)
    for axis in axes.flat:
        axis.axis("off")
    axes.flat[0].imshow(image)
    axes.flat[0].set_title(title or "image", fontsize=8)
    for index, (sentence, values) in enumerate(zip(result.sentences, result.maps), start=1):
        axis = axes.flat[index]
        axis.imshow(image)
        axis.imshow(normalise(values), cmap=cmap, alpha=opacity, vmin=0, vmax=1)
        cut = f" [{result.n_cut[index - 1]} tokens cut]" if result.n_cut and result.n_cut[index - 1] else ""
        axis.set_title("\n".join(textwrap.wrap(f"{index}. {sentence}{cut}", 34)[:4]), fontsize=7)
    fig.tight_layout(pad=0.2)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=dpi, bbox_inches="tight", pad_inches=0.0)
    plt.close(fig)
    return out
