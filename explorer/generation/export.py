"""A model's long text tower written as a transformers ``CLIPTextModel`` folder.

    explorer export-text-encoder --model longclip-L --out longclip-L-text-encoder/

The folder holds ``config.json`` (248 positions), ``model.safetensors`` in the classic
``text_model.*`` layout that SDXL's own ``text_encoder/`` uses (so transformers 4 and 5 both
read it), CLIP's tokenizer files with ``model_max_length`` 248, and ``explorer_export.json``
saying where it came from. diffusers loads it as ``text_encoder`` on its own:
``CLIPTextModel.from_pretrained(DIR)`` and ``CLIPTokenizer.from_pretrained(DIR)``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from safetensors.torch import save_file

from explorer.core.errors import ExplorerError
from explorer.generation.clip_text_model import CLASSIC_PREFIX, hf_text_tensors, text_config
from explorer.models.io.clip_tokenizer_files import write_clip_tokenizer
from explorer.generation.conditioning import LAYERS
from explorer.models.nn.positional import LONG_CONTEXT
from explorer.models.text_tower import TextTower

WEIGHTS = "model.safetensors"


def export_text_encoder(tower: TextTower | None, out: Path, name: str = "") -> list[Path]:
    """Write the folder; returns the files written. Refuses a model with no long text tower."""
    if tower is None:
        raise ExplorerError(f"{name} has no CLIP text tower to export (its text side is not CLIP's).")
    if tower.context_length != LONG_CONTEXT:
        raise ExplorerError(f"{name} reads {tower.context_length} tokens: it is not a long text tower "
                            f"({LONG_CONTEXT}); export Long-CLIP, FineLIP, MulCLIP or GOAL.")
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    tensors = {_classic(key): value.detach().float().contiguous().cpu() for key, value in hf_text_tensors(tower).items()}
    config = text_config(tower)
    config.architectures = ["CLIPTextModel"]
    config.save_pretrained(out)
    weights = out / WEIGHTS
    temporary = out / (WEIGHTS + ".partial")
    save_file(tensors, str(temporary), metadata={"format": "pt", "source": tower.source})
    os.replace(temporary, weights)  # no torn file if the write is killed
    written = [out / "config.json", weights, *write_clip_tokenizer(out, tower.context_length)]
    about = out / "explorer_export.json"
    about.write_text(json.dumps({
        "source": tower.source, "positions": tower.context_length, "width": tower.width, "layers": tower.layers,
        "activation": tower.activation,
        "sdxl": "load as text_encoder; Long-CLIP's and FineLIP's SDXL code read " + LAYERS["last"] + "; stock SDXL "
                "and ComfyUI read " + LAYERS["penultimate"],
        "padding": "explorer and Long-CLIP pad token ids with 0; the tokenizer here pads with EOT, as SDXL's CLIP-L"},
        indent=2), encoding="utf-8")
    return [*written, about]


def _classic(key: str) -> str:
    return key if key.startswith(CLASSIC_PREFIX) else CLASSIC_PREFIX + key
