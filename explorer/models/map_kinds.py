"""The names of the map kinds and what each one is, for the page and the CLI (no torch here).

``generic`` is the map every method gives (``Method.sentence_maps``); the explainers
(``explorer.models.explainers``) are the training-free readouts any CLIP ViT image tower offers.
A method's own maps (``Method.native_map_kinds``) are named in its module.
"""

from __future__ import annotations

GENERIC_MAP = "generic"
GRADCAM, LEGRAD, CLEARCLIP, NACLIP = "gradcam", "legrad", "clearclip", "naclip"
GRADIENT_KINDS = (GRADCAM, LEGRAD)
FORWARD_KINDS = (CLEARCLIP, NACLIP)
EXPLAINER_KINDS = (*GRADIENT_KINDS, *FORWARD_KINDS)
LEGRAD_LAYERS = 2  # the paper's choice for ViT-B/16
# The kind a model without a native sentence map opens on when its method declares no measured grounding
# (``Method.measured_grounding``, e.g. a plugin's): Grad-CAM is the best explainer of most measured methods
# (docs/explainers.md); a measured method opens on its own best (GOAL: ClearCLIP).
UNMEASURED_DEFAULT = GRADCAM
DESCRIPTIONS = {
    GRADCAM: "Grad-CAM: the gradient of the model's own score for the sentence at the last block's output, "
             "as channel weights on the patch tokens (ReLU)",
    LEGRAD: f"LeGrad: gradients of each of the last {LEGRAD_LAYERS} blocks' own readout score with respect to "
            "their attention maps (ReLU, mean over heads and queries), summed",
    CLEARCLIP: "ClearCLIP: the last block with query-query attention and no residual or FFN; patch tokens "
               "scored against the sentence (no gradient)",
    NACLIP: "NACLIP: the last block with key-key attention plus a Gaussian neighbourhood and no residual or "
            "FFN; patch tokens scored against the sentence (no gradient)",
}
