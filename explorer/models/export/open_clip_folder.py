"""A CLIP backbone as an open_clip folder: ``open_clip.create_model_and_transforms("local-dir:DIR")``.

open_clip 3's ``local-dir:`` loader reads ``open_clip_config.json`` (``model_cfg``: what ``open_clip.CLIP``
is built with; ``preprocess_cfg``: its eval transform) and takes the weights from
``open_clip_model.safetensors`` beside it, loaded strictly. explorer's backbone is built from
open_clip's own towers under OpenAI's names, which are ``open_clip.CLIP``'s, so the weights go out
key for key. The tokenizer is open_clip's ``SimpleTokenizer`` at ``text_cfg.context_length``
(``open_clip.get_tokenizer("local-dir:DIR")``): nothing else to write.

The pixels: for OpenAI's pipeline (torchvision resize of the short side, bicubic, centre crop) open_clip's
"shortest" transform is the same calls, so they are explorer's exactly. GOAL's pipeline floors the crop
offset where torchvision rounds it (``preprocess``), one pixel apart for some picture sizes.
"""

from __future__ import annotations

import json
from pathlib import Path

from explorer.core.errors import ExportError
from explorer.models.architecture import ClipArchitecture
from explorer.models.methods.base import Method
from explorer.models.preprocess import Preprocess

CONFIG = "open_clip_config.json"  # open_clip.constants.HF_CONFIG_NAME
WEIGHTS = "open_clip_model.safetensors"  # open_clip.constants.HF_SAFE_WEIGHTS_NAME


def model_cfg(arch: ClipArchitecture) -> dict:
    """``open_clip.CLIP(**model_cfg)`` for this architecture."""
    return {
        "embed_dim": arch.embed_dim,
        "quick_gelu": arch.quick_gelu,
        # open_clip's heads are width / head_width.
        "vision_cfg": {"image_size": arch.image_size, "patch_size": arch.patch_size, "width": arch.vision_width,
                       "layers": arch.vision_layers, "head_width": arch.vision_width // arch.vision_heads,
                       "mlp_ratio": arch.vision_mlp_ratio,
                       # "avg": the mean of the patch tokens after ln_post, as ``ClipBackbone.pool_image``;
                       # open_clip has no attention pool of ours: that export (backbone only) pools the class token
                       "pool_type": "tok" if arch.pool == "attn" else arch.pool},
        "text_cfg": {"context_length": arch.context_length, "vocab_size": arch.vocab_size, "width": arch.text_width,
                     "heads": arch.text_heads, "layers": arch.text_layers, "mlp_ratio": arch.text_mlp_ratio},
    }


def preprocess_cfg(preprocess: Preprocess) -> dict:
    """open_clip's eval transform for the model's pipeline (``open_clip.transform.PreprocessCfg`` fields)."""
    if preprocess.pipeline not in ("openai", "hf-clip"):
        raise ExportError(f"open_clip has no transform for the {preprocess.pipeline!r} pipeline")
    return {"size": preprocess.image_size, "mode": "RGB", "mean": list(preprocess.mean), "std": list(preprocess.std),
            "interpolation": "bicubic", "resize_mode": "shortest", "fill_color": 0}


def write_open_clip_folder(method: Method, out: Path) -> tuple[list[Path], list[str]]:
    """Write the folder; returns (files written, notes)."""
    from explorer.models.export.weights import backbone_tensors, save_weights

    config = {"model_cfg": model_cfg(method.arch), "preprocess_cfg": preprocess_cfg(method.preprocess)}
    out.mkdir(parents=True, exist_ok=True)
    save_weights(backbone_tensors(method), out / WEIGHTS)
    (out / CONFIG).write_text(json.dumps(config, indent=2), encoding="utf-8")
    notes = []
    if method.preprocess.pipeline == "hf-clip":
        notes.append("open_clip's centre crop rounds the offset where the model's CLIPImageProcessor floors it: a "
                     "picture whose resized side exceeds the input by 4k + 3 pixels is read one pixel down or right")
    return [out / CONFIG, out / WEIGHTS], notes
