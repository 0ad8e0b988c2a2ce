"""What ``SepsMethod.example`` builds from: a tiny BERT vocabulary and the "tiny" / "base" sizes.

Part of the ``Method`` contract (tests, training smoke runs, warm starts and
benchmarks build random models with ``example``), so it lives with the method.
"""

from __future__ import annotations

import hashlib
import tempfile
from pathlib import Path

from explorer.core.errors import ConfigError
from explorer.core.files import write_text_atomic

_EXAMPLE_WORDS = ("a an the of on in at to is are and with sits left right top bottom centre corner background "
                  "plain grey red green blue yellow purple orange cube ball cone ring star disk cat dog mat floor "
                  ". , ##s").split()


def example_vocabulary() -> list[str]:
    """A tiny BERT vocabulary: the specials, then every word of ``example_batch``'s captions (and a few more)."""
    from explorer.models.batch import EXAMPLE_COLOURS, EXAMPLE_PLACES, EXAMPLE_SHAPES

    words = set(_EXAMPLE_WORDS)
    for phrase in (*EXAMPLE_COLOURS, *EXAMPLE_SHAPES, *EXAMPLE_PLACES):
        words.update(phrase.lower().split())
    return ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *sorted(words)]


def example_vocab_file() -> Path:
    """Write the example vocabulary once (content-addressed, atomically) under the temp folder."""
    text = "\n".join(example_vocabulary()) + "\n"
    digest = hashlib.sha256(text.encode()).hexdigest()[:12]
    path = Path(tempfile.gettempdir()) / "explorer-seps" / f"vocab-{digest}.txt"
    if not path.exists():
        write_text_atomic(path, text)
    return path


def example_sizes(size: str, vocab_size: int) -> dict:
    """The constructor's sizes: "tiny" (ViT/BERT of width 64, C = 32, 64 px) or "base" (ViT-B/16 + BERT-base)."""
    if size == "tiny":
        return {"vision": {"width": 64, "layers": 2, "heads": 1, "mlp": 128, "patch_size": 16, "image_size": 64},
                "text": {"width": 64, "layers": 2, "heads": 1, "mlp": 128, "vocab_size": vocab_size,
                         "max_positions": 64, "type_vocab_size": 2},
                "embed_dim": 32}
    if size == "base":  # ViT-B/16 + BERT-base, C = 512
        return {"vision": {"width": 768, "layers": 12, "heads": 12, "mlp": 3072, "patch_size": 16,
                           "image_size": 224},
                "text": {"width": 768, "layers": 12, "heads": 12, "mlp": 3072, "vocab_size": max(30522, vocab_size),
                         "max_positions": 512, "type_vocab_size": 2},
                "embed_dim": 512}
    raise ConfigError(f"size must be 'tiny' or 'base', not {size!r}")
