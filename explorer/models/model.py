"""The public face of a loaded model: PIL images and strings in, features and maps out.

``Model`` wraps a method module with its device, precision, preprocessing
and tokenizer. Scripts and the app use only this surface:

    m = explorer.load("checkpoints/longclip-B.json")
    feats = m.encode_image([img])            # ImageFeatures (projected, not normalised)
    sims = m.similarity([img], ["a cat"])    # [n_images, n_texts]
    out = m.sentence_maps(img, sentences)    # out.maps: [M, H, W] at the image's resolution
"""

from __future__ import annotations

import contextlib

import hashlib
import itertools
import weakref
from typing import Sequence

import numpy as np
import torch
import torch.nn.functional as F
from PIL import Image

from explorer.core.cache import MB, BoundedCache
from explorer.core.errors import CaptionError, ImageError, InputError
from explorer.core.images import load_image
from explorer.models.explainers import remembering_trunks
from explorer.models.features import ImageFeatures, TextFeatures
from explorer.models.io.checkpoints import KeyReport
from explorer.models.methods.base import GENERIC_MAP, Method
from explorer.models.precision import FORMATS, computing, dtype, fp32_heads, method_precision
from explorer.models.tokenizer import TokenBatch, TokenCounter

PRECISIONS = {name: dtype(name) for name in FORMATS}  # the formats weights may be held in ("auto" picks one)


# Maps at picture size are large (60 sentences at 768 px: 141 MB) and follow from the patch grid, so
# results keep the grid and the upsampled maps live here, shared and bounded: a browser session that
# keeps its last view holds kilobytes, not the maps.
FULL_MAPS = BoundedCache("sentence maps at picture size (upsampled from the patch grid)", max_bytes=512 * MB)
# A picture's image features, kept for the next caption: a caption change on the same picture runs only the
# text tower for every kind that reads the features alone (not the explainers, which need the tower's graph).
PICTURE_FEATURES = BoundedCache("image features of recent pictures (a caption change reuses them)",
                                max_items=32, max_bytes=128 * MB)
_NEXT_KEY = itertools.count()


class SentenceMaps:
    """One map per sentence, what ``Model.sentence_maps`` returns.

    Attributes:
        grid: (M, rows, cols) float32, the maps on the patch grid, as the method computed them.
        maps: (M, H, W) float32 at the picture's size: bilinear from the grid, made on first use and kept
            in the bounded ``FULL_MAPS`` cache (``maps`` given to the constructor are kept as they are).
        kind: The map kind ("generic", a method's native kind, or an explainer).
        sentences: The M sentences, in order.
        n_cut: For each sentence, how many of its tokens the model's context cut.
        size: (H, W) of the picture.
        precision: What the maps were computed in ("fp32", "bf16", "fp16").
    """

    def __init__(self, maps: np.ndarray | None = None, kind: str = GENERIC_MAP, grid: np.ndarray | None = None,
                 sentences: Sequence[str] = (), n_cut: Sequence[int] = (), size: tuple[int, int] | None = None):
        if maps is None and (grid is None or size is None):
            raise ValueError("SentenceMaps needs the maps, or their grid and the picture size to upsample to")
        self._maps, self.kind, self.grid = maps, kind, grid
        self.sentences, self.n_cut = list(sentences), list(n_cut)
        self.size = tuple(size) if size is not None else tuple(maps.shape[1:])  # (height, width)
        self._register()

    def _register(self) -> None:
        self._key = next(_NEXT_KEY)
        if self._maps is None:  # drop the upsampled copy with the result, not only when the cache needs room
            weakref.finalize(self, FULL_MAPS.forget, self._key)

    def __getstate__(self) -> dict:
        return {k: v for k, v in vars(self).items() if k != "_key"}

    def __setstate__(self, state: dict) -> None:
        vars(self).update(state)
        self._register()  # a key of its own in this process

    @property
    def maps(self) -> np.ndarray:
        if self._maps is not None:
            return self._maps
        full_bytes = len(self.grid) * self.size[0] * self.size[1] * 4
        if FULL_MAPS.max_bytes is not None and full_bytes > FULL_MAPS.max_bytes:
            self._maps = self._upsample()  # larger than the shared cache: kept here, made once
            return self._maps
        return FULL_MAPS.get(self._key, self._upsample)

    def _upsample(self) -> np.ndarray:
        grid = torch.from_numpy(self.grid)
        return F.interpolate(grid[None], size=self.size, mode="bilinear", align_corners=False)[0].numpy()

    def __len__(self) -> int:
        return len(self.sentences)


