"""CLIP and Long-CLIP: the baselines, and the base every CLIP-family method loads through.

Pictures: OpenAI's / Long-CLIP's ``_transform`` (``Preprocess`` pipeline "openai": torchvision
bicubic resize of the short side, centre crop, OpenAI mean and std); the CLIP family inherits it.

Layouts read here:
- ``openai-clip``: OpenAI's state dict (also inside its TorchScript archive);
  carries ``input_resolution``/``context_length``/``vocab_size`` ints.
- ``open_clip``: the same keys, usually wrapped as ``{'state_dict': ...}``
  with a ``module.`` prefix by open_clip's trainer. Its default activation
  is GELU, not QuickGELU (the tensors cannot tell; a manifest can say).
- ``longclip``: OpenAI keys plus ``positional_embedding_res`` [248, d]; the
  effective table is ``cat(pe[:20], pe_res[20:])`` (positional.py).
"""

from __future__ import annotations

import contextlib
import dataclasses
from typing import Mapping

import torch
import torch.nn.functional as F

from explorer.core.errors import ConfigError, ExplorerError
from explorer.models.architecture import ClipArchitecture, infer_clip_architecture
from explorer.models.batch import TrainingBatch
from explorer.models.explainers import EXPLAINER_KINDS
from explorer.models.features import TextFeatures
from explorer.models.io.checkpoints import KeyReport, RawCheckpoint, pop_ignored, strict_load
from explorer.models.io.hf_clip_layout import HF_BUFFERS, hf_to_openai, is_hf_clip
from explorer.models.measured import held_out
from explorer.models.methods import keys_with_prefix, register
from explorer.models.methods.base import Method
from explorer.models.nn.backbone import ClipBackbone
from explorer.models.nn.losses import info_nce_pairs
from explorer.models.nn.positional import LONG_CONTEXT, SHORT_CONTEXT, merge_longclip_tables
from explorer.models.preprocess import Preprocess

OPENAI_EXTRAS = {
    "input_resolution": "int kept by OpenAI's export",
    "context_length": "int kept by OpenAI's export",
    "vocab_size": "int kept by OpenAI's export",
    "attn_mask": "causal mask buffer, rebuilt from the context length",
}
CLIP_CORE_KEYS = ("visual.conv1.weight", "token_embedding.weight", "positional_embedding", "ln_final.weight")
# Prefixes of other methods' modules: a file with these is not a plain CLIP.
OTHER_METHOD_PREFIXES = ("cross_net.", "visual_proj.", "image_post.", "text_post.")


def hf_text_positions(tensors: Mapping[str, torch.Tensor]) -> int:
    return tensors["text_model.embeddings.position_embedding.weight"].shape[0]


def is_clip_layout(tensors: Mapping[str, torch.Tensor]) -> bool:
    return all(key in tensors for key in CLIP_CORE_KEYS)


