"""The installed Hugging Face ``transformers``, imported only when SEPS needs it.

SEPS builds its ViT, BERT and tokenizer with it, and reads the installed ViT
key names off it (``key_layout``). Its image code needs torchvision importable (``prepare_libraries``).
"""

from __future__ import annotations

from explorer.core.runtime import prepared_import


def load_transformers():
    """The ``transformers`` module (imported on first use: it is slow to import)."""
    return prepared_import("transformers")
