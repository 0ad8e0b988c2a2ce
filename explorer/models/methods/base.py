"""The small surface every method offers, and what every method gets for free.

A method is an ``nn.Module`` that can
- say whether a state dict is in one of its released layouts (``detect``),
- build itself from such a file (``from_checkpoint``) with a strict key report,
- encode images and token ids into typed features,
- score images against texts (``similarity``),
- draw per-sentence maps over the patch grid (``sentence_maps``), and
- compute its training losses (``losses``).

Views only ever call these; they never reach into a method's modules.
The generic map (cosine of each sentence embedding with each projected
patch token) is defined here once, so a method needs to add only its own
native maps.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar, Mapping

import torch
import torch.nn.functional as F

from explorer.core.errors import InputError
from explorer.models.architecture import ClipArchitecture
from explorer.models.batch import TrainingBatch  # noqa: F401  (named in annotations)
from explorer.models.features import ImageFeatures, TextFeatures
from explorer.models.io.checkpoints import KeyReport, RawCheckpoint
from explorer.models.map_kinds import GENERIC_MAP  # noqa: F401  (re-exported: methods name it from here)
from explorer.models.measured import MeasuredGrounding
from explorer.models.preprocess import Preprocess
from explorer.models.text_tower import TextTower  # noqa: F401  (named in annotations)
from explorer.models.tokenizer import CLIP_TOKENS, TokenBatch, TokenCounter, tokenize


@dataclass(frozen=True)
class DemoSpec:
    """The sizes of the demo zoo's from-scratch models (``Method.demo_model``): its CLIP architecture, the
    patch size a method with towers of its own uses, the seed, and the world's word vocabulary file."""

    architecture: ClipArchitecture
    patch_size: int
    seed: int = 0
    vocab_file: Path | None = None


