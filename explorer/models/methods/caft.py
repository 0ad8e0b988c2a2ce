"""CAFT (papers/caft.txt): a fine-to-coarse image encoder and a hierarchical text encoder, aligned twice.

Pictures: as FLAIR, open_clip's transform (``Preprocess`` pipeline "openai").

CAFT extends FLAIR. Its weights were released but its code was not, so the
module layout below is this project's own (FLAIR's names where CAFT extends
FLAIR); a real CAFT release needs a converter onto it.

Text (the hierarchical text transformer, Sec. 3.2)
    A long caption is split into sentences and grouped into N = 4 chunks
    (``explorer.models.chunking``: balanced at inference, random 1-3
    sentences per chunk in training). The *sub-caption transformer* is the
    CLIP text tower at context 77 (8 layers at paper size): chunk k gives
    ``t_sub_k`` = its projected EOT state. A residual MLP adapter (CLIP-Adapter,
    Gao et al.) refines it: ``t~ = r * ReLU(t W1) W2 + (1 - r) * t`` with
    r = ``adapter_ratio`` = 0.2 and W1 d -> ``adapter_hidden`` (d / 4).
    The *whole-caption transformer* (4 layers, width d, bidirectional) reads
    ``[CLS] + t~_1..t~_N`` plus a learned position table of 1 + N rows; an
    empty chunk is masked out of every attention (its key gets -inf);
    ``t_whole = LN(CLS out) @ proj``.

    ``encode_text(ids)`` treats each id row as ONE sub-caption (a chunk of at
    most 77 tokens): ``sub`` is its ``t_sub``, ``eot`` its whole-caption
    embedding as a caption of that single chunk (the other N - 1 masked, the
    same as ``encode_long_captions`` gives a one-sentence caption), and
    ``tokens`` the sub-caption transformer's projected token states.
    ``encode_long_captions(captions)`` chunks whole captions (no 77-token
    limit on the caption, only on each chunk).

Vision (the fine-to-coarse encoder, Sec. 3.1)
    The paper starts from 196 superpixel tokens (SFCN superpixels) and
    groups them 196 -> 64 -> 32 -> 16 with CAST's graph pooling between ViT
    blocks; the 64-token stage is ``v_fine`` and the final [CLS] is
    ``v_coarse``. Here the CLIP ViT's square patches stand in for the
    superpixels (there is no superpixel network), and each grouping is a
    learned soft assignment: stage s has ``n_s`` learned queries Q_s and

        A_s = softmax_over_inputs( (LN(Q_s) W_q)(LN(X) W_k)^T / sqrt(w) )   [n_s, n_in]
        X'  = A_s X                     (each segment token = a convex mix of its inputs)

    followed by ``b_s`` ViT blocks over ``[CLS] + X'`` (CLS rides along as in
    CAST). Like CAST's assignment it is a soft clustering whose members are
    averaged; unlike CAST the cluster seeds are learned queries rather than
    sampled tokens. Default stages ``[[64, 2], [32, 2], [16, 2]]`` after a
    6-block CLIP ViT (12 blocks in all, ViT-B/16 depth). All levels go
    through the ViT's own ``ln_post`` and ``visual.proj``:
    ``v_fine = proj(LN(stage-0 tokens))`` [64, d], ``v_coarse = proj(LN(CLS))``.
    Because A_0 rows sum to 1 over the patches, any weights over the fine
    tokens carry back to the patch grid as ``w A_0`` (mass is preserved):
    that is how the attention maps are drawn. ``ImageFeatures.patches``
    holds the projected patch tokens before any grouping (the generic map).

Alignment (Sec. 3.3), with FLAIR's AttnPool
    ``AttnPool = MultiheadAttention(d, 8 heads, add_zero_attn=True)`` with
    LayerNorms on q, k, v (``explorer.models.methods.flair.TextConditionedPool``):
    ``v_tg(i, j_k) = AttnPool(t_sub_{j_k}, v_fine_i, v_fine_i)``.

    - part loss: -log sigmoid(y_ij (exp(logit_scale) cos(v_tg(i, j_k), t_sub_{j_k}) + logit_bias)),
      y = +1 iff i = j, summed over (i, j) and divided by B (SigLIP,
      ``losses.sigmoid_loss``), then averaged over the K sub-captions k;
    - whole loss: the same on cos(v_coarse_i, t_whole_j) with its own
      ``whole_logit_scale`` and ``whole_logit_bias``.

    Total = part + whole (the paper: L = L_part + L_whole). All four
    temperatures and biases start where the paper says: temperature 0.07
    (exp(scale) = 1 / 0.07) and bias -10. The K sub-captions of image i are
    its N chunks of the long caption (random chunking; only these feed the
    whole-caption transformer) plus, when ``extra_sub_captions="short"`` and
    the batch has them, its short caption (the paper samples K - N extra
    sub-captions "from multiple captions"). ``batch.sentences`` is used when
    present, else the captions are split with ``split_sentences``. Chunk
    draws use ``batch.extras["chunk_generator"]`` (a torch.Generator or
    random.Random) or, when absent, torch's global generator.

Scores
    ``similarity(image, text)``: CAFT's inference score, the whole-level
    cosine ``<v_coarse_i, t_whole_j>`` (for ``encode_text`` rows: each row a
    one-chunk caption). ``similarity_long(image, captions)``: CAFT++ (Eq. 10)

        s_ij = (1 - a) <v_coarse_i, t_whole_j> + a * sum_k <AttnPool(t_sub_{j_k}, v_fine_i), t_sub_{j_k}>

    with a = ``alpha`` = 0.3 and the sum over the caption's non-empty chunks
    (a = 0 is plain CAFT).

Maps
    "attention-pool": each sentence (its own sub-caption query ``t_sub``)
    pools the fine tokens of one image; the head-averaged weights with the
    zero-attention slot dropped (not renormalised: a map sums to
    1 - ``zero_slot_weight``) are carried to the patch grid through A_0.
    "attention-pool/head-k" (k = 0 .. heads-1): one head; the head maps
    average to the head-averaged one. ``zero_slot_weight(image, text)``: [M].
    The inherited "generic" map is the cosine of each sentence's ``eot``
    (its whole-level embedding) with the projected, ungrouped patch tokens.

Key layout (ours; our safetensors files and ``save_released`` both use it)
    visual.*                                   CLIP ViT (pre-grouping blocks), ln_post, proj
    visual_group.stages.{s}.queries            [n_s, vision width]
    visual_group.stages.{s}.{ln_queries,ln_tokens}.{weight,bias}
    visual_group.stages.{s}.{to_q,to_k}.{weight,bias}
    visual_group.stages.{s}.blocks.resblocks.{i}.*   open_clip blocks at vision width
    visual_proj.{attn,ln_q,ln_k,ln_v}.*       FLAIR's AttnPool (d, pool_heads)
    token_embedding.weight, positional_embedding [77, text width], transformer.resblocks.*,
    ln_final.*, text_projection               the sub-caption transformer (CLIP text keys)
    text_adapter.{fc1,fc2}.weight              [hidden, d], [d, hidden] (no bias)
    text_whole.cls_token [d], text_whole.positional_embedding [1 + N, d],
    text_whole.transformer.resblocks.{i}.*, text_whole.ln_final.*, text_whole.proj [d, d]
    logit_scale, logit_bias                    part level (FLAIR's names)
    whole_logit_scale, whole_logit_bias        whole level
The tensors give every size except the head counts of the pooling and of the
whole-caption transformer (defaults 8 and d / 64) and the inference options
(``alpha``, ``adapter_ratio``, ``extra_sub_captions``): a manifest sets those.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Mapping, Sequence

import torch
import torch.nn.functional as F
from torch import nn

from explorer.core.errors import CaptionError, ConfigError, InputError
from explorer.core.sentences import split_sentences
from explorer.models.architecture import count_blocks, heads_for
from explorer.models.batch import TrainingBatch
from explorer.models.chunking import N_CHUNKS, balanced_chunks, chunk_texts, random_chunks
from explorer.models.features import ImageFeatures, TextFeatures
from explorer.models.methods import keys_with_prefix, register
from explorer.models.methods.base import cosine_matrix
from explorer.models.methods.clip import ClipFamily, example_architecture
from explorer.models.nn.attention_pool import ATTENTION_MAP, DEFAULT_POOL_HEADS, AttentionPoolMaps, TextConditionedPool
from explorer.models.nn.distributed import gather_with_grad
from explorer.models.nn.losses import diagonal_positives, sigmoid_loss, sigmoid_pairs
from explorer.models.nn.open_clip_parts import LayerNorm, QuickGELU, Transformer
from explorer.models.unpadded import unpadded

DEFAULT_STAGES = ((64, 2), (32, 2), (16, 2))  # (tokens, ViT blocks) per grouping stage: 196 -> 64 -> 32 -> 16
DEFAULT_ALPHA = 0.3  # CAFT++
DEFAULT_ADAPTER_RATIO = 0.2  # CLIP-Adapter's residual ratio
INIT_LOGIT_SCALE = math.log(1 / 0.07)  # the paper: temperatures start at 0.07
INIT_LOGIT_BIAS = -10.0
EXTRA_SUB_CAPTIONS = ("short", "none")
_PAIR_BUDGET = 1 << 16  # (image, query) pairs per AttnPool call when scoring


# ---- features that carry the hierarchy ---------------------------------------------------------


@dataclass
class CaftImageFeatures(ImageFeatures):
    """``cls`` = v_coarse, ``patches`` = projected patch tokens, plus the fine level and the groupings."""

    fine: torch.Tensor | None = None  # [B, F, d] v_fine (projected)
    assignments: tuple = ()  # per stage [B, n_s, n_in]; assignments[0] is [B, F, P] (rows sum to 1)

    @property
    def fine_assignment(self) -> torch.Tensor:
        return self.assignments[0]


@dataclass
class CaftTextFeatures(TextFeatures):
    """``eot`` = whole-caption embedding of each row as a one-chunk caption, ``sub`` = its t_sub."""

    sub: torch.Tensor | None = None  # [B, d] sub-caption embedding (the AttnPool query)


# ---- modules ------------------------------------------------------------------------------------


class GroupingStage(nn.Module):
    """Learned-query soft assignment of n_in tokens to ``n_out`` segment tokens, then ViT blocks."""

    def __init__(self, width: int, n_out: int, blocks: int, heads: int, mlp_ratio: float, act):
        super().__init__()
        self.queries = nn.Parameter(torch.randn(n_out, width) * width ** -0.5)
        self.ln_queries, self.ln_tokens = LayerNorm(width), LayerNorm(width)
        self.to_q, self.to_k = nn.Linear(width, width), nn.Linear(width, width)
        self.blocks = Transformer(width=width, layers=blocks, heads=heads, mlp_ratio=mlp_ratio,
                                  act_layer=act, norm_layer=LayerNorm)

    def assignment(self, tokens: torch.Tensor) -> torch.Tensor:
        """A: [B, n_out, n_in], each row a distribution over the input tokens."""
        q = self.to_q(self.ln_queries(self.queries))  # [n_out, w]
        k = self.to_k(self.ln_tokens(tokens))  # [B, n_in, w]
        return (q @ k.transpose(1, 2) / math.sqrt(tokens.shape[-1])).softmax(dim=-1)

    def forward(self, cls: torch.Tensor, tokens: torch.Tensor):
        """cls [B, 1, w], tokens [B, n_in, w] -> (cls, grouped [B, n_out, w], A [B, n_out, n_in])."""
        weights = self.assignment(tokens)
        grouped = weights @ tokens
        out = self.blocks(torch.cat([cls, grouped], dim=1))
        return out[:, :1], out[:, 1:], weights


class FineToCoarse(nn.Module):
    def __init__(self, width: int, stages: Sequence[Sequence[int]], heads: int, mlp_ratio: float, act):
        super().__init__()
        self.stages = nn.ModuleList(GroupingStage(width, n, b, heads, mlp_ratio, act) for n, b in stages)


class ResidualAdapter(nn.Module):
    """CLIP-Adapter (Gao et al.): t~ = r * ReLU(t W1) W2 + (1 - r) * t."""

    def __init__(self, dim: int, hidden: int, ratio: float):
        super().__init__()
        self.fc1 = nn.Linear(dim, hidden, bias=False)
        self.fc2 = nn.Linear(hidden, dim, bias=False)
        self.ratio = ratio

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.ratio * self.fc2(F.relu(self.fc1(x))) + (1 - self.ratio) * x


class WholeCaptionTransformer(nn.Module):
    """[CLS] + the adapted chunk embeddings -> the whole-caption embedding; empty chunks masked."""

    def __init__(self, dim: int, n_chunks: int, layers: int, heads: int, mlp_ratio: float, act):
        super().__init__()
        self.heads = heads
        self.cls_token = nn.Parameter(torch.randn(dim) * dim ** -0.5)
        self.positional_embedding = nn.Parameter(torch.randn(1 + n_chunks, dim) * 0.01)
        self.transformer = Transformer(width=dim, layers=layers, heads=heads, mlp_ratio=mlp_ratio,
                                       act_layer=act, norm_layer=LayerNorm)
        self.ln_final = LayerNorm(dim)
        self.proj = nn.Parameter(torch.randn(dim, dim) * dim ** -0.5)

    @property
    def n_chunks(self) -> int:
        return self.positional_embedding.shape[0] - 1

    def forward(self, parts: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """parts [B, n, d] (n <= N), mask [B, n] True where the chunk is real -> [B, d]."""
        batch, n, _ = parts.shape
        if n > self.n_chunks:
            raise ValueError(f"the whole-caption transformer takes at most {self.n_chunks} chunks, got {n}")
        cls = self.cls_token.to(parts.dtype).expand(batch, 1, -1)
        x = torch.cat([cls, parts], dim=1) + self.positional_embedding[: 1 + n].to(parts.dtype)
        valid = torch.cat([torch.ones(batch, 1, dtype=torch.bool, device=mask.device), mask.bool()], dim=1)
        bias = torch.zeros(batch, 1, 1 + n, dtype=x.dtype, device=x.device).masked_fill(
            ~valid[:, None, :], float("-inf"))
        bias = bias.expand(batch, 1 + n, 1 + n).repeat_interleave(self.heads, dim=0)  # [B * heads, L, L]
        x = self.transformer(x, attn_mask=bias)
        return self.ln_final(x[:, 0]) @ self.proj


# ---- the method ---------------------------------------------------------------------------------


def _as_stage_list(stages) -> list[list[int]]:
    out = [[int(n), int(b)] for n, b in stages]
    if not out or any(n < 1 or b < 0 for n, b in out):
        raise ConfigError(f"CAFT stages must be [tokens >= 1, blocks >= 0] pairs, got {stages!r}")
    return out


@register
class CaftMethod(AttentionPoolMaps, ClipFamily):
    """CAFT: fine-to-coarse vision, hierarchical text, part (AttnPool) and whole sigmoid losses."""

    name = "caft"
    title = "CAFT"
    detect_priority = 25  # our layout also holds ``visual_proj.*``: try it before FLAIR
    default_quick_gelu = False  # like FLAIR: trained from scratch with GELU
    default_context = 77
    native_map_kinds = (ATTENTION_MAP,)  # per-head kinds are added per instance (``map_kinds``)
    preferred_native_map = ATTENTION_MAP
    new_module_prefixes = ("visual_group.", "visual_proj.", "text_adapter.", "text_whole.", "logit_bias",
                           "whole_logit_")
    export_leaves_out = ("the grouping stages, the attention pooling, the text adapter and the whole-caption "
                         "transformer: the export is the ViT before grouping and the 77-token sub-caption tower")

    def __init__(self, arch, stages=DEFAULT_STAGES, n_chunks: int = N_CHUNKS, whole_layers: int = 4,
                 whole_heads: int | None = None, pool_heads: int = DEFAULT_POOL_HEADS,
                 adapter_hidden: int | None = None, adapter_ratio: float = DEFAULT_ADAPTER_RATIO,
                 alpha: float = DEFAULT_ALPHA, extra_sub_captions: str = "short"):
        d = arch.embed_dim
        stages = _as_stage_list(stages)
        whole_heads = int(whole_heads or heads_for(d))
        adapter_hidden = int(adapter_hidden or max(1, d // 4))
        if extra_sub_captions not in EXTRA_SUB_CAPTIONS:
            raise ConfigError(f"CAFT extra_sub_captions must be one of {EXTRA_SUB_CAPTIONS}, "
                              f"not {extra_sub_captions!r}")
        if not 0.0 <= float(alpha) <= 1.0:
            raise ConfigError(f"CAFT alpha must lie in [0, 1], not {alpha}")
        for what, heads in (("pool_heads", pool_heads), ("whole_heads", whole_heads)):
            if heads < 1 or d % heads:
                raise ConfigError(f"CAFT {what}={heads} must divide the embedding width {d}")
        super().__init__(arch, stages=stages, n_chunks=int(n_chunks), whole_layers=int(whole_layers),
                         whole_heads=whole_heads, pool_heads=int(pool_heads), adapter_hidden=adapter_hidden,
                         adapter_ratio=float(adapter_ratio), alpha=float(alpha),
                         extra_sub_captions=extra_sub_captions)
        act = QuickGELU if arch.quick_gelu else nn.GELU
        self.alpha = float(alpha)
        self.extra_sub_captions = extra_sub_captions
        self.visual_group = FineToCoarse(arch.vision_width, stages, arch.vision_heads, arch.vision_mlp_ratio, act)
        self.visual_proj = TextConditionedPool(d, int(pool_heads))
        self.text_adapter = ResidualAdapter(d, adapter_hidden, float(adapter_ratio))
        self.text_whole = WholeCaptionTransformer(d, int(n_chunks), int(whole_layers), whole_heads,
                                                  arch.text_mlp_ratio, act)
        with torch.no_grad():
            self.logit_scale.fill_(INIT_LOGIT_SCALE)
        self.logit_bias = nn.Parameter(torch.tensor(INIT_LOGIT_BIAS))
        self.whole_logit_scale = nn.Parameter(torch.tensor(INIT_LOGIT_SCALE))
        self.whole_logit_bias = nn.Parameter(torch.tensor(INIT_LOGIT_BIAS))

    @property
    def n_chunks(self) -> int:
        return self.text_whole.n_chunks

    # ---- sizes and files ---------------------------------------------------------------------

    @classmethod
    def example(cls, size: str = "tiny", seed: int = 0, **extra) -> "CaftMethod":
        """"base": the paper's sizes (ViT-B/16 depth split 6 + 2 + 2 + 2, text 8 + 4, d = 512);
        "tiny": a 64-pixel, 16-patch model with 8 -> 4 -> 2 groups for tests."""
        torch.manual_seed(seed)
        arch = example_architecture(size, cls.default_context, cls.default_quick_gelu)
        if size == "base":
            arch = dataclasses.replace(arch, vision_layers=6, text_layers=8)
            defaults = {"stages": DEFAULT_STAGES, "whole_layers": 4, "whole_heads": 8, "pool_heads": 8}
        else:
            arch = dataclasses.replace(arch, vision_layers=1, text_layers=2)
            defaults = {"stages": ((8, 1), (4, 1), (2, 1)), "whole_layers": 1, "whole_heads": 2, "pool_heads": 4}
        return cls(arch, **{**defaults, **extra})

    @classmethod
    def detect(cls, tensors, raw):
        if (keys_with_prefix(tensors, "visual_group.stages.") and keys_with_prefix(tensors, "text_whole.")
                and "visual.proj" in tensors):
            return "caft"
        return None

    @classmethod
    def extra_config_from(cls, tensors: Mapping[str, torch.Tensor]) -> dict:
        stages = []
        while f"visual_group.stages.{len(stages)}.queries" in tensors:
            s = len(stages)
            stages.append([tensors[f"visual_group.stages.{s}.queries"].shape[0],
                           count_blocks(tensors, f"visual_group.stages.{s}.blocks.resblocks.")])
        d = tensors["text_whole.proj"].shape[0]
        return {
            "stages": stages,
            "n_chunks": tensors["text_whole.positional_embedding"].shape[0] - 1,
            "whole_layers": count_blocks(tensors, "text_whole.transformer.resblocks."),
            "adapter_hidden": tensors["text_adapter.fc1.weight"].shape[0],
            # Not in the tensors: the defaults, which a manifest may override.
            "whole_heads": heads_for(d), "pool_heads": DEFAULT_POOL_HEADS,
            "adapter_ratio": DEFAULT_ADAPTER_RATIO, "alpha": DEFAULT_ALPHA, "extra_sub_captions": "short",
        }

    @classmethod
    def to_backbone_layout(cls, raw, fmt, report):
        tensors = super().to_backbone_layout(raw, fmt, report)
        report.notes.append("CAFT in this project's own key layout; the head counts (pool_heads, whole_heads) "
                            "and alpha are not in the tensors: defaults unless the manifest sets them")
        return tensors

    def release_load_options(self) -> dict:
        """What a file in our key layout cannot say about this model (pass as load options)."""
        return {k: self.extra_config[k] for k in
                ("whole_heads", "pool_heads", "adapter_ratio", "alpha", "extra_sub_captions")}

    # ---- image ---------------------------------------------------------------------------------

    def encode_image(self, pixels: torch.Tensor) -> CaftImageFeatures:
        visual = self.visual
        x = visual.transformer(visual._embeds(pixels.to(self.dtype)))
        patches = self.project_image(visual.ln_post(x[:, 1:]))
        cls, tokens = x[:, :1], x[:, 1:]
        assignments, fine = [], None
        for stage in self.visual_group.stages:
            cls, tokens, weights = stage(cls, tokens)
            assignments.append(weights)
            if fine is None:
                fine = tokens
        coarse = self.project_image(visual.ln_post(cls[:, 0]))
        return CaftImageFeatures(cls=coarse, patches=patches, grid_hw=self.grid_hw,
                                 fine=self.project_image(visual.ln_post(fine)), assignments=tuple(assignments))

    # ---- text ----------------------------------------------------------------------------------

    def sub_caption_embeddings(self, ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The sub-caption transformer: (projected token states [B, K, d], t_sub [B, d]), K the longest chunk's
        tokens (``unpadded``: the tower is causal, so the padding after it changes nothing)."""
        ids = unpadded(ids)
        tokens = self.project_text(self.text_tokens(ids))
        eot = tokens[torch.arange(ids.shape[0], device=ids.device), ids.argmax(dim=-1)]
        return tokens, eot

    def whole_caption(self, parts: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """t_whole [B, d] from sub-caption embeddings [B, n, d] (adapter, then whole-caption transformer)."""
        return self.text_whole(self.text_adapter(parts), mask)

    def encode_text(self, ids: torch.Tensor) -> CaftTextFeatures:
        ids = unpadded(ids)
        tokens, sub = self.sub_caption_embeddings(ids)
        one = torch.ones(ids.shape[0], 1, dtype=torch.bool, device=ids.device)
        whole = self.whole_caption(sub[:, None], one)
        return CaftTextFeatures(eot=whole, tokens=tokens, mask=ids != 0, sub=sub)

    def long_caption_chunks(self, captions: Sequence[str]) -> list[list[str]]:
        """Each caption's N sub-captions by balanced chunking ("" for an empty chunk)."""
        chunks = []
        for caption in captions:
            sentences = split_sentences(caption or "")
            if not sentences:
                raise CaptionError("A caption is empty: CAFT needs at least one sentence per caption.")
            chunks.append(chunk_texts(balanced_chunks(sentences, self.n_chunks)))
        return chunks

    def encode_chunks(self, chunks: Sequence[Sequence[str]]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Chunk texts [B][N] ("" = empty) -> (whole [B, d], parts [B, N, d], part_mask [B, N])."""
        device = self.positional_embedding.device
        mask = torch.tensor([[bool(text) for text in row] for row in chunks], dtype=torch.bool, device=device)
        flat = [text for row in chunks for text in row if text]
        _, sub = self.sub_caption_embeddings(self.tokenize(flat).ids.to(device))
        parts = sub.new_zeros(mask.shape[0], mask.shape[1], sub.shape[-1])
        parts = parts.masked_scatter(mask[..., None], sub)
        return self.whole_caption(parts, mask), parts, mask

    def encode_long_captions(self, captions: Sequence[str]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Long captions -> (t_whole [B, d], t_sub parts [B, N, d] (zeros where empty), part_mask [B, N])."""
        return self.encode_chunks(self.long_caption_chunks(captions))

    # ---- scores --------------------------------------------------------------------------------

    @staticmethod
    def _fine(image: ImageFeatures) -> torch.Tensor:
        if not isinstance(image, CaftImageFeatures) or image.fine is None:
            raise InputError("CAFT scores and maps need the fine tokens: encode the image with CAFT's "
                             "encode_image (its CaftImageFeatures)")
        return image.fine

    @staticmethod
    def _sub(text: TextFeatures) -> torch.Tensor:
        if not isinstance(text, CaftTextFeatures) or text.sub is None:
            raise InputError("CAFT maps need the sub-caption embeddings: encode the text with CAFT's encode_text")
        return text.sub

    @classmethod
    def score_description(cls, options=None) -> str:
        alpha = float((options or {}).get("alpha", DEFAULT_ALPHA))
        return f"CAFT++ = {1 - alpha:g} whole + {alpha:g} parts" if alpha else "cosine (whole)"

    def similarity(self, image: ImageFeatures, text: TextFeatures) -> torch.Tensor:
        """CAFT's inference score: the whole-level cosine <v_coarse, t_whole> (each text row = one chunk)."""
        return cosine_matrix(image.cls, text.eot)

    def part_scores(self, image: ImageFeatures, queries: torch.Tensor) -> torch.Tensor:
        """[n_images, Q]: cos(AttnPool(q, v_fine_i), q) for every image i and sub-caption query q [Q, d]."""
        fine = self._fine(image)
        step = max(1, _PAIR_BUDGET // max(1, queries.shape[0]))
        target = F.normalize(queries.float(), dim=-1)
        out = []
        for start in range(0, fine.shape[0], step):
            block = fine[start:start + step]
            pooled, _ = self.visual_proj(queries[None].expand(block.shape[0], -1, -1), block)
            out.append((F.normalize(pooled.float(), dim=-1) * target[None]).sum(dim=-1))
        return torch.cat(out)

    def similarity_from_parts(self, image: ImageFeatures, whole: torch.Tensor, parts: torch.Tensor,
                              part_mask: torch.Tensor, alpha: float | None = None) -> torch.Tensor:
        """CAFT++ (Eq. 10): (1 - a) <v_coarse, t_whole> + a * sum over real chunks of part scores."""
        alpha = self.alpha if alpha is None else float(alpha)
        scores = (1 - alpha) * cosine_matrix(image.cls, whole)
        if alpha == 0:
            return scores
        part_mask = part_mask.bool()
        per_part = self.part_scores(image, parts[part_mask])  # [I, Q]
        full = per_part.new_zeros(len(image), *part_mask.shape)  # [I, T, N]
        full[:, part_mask] = per_part
        return scores + alpha * full.sum(dim=-1)

    reads_whole_caption = True  # CAFT++ reads every 77-token chunk of a long caption

    def score_captions(self, image: ImageFeatures, captions: list[str]) -> torch.Tensor:
        """Raw long captions are scored with CAFT++ (chunked), not cut at 77 tokens."""
        return self.similarity_long(image, captions)

    def ids_read(self, texts: list[str]) -> list[tuple[int, ...]]:
        """Each caption's chunks, each cut at 77 tokens, one after another (what ``score_captions`` reads)."""
        read = []
        for chunks in self.long_caption_chunks(texts):
            read.append(sum(super().ids_read([c for c in chunks if c]), ()))
        return read

    def similarity_long(self, image: ImageFeatures, captions: Sequence[str], alpha: float | None = None):
        """[n_images, n_captions] CAFT++ scores of whole long captions (``alpha`` = 0: plain CAFT)."""
        whole, parts, mask = self.encode_long_captions(captions)
        return self.similarity_from_parts(image, whole, parts, mask, alpha)

    # ---- maps ----------------------------------------------------------------------------------

    def pool_queries(self, text: TextFeatures) -> torch.Tensor:
        return self._sub(text)  # each sentence's sub-caption embedding queries the fine tokens

    def pool_tokens(self, image: ImageFeatures) -> torch.Tensor:
        return self._fine(image)

    def patch_attention(self, image: ImageFeatures, text: TextFeatures, average_heads: bool = True):
        """The pooling weights carried to the patches through the fine grouping: [(heads,) M, P]."""
        weights = super().patch_attention(image, text, average_heads)
        return weights @ image.fine_assignment[0].to(weights.dtype)

    # ---- training ------------------------------------------------------------------------------

    def training_sub_captions(self, batch: TrainingBatch) -> tuple[list[list[str]], int]:
        """Each image's K sub-captions (N random chunks, then the extra ones) and K."""
        sentences = batch.sentences if batch.sentences is not None else [split_sentences(c) for c in batch.captions]
        generator = batch.extras.get("chunk_generator")
        extra = self.extra_sub_captions == "short" and batch.short_captions is not None
        rows = []
        for i, own in enumerate(sentences):
            if not own:
                raise InputError(f"CAFT: caption {i} of the batch has no sentence to chunk")
            row = chunk_texts(random_chunks(list(own), self.n_chunks, generator=generator))
            rows.append(row + ([batch.short_captions[i]] if extra else []))
        return rows, self.n_chunks + (1 if extra else 0)

    def losses(self, batch: TrainingBatch) -> dict[str, torch.Tensor]:
        """CAFT's part-level and whole-level sigmoid losses (see the module docstring)."""
        rows, k = self.training_sub_captions(batch)
        device = self.positional_embedding.device
        n = len(rows)
        _, sub = self.sub_caption_embeddings(self.tokenize([t for row in rows for t in row]).ids.to(device))
        sub = sub.reshape(n, k, -1)
        whole = self.whole_caption(sub[:, : self.n_chunks], torch.ones(n, self.n_chunks, dtype=torch.bool,
                                                                       device=device))
        image = self.encode_image(batch.pixels)
        # Under DDP this rank's images against every rank's sub-captions / whole captions (gathered with
        # gradients; nn.losses explains the scaling); in one process `every` is `sub` itself.
        every = gather_with_grad(sub)  # [G, k, d]
        part_scores = self.part_scores(image, every.reshape(-1, every.shape[-1])).reshape(len(image), len(every), k)
        positives = diagonal_positives(len(image), len(every), device)
        part = torch.stack([sigmoid_loss(part_scores[:, :, j], self.logit_scale, self.logit_bias, positives)
                            for j in range(k)]).mean()
        whole_loss = sigmoid_pairs(image.cls, whole, _cosines, self.whole_logit_scale, self.whole_logit_bias)
        return {"part": part, "whole": whole_loss}


def _cosines(images: torch.Tensor, texts: torch.Tensor) -> torch.Tensor:
    return F.normalize(images.float(), dim=-1) @ F.normalize(texts.float(), dim=-1).T