class ClipFamily(ClipBackbone, Method):
    """A method whose weights are a CLIP backbone (plus, in subclasses, modules of its own): the base class of a
    CLIP-family plugin (``explorer new-method`` writes a subclass).

    A subclass overrides ``similarity`` (its score), ``sentence_maps`` (its own map kinds) and ``losses`` (its
    training terms); everything else (loading, the zoo format, the explainers, exports) comes from here.

    Attributes:
        logit_scale: The learned temperature, a scalar ``nn.Parameter`` holding log(1 / 0.07) at
            initialisation, as CLIP's: a loss multiplies cosines by ``logit_scale.exp()``.
        arch: The ``ClipArchitecture`` (widths, layers, patch size, context, pooling) the towers were built with.
        preprocess: The method's image pipeline (``Preprocess``): ``TrainingBatch.pixels`` went through it.
        extra_config: The sizes of the method's own modules, saved in ``config()`` and given back to ``build``.
        visual: The image tower (open_clip's ``VisionTransformer`` under OpenAI's names).
        positional_embedding: The text tower's position table, [context, width]; its rows are the context.
    """

    default_quick_gelu: bool = True
    default_context: int = LONG_CONTEXT  # for ``example``; CLIP and FLAIR say 77
    # Token modules a method adds to the CLIP state dict: (config key, module class with
    # ``sizes_from(tensors, prefix)``, key prefix). A CLIP layout holding the first prefix is this
    # method's released layout, and each module's sizes are read from its tensors.
    token_modules: tuple[tuple[str, type, str], ...] = ()
    # The official code's image pipeline (``explorer.models.preprocess``): OpenAI's / open_clip's
    # torchvision resize and centre crop, unless a method's code says otherwise (GOAL: Hugging Face's).
    preprocess_pipeline: str = "openai"
    explainer_kinds = EXPLAINER_KINDS  # a CLIP ViT: Grad-CAM, LeGrad, ClearCLIP and NACLIP all apply

    def __init__(self, arch: ClipArchitecture, **extra):
        super().__init__(arch)
        self.preprocess = Preprocess(arch.image_size, pipeline=self.preprocess_pipeline)
        self.extra_config = dict(extra)  # sizes of the method's own modules (subclasses use them)

    @property
    def context_length(self) -> int:
        return self.positional_embedding.shape[0]

    def config(self) -> dict:
        return {"architecture": self.arch.to_dict(), **self.extra_config}

    @classmethod
    def build(cls, config: Mapping) -> "ClipFamily":
        extra = {k: v for k, v in config.items() if k != "architecture"}
        return cls(ClipArchitecture.from_dict(config["architecture"]), **extra)

    @classmethod
    def merge_config(cls, config: Mapping, overrides: Mapping | None) -> dict:
        arch_fields = set(config["architecture"])
        overrides = dict(overrides or {})
        arch = {**config["architecture"], **{k: v for k, v in overrides.items() if k in arch_fields}}
        rest = {k: v for k, v in overrides.items() if k not in arch_fields}
        return {**config, **rest, "architecture": arch}

    @classmethod
    def detect(cls, tensors: Mapping[str, torch.Tensor], raw: RawCheckpoint) -> str | None:
        """This method's name if the file is a CLIP layout carrying its first token module."""
        if cls.token_modules and is_clip_layout(tensors) and keys_with_prefix(tensors, cls.token_modules[0][2]):
            return cls.name
        return None

    @classmethod
    def extra_config_from(cls, tensors: Mapping[str, torch.Tensor]) -> dict:
        """Sizes of the method's own modules, read from the file's tensors."""
        return {key: module.sizes_from(tensors, prefix) for key, module, prefix in cls.token_modules}

    # ---- export ------------------------------------------------------------------------------

    export_leaves_out = ""  # a CLIP exports whole; a method with modules or a score of its own says what is left

    def export_left_out(self, fmt: str) -> str | None:
        """What a CLIP export leaves out, "" for nothing. Of the method: its own words (``export_leaves_out``);
        when it gave none, its own modules (state-dict prefixes the backbone lacks) and its own score (a
        ``similarity`` that is not the cosine of ``cls`` and ``eot``: a method whose overridden score is that
        cosine says ``cosine_score = True``), so a plugin's method is never exported whole by mistake. Of the
        backbone, whatever method it carries: the mean pooling, which only open_clip can say; the attention
        pool (the demo zoo's base), which neither can."""
        left = [self.export_leaves_out] if self.export_leaves_out else []
        own = sorted({key.split(".")[0] for key in self.state_dict()} -
                     {key.split(".")[0] for key in self.backbone_state_dict()})
        if not left and own:
            left.append(f"{self.title}'s own modules ({', '.join(own)})" + ("" if self.global_score else " and score"))
        elif not left and not self.global_score:
            left.append(f"{self.title}'s own score (its similarity; if that is the cosine of cls and eot, the "
                        "class says cosine_score = True)")
        if self.arch.pool == "avg" and fmt == "transformers":
            left.append("the mean pooling of the patch tokens (CLIPModel pools the class token)")
        if self.arch.pool == "attn":
            left.append("the attention pooling of the patch tokens (the backbone's image_pool, as in the demo zoo's "
                        "base; the export pools the class token)")
        return "; ".join(left)

    # ---- loading -------------------------------------------------------------------------------

    @classmethod
    def to_backbone_layout(cls, raw: RawCheckpoint, fmt: str, report: KeyReport) -> dict[str, torch.Tensor]:
        """The file's tensors rearranged into this module's own key layout."""
        tensors = dict(raw.tensors)
        if is_hf_clip(tensors):
            pop_ignored(tensors, HF_BUFFERS, report)
            tensors = hf_to_openai(tensors)
            report.notes.append("converted Hugging Face CLIPModel keys to the OpenAI layout")
        pop_ignored(tensors, OPENAI_EXTRAS, report)
        if "positional_embedding_res" in tensors:
            tensors["positional_embedding"] = merge_longclip_tables(
                tensors["positional_embedding"], tensors.pop("positional_embedding_res"))
            report.notes.append("merged Long-CLIP tables: cat(positional_embedding[:20], "
                                "positional_embedding_res[20:])")
        return tensors

    @classmethod
    def infer_architecture(cls, tensors: Mapping[str, torch.Tensor], fmt: str, raw: RawCheckpoint,
                           report: KeyReport) -> ClipArchitecture:
        quick_gelu = cls.default_quick_gelu and fmt != "open_clip"
        if fmt == "open_clip":
            report.notes.append("activation: GELU assumed (open_clip's default); set "
                                "architecture.quick_gelu=true in the manifest if it descends from OpenAI CLIP")
        return infer_clip_architecture(tensors, quick_gelu=quick_gelu)

    @classmethod
    def from_checkpoint(cls, raw: RawCheckpoint, fmt: str, overrides: Mapping | None = None,
                        dry_run: bool = False):
        report = KeyReport(source=str(raw.path), format=fmt)
        tensors = cls.to_backbone_layout(raw, fmt, report)
        try:
            arch = cls.infer_architecture(tensors, fmt, raw, report)
        except (KeyError, ValueError, ExplorerError) as error:
            from explorer.core.errors import CheckpointMismatchError

            raise CheckpointMismatchError(f"{raw.path}: cannot read a {fmt} architecture: {error}", report) from error
        extra = cls.extra_config_from(tensors)
        overrides = dict(overrides or {})
        extra.update({k: overrides.pop(k) for k in list(overrides) if k in extra})
        if overrides:
            arch = dataclasses.replace(arch, **overrides)
        with torch.device("meta") if dry_run else contextlib.nullcontext():
            method = cls(arch, **extra)
        strict_load(method, tensors, report, dry_run=dry_run)
        return method, report

    @classmethod
    def example(cls, size: str = "tiny", seed: int = 0, **extra) -> "ClipFamily":
        torch.manual_seed(seed)
        return cls(example_architecture(size, cls.default_context, cls.default_quick_gelu), **extra)

    @classmethod
    def demo_model(cls, demo, **extra) -> "ClipFamily":
        torch.manual_seed(demo.seed)
        return cls(demo.architecture, **extra)

    # ---- training ------------------------------------------------------------------------------

    def encode_captions(self, captions: list[str]) -> TextFeatures:
        """Tokenize with this model's context and encode (for losses; the device is the model's)."""
        return self.encode_text(self.tokenize(captions).unpadded().ids.to(self.positional_embedding.device))

    def losses(self, batch: TrainingBatch) -> dict[str, torch.Tensor]:
        """CLIP's symmetric InfoNCE over the batch (Radford et al. 2021) on the long captions; under DDP the
        batch is the global one (``losses.info_nce_pairs``)."""
        image = F.normalize(self.encode_image(batch.pixels).cls, dim=-1)
        text = F.normalize(self.encode_captions(batch.captions).eot, dim=-1)
        scale = self.logit_scale.exp()
        return {"contrastive": info_nce_pairs(image, text, lambda rows, columns: scale * rows @ columns.T)}


