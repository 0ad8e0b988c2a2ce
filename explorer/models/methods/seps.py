"""SEPS (papers/seps.txt): patch slimming with sparse and dense text, built on LAPS.

Released checkpoints (``model_best.pth``) are ``{'model': state_dict, 'opt':
argparse.Namespace, 'epoch', 'best_rsum', 'Eiters'}``; the Namespace means the
file can only be read after the user opts in to unpickling. The state dict:

- ``img_enc.visual_encoder.*``: a Hugging Face ``ViTModel`` (with pooler) under
  transformers 4.x key names (``encoder.layer.N.attention.attention.query.*``);
- ``img_enc.vision_proj.*``: Linear(vision width, C), absent when C equals the
  vision width (an ``nn.Identity`` then);
- ``txt_enc.bert.*``: a Hugging Face ``BertModel`` (with pooler), 4.x names;
  ``embeddings.position_ids`` may be present (a buffer: ignored, with reason);
- ``txt_enc.fc.*``: Linear(text width, C), absent when C equals the text width;
- ``cross_net.aggr_net.*``: the LAPS/SEPS aggregation (``TokenRefiner``'s
  layout), whose width, hidden size and N' are read from the tensors.

Every size is read from the tensors; attention heads cannot be, so they are
width / 64 (at least 1), which is right for every released ViT/BERT and can be
overridden with the ``vision_heads`` / ``text_heads`` options. The image size
is the position table's; a model trained at another size (HF's
``interpolate_pos_encoding``) is loaded with the ``input_size`` option, and a
note says so when N' disagrees with the ratios. The installed
transformers may name ViT keys differently from the released 4.x names
(5.x: ``layers.N.attention.q_proj``, ``layers.N.mlp.fc1``, ...); which names it
uses is read off a ViTModel built here, and the released names are mapped onto
them on load (and back by ``released_state_dict`` for writing released files).
LAPS checkpoints share this layout and load as SEPS.

Inference, as the official code:
- image: squash-resize (no crop) bicubic, ImageNet mean/std; features are
  ``vision_proj(ViT(x).last_hidden_state)``, class token included;
- text: BERT wordpiece ``[CLS] ... [SEP]``, attention mask ``ids != 0``,
  features ``fc(BERT(x).last_hidden_state)``; the projected ``[CLS]`` is the
  global embedding. The vocabulary is not in the checkpoint: set
  ``"options": {"vocab_file": "/path/to/vocab.txt"}`` in the manifest (a
  ``vocab.txt`` or a Hugging Face tokenizer folder);
- per (image, caption): patch score = cos(patch, mean patch) + cos(patch, mean
  caption token); the top ceil(P * sparse_ratio) patches are kept and
  aggregated into N' tokens, the dropped ones folded into one extra token
  weighted by the softmax of their scores; the image tokens
  ``[CLS, N' aggregated, extra]`` meet the caption's tokens in the late
  interaction of ``late_interaction.py``.
SEPS runs that once with the sparse caption and once with the dense caption
and sums the two scores (``similarity_with_dense``); ``similarity`` is the
sparse branch alone.
"""

from __future__ import annotations

import contextlib
import math
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Mapping

import torch
import torch.nn.functional as F
from PIL import Image
from torch import nn

from ... import _torchvision_compat
from ...errors import CheckpointError, CheckpointMismatchError
from ..checkpoints import KeyReport, RawCheckpoint, pop_ignored, strict_load
from ..features import ImageFeatures, TextFeatures
from ..preprocess import IMAGENET_MEAN, IMAGENET_STD, Preprocess
from ..refinement import TokenRefiner
from ..tokenizer import TokenBatch
from . import keys_with_prefix, register
from .base import GENERIC_MAP, Method

VIT_PREFIX = "img_enc.visual_encoder."
VISION_PROJ_PREFIX = "img_enc.vision_proj."
BERT_PREFIX = "txt_enc.bert."
TEXT_FC_PREFIX = "txt_enc.fc."
AGGR_PREFIX = "cross_net.aggr_net."

