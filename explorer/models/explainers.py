"""Training-free explainers: per-sentence maps that any CLIP ViT image tower offers, written from the papers.

- ``gradcam`` (Selvaraju et al. 2017; SEPS's zero-shot grounding readout): the activations are the
  last image block's output tokens (what Grad-CAM's last convolutional feature maps are to a CNN);
  the gradient of the sentence's score with respect to them, averaged over the tokens, weighs the
  channels, and the map is ReLU of the weighted patch tokens. (Taken at the block's input instead,
  the demo base CLIP's map measured AUROC 0.51 against the background, against 0.71 here.)
- ``legrad`` (Bousselham et al. 2024): for each of the last ``LEGRAD_LAYERS`` blocks, that block's
  own readout (its tokens through ``ln_post`` and the projection, pooled as the model pools) is scored
  against the sentence; the gradient of that score with respect to the block's post-softmax attention
  is kept where positive, averaged over heads and query rows (patch columns kept), summed over the
  blocks and min-max normalised.
- ``clearclip`` (Lan et al. 2024) and ``naclip`` (Hajimiri et al. 2025): forward-only readouts. The
  last block's attention is replaced (ClearCLIP: query-query; NACLIP: key-key plus a Gaussian
  neighbourhood on the patch grid) and its residual and FFN are dropped; the patch tokens then go
  through ``ln_post`` and the projection and are scored against every sentence in one matmul.

The gradient kinds differentiate the method's own score for the sentence (``Method.similarity``:
FineLIP*, CAFT++, FLAIR's text-conditioned pooling ...), so the map explains the method. The picture
runs through the trunk once, without gradients; the blocks being explained see one copy of its tokens per
sentence, so one backward pass gives every sentence its own gradient. The trunk's output depends on the
picture alone: inside ``remembering_trunks`` (the model's per-picture cache) a caption change reuses it. Gradients are taken with ``torch.autograd.grad``
(no ``.grad`` is left on any parameter) inside ``torch.inference_mode(False)``, so the model may be in
inference mode everywhere else.
"""

from __future__ import annotations

import contextlib
import contextvars
import math
import threading
from typing import Callable

import torch
import torch.nn.functional as F

from explorer.core.errors import ExplorerError
from explorer.models.features import TextFeatures, copy_features
from explorer.models.map_kinds import (  # noqa: F401
    CLEARCLIP,
    DESCRIPTIONS,
    EXPLAINER_KINDS,
    FORWARD_KINDS,
    GRADCAM,
    GRADIENT_KINDS,
    LEGRAD,
    LEGRAD_LAYERS,
    NACLIP,
)

NACLIP_SIGMA = 5.0  # the paper's Gaussian width, in patches


class ExplainerError(ExplorerError):
    """An explainer cannot run on this model or input."""


# ---- the tower ----------------------------------------------------------------------------------


def vit_of(method, kind: str):
    """(visual, blocks, batch_first) of the method's CLIP ViT image tower, or ``ExplainerError``."""
    visual = getattr(method, "visual", None)
    blocks = getattr(getattr(visual, "transformer", None), "resblocks", None)
    if blocks is None or not hasattr(visual, "_embeds"):
        raise ExplainerError(f"{method.title} has no CLIP ViT image tower: the {kind} map needs one")
    return visual, blocks, getattr(visual.transformer, "batch_first", True)


def explain(method, pixels: torch.Tensor, text: TextFeatures, kind: str) -> torch.Tensor:
    """[M, rows, cols] maps of ``kind`` for the one picture in ``pixels`` [1, 3, H, W], one per sentence."""
    if pixels.shape[0] != 1:
        raise ExplainerError(f"maps are drawn for one picture at a time, got {pixels.shape[0]}")
    if len(text) == 0:
        raise ExplainerError("there is no sentence to explain")
    function = {GRADCAM: gradcam, LEGRAD: legrad, CLEARCLIP: clearclip, NACLIP: naclip}.get(kind)
    if function is None:
        raise ExplainerError(f"no explainer named {kind!r}; known: {', '.join(EXPLAINER_KINDS)}")
    with torch.inference_mode(False):
        pixels = pixels.clone()  # an inference tensor cannot enter a graph
        text = copy_features(text)  # every field, the method's own ones too
        maps = function(method, pixels, text)
    rows, cols = method.grid_hw
    return maps.detach().float().reshape(len(text), rows, cols)


def _tokens_first(x: torch.Tensor, batch_first: bool) -> torch.Tensor:
    return x if batch_first else x.transpose(0, 1)


# A lookup ``(label, compute) -> tensor`` for the picture being explained, set by the model around a request:
# what ``trunk_output`` computes depends on the picture and the weights only, never on the sentences.
_TRUNKS: contextvars.ContextVar[Callable | None] = contextvars.ContextVar("explainer_trunks", default=None)


