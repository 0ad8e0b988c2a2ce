"""Models built in code, for when no trained weights are at hand.

``tiny-clip`` is a small Long-CLIP-shaped model (context 248) with random
weights from a fixed seed. It shows that every view works; its maps mean
nothing, and the app labels it *untrained*.
"""

from __future__ import annotations

from explorer.models.architecture import ClipArchitecture

BUILTIN_PREFIX = "builtin:"

TINY_ARCH = ClipArchitecture(
    embed_dim=64, image_size=112, patch_size=16, vision_width=128, vision_layers=2, vision_heads=2,
    vision_mlp_ratio=4.0, context_length=248, vocab_size=49408, text_width=128, text_layers=2,
    text_heads=2, text_mlp_ratio=4.0, quick_gelu=True,
)


def tiny_clip(seed: int = 0):
    """A ``LongClipMethod`` with TINY_ARCH. The method (open_clip, ~3 s) is imported when one is built."""
    import torch

    from explorer.models.methods.clip import LongClipMethod

    generator_state = torch.random.get_rng_state()
    torch.manual_seed(seed)
    try:
        return LongClipMethod(TINY_ARCH)
    finally:
        torch.random.set_rng_state(generator_state)


BUILTINS = {"tiny-clip": tiny_clip}