def example_architecture(size: str, context_length: int, quick_gelu: bool = True) -> ClipArchitecture:
    """ViT-L/14 sizes ("large"), ViT-B/16 sizes ("base") or a tiny model ("tiny") with the given context."""
    if size == "large":
        return ClipArchitecture(embed_dim=768, image_size=224, patch_size=14, vision_width=1024, vision_layers=24,
                                vision_heads=16, vision_mlp_ratio=4.0, context_length=context_length,
                                vocab_size=49408, text_width=768, text_layers=12, text_heads=12, text_mlp_ratio=4.0,
                                quick_gelu=quick_gelu)
    if size == "base":
        return ClipArchitecture(embed_dim=512, image_size=224, patch_size=16, vision_width=768, vision_layers=12,
                                vision_heads=12, vision_mlp_ratio=4.0, context_length=context_length,
                                vocab_size=49408, text_width=512, text_layers=12, text_heads=8, text_mlp_ratio=4.0,
                                quick_gelu=quick_gelu)
    if size == "tiny":
        return ClipArchitecture(embed_dim=32, image_size=64, patch_size=16, vision_width=64, vision_layers=2,
                                vision_heads=1, vision_mlp_ratio=4.0, context_length=context_length,
                                vocab_size=49408, text_width=64, text_layers=2, text_heads=1, text_mlp_ratio=4.0,
                                quick_gelu=quick_gelu)
    raise ConfigError(f"size must be 'tiny', 'base' or 'large', not {size!r}")


