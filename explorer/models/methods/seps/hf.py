"""The installed Hugging Face ``transformers``, imported only when SEPS needs it.

SEPS builds its ViT, BERT and tokenizer with it, and reads the installed ViT
key names off it (``key_layout``).
"""

from __future__ import annotations

from explorer.core import compat


def load_transformers():
    """The ``transformers`` module, imported after making torchvision importable (its image code needs it)."""
    compat.ensure_torchvision_importable()
    import transformers

    return transformers