@contextlib.contextmanager
def remembering_trunks(lookup: Callable[[str, Callable[[], torch.Tensor]], torch.Tensor]):
    """Inside: ``trunk_output`` asks ``lookup(label, compute)`` (a cache for this model and picture) first."""
    token = _TRUNKS.set(lookup)
    try:
        yield
    finally:
        _TRUNKS.reset(token)


def trunk_output(method, pixels: torch.Tensor, blocks, n_blocks: int, batch_first: bool) -> torch.Tensor:
    """Tokens [1, N, D] (batch first, no gradient) after the patch embedding and the first ``n_blocks``
    blocks, from the model's cache of this picture where it has one."""
    def compute() -> torch.Tensor:
        with torch.no_grad():
            return trunk(method, pixels, blocks[:n_blocks], batch_first).detach()

    lookup = _TRUNKS.get()
    return compute() if lookup is None else lookup(f"after {n_blocks} of {len(blocks)} blocks", compute)


@contextlib.contextmanager
def tower_output_replaced(visual, tokens: torch.Tensor, batch_first: bool):
    """Inside: the tower's transformer skips its blocks and returns ``tokens`` (batch first [M, N, D]), so what
    the method computes after it (ln_post, the projection, its pool, its score) runs on them; a method that runs
    the blocks itself (GOAL, for the last block's attention) gets them from the last block instead.
    ``called[0]`` says whether the method's image features passed through either.

    Only this request sees the replacement (``_REPLACED`` is per thread and context): another request on the
    same model at the same time runs the real blocks."""
    # The transformer takes and gives tokens batch first whatever its blocks use (open_clip transposes inside
    # it); a block gives them in its own layout.
    called = [False]
    outputs = {visual.transformer: tokens, visual.transformer.resblocks[-1]: _tokens_first(tokens, batch_first)}
    token = _REPLACED.set({id(module): (output, called) for module, output in outputs.items()})
    _dispatch_through(outputs, +1)
    try:
        yield called
    finally:
        _dispatch_through(outputs, -1)
        _REPLACED.reset(token)


# id(module) -> (its output, the request's ``called``), for the request that replaced it; empty elsewhere.
_REPLACED: contextvars.ContextVar[dict] = contextvars.ContextVar("explainer_replaced_outputs", default={})
_DISPATCHING: dict[int, int] = {}  # id(module) -> requests using its dispatcher now
_DISPATCH_LOCK = threading.Lock()


def _dispatch_through(modules, change: int) -> None:
    """Install (``change`` +1) or release (-1) on each module a ``forward`` that returns this request's output
    where it replaced one and runs the module's own ``forward`` otherwise; the last release removes it."""
    with _DISPATCH_LOCK:
        for module in modules:
            users = _DISPATCHING.get(id(module), 0) + change
            if change > 0 and users == 1:
                module.forward = _dispatcher(module)  # an instance attribute: found before the class's
            if users == 0:
                del module.forward
                _DISPATCHING.pop(id(module), None)
            else:
                _DISPATCHING[id(module)] = users


def _dispatcher(module):
    own = type(module).forward

    def forward(*args, **kwargs):
        replaced = _REPLACED.get().get(id(module))
        if replaced is None:
            return own(module, *args, **kwargs)
        output, called = replaced
        called[0] = True
        return output

    return forward


def own_scores(method, image, text: TextFeatures) -> torch.Tensor:
    """[M]: copy m of the picture scored against sentence m by the method's own ``similarity``."""
    scores = method.similarity(image, text)
    return scores.diagonal() if scores.dim() == 2 else scores


# ---- Grad-CAM -----------------------------------------------------------------------------------


def gradcam(method, pixels: torch.Tensor, text: TextFeatures) -> torch.Tensor:
    visual, blocks, batch_first = vit_of(method, GRADCAM)
    last = trunk_output(method, pixels, blocks, len(blocks), batch_first)  # the last block's output tokens
    tokens = last.repeat(len(text), 1, 1).requires_grad_(True)  # copy m: sentence m's activations
    with torch.enable_grad(), tower_output_replaced(visual, tokens, batch_first) as called:
        scores = own_scores(method, method.encode_image(pixels), text)
        if not called[0]:
            raise ExplainerError(f"{method.title}'s image features do not pass through its last ViT block")
        gradient, = torch.autograd.grad(scores.sum(), tokens)
    weights = gradient.mean(dim=1, keepdim=True)  # [M, 1, D]: one weight per channel, over all tokens
    return F.relu((weights * tokens.detach()).sum(dim=-1))[:, 1:]  # the patch tokens


# ---- LeGrad -------------------------------------------------------------------------------------


