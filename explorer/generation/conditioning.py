"""What SDXL's UNet reads: token sequences and a pooled vector, stock or with a long text tower.

Stock SDXL encodes the prompt with CLIP-L (``text_encoder``) and OpenCLIP bigG (``text_encoder_2``),
both cut at 77 tokens, and takes each one's penultimate layer. The swap (Long-CLIP's and FineLIP's
SDXL code, METHODS.md):
- ``text_encoder`` becomes the selected model's long text tower at 248 tokens; by default its last
  layer after the final LayerNorm, no projection (their code), or the penultimate layer without
  the LayerNorm (stock SDXL's choice, and ComfyUI's);
- ``text_encoder_2`` stays frozen, its 77 positions stretched to 248 by the knowledge-preserving
  rule (``explorer.models.nn.positional``); it reads the same layer as the long tower;
- ``prompt_embeds`` = both sequences side by side on the feature axis, [B, 248, 768 + 1280];
  ``pooled_prompt_embeds`` = bigG's projected EOT embedding, [B, 1280];
- the negative prompt goes through the same encoders, or is zeros when it is empty and the
  pipeline says so (``force_zeros_for_empty_prompt``, as stock SDXL does).
Everything is handed to the stock ``StableDiffusionXLPipeline`` as embeddings: diffusers is not
patched and its denoising loop is not copied.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch

from explorer.generation.sdxl_source import SdxlError
from explorer.generation.settings import LAYERS  # noqa: F401 (re-exported)
from explorer.models.nn.positional import LONG_CONTEXT, SHORT_CONTEXT, stretch_positions
from explorer.models.text_tower import TextTower
from explorer.models.tokenizer import CLIP_TOKENS, tokenize

STOCK_READS = f"stock SDXL: CLIP-L + bigG, penultimate layer, cut at {SHORT_CONTEXT} tokens"


@dataclass
class Conditioning:
    prompt_embeds: torch.Tensor  # [B, L, 2048]
    pooled: torch.Tensor  # [B, 1280]
    negative_embeds: torch.Tensor | None  # None without classifier-free guidance
    negative_pooled: torch.Tensor | None
    reads: str  # what the encoders read, said in the page and saved with the image
    seconds: float = 0.0

    def last_features(self, width: int) -> "Conditioning":
        """Only the last ``width`` features of each token (bigG's part): what SDXL's refiner reads."""
        cut = None if self.negative_embeds is None else self.negative_embeds[..., -width:]
        return Conditioning(self.prompt_embeds[..., -width:], self.pooled, cut, self.negative_pooled,
                            reads=f"{self.reads}; refiner: its bigG part", seconds=self.seconds)

    def pipeline_kwargs(self) -> dict:
        return {"prompt_embeds": self.prompt_embeds, "pooled_prompt_embeds": self.pooled,
                "negative_prompt_embeds": self.negative_embeds,
                "negative_pooled_prompt_embeds": self.negative_pooled}


def stock_conditioning(pipe, prompt: str, negative: str, guidance: float, device: torch.device) -> Conditioning:
    """The stock pipeline's own encoding (``encode_prompt``): the baseline every swap is compared with."""
    if pipe.text_encoder is None or pipe.tokenizer is None:
        raise SdxlError("This SDXL folder has no text_encoder/ or tokenizer/ (CLIP-L): the stock pipeline cannot "
                        "run; the swapped one can.")
    start = time.perf_counter()
    with torch.inference_mode():
        embeds, negative_embeds, pooled, negative_pooled = pipe.encode_prompt(
            prompt=prompt, device=device, num_images_per_prompt=1, do_classifier_free_guidance=guidance > 1,
            negative_prompt=negative or None)
    return Conditioning(embeds, pooled, negative_embeds, negative_pooled, reads=STOCK_READS,
                        seconds=time.perf_counter() - start)


def hidden_states(encoder, ids: torch.Tensor, layer: str):
    """(token states of the chosen layer, the encoder's output)."""
    out = encoder(input_ids=ids, output_hidden_states=True)
    states = out.last_hidden_state if layer == "last" else out.hidden_states[-2]
    return states, out


class LongTextConditioner:
    """One long text tower in SDXL's ``text_encoder`` slot, beside the pipeline's stretched bigG."""

    def __init__(self, tower: TextTower | None, pipe, name: str = ""):
        self.name = name or (tower.source if tower else "")
        check_tower(tower, pipe, self.name)
        # transformers (~1 s) is imported when a long encoder is first built, not when the page starts.
        from explorer.generation.clip_text_model import position_key, stretched_copy, to_clip_text_model

        self.long = to_clip_text_model(tower).requires_grad_(False)
        bigg = pipe.text_encoder_2
        positions = bigg.state_dict()[position_key(bigg)]
        self.bigg = stretched_copy(bigg, stretch_positions(positions.float()).to(positions.dtype))
        self.force_zeros = bool(getattr(pipe.config, "force_zeros_for_empty_prompt", False))

    def reads(self, layer: str) -> str:
        return f"{self.name} + stretched bigG, {LONG_CONTEXT} tokens, {LAYERS[layer]}"

    def budget_error(self, prompt: str) -> str | None:
        """A message when the prompt does not fit 248 tokens (None when it fits)."""
        budget = CLIP_TOKENS.budget(prompt, LONG_CONTEXT)
        if budget.fits:
            return None
        tail = " ".join(prompt[budget.cut_at_char:].split())
        return (f"The prompt takes {budget.n_tokens} tokens; the long text tower reads {LONG_CONTEXT}, so "
                f"{budget.n_cut} would be cut, from \"{tail[:60]}{'…' if len(tail) > 60 else ''}\". Shorten it, "
                f"or allow the cut (--allow-cut; in the page, \"cut at 248 and go on\").")

    @torch.inference_mode()
    def __call__(self, prompt: str, negative: str, guidance: float, device: torch.device, dtype: torch.dtype,
                 layer: str = "last") -> Conditioning:
        if layer not in LAYERS:
            raise SdxlError(f"layer is one of {', '.join(LAYERS)}, not {layer!r}")
        start = time.perf_counter()
        self.long.to(device, dtype)
        self.bigg.to(device)
        embeds, pooled = self._encode(prompt, device, layer)
        negative_embeds = negative_pooled = None
        if guidance > 1:
            if not negative and self.force_zeros:
                negative_embeds, negative_pooled = torch.zeros_like(embeds), torch.zeros_like(pooled)
            else:
                negative_embeds, negative_pooled = self._encode(negative or "", device, layer)
        return Conditioning(embeds.to(dtype), pooled.to(dtype), _to(negative_embeds, dtype),
                            _to(negative_pooled, dtype), reads=self.reads(layer),
                            seconds=time.perf_counter() - start)

    def _encode(self, text: str, device: torch.device, layer: str) -> tuple[torch.Tensor, torch.Tensor]:
        ids = tokenize([text], LONG_CONTEXT).ids.to(device)  # zero-padded to 248, as Long-CLIP's tokenizer
        long_states, _ = hidden_states(self.long, ids, layer)
        bigg_states, bigg_out = hidden_states(self.bigg, ids, layer)
        embeds = torch.cat([long_states.to(bigg_states.dtype), bigg_states], dim=-1)
        return embeds, bigg_out.text_embeds


def check_tower(tower: TextTower | None, pipe, name: str) -> None:
    """A clear message when this model cannot fill SDXL's ``text_encoder`` slot."""
    if tower is None:
        raise SdxlError(f"{name} has no CLIP text tower (its text side is not CLIP's), so it cannot take SDXL's "
                        f"text_encoder slot; choose a long-text CLIP model (Long-CLIP, FineLIP, MulCLIP, GOAL).")
    if tower.context_length != LONG_CONTEXT:
        raise SdxlError(f"{name} reads {tower.context_length} tokens, not a long text tower of {LONG_CONTEXT}; the "
                        f"swap needs one (Long-CLIP, FineLIP, MulCLIP, GOAL). CAFT reads long captions in 77-token "
                        f"chunks, not with one long tower.")
    bigg_width = pipe.text_encoder_2.config.hidden_size
    wanted = pipe.unet.config.cross_attention_dim
    if tower.width + bigg_width != wanted:
        raise SdxlError(f"{name}'s text tower is {tower.width} wide; this SDXL's UNet reads {wanted} features per "
                        f"token, {wanted - bigg_width} from text_encoder and {bigg_width} from bigG, so its "
                        f"text_encoder slot needs a {wanted - bigg_width}-wide tower (ViT-L/14 sizes for SDXL base, "
                        f"e.g. Long-CLIP-L).")


def _to(tensor: torch.Tensor | None, dtype: torch.dtype) -> torch.Tensor | None:
    return None if tensor is None else tensor.to(dtype)
