"""CLIP and Long-CLIP: the baselines, and the base every CLIP-family method loads through.

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

from ..architecture import ClipArchitecture, infer_clip_architecture
from ..backbone import ClipBackbone
from ..checkpoints import KeyReport, RawCheckpoint, pop_ignored, strict_load
from ..hf_clip_layout import HF_BUFFERS, hf_to_openai, is_hf_clip
from ..positional import SHORT_CONTEXT, merge_longclip_tables
from ..preprocess import Preprocess
from . import keys_with_prefix, register
from .base import Method

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
    """A method whose weights are a CLIP backbone (plus, in subclasses, modules of its own)."""

    default_quick_gelu: bool = True

    def __init__(self, arch: ClipArchitecture, **extra):
        super().__init__(arch)
        self.preprocess = Preprocess(arch.image_size)
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
    def extra_config_from(cls, tensors: Mapping[str, torch.Tensor]) -> dict:
        """Sizes of the method's own modules, read from the file's tensors."""
        return {}

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
        except (KeyError, ValueError) as error:
            from ...errors import CheckpointMismatchError

            raise CheckpointMismatchError(f"{raw.path}: cannot read a {fmt} architecture: {error}", report) from error
        extra = cls.extra_config_from(tensors)
        overrides = dict(overrides or {})
        extra.update({k: overrides.pop(k) for k in list(overrides) if k in extra})
        if overrides:
            arch = dataclasses.replace(arch, **overrides)
        with torch.device("meta") if dry_run else contextlib.nullcontext():
            model = cls(arch, **extra)
        strict_load(model, tensors, report, dry_run=dry_run)
        return model, report

    # ---- training ------------------------------------------------------------------------------

    def losses(self, batch: Mapping) -> dict[str, torch.Tensor]:
        """CLIP's symmetric InfoNCE over the batch (Radford et al. 2021)."""
        image = self.encode_image(batch["pixels"])
        text = self.encode_text(batch["ids"])
        logits = self.logit_scale.exp() * F.normalize(image.cls, dim=-1) @ F.normalize(text.eot, dim=-1).T
        target = torch.arange(logits.shape[0], device=logits.device)
        loss = (F.cross_entropy(logits, target) + F.cross_entropy(logits.T, target)) / 2
        return {"contrastive": loss}


@register
class ClipMethod(ClipFamily):
    """OpenAI CLIP (77 tokens): text past the limit is truncated, and the UI says where."""

    name = "clip"
    title = "CLIP"

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

    @classmethod
    def detect(cls, tensors, raw):
        if not is_clip_layout(tensors) or any(keys_with_prefix(tensors, p) for p in OTHER_METHOD_PREFIXES):
            return None
        if "positional_embedding_res" in tensors:
            return "longclip"
        if tensors["positional_embedding"].shape[0] > SHORT_CONTEXT:
            return "longclip-single-table"
        return None