@register
class ClipMethod(ClipFamily):
    """OpenAI CLIP (77 tokens): text past the limit is truncated, and the UI says where."""

    name = "clip"
    title = "CLIP"
    default_context = SHORT_CONTEXT
    # No sentence map of its own: it opens on Grad-CAM, its best mean of mIoU and pointing (ClearCLIP points a
    # little better, 82.1, at half the mIoU).
    measured_grounding = held_out("demo-clip-base", {
        "generic": (21.0, 74.5), "gradcam": (46.8, 80.5), "legrad": (6.5, 19.8), "clearclip": (25.1, 82.1),
        "naclip": (25.5, 72.0)})

    @classmethod
    def detect(cls, tensors, raw):
        if is_hf_clip(tensors):
            return "hf-clip" if hf_text_positions(tensors) <= SHORT_CONTEXT else None
        if not is_clip_layout(tensors) or any(keys_with_prefix(tensors, p) for p in OTHER_METHOD_PREFIXES):
            return None
        if "positional_embedding_res" in tensors or tensors["positional_embedding"].shape[0] > SHORT_CONTEXT:
            return None  # Long-CLIP's
        return "open_clip" if "state_dict" in raw.wrapper else "openai-clip"


@register
class LongClipMethod(ClipFamily):
    """Long-CLIP: CLIP with the position table stretched to 248 and fine-tuned on long captions."""

    name = "longclip"
    title = "Long-CLIP"
    measured_grounding = held_out("demo-longclip", {  # it opens on Grad-CAM, its best
        "generic": (22.5, 74.8), "gradcam": (47.2, 79.9), "legrad": (6.9, 19.2), "clearclip": (24.5, 74.5),
        "naclip": (24.8, 70.1)})

    def released_state_dict(self) -> dict:
        """Long-CLIP's two tables: rows < 20 are read from the first, the rest from ``_res``."""
        tensors = dict(self.state_dict())
        tensors["positional_embedding_res"] = tensors["positional_embedding"].clone()
        return tensors

    @classmethod
    def detect(cls, tensors, raw):
        if not is_clip_layout(tensors) or any(keys_with_prefix(tensors, p) for p in OTHER_METHOD_PREFIXES):
            return None
        if "positional_embedding_res" in tensors:
            return "longclip"
        if tensors["positional_embedding"].shape[0] > SHORT_CONTEXT:
            return "longclip-single-table"
        return None
