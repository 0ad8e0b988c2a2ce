"""Drawing a long caption with stock SDXL and with long text towers swapped in, side by side.

    generator = Generator(load_model=zoo.load)
    result = generator.run(GenerationSettings(prompt=caption, models=["longclip-L"], seeds=[0, 1],
                                              sdxl="/models/sdxl-base"))
    result.picture("stock", 0), result.picture("longclip-L", 1)
    # explorer.views.generation_view draws the grid (rows: seeds; columns: stock, then each model)

Every column uses the same pipeline object, scheduler, steps, size, guidance and, per row, the
same seed (a CPU generator, so a seed draws the same noise on any device): only the text
conditioning differs. Progress is reported per denoising step; a stop request ends the run
between steps. torch and the conditioning are imported on the first run: the page makes its
Generator before torch is imported.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Callable

from PIL import Image

from explorer.core.background import TaskStopped
from explorer.core.cache import BoundedCache
from explorer.generation.sdxl_source import SdxlCache, SdxlError, check_source
from explorer.generation.settings import CUT_MARK, GenerationSettings  # noqa: F401 (CUT_MARK re-exported)
from explorer.models.contexts import LONG_CONTEXT, SHORT_CONTEXT
from explorer.models.tokenizer import CLIP_TOKENS

if TYPE_CHECKING:
    from explorer.generation.conditioning import Conditioning, LongTextConditioner



@dataclass
class Picture:
    column: str
    seed: int
    image: Image.Image
    seconds: float  # denoising and decoding


@dataclass
class GenerationResult:
    settings: GenerationSettings
    pictures: list[Picture]
    reads: dict[str, str]  # column -> what its text encoders read
    encode_seconds: dict[str, float]  # column -> text-encoding time
    stock_prompt: str  # the prompt with the 77-token cut marked (unchanged when it fits)
    notes: list[str] = field(default_factory=list)

    def picture(self, column: str, seed: int) -> Image.Image:
        return next(p.image for p in self.pictures if p.column == column and p.seed == seed)

    def record(self) -> dict:
        """What is saved beside the pictures: the settings and what each column read."""
        return {"reads": self.reads, "stock_prompt": self.stock_prompt, "notes": self.notes,
                "encode_seconds": {k: round(v, 4) for k, v in self.encode_seconds.items()},
                "seconds": {f"{p.column}/{p.seed}": round(p.seconds, 3) for p in self.pictures}}


def mark_stock_cut(prompt: str) -> str:
    """The prompt with the place where a 77-token encoder stops reading marked."""
    budget = CLIP_TOKENS.budget(prompt, SHORT_CONTEXT)
    if budget.fits:
        return prompt
    return prompt[:budget.cut_at_char].rstrip() + CUT_MARK + prompt[budget.cut_at_char:].lstrip()


class Generator:
    """Runs generations; keeps the one SDXL pipeline and the long-tower conditioners between requests."""

    def __init__(self, load_model: Callable, sdxl: SdxlCache | None = None):
        self.load_model = load_model  # zoo name -> explorer Model
        self.sdxl = sdxl or SdxlCache()
        self._conditioners: BoundedCache = BoundedCache("SDXL text conditioners", max_items=4,
                                                        max_bytes=4 << 30, keep_oversized=True)

    def pipeline(self, settings: GenerationSettings):
        # The conditioners share the old pipeline's bigG weights: they go before another pipeline loads.
        return self.sdxl.get(check_source(settings.sdxl, settings.sdxl_config or None), settings.options(),
                             before_load=self._conditioners.clear)

    def conditioner(self, name: str, pipe) -> LongTextConditioner:
        from explorer.generation.conditioning import LongTextConditioner

        def build() -> LongTextConditioner:
            model = self.load_model(name)
            return LongTextConditioner(model.text_tower(), pipe, name=model.name)

        return self._conditioners.get((name, id(pipe)), build)

    def conditioning(self, column: str, pipe, settings: GenerationSettings) -> Conditioning:
        from explorer.generation.conditioning import stock_conditioning

        options = settings.options()
        device = options.resolved_device()
        if column == "stock":
            return stock_conditioning(pipe, settings.prompt, settings.negative, settings.guidance, device)
        conditioner = self.conditioner(column, pipe)
        problem = conditioner.budget_error(settings.prompt)
        if problem and not settings.allow_cut:
            raise SdxlError(problem)
        return conditioner(settings.prompt, settings.negative, settings.guidance, device, options.dtype(),
                           layer=settings.layer)

    def refiner_negatives(self, refiner, pipe, settings: GenerationSettings) -> dict[str, Conditioning]:
        """{column: its encoding of ""} when the refiner's negative is not the base's: an empty negative prompt
        gives the base zeros (SDXL base forces them), but a refiner whose config does not force them (SDXL
        refiner 1.0) encodes "" through bigG, as stock diffusers and Long-CLIP's SDXL script do. Each column
        encodes "" the way it encodes its prompt (stock: 77 tokens; swapped: stretched bigG, 248), so the
        negative has the prompt's length. Empty when the refiner keeps the base's negative."""
        if refiner is None or settings.negative or settings.guidance <= 1 or getattr(
                refiner.config, "force_zeros_for_empty_prompt", False):
            return {}
        empty = replace(settings, prompt="", negative="", guidance=1.0)
        return {column: self.conditioning(column, pipe, empty) for column in settings.columns}

    def run(self, settings: GenerationSettings, progress: Callable[[int, int, str], None] | None = None,
            should_stop: Callable[[], bool] | None = None) -> GenerationResult:
        settings.check()
        pipe = self.pipeline(settings)
        refiner = self.sdxl.refiner(settings.refiner, pipe, settings.options()) if settings.refiner else None
        settings.scheduler = type(pipe.scheduler).__name__
        notes = settings.options().notes()
        conditionings = {column: self.conditioning(column, pipe, settings) for column in settings.columns}
        refiner_negatives = self.refiner_negatives(refiner, pipe, settings)
        total = len(conditionings) * len(settings.seeds) * settings.steps
        pictures: list[Picture] = []
        for seed in settings.seeds:
            for column, conditioning in conditionings.items():
                done_before = len(pictures) * settings.steps

                def on_step(step: int, column=column, done_before=done_before) -> None:
                    if progress:
                        progress(done_before + step, total, f"{column}, seed {seed}")

                start = time.perf_counter()
                image = denoise(pipe, conditioning, settings, seed, on_step, should_stop, refiner=refiner,
                                refiner_negative=refiner_negatives.get(column))
                pictures.append(Picture(column, seed, image, time.perf_counter() - start))
        long_cut = CLIP_TOKENS.budget(settings.prompt, LONG_CONTEXT).n_cut
        if long_cut and settings.models:
            notes.append(f"the prompt is past {LONG_CONTEXT} tokens: the long text towers read it cut "
                         f"({long_cut} tokens dropped)")
        return GenerationResult(
            settings=settings, pictures=pictures, reads={c: k.reads for c, k in conditionings.items()},
            encode_seconds={c: k.seconds for c, k in conditionings.items()},
            stock_prompt=mark_stock_cut(settings.prompt), notes=notes)


def denoise(pipe, conditioning: Conditioning, settings: GenerationSettings, seed: int,
            on_step: Callable[[int], None] | None = None, should_stop: Callable[[], bool] | None = None,
            refiner=None, refiner_negative: Conditioning | None = None) -> Image.Image:
    """One picture from the stock pipeline, given its text conditioning; with a refiner, the base runs the
    first ``refiner_start`` of the schedule and the refiner (reading bigG's part) the rest. ``refiner_negative``:
    the column's encoding of "" (its ``prompt_embeds``), the refiner's negative when the base's was zeros
    (``Generator.refiner_negatives``)."""
    import torch

    done = [0]

    def step_end(pipeline, step: int, timestep, tensors: dict) -> dict:
        done[0] += 1
        if on_step:
            on_step(min(done[0], settings.steps))
        if should_stop and should_stop():
            raise TaskStopped(f"stopped after step {done[0]}")
        return tensors

    generator = torch.Generator(device="cpu").manual_seed(int(seed))
    common = dict(num_inference_steps=settings.steps, guidance_scale=settings.guidance, generator=generator,
                  callback_on_step_end=step_end)
    with torch.inference_mode():
        if refiner is None:
            return pipe(height=settings.size, width=settings.size, **common,
                        **conditioning.pipeline_kwargs()).images[0]
        latents = pipe(height=settings.size, width=settings.size, denoising_end=settings.refiner_start,
                       output_type="latent", **common, **conditioning.pipeline_kwargs()).images
        bigg = refiner.text_encoder_2.config.hidden_size
        finish = conditioning.last_features(bigg)  # the refiner reads bigG's part of the column's conditioning
        if refiner_negative is not None and finish.negative_embeds is not None:
            own = refiner_negative.last_features(bigg)
            finish = replace(finish, negative_embeds=own.prompt_embeds, negative_pooled=own.pooled)
        return refiner(image=latents, denoising_start=settings.refiner_start, **common,
                       **finish.pipeline_kwargs()).images[0]