def resolve_device(device: str = "auto") -> torch.device:
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(device)


def weights_reader(precision: str, device: str = "auto"):
    """``load_method``'s ``weights_in`` for a ``Model`` about to hold the method: the file's floating-point
    weights are read straight into the format it will hold them in."""
    target = resolve_device(device)

    def held_in(method: Method, key: str = "") -> torch.dtype | None:
        if any(key.startswith(f"{head}.") for head in fp32_heads(method, precision, target).values()):
            return None  # a head "auto" computes in fp32 keeps the model's own (fp32) weights
        return dtype(method_precision(method, precision, target)[0])

    return held_in


class Model:
    """A loaded model: PIL pictures (or paths) and strings in, features, scores and maps out.

    Made by [`explorer.load`][explorer.load] (or the zoo); it wraps a method (``method``, an ``nn.Module``
    with the [`Method`][explorer.models.methods.base.Method] surface) with its device, precision,
    preprocessing and tokenizer. Features leave it in float32, projected into the joint space and not
    normalised, whatever it computed in.

    Attributes:
        name: The model's name (the zoo's, or the weights file's stem).
        method: The method module itself.
        device: The ``torch.device`` it runs on.
        precision: What it computes in: "fp32", "bf16" or "fp16" ("auto" resolved for this hardware).
        precision_note: Why, in one line ("auto"'s measurement on this CPU, or a requested format replaced), or None.
        key_report: What the load matched: missing, unexpected, mis-shaped and ignored keys (``summary()``).
    """

    def __init__(self, method: Method, name: str = "", report: KeyReport | None = None,
                 device: str = "auto", precision: str = "fp32", trained: bool = True,
                 synthetic_only: bool = False):
        self.device = resolve_device(device)
        self.notes: list[str] = []
        # "auto": bf16 where the hardware has it (``explorer.models.precision``); what runs is ``self.precision``
        self.precision, note = method_precision(method, precision, self.device)
        self.precision_note = note  # why it runs in that format ("auto"'s measurement, a replaced request)
        if note:
            self.notes.append(note)
        # Under "auto", a kind measured to lose its shape in the low format computes its own head in fp32 (that
        # submodule keeps fp32 weights), a method measured to lose it wholly stays fp32: ``models.precision``.
        self.fp32_heads = fp32_heads(method, precision, self.device)
        self.weights_precision = self.precision  # what the weights are held in (the heads of fp32_heads: fp32)
        heads = set(self.fp32_heads.values())
        # the heads' own values, kept through the conversion (fp32 -> bf16 -> fp32 would round them)
        kept = {head: {key: value.detach().clone() for key, value in getattr(method, head).state_dict().items()}
                for head in heads}
        self.method = method.to(self.device, dtype(self.weights_precision)).eval()
        for head in heads:
            getattr(self.method, head).float().load_state_dict(kept[head])
        self.name = name or method.title
        self.key_report = report
        self.trained = trained
        self._features_key = next(_NEXT_KEY)  # this model's own in PICTURE_FEATURES (an id() could be reused)
        self.synthetic_only = synthetic_only  # trained on the synthetic shapes only (a demo model)

    # ---- what the model is ---------------------------------------------------------------------

    @property
    def method_name(self) -> str:
        """The method's registry name ("clip", "longclip", "finelip", ...)."""
        return self.method.name

    @property
    def title(self) -> str:
        """How the page names the method ("Long-CLIP", "FineLIP", ...)."""
        return self.method.title

    @property
    def score_label(self) -> str:
        """What ``similarity`` returns (e.g. "cosine", FLAIR's "logits"), for labels and exports."""
        return self.method.score_label

    @property
    def context_length(self) -> int:
        """Tokens the text tower reads, start and end tokens included (77 or 248; SEPS's BERT 256)."""
        return self.method.context_length

    @property
    def map_kinds(self) -> tuple[str, ...]:
        """Every map kind ``sentence_maps`` takes: "generic", the native kinds (and their per-head views),
        then the explainers."""
        return self.method.map_kinds

    @property
    def preferred_native_map(self) -> str | None:
        """The method's own map that "native" draws and the tables score (``Method.preferred_native_map``)."""
        return self.method.preferred_native_map

    @property
    def measured_grounding(self):
        """The method's grounding per kind on a held-out evaluation (``Method.measured_grounding``), or None."""
        return self.method.measured_grounding

    def best_measured_kind(self) -> str | None:
        """The kind it offers that grounded best when measured (``Method.best_measured_kind``), or None."""
        return self.method.best_measured_kind()

    @property
    def global_score(self) -> bool:
        """Whether the method's score is the cosine of the global embeddings (no re-ranking needed)."""
        return self.method.global_score

    @property
    def reads_whole_caption(self) -> bool:
        """Whether the method reads captions past ``context_length`` (CAFT's chunks) instead of cutting them."""
        return self.method.reads_whole_caption

    @property
    def uses_dense_caption(self) -> bool:
        return self.method.uses_dense_caption

    def text_tower(self):
        """The method's CLIP text transformer on its own (``TextTower``), or None when it has none."""
        return self.method.text_tower(source=f"{self.name} ({self.title})")

    def __repr__(self) -> str:
        return f"Model({self.name!r}, method={self.method_name}, context={self.context_length}, device={self.device})"

    # ---- encoders ------------------------------------------------------------------------------

    def tokenize(self, texts: Sequence[str]) -> TokenBatch:
        """The method's token ids: ``ids`` (B, context_length) int64, ``n_tokens`` and ``n_cut`` per text."""
        return self.method.tokenize(list(texts))

    @property
    def token_counter(self) -> TokenCounter:
        """The method's own token counting (CLIP BPE, or SEPS's BERT word pieces)."""
        return self.method.token_counter

    def ids_read(self, texts: Sequence[str]) -> list[tuple[int, ...]]:
        """The token ids the model reads for each text when it scores it, after its cut (or CAFT's chunks)."""
        return self.method.ids_read(list(texts))

    def pixels(self, images: Sequence, fit: str = "crop") -> torch.Tensor:
        """The pictures as the method's tower reads them, on the model's device and precision."""
        pictures = [_as_pil(image) for image in images]
        if not pictures:
            raise ImageError("There is no image to encode.")
        return self.method.preprocess(pictures, fit=fit).to(self.device, PRECISIONS[self.weights_precision])

    def computing(self, kind: str | None = None):
        """The context every forward pass runs in: autocast to ``precision`` (nothing for fp32)."""
        return computing(self.precision, self.device)

    def precision_of(self, kind: str | None) -> str:
        """What a map kind computes in, as results and the page say it: "fp32", "bf16", "fp16", or "bf16, head
        fp32" for a kind of ``fp32_heads`` (the towers in bf16, the kind's own head in fp32)."""
        if kind in self.fp32_heads:
            return f"{self.precision}, head fp32"
        return self.precision

    # Features leave the model in fp32 (stores, indexes and scores expect it); inside, they stay in the format
    # the model computes in, and features handed back in are put into it (a bf16 layer norm takes no fp32).

    @torch.inference_mode()
    def encode_image(self, images: Sequence, fit: str = "crop") -> ImageFeatures:
        """Encode pictures with the image tower.

        Args:
            images: PIL images or paths to picture files.
            fit: "crop" (the method's own preprocessing: resize the short side, centre crop) or "squash"
                (the whole picture resized to the input square, as the sentence maps read it).

        Returns:
            ``ImageFeatures``: ``cls`` (B, D) and ``patches`` (B, P, D) float32, ``grid_hw`` (rows, cols).
        """
        return _as_fp32(self._encode_pixels(self.pixels(images, fit=fit)))

    @torch.inference_mode()
    def encode_text(self, texts: Sequence[str]) -> TextFeatures:
        """Encode texts with the text tower, each cut at ``context_length`` tokens.

        Returns:
            ``TextFeatures``: ``eot`` (B, D) and ``tokens`` (B, K, D) float32, ``mask`` (B, K) bool, where
            K is the longest text's length in tokens (start and end tokens included), not the context.
        """
        return _as_fp32(self._encode_tokens(self.tokenize(texts)))

    def _encode_pixels(self, pixels: torch.Tensor, kind: str | None = None) -> ImageFeatures:
        with self.computing(kind):
            return self.method.encode_image(pixels)

    def _encode_tokens(self, batch: TokenBatch, kind: str | None = None) -> TextFeatures:
        with self.computing(kind):
            return self.method.encode_text(batch.unpadded().ids.to(self.device))

    def _in_format(self, features):
        """Features given back to the model, in the format it computes in."""
        return features.to(self.device, PRECISIONS[self.weights_precision])

    def picture_features(self, picture: Image.Image, kind: str | None = None, fit: str = "squash") -> ImageFeatures:
        """The picture's features, in the model's format, kept per (model, pixels, fit) in ``PICTURE_FEATURES``:
        ``fit="squash"`` (the whole picture) for its maps, ``"crop"`` (the method's own preprocessing) for
        ``similarity``, which takes them as they are (a swap probe scores many texts on one picture so)."""
        key = self._picture_key(picture, kind) + (() if fit == "squash" else (fit,))
        return PICTURE_FEATURES.get(key, lambda: self._encode_pixels(self.pixels([picture], fit=fit), kind))

    def _picture_key(self, picture: Image.Image, kind: str | None) -> tuple:
        """This model's key of a picture's pixels, in the format its towers compute ``kind`` in."""
        digest = hashlib.blake2b(picture.tobytes(), digest_size=16).hexdigest()
        return self._features_key, picture.size, digest

    PATCH_SOURCES = ("features", "attention")

    @torch.inference_mode()
    def patch_features(self, image, source: str = "features") -> tuple[np.ndarray, tuple[int, int]]:
        """Per-patch vectors of one picture, for PCA maps: ([P, D] float32, (rows, cols)).

        ``"features"``: the projected patch tokens; ``"attention"``: each patch's row of the last
        layer's head-averaged self-attention over the patches (D = P). The whole picture is seen
        (``fit="squash"``), as for the sentence maps.
        """
        if source not in self.PATCH_SOURCES:
            raise InputError(f"patch source is one of {self.PATCH_SOURCES}, not {source!r}")
        pixels = self.method.preprocess([_as_pil(image)], fit="squash").to(self.device,
                                                                           PRECISIONS[self.weights_precision])
        features = self._encode_pixels(pixels)
        grid = tuple(int(v) for v in features.grid_hw)
        if source == "features":
            return features.patches[0].float().cpu().numpy(), grid
        with self.computing():
            attention = self.method.patch_self_attention(pixels)
        if attention is None:
            raise InputError(f"{self.title} does not expose its image encoder's attention; use the patch features")
        return attention[0].float().cpu().numpy(), grid

    # ---- scores and maps -----------------------------------------------------------------------

    @torch.inference_mode()
    def similarity(self, images, texts) -> torch.Tensor:
        """Score every picture against every text with the method's own score.

        Args:
            images: PIL images or paths, or ``ImageFeatures`` already encoded.
            texts: Strings (long captions are read as the method reads them: cut, or CAFT's chunks), or
                ``TextFeatures`` already encoded.

        Returns:
            (n_images, n_texts) float32 scores on the CPU, of the kind ``score_label`` names (a cosine for
            most methods; FineLIP*, CAFT++, SEPS's late interaction, FLAIR's chosen score otherwise).
        """
        if isinstance(images, ImageFeatures):
            image = self._in_format(images)
        else:
            image = self._encode_pixels(self.pixels(images))
        with self.computing():
            if isinstance(texts, TextFeatures):
                return self.method.similarity(image, self._in_format(texts)).float().cpu()
            return self.method.score_captions(image, list(texts)).float().cpu()

    @torch.inference_mode()
    def region_features(self, images, boxes) -> torch.Tensor | None:
        """One embedding per box, pooled from the patch grid of the whole picture (FG-CLIP's region features,
        ``explorer.models.regions``).

        Args:
            images: PIL images or paths, each read whole (``fit="squash"``).
            boxes: Rows (picture index, x0, y0, x1, y1), corners as fractions of that picture's width and
                height.

        Returns:
            (n_boxes, D) float32 on the CPU, projected and not normalised; None when the method has no patch
            grid to pool from.
        """
        from explorer.models.regions import grid_boxes

        features = self._encode_pixels(self.pixels(images, fit="squash"))
        with self.computing():
            pooled = self.method.region_features(features, grid_boxes(boxes, features.grid_hw))
        return None if pooled is None else pooled.float().cpu()

    @torch.inference_mode()
    def sentence_maps(self, image, sentences: Sequence[str], kind: str = GENERIC_MAP,
                      dense_caption: str | None = None) -> SentenceMaps:
        """One map per sentence, over the whole image, at the image's resolution.

        Args:
            image: A PIL image or a path.
            sentences: The M sentences, each scored on its own.
            kind: "generic" (the sentence-patch cosine), one of the method's native kinds, or an explainer
                ("gradcam", "legrad", "clearclip", "naclip"); ``map_kinds`` lists them.
            dense_caption: Read by methods that use one (``uses_dense_caption``, e.g. SEPS); without it
                they use each sentence as its own dense text.

        Returns:
            ``SentenceMaps``: ``maps`` (M, H, W) float32 at the picture's size, ``grid`` (M, rows, cols).
        """
        sentences = [s for s in sentences]
        if not sentences or not any(s.strip() for s in sentences):
            raise CaptionError("There is no sentence to draw a map for: the caption is empty.")
        picture = _as_pil(image)
        tokens = self.tokenize(sentences)
        with self.computing(kind):
            if kind in self.method.explainer_kinds:  # they need the tower itself, with gradients for some
                key = self._picture_key(picture, kind)  # the trunk's tokens depend on the picture alone
                with remembering_trunks(lambda label, compute: PICTURE_FEATURES.get((*key, label), compute)):
                    grid = self.method.explainer_maps(self.pixels([picture], fit="squash"),
                                                      self._encode_tokens(tokens, kind), kind)
            else:
                # 'squash' so the map covers every pixel of the picture, not only a centre crop.
                image_features = self.picture_features(picture, kind)
                text_features = self._encode_tokens(tokens, kind)
                dense = None
                if dense_caption and self.method.uses_dense_caption:
                    dense = self._encode_tokens(self.tokenize([dense_caption]), kind)
                grid = self._native_maps(kind, image_features, text_features, dense)
        width, height = picture.size
        maps = SentenceMaps(kind=kind, grid=grid.float().cpu().numpy(), sentences=sentences, n_cut=tokens.n_cut,
                            size=(height, width))
        maps.precision = self.precision_of(kind)  # what these maps were computed in
        return maps

    def _native_maps(self, kind: str, image: ImageFeatures, text: TextFeatures,
                     dense: TextFeatures | None) -> torch.Tensor:
        """A native kind's maps from the features; a kind of ``fp32_heads`` runs its head in fp32 (autocast off,
        the features put in fp32)."""
        head_in_fp32 = kind in self.fp32_heads
        if head_in_fp32:
            image, text, dense = (None if f is None else _as_fp32(f) for f in (image, text, dense))
        with torch.autocast(self.device.type, enabled=False) if head_in_fp32 else contextlib.nullcontext():
            if dense is not None:
                return self.method.dense_caption_maps(image, text, dense, kind)
            return self.method.sentence_maps(image, text, kind)


def _as_fp32(features):
    """Features leave the model in fp32 whatever it computed in (stores, indexes and scores expect it)."""
    floating = [f for f in vars(features).values() if torch.is_tensor(f) and f.is_floating_point()]
    return features if all(f.dtype == torch.float32 for f in floating) else features.to(torch.float32)


def _as_pil(image) -> Image.Image:
    if isinstance(image, Image.Image) and image.mode == "RGB":
        return image
    return load_image(image).image
