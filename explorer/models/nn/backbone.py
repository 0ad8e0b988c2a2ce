"""CLIP ViT image and text towers that return projected features.

Built from open_clip's transformer modules, with attribute names that match
the OpenAI CLIP state-dict layout (``visual.*``, ``token_embedding``,
``positional_embedding``, ``transformer.*``, ``ln_final``,
``text_projection``, ``logit_scale``). OpenAI, Long-CLIP and FineLIP
checkpoints therefore load key for key; methods built on this backbone
subclass it and add their own modules beside these.

The towers return *all* tokens through the final LayerNorm and projection
(METHODS.md: v_loc, t_loc), not only the pooled one, because every map and
every fine-grained score needs them.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from explorer.models.architecture import ClipArchitecture
from explorer.models.features import ImageFeatures, TextFeatures
from explorer.models.nn.image_pool import PREFIX as POOL_PREFIX
from explorer.models.nn.image_pool import PositionalAttentionPool
from explorer.models.nn.open_clip_parts import LayerNorm, QuickGELU, Transformer, VisionTransformer
from explorer.models.nn.positional import stretch_positions
from explorer.models.text_tower import TextTower, text_keys
from explorer.models.unpadded import unpadded


class ClipBackbone(nn.Module):
    """A CLIP ViT: image tower, text tower, and the learned temperature."""

    def __init__(self, arch: ClipArchitecture):
        super().__init__()
        self.arch = arch
        act = QuickGELU if arch.quick_gelu else nn.GELU
        self.visual = VisionTransformer(
            image_size=arch.image_size, patch_size=arch.patch_size, width=arch.vision_width,
            layers=arch.vision_layers, heads=arch.vision_heads, mlp_ratio=arch.vision_mlp_ratio,
            output_dim=arch.embed_dim, act_layer=act, norm_layer=LayerNorm,
        )
        if arch.pool == "attn":
            self.image_pool = PositionalAttentionPool(arch.embed_dim, arch.pool_heads, arch.grid ** 2)
        self.token_embedding = nn.Embedding(arch.vocab_size, arch.text_width)
        self.positional_embedding = nn.Parameter(torch.empty(arch.context_length, arch.text_width))
        self.transformer = Transformer(
            width=arch.text_width, layers=arch.text_layers, heads=arch.text_heads,
            mlp_ratio=arch.text_mlp_ratio, act_layer=act, norm_layer=LayerNorm,
        )
        self.ln_final = LayerNorm(arch.text_width)
        self.text_projection = nn.Parameter(torch.empty(arch.text_width, arch.embed_dim))
        self.logit_scale = nn.Parameter(torch.tensor(math.log(1 / 0.07)))
        causal = torch.full((arch.context_length, arch.context_length), float("-inf")).triu_(1)
        self.register_buffer("attn_mask", causal, persistent=False)
        self._init_text_parameters()

    def _init_text_parameters(self) -> None:
        # CLIP's initialisation (Radford et al.), so a model built in code is a sane start.
        nn.init.normal_(self.token_embedding.weight, std=0.02)
        nn.init.normal_(self.positional_embedding, std=0.01)
        width, layers = self.arch.text_width, self.arch.text_layers
        for block in self.transformer.resblocks:
            nn.init.normal_(block.attn.in_proj_weight, std=width ** -0.5)
            nn.init.normal_(block.attn.out_proj.weight, std=width ** -0.5 * (2 * layers) ** -0.5)
            nn.init.normal_(block.mlp.c_fc.weight, std=(2 * width) ** -0.5)
            nn.init.normal_(block.mlp.c_proj.weight, std=width ** -0.5 * (2 * layers) ** -0.5)
        nn.init.normal_(self.text_projection, std=width ** -0.5)

    @property
    def context_length(self) -> int:
        return self.positional_embedding.shape[0]

    @property
    def grid_hw(self) -> tuple[int, int]:
        return tuple(self.visual.grid_size)

    # ---- image tower -------------------------------------------------------------------------

    def image_tokens(self, pixels: torch.Tensor) -> torch.Tensor:
        """All tokens [B, 1 + P, width] after the last block and ``ln_post`` (not projected)."""
        visual = self.visual
        x = visual._embeds(pixels.to(self.dtype))
        x = visual.transformer(x)
        return visual.ln_post(x)

    def project_image(self, tokens: torch.Tensor) -> torch.Tensor:
        return tokens @ self.visual.proj

    def pool_image(self, projected: torch.Tensor) -> torch.Tensor:
        """The global embedding [B, E] of projected tokens [B, 1 + P, E]: the class token ("tok"), the mean of
        the patches ("avg"; the projection is linear, so before or after it is the same), or the attention pool
        over the patches ("attn", ``nn.image_pool``)."""
        pool = self.arch.pool
        if pool == "attn":
            return self.image_pool(projected[:, 1:])
        return projected[:, 0] if pool == "tok" else projected[:, 1:].mean(dim=1)

    def patch_features(self, projected: torch.Tensor) -> torch.Tensor:
        """The patches [B, P, E] of projected tokens [B, 1 + P, E], in the space of the global embedding: what
        maps compare with a sentence."""
        return self.in_embedding_space(projected[:, 1:])

    def in_embedding_space(self, patches: torch.Tensor) -> torch.Tensor:
        """Projected patch vectors [..., E] (or a pool of them) where the global embedding lives: as they are,
        or under the attention pool their values (the pooled embedding mixes those; an affine map, so the
        mean of a region's values is the value of its mean)."""
        return self.image_pool.values(patches) if self.arch.pool == "attn" else patches

    def encode_image(self, pixels: torch.Tensor) -> ImageFeatures:
        projected = self.project_image(self.image_tokens(pixels))
        return ImageFeatures(cls=self.pool_image(projected), patches=self.patch_features(projected),
                             grid_hw=self.grid_hw)

    def image_attention(self, pixels: torch.Tensor) -> torch.Tensor:
        """Self-attention weights of the last vision block: [B, heads, 1 + P, 1 + P], rows sum to 1.

        Token 0 is the class token, then the patches row-major. The earlier blocks run as in
        the forward; the last block's queries and keys are computed here from its own
        ``attn.in_proj_weight/bias`` on ``ln_1`` of its input, and
        ``softmax(q k^T / sqrt(head width))`` is taken per head (in float32). Nothing in the
        forward is changed or hooked.
        """
        visual = self.visual
        x = visual._embeds(pixels.to(self.dtype))
        blocks = visual.transformer.resblocks
        batch_first = getattr(visual.transformer, "batch_first", True)
        if not batch_first:
            x = x.transpose(0, 1)
        for block in blocks[:-1]:
            x = block(x)
        if not batch_first:
            x = x.transpose(0, 1)
        last = blocks[-1]
        h = last.ln_1(x)
        width, heads = h.shape[-1], last.attn.num_heads
        weight = last.attn.in_proj_weight[: 2 * width]
        bias = None if last.attn.in_proj_bias is None else last.attn.in_proj_bias[: 2 * width]
        q, k = torch.nn.functional.linear(h, weight, bias).float().chunk(2, dim=-1)
        n, length = h.shape[0], h.shape[1]
        q = q.reshape(n, length, heads, width // heads).transpose(1, 2)
        k = k.reshape(n, length, heads, width // heads).transpose(1, 2)
        scores = q @ k.transpose(-2, -1) / math.sqrt(width // heads)
        return scores.softmax(dim=-1)

    # ---- text tower --------------------------------------------------------------------------

    def text_tokens(self, ids: torch.Tensor) -> torch.Tensor:
        """All token states [B, K, width] after the last block and ``ln_final`` (not projected)."""
        length = ids.shape[1]
        x = self.token_embedding(ids).to(self.dtype) + self.positional_embedding[:length].to(self.dtype)
        x = self.transformer(x, attn_mask=self.attn_mask[:length, :length].to(x.dtype))
        return self.ln_final(x)

    def project_text(self, tokens: torch.Tensor) -> torch.Tensor:
        return tokens @ self.text_projection

    def encode_text(self, ids: torch.Tensor) -> TextFeatures:
        # The mask is causal, so padding after the last EOT changes nothing before it: drop it
        # (``models.unpadded``). A 20-token caption in a 248-token context then costs 20 positions, not 248.
        ids = unpadded(ids)
        # EOT has the largest id in CLIP's vocabulary, so argmax finds it (as OpenAI CLIP does).
        eot_index = ids.argmax(dim=-1)
        projected = self.project_text(self.text_tokens(ids))
        eot = projected[torch.arange(ids.shape[0], device=ids.device), eot_index]
        # Real tokens are SOT .. EOT. Not ``ids != 0``: id 0 is a real BPE token ("!").
        positions = torch.arange(ids.shape[1], device=ids.device)
        return TextFeatures(eot=eot, tokens=projected, mask=positions[None, :] <= eot_index[:, None])

    def text_tower(self, source: str = "") -> TextTower:
        """The text transformer alone (shares storage with this model; nothing is copied)."""
        arch = self.arch
        return TextTower(
            tensors=text_keys(self.state_dict()), width=arch.text_width, layers=arch.text_layers,
            heads=arch.text_heads, mlp_width=int(round(arch.text_width * arch.text_mlp_ratio)),
            context_length=self.positional_embedding.shape[0], vocab_size=arch.vocab_size,
            projection_dim=self.text_projection.shape[1], quick_gelu=arch.quick_gelu, source=source)

    def backbone_state_dict(self, pool: bool = True) -> dict[str, torch.Tensor]:
        """This CLIP's own entries of the state dict, without a subclass's modules; ``pool=False`` without the
        attention pool too (what an export holds: neither library has that readout)."""
        with torch.device("meta"):  # only the keys are wanted: nothing is allocated or initialised for real
            keys = ClipBackbone(self.arch).state_dict().keys()
        tensors = self.state_dict()
        return {key: tensors[key] for key in keys if pool or not key.startswith(POOL_PREFIX)}

    @property
    def dtype(self) -> torch.dtype:
        return self.visual.conv1.weight.dtype

    # ---- long text ---------------------------------------------------------------------------

    def stretch_to_long_context(self) -> None:
        """Apply Long-CLIP's stretch 77 -> 248 in place (the start of Long-CLIP fine-tuning)."""
        stretched = stretch_positions(self.positional_embedding.data)
        self.positional_embedding = nn.Parameter(stretched)
        n = stretched.shape[0]
        self.attn_mask = torch.full((n, n), float("-inf"), device=stretched.device).triu_(1)
        self.arch = type(self.arch)(**{**self.arch.to_dict(), "context_length": n})
