"""CLIP's BPE written as transformers ``CLIPTokenizer`` files, from the vocabulary open_clip ships.

Both exports use it: the long text tower for SDXL (``explorer export-text-encoder``) and whole models
(``explorer export``). Nothing is fetched: the ids are the ones the model was trained on.
"""

from __future__ import annotations

import json
from pathlib import Path

from explorer.models.tokenizer import EOT_ID, SOT_ID, bpe_tables

HF_SPECIALS = ("<|startoftext|>", "<|endoftext|>")  # CLIP's special tokens as transformers spells them
TOKENIZER_FILES = ("vocab.json", "merges.txt", "tokenizer_config.json", "special_tokens_map.json")


def write_clip_tokenizer(folder: Path, context_length: int) -> list[Path]:
    """CLIP's BPE as transformers' ``CLIPTokenizer`` files (vocab.json, merges.txt, configs).

    ``model_max_length`` is the model's context (248 for a long tower). Padding is EOT, as in SDXL's
    own CLIP-L tokenizer: the pooled token is the first EOT and the mask is causal, so what follows it
    changes nothing. (Making "!" the pad token, id 0 as explorer pads, as SDXL's bigG tokenizer does,
    would turn every "!" of a text into a special token with another id.)
    """
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    encoder, merges = bpe_tables()
    vocab = {HF_SPECIALS[0] if token_id == SOT_ID else HF_SPECIALS[1] if token_id == EOT_ID else token: token_id
             for token, token_id in encoder.items()}
    (folder / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False), encoding="utf-8")
    (folder / "merges.txt").write_text("#version: 0.2\n" + "\n".join(" ".join(pair) for pair in merges) + "\n",
                                       encoding="utf-8")
    specials = {"bos_token": HF_SPECIALS[0], "eos_token": HF_SPECIALS[1], "unk_token": HF_SPECIALS[1],
                "pad_token": HF_SPECIALS[1]}
    config = {"tokenizer_class": "CLIPTokenizer", "model_max_length": context_length, **specials,
              "do_lower_case": True, "clean_up_tokenization_spaces": False}
    (folder / "tokenizer_config.json").write_text(json.dumps(config, indent=2), encoding="utf-8")
    (folder / "special_tokens_map.json").write_text(json.dumps(specials, indent=2), encoding="utf-8")
    return [folder / name for name in TOKENIZER_FILES]