DEFAULT_SPARSE_RATIO = 0.5
DEFAULT_AGGR_RATIO = 0.4
REFINER_HIDDEN_RATIO = 0.2  # LAPS/SEPS: hidden width of the aggregation MLP is int(0.2 C)
HEAD_WIDTH = 64  # ViT-B and BERT-base: 768 / 12
LAYER_NORM_EPS = 1e-12

KEPT_PATCHES_MAP = "kept-patches"
SELECTION_SCORE_MAP = "selection-score"

IGNORED_KEYS = {
    "embeddings.position_ids": "BERT buffer (0..max_positions-1), rebuilt by the model",
    "embeddings.token_type_ids": "BERT buffer (zeros), rebuilt by the model",
}
OPTIONS = ("vocab_file", "do_lower_case", "sparse_ratio", "aggr_ratio", "vision_heads", "text_heads", "input_size")


def _transformers():
    _torchvision_compat.ensure_torchvision_importable()
    import transformers

    return transformers


# ---- ViT key names: released (transformers 4.x) <-> installed -----------------------------------


@dataclass(frozen=True)
class VitNaming:
    """Where one transformers version keeps a ViT layer's weights."""

    label: str
    layer: str  # prefix of layer N, with {} for N
    parts: tuple[tuple[str, str], ...]  # (role, module path inside the layer)

    def key(self, index: int, role: str, leaf: str) -> str:
        return self.layer.format(index) + dict(self.parts)[role] + "." + leaf

    def parse(self, key: str) -> tuple[int, str, str] | None:
        """(layer index, role, leaf) of a layer key in this naming, or None."""
        head, _, tail = self.layer.partition("{}")
        match = re.fullmatch(re.escape(head) + r"(\d+)" + re.escape(tail) + r"(.+)\.([^.]+)", key)
        if match is None:
            return None
        by_path = {path: role for role, path in self.parts}
        role = by_path.get(match.group(2))
        return None if role is None else (int(match.group(1)), role, match.group(3))


RELEASED_VIT_NAMING = VitNaming("transformers 4.x", "encoder.layer.{}.", (
    ("q", "attention.attention.query"), ("k", "attention.attention.key"), ("v", "attention.attention.value"),
    ("o", "attention.output.dense"), ("fc1", "intermediate.dense"), ("fc2", "output.dense"),
    ("ln1", "layernorm_before"), ("ln2", "layernorm_after"),
))
V5_VIT_NAMING = VitNaming("transformers 5.x", "layers.{}.", (
    ("q", "attention.q_proj"), ("k", "attention.k_proj"), ("v", "attention.v_proj"),
    ("o", "attention.o_proj"), ("fc1", "mlp.fc1"), ("fc2", "mlp.fc2"),
    ("ln1", "layernorm_before"), ("ln2", "layernorm_after"),
))
KNOWN_VIT_NAMINGS = (RELEASED_VIT_NAMING, V5_VIT_NAMING)


@lru_cache(maxsize=1)
def installed_vit_naming() -> VitNaming:
    """The naming the installed transformers' ViTModel uses, read off a tiny one built on meta."""
    tf = _transformers()
    config = tf.ViTConfig(hidden_size=8, num_hidden_layers=1, num_attention_heads=1, intermediate_size=8,
                          image_size=4, patch_size=2)
    with torch.device("meta"):
        keys = set(tf.ViTModel(config).state_dict())
    for naming in KNOWN_VIT_NAMINGS:
        if all(naming.key(0, role, "weight") in keys for role, _ in naming.parts):
            return naming
    sample = ", ".join(sorted(keys)[:12])
    raise CheckpointError(f"The installed transformers {tf.__version__} names ViTModel weights in a way this "
                          f"explorer does not know ({sample}); SEPS checkpoints cannot be mapped onto it.")


def rename_vit_keys(tensors: Mapping[str, torch.Tensor], source: VitNaming, target: VitNaming,
                    prefix: str = VIT_PREFIX) -> dict[str, torch.Tensor]:
    """Rename the ViT layer keys under ``prefix`` from one naming to another (others unchanged)."""
    if source == target:
        return dict(tensors)
    out = {}
    for key, value in tensors.items():
        if key.startswith(prefix):
            parsed = source.parse(key[len(prefix):])
            if parsed is not None:
                key = prefix + target.key(*parsed)
        out[key] = value
    return out


