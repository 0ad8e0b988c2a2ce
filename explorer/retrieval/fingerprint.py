"""What an embedding depends on, as short hashes: the model's weights and settings, and the dataset.

An embedding cache is reused only when everything that shaped its vectors is the same: the
weights (hashed from the loaded tensors, so a rewritten file, a changed manifest option or another
checkpoint at the same path all count as a change), the method and its config, the preprocessing,
the context length and the precision. Hashing the tensors reads them once (BLAKE2b, about 1 GB/s),
and the result is kept for the life of the ``Model`` object.
"""

from __future__ import annotations

import hashlib
import json
import weakref

import torch

FINGERPRINTS: "weakref.WeakKeyDictionary[object, str]" = weakref.WeakKeyDictionary()


def model_key(model) -> dict:
    """Everything that shapes ``model``'s embeddings, as JSON-ready values (stored in the cache's index)."""
    method = model.method
    return {"weights": weights_hash(model), "method": method.name, "config": _config_hash(method),
            "preprocess": repr(method.preprocess), "context_length": int(model.context_length),
            "precision": str(getattr(model, "precision", "fp32"))}


def weights_hash(model) -> str:
    """BLAKE2b over every parameter and buffer of the method (names, dtypes, shapes, bytes), in name order."""
    cached = FINGERPRINTS.get(model)
    if cached is None:
        digest = hashlib.blake2b(digest_size=16)
        for name, tensor in sorted(model.method.state_dict().items()):
            digest.update(f"{name}|{tensor.dtype}|{tuple(tensor.shape)}|".encode())
            digest.update(_tensor_bytes(tensor))
        cached = FINGERPRINTS[model] = digest.hexdigest()
    return cached


def short_hash(value) -> str:
    """A 16-hex-digit name for any JSON-ready value (folder names of the cache)."""
    text = json.dumps(value, sort_keys=True, default=str)
    return hashlib.blake2b(text.encode(), digest_size=8).hexdigest()


def _config_hash(method) -> str:
    try:
        config = method.config()
    except NotImplementedError:
        config = {}
    return short_hash(config)


def _tensor_bytes(tensor: torch.Tensor) -> memoryview:
    flat = tensor.detach().cpu().contiguous().reshape(-1)
    if flat.dtype == torch.bfloat16:  # numpy has no bfloat16: hash the same bits as int16
        flat = flat.view(torch.int16)
    return memoryview(flat.numpy()).cast("B")
