"""What a released SEPS file says about its model: the constructor's arguments, read with notes.

Sizes come from the tensors (``encoders``), the ratios from the options, the
file's ``opt`` or the defaults, and the scoring from whether the file holds the
paper variant's prior MLP. Every guess goes into the key report's notes; a note
also says when N' disagrees with the ratios at the image size loaded.
"""

from __future__ import annotations

from pathlib import Path
from typing import Mapping

import torch

from explorer.core.errors import CheckpointError, CheckpointMismatchError
from explorer.models.io.checkpoints import KeyReport, RawCheckpoint, pop_ignored
from explorer.models.methods import keys_with_prefix
from explorer.models.methods.seps.encoders import (DEFAULT_AGGR_RATIO, DEFAULT_SPARSE_RATIO, HEAD_WIDTH, infer_text,
                                                   infer_vision)
from explorer.models.methods.seps.key_layout import (AGGR_PREFIX, IGNORED_KEYS, RELEASED_VIT_NAMING, SCORE_NET_PREFIX,
                                                     from_released_layout, installed_vit_naming)
from explorer.models.methods.seps.scoring import SCORINGS
from explorer.models.nn.refinement import TokenRefiner

OPTIONS = ("vocab_file", "do_lower_case", "sparse_ratio", "aggr_ratio", "vision_heads", "text_heads", "input_size",
           "scoring")


def read_released(raw: RawCheckpoint, overrides: Mapping | None,
                  report: KeyReport) -> tuple[dict[str, torch.Tensor], dict]:
    """(the tensors under the installed names, ``SepsMethod``'s keyword arguments) of a released file."""
    options = dict(overrides or {})
    unknown = sorted(set(options) - set(OPTIONS))
    if unknown:
        raise CheckpointError(f"SEPS has no option(s) {', '.join(unknown)}; it takes {', '.join(OPTIONS)}.")
    tensors = dict(raw.tensors)
    pop_ignored(tensors, IGNORED_KEYS, report)
    installed = installed_vit_naming()
    renamed = from_released_layout(tensors)
    if renamed.keys() != tensors.keys():
        report.notes.append(f"renamed ViT keys from the released {RELEASED_VIT_NAMING.label} names to the "
                            f"installed {installed.label} names")
    tensors = renamed
    scoring, score_hidden = scoring_of(tensors, options.get("scoring"), raw, report)
    try:
        vision = infer_vision(tensors, installed, options.get("vision_heads"))
        text = infer_text(tensors, options.get("text_heads"))
        refiner = TokenRefiner.sizes_from(tensors, AGGR_PREFIX)
    except (KeyError, ValueError, CheckpointError) as error:
        raise CheckpointMismatchError(f"{raw.path}: cannot read a SEPS architecture: missing or odd "
                                      f"{error}", report) from error
    for part, sizes, option in (("ViT", vision, "vision_heads"), ("BERT", text, "text_heads")):
        if option not in options:
            report.notes.append(f"{part}: {sizes['heads']} attention heads assumed (width / {HEAD_WIDTH}); "
                                f"set the option {option} if the model differs")
    ratios = read_ratios(options, raw.extras.get("opt"), report)
    input_size = int(options.get("input_size") or vision["image_size"])
    if input_size != vision["image_size"]:
        report.notes.append(f"images at {input_size} px with the ViT's {vision['image_size']} px position "
                            "table interpolated (option input_size)")
    n_patches = (input_size // vision["patch_size"]) ** 2
    expected = int(n_patches * ratios["aggr_ratio"] * ratios["sparse_ratio"])
    if expected != refiner["n_out"]:
        report.notes.append(f"the aggregation makes {refiner['n_out']} tokens, but {n_patches} patches x "
                            f"aggr_ratio x sparse_ratio gives {expected}: the model may have been trained at "
                            "another image size (option input_size) or with other ratios")
    vocab_file = options.get("vocab_file")
    if vocab_file is not None and not Path(vocab_file).expanduser().exists():
        raise CheckpointError(f"SEPS vocabulary {vocab_file} (option vocab_file) does not exist.")
    if vocab_file is None:
        report.notes.append('no BERT vocabulary: set "options": {"vocab_file": ".../vocab.txt"} to tokenize')
    arguments = {"vision": vision, "text": text, "embed_dim": refiner["dim"], "refiner": refiner,
                 "vocab_file": vocab_file, "do_lower_case": bool(options.get("do_lower_case", True)),
                 "input_size": input_size, "scoring": scoring, "score_hidden": score_hidden, **ratios}
    return tensors, arguments


def read_ratios(options: Mapping, opt, report: KeyReport) -> dict[str, float]:
    """sparse_ratio and aggr_ratio from the options, else the file's ``opt``, else the defaults (noted)."""
    ratios = {}
    for name, default in (("sparse_ratio", DEFAULT_SPARSE_RATIO), ("aggr_ratio", DEFAULT_AGGR_RATIO)):
        if name in options:
            try:
                ratios[name], source = float(options[name]), "the options"
            except (TypeError, ValueError) as error:
                raise CheckpointError(f"SEPS option {name} must be a number, not {options[name]!r}.") from error
        elif opt is not None and getattr(opt, name, None) is not None:
            ratios[name], source = float(getattr(opt, name)), "the file's opt"
        else:
            ratios[name], source = default, "the default"
        report.notes.append(f"{name} = {ratios[name]:g} (from {source})")
    return ratios


def scoring_of(tensors: Mapping[str, torch.Tensor], asked: str | None, raw: RawCheckpoint,
               report: KeyReport) -> tuple[str, int | None]:
    """Which scoring a file is loaded with, and the prior MLP's hidden width (paper only)."""
    has_prior = keys_with_prefix(tensors, SCORE_NET_PREFIX)
    if asked is not None and asked not in SCORINGS:
        raise CheckpointError(f"SEPS option scoring must be one of {', '.join(SCORINGS)}, not {asked!r}.")
    if asked == "paper" and not has_prior:
        raise CheckpointError(
            f"{raw.path}: scoring='paper' needs the learned patch prior s_p = sigmoid(MLP(v)) "
            f"({SCORE_NET_PREFIX}*), which this file does not hold: official SEPS checkpoints were trained "
            "with the official scoring (cosine with the mean patch and the mean caption token, top-k). Load "
            "it with scoring='official' (the default), or train the paper variant first.")
    if asked == "official" and has_prior:
        raise CheckpointError(
            f"{raw.path} holds the paper variant's prior MLP ({SCORE_NET_PREFIX}*), which scoring='official' "
            "would leave unused; load it with scoring='paper' (the default for such a file).")
    scoring = asked or ("paper" if has_prior else "official")
    if has_prior:
        if asked is None:
            report.notes.append(f"scoring = paper (the file holds the prior MLP {SCORE_NET_PREFIX}*)")
        key = SCORE_NET_PREFIX + "0.weight"
        if key not in tensors:
            raise CheckpointMismatchError(f"{raw.path}: the prior MLP lacks {key}", report)
        return scoring, int(tensors[key].shape[0])
    return scoring, None
