"""Generation: SDXL long-text-to-image with a long text tower swapped in, beside stock SDXL.

    from explorer.generation import GenerationSettings, Generator
    generator = Generator(load_model=zoo.load)               # keeps the one SDXL pipeline between runs
    result = generator.run(GenerationSettings(prompt=caption, models=["longclip-L"], seeds=[0, 1],
                                              sdxl="/models/sdxl-base"))
    result.picture("stock", 0), result.picture("longclip-L", 0), result.reads, result.stock_prompt

Modules, one concept each (lowest first):

    sdxl_source      find SDXL on disk (folder or single file), say what is missing, load it once
    clip_text_model  a method's TextTower as a transformers CLIPTextModel; bigG stretched; tokenizer files
    conditioning     prompt_embeds / pooled: stock (encode_prompt) or the long tower + stretched bigG
    settings         GenerationSettings: the page, the CLI and the JSON saved beside each picture
    generate         Generator: same pipeline, seed, scheduler, steps for every column; progress; stop
    caption_match    how well each picture matches the caption, whole and per sentence
    export           the long tower as a CLIPTextModel folder (explorer export-text-encoder)
    tiny_sdxl        a tiny SDXL in the official layout, built in code (tests, the CPU benchmark)

transformers and diffusers need torchvision's op schemas declared first on CPU-only machines
(``explorer.core.runtime.prepare_libraries``): each module that imports them does that first. The
names below are imported on first use, so importing the package imports no torch.
"""

from explorer.core.lazy import lazy_exports

_EXPORTS = {"GenerationResult": "generate", "Generator": "generate", "GenerationSettings": "settings"}
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
__all__ = sorted(_EXPORTS)
