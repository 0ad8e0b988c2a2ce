"""A tiny SDXL built in code, in the official folder layout, for tests and the CPU benchmark.

Every component has SDXL base's class and arrangement (UNet with text-time conditioning, VAE,
CLIP-L-like ``text_encoder`` with QuickGELU, bigG-like ``text_encoder_2`` with a projection,
both tokenizers, Euler scheduler), only small; ``save_pretrained`` writes it as a diffusers
folder, which is then loaded through the same path as a real one. Its ``text_encoder`` is as
wide as a given long text tower, so the swap fits it exactly as Long-CLIP-L fits SDXL base.
The weights are random: its pictures are noise, its numbers are only for plumbing and timing.
"""

from __future__ import annotations

from pathlib import Path

import torch

from explorer.core.runtime import prepare_libraries
from explorer.models.io.clip_tokenizer_files import write_clip_tokenizer
from explorer.models.nn.positional import SHORT_CONTEXT
from explorer.models.tokenizer import EOT_ID, SOT_ID

TIME_EMBED = 8  # addition_time_embed_dim; SDXL feeds 6 size/crop numbers through it


def _denoiser_parts(cross_attention: int, pooled_inputs: int):
    """(UNet, VAE, scheduler) at SDXL's arrangement, tiny: ``pooled_inputs`` = pooled width + time numbers."""
    prepare_libraries()  # diffusers and transformers import torchvision
    from diffusers import AutoencoderKL, EulerDiscreteScheduler, UNet2DConditionModel

    unet = UNet2DConditionModel(
        block_out_channels=(32, 64), layers_per_block=1, sample_size=32, in_channels=4, out_channels=4,
        down_block_types=("DownBlock2D", "CrossAttnDownBlock2D"), up_block_types=("CrossAttnUpBlock2D", "UpBlock2D"),
        attention_head_dim=(2, 4), use_linear_projection=True, addition_embed_type="text_time",
        addition_time_embed_dim=TIME_EMBED, transformer_layers_per_block=(1, 1),
        projection_class_embeddings_input_dim=pooled_inputs, cross_attention_dim=cross_attention, norm_num_groups=8)
    vae = AutoencoderKL(block_out_channels=(32, 64), in_channels=3, out_channels=3,
                        down_block_types=("DownEncoderBlock2D",) * 2, up_block_types=("UpDecoderBlock2D",) * 2,
                        latent_channels=4, sample_size=64, norm_num_groups=8)
    scheduler = EulerDiscreteScheduler(beta_start=0.00085, beta_end=0.012, beta_schedule="scaled_linear",
                                       timestep_spacing="leading", steps_offset=1)
    return unet, vae, scheduler


def build_tiny_sdxl(folder: Path, long_width: int = 64, bigg_width: int = 32, projection: int = 32,
                    seed: int = 0) -> Path:
    """Write a tiny SDXL base folder whose ``text_encoder`` is ``long_width`` wide; returns ``folder``."""
    prepare_libraries()  # diffusers and transformers import torchvision
    from diffusers import StableDiffusionXLPipeline
    from transformers import CLIPTextConfig, CLIPTextModel, CLIPTextModelWithProjection, CLIPTokenizer

    torch.manual_seed(seed)
    unet, vae, scheduler = _denoiser_parts(long_width + bigg_width, projection + 6 * TIME_EMBED)

    def text_config(width: int, act: str) -> CLIPTextConfig:
        return CLIPTextConfig(vocab_size=49408, hidden_size=width, intermediate_size=2 * width,
                              num_hidden_layers=3, num_attention_heads=max(1, width // 32),
                              max_position_embeddings=SHORT_CONTEXT, hidden_act=act, projection_dim=projection,
                              bos_token_id=SOT_ID, eos_token_id=EOT_ID, pad_token_id=EOT_ID)

    text_encoder = CLIPTextModel(text_config(long_width, "quick_gelu"))
    text_encoder_2 = CLIPTextModelWithProjection(text_config(bigg_width, "gelu"))
    folder = Path(folder)
    for name in ("tokenizer", "tokenizer_2"):
        write_clip_tokenizer(folder / "_tokenizers" / name, SHORT_CONTEXT)
    tokenizer = CLIPTokenizer.from_pretrained(folder / "_tokenizers" / "tokenizer")
    tokenizer_2 = CLIPTokenizer.from_pretrained(folder / "_tokenizers" / "tokenizer_2")
    pipe = StableDiffusionXLPipeline(vae=vae, text_encoder=text_encoder, text_encoder_2=text_encoder_2,
                                     tokenizer=tokenizer, tokenizer_2=tokenizer_2, unet=unet, scheduler=scheduler,
                                     force_zeros_for_empty_prompt=True)
    pipe.save_pretrained(folder, safe_serialization=True)
    _remove_tree(folder / "_tokenizers")
    return folder


def _remove_tree(path: Path) -> None:
    import shutil

    shutil.rmtree(path, ignore_errors=True)


def build_tiny_refiner(folder: Path, bigg_width: int = 32, projection: int = 32, seed: int = 1) -> Path:
    """A tiny SDXL refiner folder (UNet reading bigG's features and an aesthetic score), as the base's."""
    prepare_libraries()  # diffusers and transformers import torchvision
    from diffusers import StableDiffusionXLImg2ImgPipeline
    from transformers import CLIPTextConfig, CLIPTextModelWithProjection, CLIPTokenizer

    torch.manual_seed(seed)
    # the refiner's time numbers are 5 (an aesthetic score instead of the target size)
    unet, vae, scheduler = _denoiser_parts(bigg_width, projection + 5 * TIME_EMBED)
    text_encoder_2 = CLIPTextModelWithProjection(CLIPTextConfig(
        vocab_size=49408, hidden_size=bigg_width, intermediate_size=2 * bigg_width, num_hidden_layers=3,
        num_attention_heads=1, max_position_embeddings=SHORT_CONTEXT, hidden_act="gelu", projection_dim=projection,
        bos_token_id=SOT_ID, eos_token_id=EOT_ID, pad_token_id=EOT_ID))
    folder = Path(folder)
    write_clip_tokenizer(folder / "_tokenizer_2", SHORT_CONTEXT)
    refiner = StableDiffusionXLImg2ImgPipeline(
        vae=vae, text_encoder=None, text_encoder_2=text_encoder_2, tokenizer=None,
        tokenizer_2=CLIPTokenizer.from_pretrained(folder / "_tokenizer_2"), unet=unet, scheduler=scheduler,
        requires_aesthetics_score=True, force_zeros_for_empty_prompt=False)
    refiner.save_pretrained(folder, safe_serialization=True)
    _remove_tree(folder / "_tokenizer_2")
    return folder
