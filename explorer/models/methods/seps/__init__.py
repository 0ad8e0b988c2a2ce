"""SEPS (papers/seps.txt): patch slimming with sparse and dense text, built on LAPS.

One concept a module:

- ``key_layout``: the released checkpoint layout and its ViT key names
  (transformers 4.x) <-> the installed transformers' names;
- ``encoders``: the ViT and BERT (Hugging Face transformers, via ``hf``), their
  projections and the cross net, with every size read from the tensors;
- ``checkpoint``: what a released file says about its model (options, ratios,
  scoring), with notes for the key report;
- ``tokenizer``: BERT wordpiece text from a vocabulary file (not in the
  checkpoint). Pictures go through LAPS's test transform (``Preprocess``
  pipeline "laps": squashed to the square, ImageNet mean and std);
- ``scoring``: the two scorings, ``OfficialScoring`` (the official code's top-k
  selection + aggregation, what released checkpoints were trained with) and
  ``PaperScoring`` (the paper's prior, calibrated views, Gumbel selection and
  joint re-synthesis), and their pure selection/aggregation functions;
- ``losses``: hinge with the hardest negatives + the keep-ratio loss;
- ``examples``: the vocabulary and sizes ``SepsMethod.example`` builds from;
- ``method``: ``SepsMethod``, the ``Method`` surface (registered as "seps").
"""

from __future__ import annotations

from explorer.models.methods.seps.encoders import infer_text, infer_vision
from explorer.models.methods.seps.examples import example_sizes, example_vocab_file, example_vocabulary
from explorer.models.methods.seps.key_layout import (KNOWN_VIT_NAMINGS, POOLER_PREFIXES, RELEASED_VIT_NAMING,
                                                     V5_VIT_NAMING, VitNaming, from_released_layout,
                                                     installed_vit_naming, released_state_dict, rename_vit_keys)
from explorer.models.methods.seps.losses import seps_loss_terms
from explorer.models.methods.seps.method import NATIVE_MAPS, SepsMethod
from explorer.models.methods.seps.scoring import (SCORINGS, OfficialScoring, PairOutputs, PaperScoring, aggregate_kept,
                                                  consensus, gumbel_keep, min_max, select_patches, top_k_mask,
                                                  view_scores)
from explorer.models.methods.seps.tokenizer import build_bert_tokenizer, read_vocab

__all__ = [
    "KNOWN_VIT_NAMINGS", "NATIVE_MAPS", "POOLER_PREFIXES", "RELEASED_VIT_NAMING", "SCORINGS", "V5_VIT_NAMING",
    "OfficialScoring", "PairOutputs", "PaperScoring", "SepsMethod", "VitNaming",
    "aggregate_kept", "build_bert_tokenizer", "consensus", "example_sizes", "example_vocab_file",
    "example_vocabulary", "from_released_layout", "gumbel_keep", "infer_text", "infer_vision",
    "installed_vit_naming", "min_max", "read_vocab", "released_state_dict", "rename_vit_keys", "select_patches",
    "seps_loss_terms", "top_k_mask", "view_scores",
]