def block_with_attention(block, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """open_clip's residual block on tokens [B, N, D], returning (output, post-softmax attention [B, h, N, N])."""
    h = block.ln_1(x)
    q, k, v = _qkv(block.attn, h)
    attention = (q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])).softmax(dim=-1)
    x = x + block.ls_1(_merge_heads(block.attn, attention @ v))
    return x + block.ls_2(block.mlp(block.ln_2(x))), attention


def _qkv(attn, h: torch.Tensor):
    """Per-head queries, keys and values [B, h, N, d] from ``nn.MultiheadAttention``'s packed projection."""
    n, length, width = h.shape
    heads = attn.num_heads
    q, k, v = F.linear(h, attn.in_proj_weight, attn.in_proj_bias).chunk(3, dim=-1)
    return [t.reshape(n, length, heads, width // heads).transpose(1, 2) for t in (q, k, v)]


def _merge_heads(attn, values: torch.Tensor) -> torch.Tensor:
    n, heads, length, d = values.shape
    return attn.out_proj(values.transpose(1, 2).reshape(n, length, heads * d))


def legrad(method, pixels: torch.Tensor, text: TextFeatures, layers: int = LEGRAD_LAYERS) -> torch.Tensor:
    visual, blocks, batch_first = vit_of(method, LEGRAD)
    layers = min(layers, len(blocks))
    x = trunk_output(method, pixels, blocks, len(blocks) - layers, batch_first)  # once, for every sentence
    x = x.repeat(len(text), 1, 1).requires_grad_(True)
    sentences = F.normalize(text.eot.float(), dim=-1)
    relevance = 0
    with torch.enable_grad():
        attentions, scores = [], []
        for block in blocks[len(blocks) - layers:]:
            x, attention = block_with_attention(block, x)
            readout = method.pool_image(method.project_image(visual.ln_post(x)))  # [M, E]: as the model pools
            attentions.append(attention)
            scores.append((F.normalize(readout.float(), dim=-1) * sentences).sum())  # sentence m on copy m
        for attention, score in zip(attentions, scores):
            gradient, = torch.autograd.grad(score, attention, retain_graph=True)
            relevance = relevance + F.relu(gradient).mean(dim=(1, 2))[:, 1:]  # heads, query rows; patch columns
    low = relevance.amin(dim=1, keepdim=True)
    high = relevance.amax(dim=1, keepdim=True)
    return (relevance - low) / (high - low).clamp_min(1e-12)


def trunk(method, pixels: torch.Tensor, blocks, batch_first: bool) -> torch.Tensor:
    """Tokens [B, N, D] after the patch embedding and ``blocks`` (the tower's first blocks)."""
    x = _tokens_first(method.visual._embeds(pixels.to(method.dtype)), batch_first)
    for block in blocks:
        x = block(x)
    return _tokens_first(x, batch_first)


# ---- forward-only readouts ----------------------------------------------------------------------


def clearclip(method, pixels: torch.Tensor, text: TextFeatures) -> torch.Tensor:
    return _reduced_last_block(method, pixels, text, CLEARCLIP)


def naclip(method, pixels: torch.Tensor, text: TextFeatures) -> torch.Tensor:
    return _reduced_last_block(method, pixels, text, NACLIP)


def _reduced_last_block(method, pixels, text, kind) -> torch.Tensor:
    visual, blocks, batch_first = vit_of(method, kind)
    x = trunk_output(method, pixels, blocks, len(blocks) - 1, batch_first)
    with torch.no_grad():
        last = blocks[-1]
        q, k, v = _qkv(last.attn, last.ln_1(x))
        scale = 1 / math.sqrt(q.shape[-1])
        if kind == CLEARCLIP:
            logits = q @ q.transpose(-2, -1) * scale
        else:
            logits = k @ k.transpose(-2, -1) * scale + neighbourhood(method.grid_hw, x.device)
        tokens = _merge_heads(last.attn, logits.softmax(dim=-1) @ v)  # no residual, no FFN
        patches = method.patch_features(method.project_image(visual.ln_post(tokens)))[0]  # [P, E]
        return F.normalize(text.eot.float(), dim=-1) @ F.normalize(patches.float(), dim=-1).T


def neighbourhood(grid_hw: tuple[int, int], device, sigma: float = NACLIP_SIGMA) -> torch.Tensor:
    """NACLIP's Gaussian window [1 + P, 1 + P] added to the attention logits: exp(-d^2 / 2 sigma^2) between
    patch positions on the grid, 0 for the class token's row and column."""
    rows, cols = grid_hw
    ys, xs = torch.meshgrid(torch.arange(rows, device=device), torch.arange(cols, device=device), indexing="ij")
    points = torch.stack([ys.flatten(), xs.flatten()], dim=1).float()
    window = torch.exp(-torch.cdist(points, points).pow(2) / (2 * sigma ** 2))
    return F.pad(window, (1, 0, 1, 0))
