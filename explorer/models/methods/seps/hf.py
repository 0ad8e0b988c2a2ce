"""The installed Hugging Face ``transformers``, imported only when SEPS needs it.

SEPS builds its ViT, BERT and tokenizer with it, and reads the installed ViT
key names off it (``key_layout``). ``explorer.models`` has already made
torchvision importable, which transformers' image code needs.
"""

from __future__ import annotations


def load_transformers():
    """The ``transformers`` module (imported on first use: it is slow to import)."""
    import transformers

    return transformers
