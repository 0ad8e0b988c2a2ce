"""A CLIP backbone as a transformers folder: ``CLIPModel.from_pretrained(DIR)``, ``CLIPProcessor.from_pretrained(DIR)``.

Files: ``config.json`` (``CLIPConfig``; the text tower's ``max_position_embeddings`` is the model's
context), ``model.safetensors`` (Hugging Face ``CLIPModel`` keys: ``hf_clip_layout.openai_to_hf``
splits the fused attention into q/k/v and transposes the projections), CLIP's tokenizer files
(``model_max_length`` the context), and ``preprocessor_config.json``, a ``CLIPImageProcessor`` with the
model's own settings (shortest edge, centre crop, bicubic, mean and std).

How close the processor's pixels are to explorer's (``explorer.models.preprocess``), measured in
tests/test_export.py: GOAL's pipeline is ``CLIPImageProcessor`` itself. OpenAI's (every other CLIP here)
is torchvision's resize and centre crop: the same PIL resize, but the crop offset is rounded there and
floored here, so a picture whose resized side exceeds the input by 4k + 3 pixels is read one pixel
further up or left. transformers 5 loads the file with its torchvision backend, which resizes tensors
rather than PIL pictures: at most one grey level from explorer's pixels; ``backend="pil"`` gives them
exactly (where the crop offsets agree).
"""

from __future__ import annotations

from pathlib import Path

from explorer.core.errors import ExportError
from explorer.core.runtime import prepared_import
from explorer.models.architecture import ClipArchitecture
from explorer.models.io.clip_tokenizer_files import write_clip_tokenizer
from explorer.models.io.hf_clip_layout import openai_to_hf
from explorer.models.methods.base import Method
from explorer.models.preprocess import Preprocess
from explorer.models.tokenizer import EOT_ID, SOT_ID

WEIGHTS = "model.safetensors"
PROCESSOR_CONFIG = "preprocessor_config.json"
LAYER_NORM_EPS = 1e-5  # CLIP's (OpenAI, open_clip): transformers' default is the same


def clip_config(arch: ClipArchitecture, logit_scale: float):
    """The ``CLIPConfig`` of a backbone with this architecture (activation and context included)."""
    act = "quick_gelu" if arch.quick_gelu else "gelu"  # "gelu" is the exact (erf) GELU, as torch's nn.GELU
    text = dict(vocab_size=arch.vocab_size, hidden_size=arch.text_width, num_hidden_layers=arch.text_layers,
                num_attention_heads=arch.text_heads, intermediate_size=round(arch.text_width * arch.text_mlp_ratio),
                max_position_embeddings=arch.context_length, hidden_act=act, layer_norm_eps=LAYER_NORM_EPS,
                projection_dim=arch.embed_dim,
                # The pooled token is the first EOT (explorer: the argmax of the ids, EOT being the largest id).
                bos_token_id=SOT_ID, eos_token_id=EOT_ID, pad_token_id=EOT_ID)
    vision = dict(hidden_size=arch.vision_width, num_hidden_layers=arch.vision_layers,
                  num_attention_heads=arch.vision_heads,
                  intermediate_size=round(arch.vision_width * arch.vision_mlp_ratio), image_size=arch.image_size,
                  patch_size=arch.patch_size, hidden_act=act, layer_norm_eps=LAYER_NORM_EPS,
                  projection_dim=arch.embed_dim)
    config = prepared_import("transformers").CLIPConfig(
        text_config=text, vision_config=vision, projection_dim=arch.embed_dim, logit_scale_init_value=logit_scale)
    config.architectures = ["CLIPModel"]
    return config


def image_processor(preprocess: Preprocess):
    """The model's pipeline as a ``CLIPImageProcessor``: ``Preprocess.hf_processor``, GOAL's own, has the
    settings of OpenAI's too (shortest edge, centre crop, bicubic, the model's mean and std)."""
    if preprocess.pipeline not in ("openai", "hf-clip"):
        raise ExportError(f"no CLIPImageProcessor reads pictures as the {preprocess.pipeline!r} pipeline does")
    return preprocess.hf_processor


def write_transformers_folder(method: Method, out: Path) -> tuple[list[Path], list[str]]:
    """Write the folder; returns (files written, notes)."""
    from explorer.models.export.weights import backbone_tensors, save_weights

    processor = image_processor(method.preprocess)  # before anything is written: it may refuse
    out.mkdir(parents=True, exist_ok=True)
    tensors = backbone_tensors(method)
    config = clip_config(method.arch, float(tensors["logit_scale"]))
    config.save_pretrained(out)
    save_weights(openai_to_hf(tensors), out / WEIGHTS)
    written = [out / "config.json", out / WEIGHTS, *write_clip_tokenizer(out, method.context_length)]
    processor.save_pretrained(out)  # preprocessor_config.json: transformers 4 and 5 read it
    written.append(out / PROCESSOR_CONFIG)
    notes = []
    if method.preprocess.pipeline == "openai":
        notes.append("CLIPImageProcessor floors the centre crop's offset where torchvision rounds it: a picture "
                     "whose resized side exceeds the input by 4k + 3 pixels is read one pixel up or left")
    return written, notes
