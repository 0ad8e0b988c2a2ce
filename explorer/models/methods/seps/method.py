"""``SepsMethod``: SEPS (papers/seps.txt) behind the explorer's ``Method`` surface.

The key layout and its ViT renaming are in ``key_layout``, the encoders and the
sizes read from the tensors in ``encoders``, what a released file says about
its model in ``checkpoint``, the inputs in ``tokenizer`` (pictures: ``Preprocess`` pipeline "laps"), the
two scorings (``scoring`` option) in ``scoring`` and the training objective in
``losses``. This module holds the configuration, checkpoint loading and
writing, features, scores, maps and losses.

The two poolers (``*.pooler.dense.*``) are in the released files because Hugging
Face builds both encoders with their pooling layer, but SEPS never reads them:
the official code leaves them without gradient, and here they are frozen
(``requires_grad=False``; ``parameters_without_gradient`` names them), so the
optimizer carries no state for them. Nothing else is left without gradient.

Maps (``native_map_kinds``): ``kept-sparse`` / ``kept-dense`` (1 where a branch
keeps the patch, deterministic selection), ``word-max`` (per sentence, the max
over its word tokens, ``[CLS]``/``[SEP]`` left out, of the leaky-ReLU cosine with
each projected, unaggregated patch) and ``selection-score`` (the sparse
branch's selection score). ``sentence_maps`` gets no dense caption, so there
the dense branch uses the sentence itself (kept-dense then equals kept-sparse);
``dense_maps`` and ``kept_masks`` take dense captions.

Training recipe (``recipe``, ``mean_violation_steps``): ``losses`` says (the official code's warm-up of
summed negatives, then hardest negatives; no gradient through the fold weights; "hardest" for the
earlier recipe).
"""

from __future__ import annotations

import argparse
import contextlib
import math
import warnings
from pathlib import Path
from typing import Mapping

import torch
from torch import nn

from explorer.core.errors import CheckpointError, ConfigError, InputError
from explorer.models.batch import TrainingBatch
from explorer.models.features import ImageFeatures, TextFeatures
from explorer.models.io.checkpoints import KeyReport, RawCheckpoint, strict_load
from explorer.models.methods import keys_with_prefix, register
from explorer.models.methods.base import GENERIC_MAP, Method
from explorer.models.methods.seps.checkpoint import read_released
from explorer.models.methods.seps.encoders import (DEFAULT_AGGR_RATIO, DEFAULT_SPARSE_RATIO, SepsCrossNet,
                                                   SepsImageEncoder, SepsTextEncoder, default_refiner)
from explorer.models.methods.seps.examples import example_sizes, example_vocab_file
from explorer.models.methods.seps.key_layout import BERT_PREFIX, POOLER_PREFIXES, VIT_PREFIX, released_state_dict
from explorer.models.methods.seps.losses import RECIPES, seps_loss_terms, uses_hardest_negatives
from explorer.models.methods.seps.scoring import (PRIOR_HIDDEN_DIVISOR, SCORINGS, OfficialScoring, PairOutputs,
                                                  PaperScoring, calibrated_scores, checked_dense_text, make_scoring)
from explorer.models.methods.seps.tokenizer import WordPieceCounter, bert_token_batch, build_bert_tokenizer, read_vocab
from explorer.models.nn.distributed import gather_features, same_token_length, world
from explorer.models.nn.late_interaction import token_similarity
from explorer.models.preprocess import IMAGENET_MEAN, IMAGENET_STD, Preprocess
from explorer.models.tokenizer import TokenBatch
from explorer.models.unpadded import unpadded

KEPT_SPARSE_MAP = "kept-sparse"
KEPT_DENSE_MAP = "kept-dense"
WORD_MAX_MAP = "word-max"
SELECTION_SCORE_MAP = "selection-score"
KEPT_PATCHES_MAP = "kept-patches"  # earlier name of kept-sparse, still accepted
NATIVE_MAPS = (KEPT_SPARSE_MAP, KEPT_DENSE_MAP, WORD_MAX_MAP, SELECTION_SCORE_MAP)
DEMO_MAX_POSITIONS = 256  # the demo zoo's BERT position table (the world's long captions fit)