def released_state_dict(state_dict: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Our module's state dict -> the released SEPS layout (transformers 4.x ViT names)."""
    return rename_vit_keys(state_dict, installed_vit_naming(), RELEASED_VIT_NAMING)


def from_released_layout(tensors: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Released SEPS keys -> the installed transformers' ViT names (a no-op where they agree)."""
    return rename_vit_keys(tensors, RELEASED_VIT_NAMING, installed_vit_naming())


# ---- sizes read from the tensors -----------------------------------------------------------------


def heads_for(width: int, override: int | None = None) -> int:
    if override is not None:
        heads = int(override)
        if heads < 1 or width % heads:
            raise CheckpointError(f"{heads} attention heads do not divide the width {width}.")
        return heads
    heads = max(1, width // HEAD_WIDTH)
    while width % heads:
        heads -= 1
    return heads


def _layer_indices(tensors: Mapping[str, torch.Tensor], pattern: str) -> set[int]:
    regex = re.compile(pattern)
    return {int(m.group(1)) for key in tensors if (m := regex.match(key))}


def infer_vision(tensors: Mapping[str, torch.Tensor], naming: VitNaming, heads: int | None = None) -> dict:
    p = VIT_PREFIX
    width = tensors[p + "embeddings.cls_token"].shape[-1]
    patch_h, patch_w = tensors[p + "embeddings.patch_embeddings.projection.weight"].shape[2:]
    if patch_h != patch_w:
        raise ValueError(f"non-square patches {patch_h}x{patch_w}")
    n_positions = tensors[p + "embeddings.position_embeddings"].shape[1]
    grid = math.isqrt(n_positions - 1)
    if grid * grid != n_positions - 1:
        raise ValueError(f"the ViT position table has {n_positions} rows, not 1 + a square number of patches")
    layers = {parsed[0] for key in tensors if key.startswith(p) and (parsed := naming.parse(key[len(p):]))}
    if not layers:
        raise ValueError("the ViT has no encoder layers")
    return {"width": int(width), "layers": max(layers) + 1, "heads": heads_for(int(width), heads),
            "mlp": int(tensors[p + naming.key(0, "fc1", "weight")].shape[0]),
            "patch_size": int(patch_h), "image_size": int(grid * patch_h)}


def infer_text(tensors: Mapping[str, torch.Tensor], heads: int | None = None) -> dict:
    p = BERT_PREFIX
    vocab, width = tensors[p + "embeddings.word_embeddings.weight"].shape
    layers = _layer_indices(tensors, re.escape(p) + r"encoder\.layer\.(\d+)\.")
    if not layers:
        raise ValueError("BERT has no encoder layers")
    return {"width": int(width), "layers": max(layers) + 1, "heads": heads_for(int(width), heads),
            "mlp": int(tensors[p + "encoder.layer.0.intermediate.dense.weight"].shape[0]),
            "vocab_size": int(vocab),
            "max_positions": int(tensors[p + "embeddings.position_embeddings.weight"].shape[0]),
            "type_vocab_size": int(tensors[p + "embeddings.token_type_embeddings.weight"].shape[0])}


# ---- modules ---------------------------------------------------------------------------------------


def build_vit(vision: Mapping) -> nn.Module:
    tf = _transformers()
    config = tf.ViTConfig(
        hidden_size=vision["width"], num_hidden_layers=vision["layers"], num_attention_heads=vision["heads"],
        intermediate_size=vision["mlp"], image_size=vision["image_size"], patch_size=vision["patch_size"],
        num_channels=3, hidden_act="gelu", layer_norm_eps=LAYER_NORM_EPS, qkv_bias=True,
        hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    return tf.ViTModel(config, add_pooling_layer=True)


def build_bert(text: Mapping) -> nn.Module:
    tf = _transformers()
    config = tf.BertConfig(
        vocab_size=text["vocab_size"], hidden_size=text["width"], num_hidden_layers=text["layers"],
        num_attention_heads=text["heads"], intermediate_size=text["mlp"],
        max_position_embeddings=text["max_positions"], type_vocab_size=text["type_vocab_size"],
        hidden_act="gelu", layer_norm_eps=LAYER_NORM_EPS, pad_token_id=0)
    return tf.BertModel(config, add_pooling_layer=True)


def _projection(width: int, embed_dim: int) -> nn.Module:
    return nn.Identity() if width == embed_dim else nn.Linear(width, embed_dim)


class SepsImageEncoder(nn.Module):
    def __init__(self, vision: Mapping, embed_dim: int):
        super().__init__()
        self.visual_encoder = build_vit(vision)
        self.vision_proj = _projection(vision["width"], embed_dim)

    def forward(self, pixels: torch.Tensor) -> torch.Tensor:
        """[B, 1 + P, C]: projected class token, then the patch tokens."""
        # Images at another size than the position table's use HF's interpolated table.
        table = self.visual_encoder.config.image_size
        interpolate = tuple(pixels.shape[-2:]) != (table, table)
        out = self.visual_encoder(pixel_values=pixels, interpolate_pos_encoding=interpolate)
        return self.vision_proj(out.last_hidden_state)


class SepsTextEncoder(nn.Module):
    def __init__(self, text: Mapping, embed_dim: int):
        super().__init__()
        self.bert = build_bert(text)
        self.fc = _projection(text["width"], embed_dim)

    def forward(self, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return self.fc(self.bert(input_ids=ids, attention_mask=mask.long()).last_hidden_state)


class SepsCrossNet(nn.Module):
    def __init__(self, refiner: Mapping):
        super().__init__()
        self.aggr_net = TokenRefiner(**refiner)


@dataclass(frozen=True)
class SquashPreprocess(Preprocess):
    """SEPS's official resize: the whole image squashed to the square, never cropped.

    The public ``Model`` asks for ``fit="crop"`` for scores and ``"squash"`` for
    maps; SEPS was trained and evaluated on squashed images, so both squash.
    """

    def resize(self, image: Image.Image, fit: str = "squash") -> Image.Image:
        if fit not in ("crop", "squash"):
            raise ValueError(f"fit must be 'crop' or 'squash', not {fit!r}")
        return super().resize(image, "squash")


# ---- tokenizer ---------------------------------------------------------------------------------------


def read_vocab(path: Path) -> dict[str, int]:
    """A BERT vocab.txt: one wordpiece a line, its id the line number."""
    with open(path, encoding="utf-8") as handle:
        tokens = [line.rstrip("\r\n") for line in handle]
    while tokens and not tokens[-1]:
        tokens.pop()
    vocab: dict[str, int] = {}
    for index, token in enumerate(tokens):
        vocab.setdefault(token, index)
    return vocab


def build_bert_tokenizer(vocab_file: str | Path, do_lower_case: bool = True):
    """A BERT wordpiece tokenizer from a vocab.txt or a Hugging Face tokenizer folder (never downloaded)."""
    tf = _transformers()
    path = Path(vocab_file).expanduser()
    if not path.exists():
        raise CheckpointError(f"SEPS vocabulary {path} does not exist; set \"options\": {{\"vocab_file\": "
                              "\"/path/to/bert-base-uncased/vocab.txt\"}} in the manifest.")
    try:
        if path.is_dir():
            return tf.BertTokenizer.from_pretrained(str(path), local_files_only=True)
        vocab = read_vocab(path)
        for special in ("[PAD]", "[UNK]", "[CLS]", "[SEP]"):
            if special not in vocab:
                raise CheckpointError(f"{path} is not a BERT vocabulary: it lacks {special}.")
        # transformers 5 takes the vocabulary itself (and silently ignores vocab_file=...);
        # transformers 4 takes the file.
        import inspect

        if "vocab" in inspect.signature(tf.BertTokenizer.__init__).parameters:
            tokenizer = tf.BertTokenizer(vocab=vocab, do_lower_case=do_lower_case)
        else:
            tokenizer = tf.BertTokenizerFast(vocab_file=str(path), do_lower_case=do_lower_case)
    except (OSError, ValueError, UnicodeDecodeError) as error:
        raise CheckpointError(f"Cannot build a BERT tokenizer from {path} ({error}).") from error
    if len(tokenizer.get_vocab()) != len(vocab):
        raise CheckpointError(f"The tokenizer built from {path} has {len(tokenizer.get_vocab())} tokens, "
                              f"the file {len(vocab)}: the installed transformers did not take the vocabulary.")
    return tokenizer


# ---- the method ------------------------------------------------------------------------------------------


def late_interaction_batch(text_tokens: torch.Tensor, image_tokens: torch.Tensor) -> torch.Tensor:
    """``late_interaction_score`` of one caption ([K, d]) against a batch of images ([B, N, d]) -> [B]."""
    from ..late_interaction import NEGATIVE_SLOPE

    text = F.normalize(text_tokens.float(), dim=-1)
    image = F.normalize(image_tokens.float(), dim=-1)
    sim = F.leaky_relu(torch.einsum("kd,bnd->bkn", text, image), NEGATIVE_SLOPE)
    return sim.max(dim=2).values.mean(dim=1) + sim.max(dim=1).values.mean(dim=1)


@register
class SepsMethod(nn.Module, Method):
    name = "seps"
    title = "SEPS"
    detect_priority = 30
    native_map_kinds = (KEPT_PATCHES_MAP, SELECTION_SCORE_MAP)

    def __init__(self, vision: Mapping, text: Mapping, embed_dim: int, refiner: Mapping | None = None,
                 sparse_ratio: float = DEFAULT_SPARSE_RATIO, aggr_ratio: float = DEFAULT_AGGR_RATIO,
                 vocab_file: str | None = None, do_lower_case: bool = True, input_size: int | None = None):
        super().__init__()
        if not 0 < float(sparse_ratio) <= 1:
            raise ValueError(f"sparse_ratio must be in (0, 1], not {sparse_ratio}")
        self.vision, self.text = dict(vision), dict(text)
        self.embed_dim = int(embed_dim)
        # input_size: the pixels the model is fed; the ViT's position table is for vision["image_size"]
        self.input_size = int(input_size or self.vision["image_size"])
        if self.input_size % self.vision["patch_size"]:
            raise ValueError(f"input size {self.input_size} is not a multiple of the patch size")
        grid = self.input_size // self.vision["patch_size"]
        if refiner is None:
            n_out = max(1, int(grid * grid * aggr_ratio * sparse_ratio))
            refiner = {"dim": self.embed_dim, "hidden": int(self.embed_dim * REFINER_HIDDEN_RATIO), "n_out": n_out}
        self.refiner = {k: int(v) for k, v in refiner.items()}
        if self.refiner["dim"] != self.embed_dim:
            raise ValueError(f"the aggregation works on {self.refiner['dim']}-d tokens, the embeddings are "
                             f"{self.embed_dim}-d")
        self.sparse_ratio, self.aggr_ratio = float(sparse_ratio), float(aggr_ratio)
        self.vocab_file = None if vocab_file is None else str(vocab_file)
        self.do_lower_case = bool(do_lower_case)
        self._tokenizer = None
        self.grid_hw = (grid, grid)
        self.preprocess = SquashPreprocess(self.input_size, IMAGENET_MEAN, IMAGENET_STD)
        self.img_enc = SepsImageEncoder(self.vision, self.embed_dim)
        self.txt_enc = SepsTextEncoder(self.text, self.embed_dim)
        self.cross_net = SepsCrossNet(self.refiner)

    # ---- what the model is ---------------------------------------------------------------------

    @property
    def context_length(self) -> int:
        return self.text["max_positions"]

    @property
    def n_patches(self) -> int:
        return self.grid_hw[0] * self.grid_hw[1]

    @property
    def n_keep(self) -> int:
        """Patches the selection keeps: ceil(P * sparse_ratio), as the official TokenSparse."""
        return math.ceil(self.n_patches * self.sparse_ratio)

    @property
    def architecture_name(self) -> str:
        v, t = self.vision, self.text
        if (v["width"], v["layers"], v["patch_size"]) == (768, 12, 16):
            vision = "ViT-B/16"
        else:
            vision = f"ViT-w{v['width']}-l{v['layers']}/{v['patch_size']}"
        if self.input_size != 224:
            vision += f"@{self.input_size}"
        text = "BERT-base" if (t["width"], t["layers"]) == (768, 12) else f"BERT-w{t['width']}-l{t['layers']}"
        return f"{vision} + {text}"

    def config(self) -> dict:
        return {"vision": dict(self.vision), "text": dict(self.text), "embed_dim": self.embed_dim,
                "refiner": dict(self.refiner), "sparse_ratio": self.sparse_ratio, "aggr_ratio": self.aggr_ratio,
                "vocab_file": self.vocab_file, "do_lower_case": self.do_lower_case, "input_size": self.input_size}

    @classmethod
    def build(cls, config: Mapping) -> "SepsMethod":
        return cls(**config)

    # ---- loading -------------------------------------------------------------------------------

    @classmethod
    def detect(cls, tensors, raw):
        if keys_with_prefix(tensors, VIT_PREFIX) and keys_with_prefix(tensors, BERT_PREFIX):
            return "seps"
        return None

    @classmethod
    def from_checkpoint(cls, raw: RawCheckpoint, fmt: str, overrides: Mapping | None = None,
                        dry_run: bool = False):
        report = KeyReport(source=str(raw.path), format=fmt)
        options = dict(overrides or {})
        unknown = sorted(set(options) - set(OPTIONS))
        if unknown:
            raise CheckpointError(f"SEPS has no option(s) {', '.join(unknown)}; it takes {', '.join(OPTIONS)}.")
        tensors = dict(raw.tensors)
        pop_ignored(tensors, IGNORED_KEYS, report)
        installed = installed_vit_naming()
        renamed = from_released_layout(tensors)
        if renamed.keys() != tensors.keys():
            report.notes.append(f"renamed ViT keys from the released {RELEASED_VIT_NAMING.label} names to the "
                                f"installed {installed.label} names")
        tensors = renamed
        try:
            vision = infer_vision(tensors, installed, options.get("vision_heads"))
            text = infer_text(tensors, options.get("text_heads"))
            refiner = TokenRefiner.sizes_from(tensors, AGGR_PREFIX)
        except (KeyError, ValueError) as error:
            raise CheckpointMismatchError(f"{raw.path}: cannot read a SEPS architecture: missing or odd "
                                          f"{error}", report) from error
        for part, sizes, option in (("ViT", vision, "vision_heads"), ("BERT", text, "text_heads")):
            if option not in options:
                report.notes.append(f"{part}: {sizes['heads']} attention heads assumed (width / {HEAD_WIDTH}); "
                                    f"set the option {option} if the model differs")
        opt = raw.extras.get("opt")
        ratios = {}
        for name, default in (("sparse_ratio", DEFAULT_SPARSE_RATIO), ("aggr_ratio", DEFAULT_AGGR_RATIO)):
            if name in options:
                try:
                    ratios[name], source = float(options[name]), "the options"
                except (TypeError, ValueError) as error:
                    raise CheckpointError(f"SEPS option {name} must be a number, not {options[name]!r}.") from error
            elif opt is not None and getattr(opt, name, None) is not None:
                ratios[name], source = float(getattr(opt, name)), "the file's opt"
            else:
                ratios[name], source = default, "the default"
            report.notes.append(f"{name} = {ratios[name]:g} (from {source})")
        input_size = int(options.get("input_size") or vision["image_size"])
        if input_size != vision["image_size"]:
            report.notes.append(f"images at {input_size} px with the ViT's {vision['image_size']} px position "
                                "table interpolated (option input_size)")
        n_patches = (input_size // vision["patch_size"]) ** 2
        expected = int(n_patches * ratios["aggr_ratio"] * ratios["sparse_ratio"])
        if expected != refiner["n_out"]:
            report.notes.append(f"the aggregation makes {refiner['n_out']} tokens, but {n_patches} patches x "
                                f"aggr_ratio x sparse_ratio gives {expected}: the model may have been trained at "
                                "another image size (option input_size) or with other ratios")
        vocab_file = options.get("vocab_file")
        if vocab_file is not None and not Path(vocab_file).expanduser().exists():
            raise CheckpointError(f"SEPS vocabulary {vocab_file} (option vocab_file) does not exist.")
        if vocab_file is None:
            report.notes.append('no BERT vocabulary: set "options": {"vocab_file": ".../vocab.txt"} to tokenize')
        with torch.device("meta") if dry_run else contextlib.nullcontext():
            try:
                model = cls(vision, text, embed_dim=refiner["dim"], refiner=refiner, vocab_file=vocab_file,
                            do_lower_case=bool(options.get("do_lower_case", True)), input_size=input_size,
                            **ratios)
            except ValueError as error:
                raise CheckpointError(f"{raw.path}: cannot build SEPS with these options ({error}).") from error
        strict_load(model, tensors, report, dry_run=dry_run)
        return model, report

    # ---- inputs ----------------------------------------------------------------------------------

    def set_vocab_file(self, vocab_file: str | Path, do_lower_case: bool | None = None) -> None:
        self.vocab_file = str(vocab_file)
        if do_lower_case is not None:
            self.do_lower_case = bool(do_lower_case)
        self._tokenizer = None

    @property
    def tokenizer(self):
        if self._tokenizer is None:
            if self.vocab_file is None:
                raise CheckpointError(
                    "SEPS needs the BERT vocabulary (bert-base-uncased vocab.txt), which its checkpoint does not "
                    'hold: set "options": {"vocab_file": "/path/to/vocab.txt"} in the model\'s manifest '
                    "(or pass options={'vocab_file': ...} to explorer.load).")
            tokenizer = build_bert_tokenizer(self.vocab_file, self.do_lower_case)
            if len(tokenizer.get_vocab()) > self.text["vocab_size"]:
                raise CheckpointError(f"{self.vocab_file} has {len(tokenizer.get_vocab())} tokens; this BERT "
                                      f"knows only {self.text['vocab_size']}.")
            self._tokenizer = tokenizer
        return self._tokenizer

    def tokenize(self, texts: list[str]) -> TokenBatch:
        """``[CLS] wordpieces [SEP]``, 0-padded to BERT's positions; a long text keeps its head and [SEP]."""
        tokenizer = self.tokenizer
        limit = self.context_length
        pieces = tokenizer(list(texts), add_special_tokens=False)["input_ids"] if texts else []
        ids = torch.zeros(len(texts), limit, dtype=torch.long)
        n_tokens, n_cut = [], []
        for row, body in enumerate(pieces):
            tokens = [tokenizer.cls_token_id, *body, tokenizer.sep_token_id]
            n_tokens.append(len(tokens))
            n_cut.append(max(0, len(tokens) - limit))
            if len(tokens) > limit:
                tokens = tokens[: limit - 1] + [tokenizer.sep_token_id]
            ids[row, : len(tokens)] = torch.tensor(tokens)
        return TokenBatch(ids=ids, n_tokens=n_tokens, n_cut=n_cut)

    # ---- features --------------------------------------------------------------------------------

    def encode_image(self, pixels: torch.Tensor) -> ImageFeatures:
        tokens = self.img_enc(pixels)
        return ImageFeatures(cls=tokens[:, 0], patches=tokens[:, 1:], grid_hw=self.grid_hw)

    def encode_text(self, ids: torch.Tensor) -> TextFeatures:
        mask = ids != 0
        used = mask.any(dim=0).nonzero()
        length = int(used.max()) + 1 if len(used) else 1
        ids, mask = ids[:, :length], mask[:, :length]  # padding changes nothing under the attention mask
        tokens = self.txt_enc(ids, mask)
        return TextFeatures(eot=tokens[:, 0], tokens=tokens, mask=mask)

    # ---- patch slimming ----------------------------------------------------------------------------

    @staticmethod
    def _words(text: TextFeatures, index: int) -> torch.Tensor:
        return text.tokens[index][text.mask[index]]

    def selection_scores(self, image: ImageFeatures, words: torch.Tensor) -> torch.Tensor:
        """[B, P] cos(patch, mean patch) + cos(patch, mean caption token), as the official code."""
        patches = image.patches.float()
        normed = F.normalize(patches, dim=-1)
        image_global = F.normalize(patches.mean(dim=1), dim=-1)
        text_global = F.normalize(words.float().mean(dim=0), dim=-1)
        return (normed * image_global[:, None]).sum(dim=-1) + normed @ text_global

    def slim(self, image: ImageFeatures, scores: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Image tokens [B, 1 + N' + 1, C] = [CLS, aggregated kept patches, extra] and the kept mask [B, P]."""
        patches = image.patches
        n_keep = self.n_keep
        sorted_scores, order = torch.sort(scores, dim=1, descending=True)
        keep, drop = order[:, :n_keep], order[:, n_keep:]
        width = patches.shape[-1]
        kept = torch.gather(patches, 1, keep[..., None].expand(-1, -1, width))
        dropped = torch.gather(patches, 1, drop[..., None].expand(-1, -1, width)).float()
        weights = sorted_scores[:, n_keep:].softmax(dim=1)[..., None]
        extra = (weights * dropped).sum(dim=1, keepdim=True)  # zeros when nothing is dropped
        refined, _ = self.cross_net.aggr_net(kept)
        tokens = torch.cat([image.cls[:, None].float(), refined.float(), extra], dim=1)
        kept_mask = torch.zeros_like(scores).scatter(1, keep, 1.0)
        return tokens, kept_mask

    def branch_scores(self, image: ImageFeatures, text: TextFeatures) -> torch.Tensor:
        """[n_images, n_texts]: one SEPS branch (select with each caption, then late interaction)."""
        columns = []
        for j in range(len(text)):
            words = self._words(text, j)
            tokens, _ = self.slim(image, self.selection_scores(image, words))
            columns.append(late_interaction_batch(words, tokens))
        if not columns:
            return torch.zeros(len(image), 0, device=image.cls.device)
        return torch.stack(columns, dim=1)

    def similarity(self, image: ImageFeatures, text: TextFeatures) -> torch.Tensor:
        """The sparse-caption branch of SEPS alone (see ``similarity_with_dense`` for the full score)."""
        return self.branch_scores(image, text)

    def similarity_with_dense(self, image: ImageFeatures, text: TextFeatures,
                              dense_text: TextFeatures | None = None) -> torch.Tensor:
        """SEPS's full score: sparse branch with ``text`` + dense branch with ``dense_text``.

        ``dense_text[j]`` is the dense (e.g. MLLM-written) caption that goes with
        caption ``text[j]``, as in the official code. When no dense caption is
        given, the dense text is the caption itself, so the score is twice the
        sparse branch: an approximation of SEPS, not its published setting.
        """
        if dense_text is None:
            dense_text = text
        if len(dense_text) != len(text):
            raise ValueError(f"one dense caption per caption: got {len(dense_text)} for {len(text)}")
        return self.branch_scores(image, text) + self.branch_scores(image, dense_text)

    # ---- maps ------------------------------------------------------------------------------------

    def sentence_maps(self, image: ImageFeatures, text: TextFeatures, kind: str = GENERIC_MAP) -> torch.Tensor:
        """``kept-patches``: 1 where the sparse branch keeps a patch for the sentence, else 0;
        ``selection-score``: the score the selection ranks patches by."""
        if kind not in (KEPT_PATCHES_MAP, SELECTION_SCORE_MAP):
            return super().sentence_maps(image, text, kind)
        if len(image) != 1:
            raise ValueError(f"maps are drawn for one image at a time, got {len(image)}")
        rows, cols = image.grid_hw
        maps = []
        for j in range(len(text)):
            scores = self.selection_scores(image, self._words(text, j))
            if kind == KEPT_PATCHES_MAP:
                _, order = torch.sort(scores, dim=1, descending=True)
                scores = torch.zeros_like(scores).scatter(1, order[:, : self.n_keep], 1.0)
            maps.append(scores[0])
        if not maps:
            return torch.zeros(0, rows, cols, device=image.patches.device)
        return torch.stack(maps).reshape(len(text), rows, cols)

    # ---- training ----------------------------------------------------------------------------------

    def losses(self, batch: Mapping) -> dict[str, torch.Tensor]:
        raise NotImplementedError("SEPS training losses (hinge with hardest negatives + ratio loss) are not "
                                  "implemented yet")