class Method:
    """Mixin that defines the method surface; concrete methods also subclass ``nn.Module``.

    A method is one class: everything the app needs to know about it is said here, so no code outside
    ``explorer/models/methods/`` names a method. CLIP-family methods build on
    ``explorer.models.methods.clip.ClipFamily``; a plugin registers its class under the entry-point
    group ``explorer.methods``, and ``explorer.testing.check_method`` says whether it fits.

    Attributes:
        name: The registry key, e.g. "clip", "finelip" (a plugin's entry point has this name).
        title: How the page names it, e.g. "FineLIP".
        native_map_kinds: The method's own map kinds, beside "generic".
        preferred_native_map: Its own sentence map that "native" draws on the page and the evaluation
            tables score as ``miou_native``; None when it has none (the page then draws the kind of
            ``measured_grounding`` with the best grounding).
        measured_grounding: Its map kinds' mIoU and pointing on a held-out evaluation, with the command
            that measured them (``explorer.models.measured.MeasuredGrounding``); None: not measured.
        explainer_kinds: The training-free explainers its image tower supports ("gradcam", "legrad",
            "clearclip", "naclip" for a CLIP ViT); () when its tower is not one.
        context_length: Tokens its text tower reads (77, 248, ...).
        reads_whole_caption: True when it reads a caption past ``context_length`` (CAFT's 77-token chunks).
        uses_dense_caption: True when it reads a dense caption beside the sentences (SEPS).
        needs_local_pairs: True when it trains on one FLISM (region, sentence) pair per picture (GOAL); a job
            whose data lacks them mines them with its init model first.
        needs_word_vocabulary: True when its text side needs a word vocabulary of its training data (SEPS).
        init_methods: The methods whose checkpoints it can start from; None: any CLIP-family checkpoint.
        job_defaults: Defaults for a background run, in the schema of ``explorer/jobs/configs/*.yaml``:
            ``{"train": {...}, "sources": {...}, "fixed": {...}, "notes": [...]}`` (a built-in's YAML wins).
        demo_recipe: How ``explorer zoo build-demo`` trains it when it is not in the demo zoo's recipe
            table (``DemoRun`` fields, e.g. ``{"steps": 200}``); None: not in the demo zoo.
        export_leaves_out: What ``explorer export`` leaves out of the method: "" when the exported CLIP
            computes its own embeddings and score (it exports whole); a phrase naming what is left out,
            which makes ``explorer export`` refuse a whole export (``--backbone-only`` then exports the
            backbone alone); None (the default) when it has no CLIP backbone. ``export_left_out(fmt)``
            gives the answer for an instance and format.
        new_module_prefixes: Prefixes of the parameters it adds to its backbone; they train with their own
            learning rate.
        detect_priority: Order in which released layouts are tried (higher first).
    """

    name: ClassVar[str]  # registry key, e.g. "clip", "finelip"
    title: ClassVar[str]  # how the UI names it, e.g. "FineLIP"
    native_map_kinds: ClassVar[tuple[str, ...]] = ()  # the method's own maps, beside the generic one
    detect_priority: ClassVar[int] = 0  # higher is tried first: specific layouts before generic ones

    # ---- checkpoints ---------------------------------------------------------------------------

    @classmethod
    def detect(cls, tensors: Mapping[str, torch.Tensor], raw: RawCheckpoint) -> str | None:
        """The name of this method's released format that ``tensors`` are in, or None."""
        return None

    @classmethod
    def from_checkpoint(cls, raw: RawCheckpoint, fmt: str, overrides: Mapping | None = None,
                        dry_run: bool = False) -> tuple["Method", KeyReport]:
        raise NotImplementedError

    def config(self) -> dict:
        """What ``build`` needs to rebuild this model (saved with our own checkpoints)."""
        raise NotImplementedError

    @classmethod
    def score_description(cls, options: Mapping | None = None) -> str:
        """What ``similarity`` returns with these options (a manifest's, or a config), said in a few
        words for the UI's tables and exported results: scores of different kinds do not compare."""
        return "cosine"

    @property
    def score_label(self) -> str:
        return self.score_description(self.config())

    @classmethod
    def build(cls, config: Mapping) -> "Method":
        raise NotImplementedError

    @classmethod
    def example(cls, size: str = "tiny", seed: int = 0) -> "Method":
        """A randomly initialised model: "tiny" for tests, "base" (ViT-B/16 sizes) for benchmarks."""
        raise NotImplementedError

    def released_state_dict(self) -> dict:
        """The weights in the method's official release layout (default: our own keys are that layout)."""
        return dict(self.state_dict())

    def released_file_object(self):
        """What ``torch.save`` writes for an official-layout file (wrappers such as {'state_dict': ...})."""
        return self.released_state_dict()

    @classmethod
    def merge_config(cls, config: Mapping, overrides: Mapping | None) -> dict:
        """``config`` with a manifest's options applied (used for this project's own files)."""
        return {**config, **(overrides or {})}

    # ---- inputs --------------------------------------------------------------------------------

    preprocess: Preprocess
    context_length: int

    def tokenize(self, texts: list[str]) -> TokenBatch:
        return tokenize(texts, self.context_length)

    @property
    def token_counter(self) -> TokenCounter:
        """Counts tokens the way ``tokenize`` does (token budgets, cut marks); CLIP's BPE here."""
        return CLIP_TOKENS

    # Training-free explainers the method's image tower supports (``explorer.models.explainers``): every
    # method with a CLIP ViT offers them; a method says () when its tower is not one.
    explainer_kinds: ClassVar[tuple[str, ...]] = ()

    @property
    def head_map_kinds(self) -> tuple[str, ...]:
        """Per-head variants of the native maps, when the instance has heads to show (GOAL, FLAIR, CAFT)."""
        return ()

    @property
    def map_kinds(self) -> tuple[str, ...]:
        return (GENERIC_MAP, *self.native_map_kinds, *self.head_map_kinds, *self.explainer_kinds)

    # ---- what a method computes ----------------------------------------------------------------

    def encode_image(self, pixels: torch.Tensor) -> ImageFeatures:
        raise NotImplementedError

    def encode_text(self, ids: torch.Tensor) -> TextFeatures:
        raise NotImplementedError

    def similarity(self, image: ImageFeatures, text: TextFeatures) -> torch.Tensor:
        """[n_images, n_texts]. Default: cosine of the global embeddings."""
        return cosine_matrix(image.cls, text.eot)

    # True: ``similarity`` (and ``score_captions``) give the cosine of ``cls`` and ``eot``, even where the class
    # overrides them (the scaffold's template does). None: decided from whether they are the base's. The kit
    # checks a True; retrieval then searches the vectors alone, and ``explorer export`` counts no score of its own.
    cosine_score: ClassVar[bool | None] = None

    @property
    def global_score(self) -> bool:
        """True when ``similarity`` is the cosine of the global embeddings (``cls``, ``eot``): a search over
        those vectors is then already the method's own ranking, and retrieval needs no re-ranking. Said by
        ``cosine_score`` where the class sets it, else whether ``similarity`` is the base's."""
        if self.cosine_score is not None:
            return bool(self.cosine_score)
        cls = type(self)
        return cls.similarity is Method.similarity and cls.score_captions is Method.score_captions

    # A method that reads a long caption past its context (CAFT's 77-token chunks) says so: nothing of
    # the caption is cut. Everyone else sees it cut at ``context_length`` tokens.
    reads_whole_caption: ClassVar[bool] = False

    def region_features(self, image: ImageFeatures, boxes: torch.Tensor) -> torch.Tensor | None:
        """[N, D] one projected embedding per box of the pictures in ``image`` (read whole, squashed to the
        input square), or None when the method has no patch grid to pool from. ``boxes`` [N, 5]: picture
        index, x0, y0, x1, y1 in patch units (``explorer.models.regions.grid_boxes``). Default: FG-CLIP's
        region features, RoIAlign of the projected patch tokens to one cell (``regions.roi_pool``); a
        method with a box head of its own overrides this."""
        from explorer.models.regions import roi_pool

        return roi_pool(image, boxes)

    def score_captions(self, image: ImageFeatures, captions: list[str]) -> torch.Tensor:
        """[n_images, n_captions] scores of raw captions. Methods whose text side is more than one token
        sequence (CAFT's chunks) override this; everyone else tokenizes and calls ``similarity``."""
        device = image.cls.device
        return self.similarity(image, self.encode_text(self.tokenize(list(captions)).unpadded().ids.to(device)))

    def ids_read(self, texts: list[str]) -> list[tuple[int, ...]]:
        """The token ids ``score_captions`` reads for each text, after the method's cut: two texts read
        alike score alike. Default: ``tokenize``'s row, up to its end token. A method that reads a text as
        several sequences (CAFT's chunks) overrides this and gives them one after another."""
        batch = self.tokenize(list(texts))
        return [tuple(row[:min(n, len(row))].tolist()) for row, n in zip(batch.ids, batch.n_tokens)]

    def sentence_maps(self, image: ImageFeatures, text: TextFeatures, kind: str = GENERIC_MAP) -> torch.Tensor:
        """[M, rows, cols] maps over the patch grid of one image, one per sentence."""
        if kind == GENERIC_MAP:
            return generic_maps(image, text)
        raise InputError(f"{self.title} has no map kind {kind!r}; it offers {', '.join(self.map_kinds)}")

    def explainer_maps(self, pixels: torch.Tensor, text: TextFeatures, kind: str) -> torch.Tensor:
        """[M, rows, cols] maps of an explainer kind for one picture's pixels [1, 3, H, W]: they need the
        tower itself (attention, gradients), not only its features."""
        if kind not in self.explainer_kinds:
            raise InputError(f"{self.title} has no map kind {kind!r}; it offers {', '.join(self.map_kinds)}")
        from explorer.models.explainers import explain

        return explain(self, pixels, text, kind)

    # Methods that read a second, dense caption beside the sentences (SEPS) say so; the UI then
    # offers a box for it, and says when the caption itself stands in for it.
    uses_dense_caption: ClassVar[bool] = False

    def patch_self_attention(self, pixels: torch.Tensor) -> torch.Tensor | None:
        """Head-averaged last-layer self-attention among the patches, [B, P, P] (row i: where patch i
        looks), or None when the image encoder does not expose it. CLIP-backbone methods have it."""
        attention = getattr(self, "image_attention", None)
        if attention is None:
            return None
        return attention(pixels).mean(dim=1)[:, 1:, 1:]  # drop the class token's row and column

    def dense_caption_maps(self, image: ImageFeatures, text: TextFeatures, dense: TextFeatures,
                           kind: str = GENERIC_MAP) -> torch.Tensor:
        """``sentence_maps`` given a dense caption (one row for all sentences); default: it is not used."""
        return self.sentence_maps(image, text, kind)

    def text_tower(self, source: str = "") -> "TextTower | None":
        """The method's CLIP text transformer on its own (what SDXL's ``text_encoder`` slot can take), or
        None when its text side is not one CLIP text tower (SEPS's BERT). CLIP-backbone methods have one."""
        return None

    # ---- export (``explorer export``: a transformers CLIPModel or an open_clip CLIP) --------------
    # What such an export leaves out of the method, in a few words: "" when the exported CLIP computes the
    # method's own embeddings and score (it exports whole); else it exports only its CLIP backbone, and only
    # when asked (``--backbone-only``). None: the method has no CLIP backbone (``nn.backbone.ClipBackbone``).
    export_leaves_out: ClassVar[str | None] = None

    def export_left_out(self, fmt: str) -> str | None:
        """``export_leaves_out`` for this instance and format ("transformers" or "open_clip")."""
        return self.export_leaves_out

    def losses(self, batch: "TrainingBatch") -> dict[str, torch.Tensor]:
        """Named loss terms, each already weighted: the training loop minimises their sum."""
        raise NotImplementedError(f"{self.title} has no training losses yet")

    # ---- what the rest of the app asks of a method (no package outside methods/ names one) -----------

    # Precision "auto" (``explorer.models.precision``), where bf16 was measured to lose a map's shape (median
    # Otsu-mask IoU against fp32 under 0.95) or a score's ranking: why the whole model stays in fp32 (None: it
    # computes in the low format), and {map kind: the submodule that computes it in fp32} when the loss is in
    # that kind's own head (the towers stay in the low format; the head keeps fp32 weights and fp32 inputs).
    fp32_under_auto: ClassVar[str | None] = None
    fp32_heads: ClassVar[Mapping[str, str]] = {}

    # Training data beyond images and captions. GOAL trains on one FLISM local pair (region crop, sentence)
    # per image: a job whose data lacks them mines them with its init model first (FAST-GOAL mines with CLIP).
    needs_local_pairs: ClassVar[bool] = False
    # A text side with a word vocabulary of its own training data (SEPS's BERT): the demo zoo writes one
    # beside the weights (``vocab_file`` in the manifest's options).
    needs_word_vocabulary: ClassVar[bool] = False
    # The methods whose checkpoints it can start from (an init); None: any CLIP-family checkpoint.
    init_methods: ClassVar[tuple[str, ...] | None] = None
    # Its own sentence map that "native" draws on the page and that the evaluation tables score as
    # ``miou_native``; None: it has none (the page then draws the best measured explainer).
    preferred_native_map: ClassVar[str | None] = None
    # Its map kinds' grounding on a held-out evaluation and the command that measured it: a method without its
    # own sentence map opens on the best of them (``best_measured_kind``); None: not measured (Grad-CAM then).
    measured_grounding: ClassVar[MeasuredGrounding | None] = None

    def best_measured_kind(self) -> str | None:
        """The kind it offers that grounded best when measured (``measured_grounding``), or None."""
        measured = self.measured_grounding
        return measured.best(self.map_kinds) if measured is not None else None
    # Defaults for a background run (``explorer.jobs``), in the schema of ``explorer/jobs/configs/*.yaml``:
    # {"train": {key: value}, "sources": {key: where from}, "fixed": {...}, "notes": [...]}. A built-in's
    # numbers are in its YAML there (each with its source); a plugin gives them here.
    job_defaults: ClassVar[Mapping] = {}

    @classmethod
    def refuse_init(cls, init_method: str | None, init: str = "") -> str | None:
        """Why a run of this method cannot start from a checkpoint of ``init_method``, or None when it can."""
        if cls.init_methods is None or init_method is None or init_method in cls.init_methods:
            return None
        return f"{cls.title} starts only from a {' or '.join(cls.init_methods)} checkpoint; {init} is a " \
               f"{init_method} model."

    # How `explorer zoo build-demo` trains it, for a method not in the demo zoo's recipe table (a plugin):
    # ``DemoRun`` fields (explorer.training.demo_zoo), e.g. {"steps": 200}; None: it is not in the demo zoo.
    demo_recipe: ClassVar[Mapping | None] = None

    @classmethod
    def demo_model(cls, demo: "DemoSpec", **extra) -> "Method":
        """A model built from scratch for the demo zoo (``explorer.training.demo_zoo``) at ``demo``'s sizes.
        A CLIP-family method builds on ``demo.architecture``; a method with other towers says here how."""
        raise NotImplementedError(f"{cls.title} has no from-scratch recipe for the demo zoo")

    # Modules the method adds to its backbone (prefixes of parameter names). They train with their own
    # learning rate (papers: e.g. MulCLIP 1e-5 backbone, 2e-4 new modules).
    new_module_prefixes: ClassVar[tuple[str, ...]] = ()

    def parameter_groups(self) -> dict[str, list]:
        """{"backbone": [...], "new": [...]}: trainable parameters split by where they come from."""
        groups: dict[str, list] = {"backbone": [], "new": []}
        for name, parameter in self.named_parameters():
            if parameter.requires_grad:
                is_new = name.startswith(self.new_module_prefixes) if self.new_module_prefixes else False
                groups["new" if is_new else "backbone"].append(parameter)
        return groups


def cosine_matrix(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """[n_a, n_b] cosines of the rows of ``a`` [n_a, D] and ``b`` [n_b, D], computed in float32: CLIP's score
    of global embeddings (``ImageFeatures.cls`` against ``TextFeatures.eot``)."""
    return F.normalize(a.float(), dim=-1) @ F.normalize(b.float(), dim=-1).T


def generic_maps(image: ImageFeatures, text: TextFeatures) -> torch.Tensor:
    """Cosine of each sentence embedding with each projected patch token of the first image."""
    if len(image) != 1:
        raise InputError(f"maps are drawn for one image at a time, got {len(image)}")
    rows, cols = image.grid_hw
    scores = cosine_matrix(text.eot, image.patches[0])  # [M, P]
    return scores.reshape(len(text), rows, cols)
