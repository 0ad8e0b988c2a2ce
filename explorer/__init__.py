"""explorer: see what long-text, fine-grained CLIP models see.

    import explorer
    m = explorer.load("path/to/longclip-B.pt")       # or a manifest .json, or a zoo name
    m.similarity(images, texts)                        # [n_images, n_texts]
    m.sentence_maps(image, sentences).maps             # [M, H, W]

The packages are layers; data flows up this list, never down (``LAYERS``, checked by
tests/test_architecture.py). A package imports only from layers before its own; packages
in one layer are peers and do not import each other.

    core                   errors, images, sentences, regions, paths, caches, compat
    models                 what a method computes: features, tokenizer, io/ (formats), nn/ (shared layers), methods/
    zoo                    manifests, the zoo folder, built-in models, the loaded-model cache
    data                   the synthetic world and dataset readers
    grounding              per-sentence maps, token budgets, masks, FLISM, PCA, ground truth
    retrieval              benchmark datasets embedded once (on-disk cache), searched, re-ranked
    evaluation             metrics, the evaluation tasks (retrieval's Recall@K among them), the synthetic benchmark
    training               the training loop and the demo-zoo recipe
    testing                the conformance kit a method's author runs (check_method)
    probe                  the swap probe: one word swapped, each model's score and map
    jobs, generation       background runs; SDXL generation
    views                  settings, rendering, paper figures
    serve                  the server's guards: budget, access, uploads, per-address caps, launch
    ui                     one Gradio module per tab
    cli                    the command line
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Mapping

from explorer.core.compat import guard_torchvision_import
from explorer.core.errors import ExplorerError

# Where torchvision's C++ ops are missing (a CPU torch beside a CUDA-linked torchvision), the process's first
# `import torchvision` (open_clip's, transformers', or your own after `import explorer`) declares them first.
# No-op on a normal install; imports nothing now.
guard_torchvision_import()

if TYPE_CHECKING:  # the real imports are lazy (below)
    from explorer.models.model import Model

_LAZY = {  # imported on first use, so `import explorer.data` does not pull in torch and open_clip
    "ImageFeatures": "explorer.models.features",
    "TextFeatures": "explorer.models.features",
    "Model": "explorer.models.model",
    "SentenceMaps": "explorer.models.model",
}


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'explorer' has no attribute {name!r}")

__version__ = "0.1.0"

# The layer order, lowest first (see the docstring). Packages named here that do not exist yet are
# where new capabilities go.
LAYERS = (
    ("core",),
    ("models",),
    ("zoo",),
    ("data",),
    ("grounding",),
    ("retrieval",),  # embedding cache, index, search: evaluation.retrieval scores Recall@K on top of it
    ("evaluation",),
    ("training",),
    ("testing",),  # the conformance kit for a method's author (explorer.testing.check_method)
    ("probe",),  # the swap probe: what one word changes in each model's score and map
    ("jobs", "generation"),
    ("views",),
    ("serve",),  # the server's guards (budget, access, uploads, per-address caps): never imports a tab
    ("ui",),
    ("cli",),
)
WEIGHT_SUFFIXES = (".pt", ".pth", ".bin", ".ckpt", ".safetensors")


def load(source: str | Path, device: str = "auto", precision: str = "fp32", allow_pickle: bool = False,
         method: str | None = None, options: Mapping | None = None, zoo_root: str | Path | None = None) -> "Model":
    """Load a model from a weights file (format detected), a manifest (.json), or a zoo name.

        m = explorer.load("checkpoints/demo/clip-base.json", precision="auto")
        m.similarity([picture], ["A red cube sits on the left."])   # (1, 1)

    Args:
        source: A weights file (.pt, .pth, .bin, .ckpt, .safetensors; its layout is detected from its keys),
            a zoo manifest (.json), or the name of a model in the zoo.
        device: "auto" (CUDA when there is one), "cpu", "cuda", "cuda:1", ...
        precision: "fp32" (the default), "bf16", "fp16", or "auto": bf16 where the hardware computes it
            natively, fp16 on other GPUs, fp32 elsewhere (``Model.precision`` says what was chosen).
        allow_pickle: The explicit opt-in for files that can only be read by unpickling (SEPS's
            model_best.pth, OpenAI's TorchScript archives); without it such files are refused.
        method: A method to read a weights file as, instead of the one its layout is detected as.
        options: What the tensors cannot say (a manifest's ``options``), e.g. ``{"quick_gelu": False}``.
        zoo_root: The zoo folder to look names up in (default: ``$EXPLORER_CHECKPOINTS``, else the
            checkout's ``checkpoints/``).

    Returns:
        The loaded [`Model`][explorer.models.model.Model]; its ``key_report`` says what the strict load matched.

    Raises:
        ExplorerError: A missing file, an unknown name, a layout no method reads, a file that needs
            unpickling without ``allow_pickle``, or missing, unexpected or mis-shaped keys.
    """
    from explorer.models.io.loading import load_method
    from explorer.models.model import Model, weights_reader
    from explorer.zoo import Manifest, Zoo, load_manifest

    path = Path(source).expanduser()
    looks_like_a_file = path.suffix in WEIGHT_SUFFIXES or "/" in str(source) or "\\" in str(source)
    if path.suffix == ".json":
        manifest = Manifest.read(path)
        if allow_pickle:
            manifest.allow_pickle = True
        return load_manifest(manifest, device=device, precision=precision)
    if path.exists() or looks_like_a_file:  # a missing file is reported as such, not as an unknown zoo name
        loaded, report = load_method(path, method=method, overrides=options, allow_pickle=allow_pickle,
                                     weights_in=weights_reader(precision, device))
        return Model(loaded, name=path.stem, report=report, device=device, precision=precision)
    zoo = Zoo(zoo_root, device=device, precision=precision)
    return zoo.load(str(source))


__all__ = ["ExplorerError", "ImageFeatures", "Model", "SentenceMaps", "TextFeatures", "load", "__version__"]