@register
class SepsMethod(nn.Module, Method):
    """SEPS (papers/seps.txt): patch slimming with sparse and dense text, built on LAPS."""

    name = "seps"
    title = "SEPS"
    detect_priority = 30
    native_map_kinds = NATIVE_MAPS
    preferred_native_map = WORD_MAX_MAP
    init_methods = ("seps",)  # ViT + BERT, no CLIP backbone: it starts only from its own checkpoints
    needs_word_vocabulary = True  # its BERT reads a word vocabulary of its training data
    new_module_prefixes = ("cross_net.",)  # the aggregation and, in the paper variant, the prior MLP
    # bench/precision.py: bf16 tower features move the patches near the top-k cut in or out of the kept set:
    # kept-sparse and kept-dense 0.946 median IoU on the demo zoo (0.907 with the cross net alone in fp32),
    # retrieval R@1 6.7 points off; and bf16 was no faster (0.89x: the towers are small).
    fp32_under_auto = "its kept patches move in bf16 or fp16"
    # Released weights SEPS never reads (frozen here; see the module docstring).
    parameters_without_gradient = POOLER_PREFIXES

    def __init__(self, vision: Mapping, text: Mapping, embed_dim: int, refiner: Mapping | None = None,
                 sparse_ratio: float = DEFAULT_SPARSE_RATIO, aggr_ratio: float = DEFAULT_AGGR_RATIO,
                 vocab_file: str | None = None, do_lower_case: bool = True, input_size: int | None = None,
                 scoring: str = "official", score_hidden: int | None = None, recipe: str = "official",
                 mean_violation_steps: int | None = None):
        super().__init__()
        if recipe not in RECIPES:
            raise ConfigError(f"recipe must be one of {', '.join(RECIPES)}, not {recipe!r}")
        if mean_violation_steps is not None and int(mean_violation_steps) < 0:
            raise ConfigError(f"mean_violation_steps must be at least 0, not {mean_violation_steps}")
        self.recipe = recipe
        self.mean_violation_steps = None if mean_violation_steps is None else int(mean_violation_steps)
        if not 0 < float(sparse_ratio) <= 1:
            raise ConfigError(f"sparse_ratio must be in (0, 1], not {sparse_ratio}")
        if scoring not in SCORINGS:
            raise ConfigError(f"scoring must be one of {', '.join(SCORINGS)}, not {scoring!r}")
        if scoring == "official" and score_hidden is not None:
            raise ConfigError("score_hidden sizes the paper variant's prior MLP; the official scoring has none")
        self.vision, self.text = dict(vision), dict(text)
        self.embed_dim = int(embed_dim)
        # input_size: the pixels the model is fed; the ViT's position table is for vision["image_size"]
        self.input_size = int(input_size or self.vision["image_size"])
        if self.input_size % self.vision["patch_size"]:
            raise ConfigError(f"input size {self.input_size} is not a multiple of the patch size")
        grid = self.input_size // self.vision["patch_size"]
        if refiner is None:
            refiner = default_refiner(self.embed_dim, grid * grid, aggr_ratio, sparse_ratio)
        self.refiner = {k: int(v) for k, v in refiner.items()}
        if self.refiner["dim"] != self.embed_dim:
            raise ConfigError(f"the aggregation works on {self.refiner['dim']}-d tokens, the embeddings are "
                              f"{self.embed_dim}-d")
        self.sparse_ratio, self.aggr_ratio = float(sparse_ratio), float(aggr_ratio)
        self.scoring = scoring
        self.score_hidden = None
        if scoring == "paper":
            self.score_hidden = int(score_hidden or max(1, self.embed_dim // PRIOR_HIDDEN_DIVISOR))
        self.vocab_file = None if vocab_file is None else str(vocab_file)
        self.do_lower_case = bool(do_lower_case)
        self._tokenizer = None
        self._warned_no_dense = False
        self.grid_hw = (grid, grid)
        self.scorer = make_scoring(scoring, self.sparse_ratio, self.n_keep, fold_gradient=recipe == "hardest")
        # LAPS's test transform: the whole picture squashed to the square, ImageNet mean and std
        self.preprocess = Preprocess(self.input_size, IMAGENET_MEAN, IMAGENET_STD, pipeline="laps")
        self.img_enc = SepsImageEncoder(self.vision, self.embed_dim)
        self.txt_enc = SepsTextEncoder(self.text, self.embed_dim)
        self.cross_net = SepsCrossNet(self.refiner, self.score_hidden)
        for name, parameter in self.named_parameters():
            if name.startswith(POOLER_PREFIXES):
                parameter.requires_grad_(False)

    # ---- what the model is ---------------------------------------------------------------------

    @property
    def context_length(self) -> int:
        return self.text["max_positions"]

    @property
    def n_patches(self) -> int:
        return self.grid_hw[0] * self.grid_hw[1]

    @property
    def n_keep(self) -> int:
        """Patches the deterministic selection keeps: ceil(P * sparse_ratio), as the official TokenSparse."""
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
        return f"{vision} + {text}" + (" (paper scoring)" if self.scoring == "paper" else "")

    @classmethod
    def score_description(cls, options=None) -> str:
        return f"late interaction, sparse + dense ({(options or {}).get('scoring', 'official')} scoring)"

    def config(self) -> dict:
        return {"vision": dict(self.vision), "text": dict(self.text), "embed_dim": self.embed_dim,
                "refiner": dict(self.refiner), "sparse_ratio": self.sparse_ratio, "aggr_ratio": self.aggr_ratio,
                "vocab_file": self.vocab_file, "do_lower_case": self.do_lower_case, "input_size": self.input_size,
                "scoring": self.scoring, "score_hidden": self.score_hidden, "recipe": self.recipe,
                "mean_violation_steps": self.mean_violation_steps}

    @classmethod
    def build(cls, config: Mapping) -> "SepsMethod":
        return cls(**config)

    @classmethod
    def merge_config(cls, config: Mapping, overrides: Mapping | None) -> dict:
        merged = {**config, **(overrides or {})}
        before, after = config.get("scoring", "official"), merged.get("scoring", "official")
        if after not in SCORINGS:
            raise CheckpointError(f"SEPS scoring must be one of {', '.join(SCORINGS)}, not {after!r}.")
        if before != after:
            raise CheckpointError(
                f"This SEPS file was saved with scoring={before!r}; scoring={after!r} needs "
                + ("the paper variant's prior MLP (cross_net.score_net.*), which it does not hold."
                   if after == "paper" else "no prior MLP, but the file holds one (cross_net.score_net.*).")
                + " Load it with its own scoring.")
        return merged

    @classmethod
    def example(cls, size: str = "tiny", seed: int = 0, scoring: str = "official",
                vocab_file: str | Path | None = None, **extra) -> "SepsMethod":
        """A random model ("tiny": ViT/BERT of width 64, C = 32, 64 px; "base": ViT-B/16 + BERT-base, C = 512).

        Without ``vocab_file`` it tokenizes with ``example_vocab_file()``, which
        covers the words of ``explorer.models.batch.example_batch``.
        """
        vocab_file = Path(vocab_file) if vocab_file is not None else example_vocab_file()
        sizes = example_sizes(size, len(read_vocab(vocab_file)) if vocab_file.is_file() else 30522)
        torch.manual_seed(seed)
        return cls(**sizes, vocab_file=str(vocab_file), scoring=scoring, **extra)

    @classmethod
    def demo_model(cls, demo, **extra) -> "SepsMethod":
        """The demo zoo's SEPS: a ViT and a BERT of the demo CLIP's widths and depths, its own patch size,
        and a BERT vocabulary of the world's words (``demo.vocab_file``)."""
        arch, vocab = demo.architecture, read_vocab(Path(demo.vocab_file))
        torch.manual_seed(demo.seed)
        return cls(
            vision={"width": arch.vision_width, "layers": arch.vision_layers, "heads": arch.vision_heads,
                    "mlp": int(arch.vision_width * arch.vision_mlp_ratio), "patch_size": demo.patch_size,
                    "image_size": arch.image_size},
            text={"width": arch.text_width, "layers": arch.text_layers, "heads": arch.text_heads,
                  "mlp": int(arch.text_width * arch.text_mlp_ratio), "vocab_size": len(vocab),
                  "max_positions": DEMO_MAX_POSITIONS, "type_vocab_size": 2},
            embed_dim=arch.embed_dim, vocab_file=str(demo.vocab_file), **extra)

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
        tensors, arguments = read_released(raw, overrides, report)
        with torch.device("meta") if dry_run else contextlib.nullcontext():
            try:
                method = cls(**arguments)
            except (ValueError, ConfigError) as error:
                raise CheckpointError(f"{raw.path}: cannot build SEPS with these options ({error}).") from error
        strict_load(method, tensors, report, dry_run=dry_run)
        return method, report

    def released_state_dict(self) -> dict:
        """The weights under the released SEPS names (the paper variant adds ``cross_net.score_net.*``)."""
        return released_state_dict(self.state_dict())

    def released_file_object(self) -> dict:
        """What the official training script saves: ``{'model', 'opt', 'epoch', 'best_rsum', 'Eiters'}``."""
        opt = argparse.Namespace(embed_size=self.embed_dim, sparse_ratio=self.sparse_ratio,
                                 aggr_ratio=self.aggr_ratio, num_patches=self.n_patches, img_res=self.input_size)
        return {"model": self.released_state_dict(), "opt": opt, "epoch": 0, "best_rsum": 0.0, "Eiters": 0}

    def release_load_options(self) -> dict:
        """The ``explorer.load`` options a released file of this model needs (the vocabulary is not in it)."""
        return {"vocab_file": self.vocab_file} if self.vocab_file else {}

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
        return bert_token_batch(self.tokenizer, texts, self.context_length)

    @property
    def token_counter(self) -> WordPieceCounter:
        return WordPieceCounter(self.tokenizer)

    # ---- features --------------------------------------------------------------------------------

    def encode_image(self, pixels: torch.Tensor) -> ImageFeatures:
        tokens = self.img_enc(pixels)
        return ImageFeatures(cls=tokens[:, 0], patches=tokens[:, 1:], grid_hw=self.grid_hw)

    def encode_text(self, ids: torch.Tensor) -> TextFeatures:
        ids = unpadded(ids, ids != 0)  # BERT's padding is id 0; it changes nothing under the attention mask
        mask = ids != 0
        tokens = self.txt_enc(ids, mask)
        return TextFeatures(eot=tokens[:, 0], tokens=tokens, mask=mask)

    def encode_captions(self, captions: list[str]) -> TextFeatures:
        """Tokenize and encode on the model's device (for losses)."""
        return self.encode_text(self.tokenize(captions).unpadded().ids.to(self.cross_net.aggr_net.scale.device))

    # ---- scores (the strategies in ``scoring``) ----------------------------------------------------

    official_scores = staticmethod(OfficialScoring.selection_scores)

    def selection_scores(self, image: ImageFeatures, words: torch.Tensor) -> torch.Tensor:
        """[B, P] the official score for one caption's tokens ([K, C], valid tokens only)."""
        return OfficialScoring.caption_scores(image, words)

    def slim(self, image: ImageFeatures, scores: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Official: image tokens [B, 1 + N' + 1, C] = [CLS, aggregated kept patches, extra], kept mask [B, P]."""
        return OfficialScoring(self.n_keep).slim(self.cross_net.aggr_net, image, scores)

    def branch_scores(self, image: ImageFeatures, text: TextFeatures) -> torch.Tensor:
        """[n_images, n_texts]: one official SEPS branch (select with each caption, then late interaction)."""
        return OfficialScoring(self.n_keep).branch(self.cross_net.aggr_net, image, text)[0]

    def prior_scores(self, image: ImageFeatures) -> torch.Tensor:
        """Paper eq. 1: [B, P] ``sigmoid(MLP(v_i))`` (paper scoring only)."""
        if self.scoring != "paper":
            raise InputError("the learned patch prior exists only with scoring='paper'; official SEPS checkpoints "
                             "have none (they were trained with the official scoring)")
        return PaperScoring.prior_scores(self.cross_net.score_net, image)

    def paper_scores(self, image: ImageFeatures, text: TextFeatures, dense_text: TextFeatures,
                     dense_for: str = "caption") -> tuple[torch.Tensor, torch.Tensor]:
        """Paper eqs. 1-3: the calibrated scores ``s_s`` and ``s_d``, each [B, M, P]."""
        return calibrated_scores(self.prior_scores(image), image, text, dense_text, dense_for)

    def pair_outputs(self, image: ImageFeatures, text: TextFeatures, dense_text: TextFeatures | None = None,
                     dense_for: str = "caption", stochastic: bool | None = None) -> PairOutputs:
        """Scores, keep decisions and selection scores of every (image, caption) pair.

        ``dense_text``: see ``similarity_with_dense``. ``stochastic`` (default:
        the module's training mode) samples the paper variant's Gumbel selection;
        the official selection is always the deterministic top-k.
        """
        dense_text = checked_dense_text(image, text, dense_text, dense_for)
        if stochastic is None:
            stochastic = self.training
        return self.scorer.pair_outputs(self.cross_net, image, text, dense_text, dense_for, stochastic)

    def similarity(self, image: ImageFeatures, text: TextFeatures) -> torch.Tensor:
        """Without dense captions: the official sparse branch alone (the full official score with the caption
        as its own dense text is twice this); the paper variant's full score with the caption as its dense text."""
        return self.scorer.similarity(self.cross_net, image, text, self.training)

    def similarity_with_dense(self, image: ImageFeatures, text: TextFeatures,
                              dense_text: TextFeatures | None = None, dense_for: str = "caption") -> torch.Tensor:
        """SEPS's full score [n_images, n_texts] with dense captions.

        ``dense_for="caption"``: ``dense_text[j]`` is the dense (e.g.
        MLLM-written) caption that goes with caption ``text[j]``;
        ``dense_for="image"``: ``dense_text[i]`` describes image ``i`` (the
        paper's T_d = F_MLLM(I)). Without ``dense_text`` each caption is its own
        dense text, an approximation of SEPS, not its published setting.
        Official: sparse branch + dense branch; paper: the joint score.
        """
        return self.pair_outputs(image, text, dense_text, dense_for).scores

    # ---- maps ------------------------------------------------------------------------------------

    def kept_masks(self, image: ImageFeatures, text: TextFeatures,
                   dense_text: TextFeatures | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """(sparse, dense) [M, rows, cols]: 1 where each branch keeps the patch (deterministic selection).

        One image; ``dense_text`` holds one dense caption per sentence or one for
        all of them; without it each sentence is its own dense caption.
        """
        out = self._map_pairs(image, text, dense_text)
        rows, cols = image.grid_hw
        return (out.keep_sparse[0].reshape(len(text), rows, cols),
                out.keep_dense[0].reshape(len(text), rows, cols))

    def _map_pairs(self, image: ImageFeatures, text: TextFeatures, dense_text: TextFeatures | None) -> PairOutputs:
        if len(image) != 1:
            raise InputError(f"maps are drawn for one image at a time, got {len(image)}")
        if dense_text is not None and len(dense_text) == 1 and len(text) != 1:
            dense_text = TextFeatures(eot=dense_text.eot.expand(len(text), -1),
                                      tokens=dense_text.tokens.expand(len(text), -1, -1),
                                      mask=dense_text.mask.expand(len(text), -1))
        dense_text = checked_dense_text(image, text, dense_text, "caption")
        return self.scorer.selections(self.cross_net, image, text, dense_text)

    @staticmethod
    def word_tokens(text: TextFeatures, index: int) -> torch.Tensor:
        """[K, C] the word tokens of one sentence: the valid tokens without [CLS] and [SEP] (all if none left)."""
        tokens = text.tokens[index][text.mask[index]]
        return tokens[1:-1] if tokens.shape[0] > 2 else tokens

    def word_maps(self, image: ImageFeatures, text: TextFeatures, index: int = 0) -> torch.Tensor:
        """[K, rows, cols]: per word token of sentence ``index``, its leaky-ReLU cosine with each projected patch."""
        if len(image) != 1:
            raise InputError(f"maps are drawn for one image at a time, got {len(image)}")
        words = self.word_tokens(text, index)
        return token_similarity(words, image.patches[0]).reshape(len(words), *image.grid_hw)

    uses_dense_caption = True

    def dense_caption_maps(self, image: ImageFeatures, text: TextFeatures, dense: TextFeatures,
                           kind: str = GENERIC_MAP) -> torch.Tensor:
        """The Method hook: native kinds read the dense caption; the generic map does not."""
        if kind == GENERIC_MAP:
            return self.sentence_maps(image, text, kind)
        return self.dense_maps(image, text, dense, kind)

    def dense_maps(self, image: ImageFeatures, text: TextFeatures, dense_text: TextFeatures | None = None,
                   kind: str = KEPT_DENSE_MAP) -> torch.Tensor:
        """[M, rows, cols] native maps of one image with dense captions (one per sentence, or one for all).

        ``kept-sparse`` / ``kept-dense``: the branches' kept patches; ``word-max``:
        per sentence, the max over its words of the word-patch leaky-ReLU cosine
        on the unaggregated patches; ``selection-score``: the sparse branch's
        selection score (official score, or the paper's s_s).
        """
        if kind == KEPT_PATCHES_MAP:
            kind = KEPT_SPARSE_MAP
        if kind not in NATIVE_MAPS:
            raise InputError(f"SEPS has no native map kind {kind!r}; it offers {', '.join(NATIVE_MAPS)}")
        if len(image) != 1:
            raise InputError(f"maps are drawn for one image at a time, got {len(image)}")
        rows, cols = image.grid_hw
        if len(text) == 0:
            return image.patches.new_zeros(0, rows, cols).float()
        if kind == WORD_MAX_MAP:
            maps = [token_similarity(self.word_tokens(text, j), image.patches[0]).max(dim=0).values
                    for j in range(len(text))]
            return torch.stack(maps).reshape(len(text), rows, cols)
        out = self._map_pairs(image, text, dense_text)
        grid = {KEPT_SPARSE_MAP: out.keep_sparse, KEPT_DENSE_MAP: out.keep_dense,
                SELECTION_SCORE_MAP: out.score_sparse}[kind]
        return grid[0].reshape(len(text), rows, cols)

    def sentence_maps(self, image: ImageFeatures, text: TextFeatures, kind: str = GENERIC_MAP) -> torch.Tensor:
        """The generic map, or a native one (``dense_maps``) with each sentence as its own dense caption."""
        if kind not in (*NATIVE_MAPS, KEPT_PATCHES_MAP):
            return super().sentence_maps(image, text, kind)
        return self.dense_maps(image, text, None, kind)

    # ---- training ----------------------------------------------------------------------------------

    def losses(self, batch: TrainingBatch) -> dict[str, torch.Tensor]:
        """Hinge (margin 0.2) on the [B, B] full scores + the keep-ratio loss.

        The hinge takes the hardest negatives, or under the official recipe's warm-up (the first
        ``mean_violation_steps`` steps, or the first epoch; ``batch.extras["step"]`` / ``["epoch"]``
        from the training loop) sums over all of them (``losses.uses_hardest_negatives``).

        Sparse captions: ``batch.captions``; dense captions:
        ``batch.dense_captions`` (without them the captions are their own dense
        text, and a warning says so). ``batch.extras["dense_for"]`` may be
        "image" to pair dense caption i with image i (default "caption").
        """
        dense = batch.dense_captions
        if dense is None:
            dense = batch.captions
            if not self._warned_no_dense:
                warnings.warn("SEPS trains on dense captions; the batch has none, so each caption is used as its "
                              "own dense caption", stacklevel=2)
                self._warned_no_dense = True
        parameter = next(self.img_enc.parameters())
        image = self.encode_image(batch.pixels.to(parameter.device, parameter.dtype))
        text = self.encode_captions(list(batch.captions))
        dense_text = self.encode_captions(list(dense))
        dense_for = batch.extras.get("dense_for", "caption")
        hardest = uses_hardest_negatives(self.recipe, self.mean_violation_steps, batch.extras.get("step"),
                                         batch.extras.get("epoch"))
        if world()[1] > 1:
            return self.global_losses(image, text, dense_text, dense_for, hardest)
        out = self.pair_outputs(image, text, dense_text, dense_for)
        return seps_loss_terms(out.scores, out.keep_sparse, out.keep_dense, self.sparse_ratio, hardest=hardest)

    def global_losses(self, image: ImageFeatures, text: TextFeatures, dense_text: TextFeatures,
                      dense_for: str, hardest: bool = True) -> dict[str, torch.Tensor]:
        """``losses`` under DDP: this rank's images against every rank's captions ([B, G]) and every rank's
        images against its captions ([G, B]), features gathered with gradients (``nn.distributed``). The
        token axes are padded to the longest over ranks first (masked padding changes no score). With the
        paper's Gumbel selection the two blocks draw their own samples, so there the loss is not the
        single-process one draw for draw."""
        text, dense_text = (same_token_length(t) for t in (text, dense_text))
        every_image, every_text, every_dense = (gather_features(f) for f in (image, text, dense_text))
        by_caption = dense_for == "caption"  # the dense text goes with its caption, else with its image
        rows = self.pair_outputs(image, every_text, every_dense if by_caption else dense_text, dense_for)
        columns = self.pair_outputs(every_image, text, dense_text if by_caption else every_dense, dense_for)
        return seps_loss_terms(rows.scores, rows.keep_sparse, rows.keep_dense, self.sparse_ratio,
                               column_scores=columns.scores, hardest=hardest)
