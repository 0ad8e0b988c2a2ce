"""``explorer new-method NAME --out DIR``: a method package that installs and passes the kit as written.

The package: ``pyproject.toml`` (its entry point in ``explorer.methods``, and a ``test`` extra that
installs pytest into explorer's environment), one module on the CLIP-family base with three places
marked ``YOUR METHOD`` (the score, a native map, the loss) and the class attributes that say what the
method is to the rest of the app (``cosine_score``, ``score_description``, ``export_leaves_out``), a test running the
conformance kit, and a README of the steps (``pip install -e '.[test]'``, ``python -m pytest tests/``).
What it writes is a working method (CLIP's score and loss, a sharpened patch-cosine map) to change,
not a stub that fails until filled in.
"""

from __future__ import annotations

import re
from pathlib import Path

from explorer.core.errors import ExplorerError

NAME_PATTERN = re.compile(r"[a-z][a-z0-9_]{0,39}")

PYPROJECT = '''[build-system]
requires = ["setuptools>=61"]
build-backend = "setuptools.build_meta"

[project]
name = "explorer-{dist}"
version = "0.1.0"
description = "{title}: a method for explorer (long-text CLIP workbench), loaded as a plugin"
readme = "README.md"
requires-python = ">=3.10"
dependencies = ["explorer"]

# `pip install -e '.[test]'` puts pytest in explorer's own environment: `python -m pytest tests/` then
# runs the tests with the interpreter that has explorer (a pytest installed elsewhere would not find it).
[project.optional-dependencies]
test = ["pytest>=8"]

# explorer finds the method here: `explorer methods` lists it once this package is installed.
[project.entry-points."explorer.methods"]
{name} = "{package}.method:{cls}"

[tool.setuptools]
packages = ["{package}"]
'''

INIT = '''"""{title} for explorer: the method class is ``{package}.method.{cls}``."""

from {package}.method import {cls}

__all__ = ["{cls}"]
'''

METHOD = '''"""{title}: TODO say in one line what the method does, and cite its paper.

Built on explorer's CLIP family (``ClipFamily``): a CLIP ViT image tower and text tower that read the
released CLIP / Long-CLIP layouts, the explainers (Grad-CAM, LeGrad, ClearCLIP, NACLIP), the
position stretch to 248 tokens and the warm start from any CLIP-family checkpoint come with it.
Three places are yours, each marked ``YOUR METHOD``: the score, the method's own map, the loss.
Run ``explorer check-method {name}`` (or this package's test) after each change.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from explorer.models.batch import TrainingBatch
from explorer.models.features import ImageFeatures, TextFeatures
from explorer.models.methods.base import GENERIC_MAP, cosine_matrix
from explorer.models.methods.clip import ClipFamily
from explorer.models.nn.losses import info_nce_pairs

NATIVE_MAP = "{name}-map"  # the method's own map kind, beside "generic" and the explainers
MAP_TEMPERATURE = 0.05  # sharpens the patch softmax of the example map


class {cls}(ClipFamily):
    """{title}: TODO one line (the models table shows it)."""

    name = "{name}"  # the entry point's name in pyproject.toml: the two must be the same
    title = "{title}"
    default_context = 248  # tokens a model built from scratch reads (CLIP's 77, the long methods' 248)
    native_map_kinds = (NATIVE_MAP,)
    preferred_native_map = NATIVE_MAP  # what "native" draws on the page and miou_native scores
    # The score below is the cosine of the global embeddings (cls, eot), as CLIP's: retrieval then searches
    # those vectors alone, and `explorer export` counts no score of the method's own. Set it to False (or
    # delete the line) when your similarity is anything else; the kit checks that a True is true.
    cosine_score = True
    # What `explorer export` (a transformers or open_clip CLIP) leaves out of the method, in a few words,
    # e.g. "the token refiners and the late-interaction score". "" lets explorer say it: the method's own
    # modules (parameters beside the CLIP backbone's), its score unless cosine_score, and a pooling neither
    # library has (an attention-pooled base's). Anything left out makes the command refuse a whole export
    # and write the CLIP backbone alone with --backbone-only.
    export_leaves_out = ""

    # What `similarity` returns, in a few words: `explorer eval`, the app's tables and results.json print it
    # beside every score (scores of different kinds do not compare). "cosine" is right only while cosine_score
    # is True; a score of your own says what it is, e.g. "late-interaction token max-sim" (the kit warns when a
    # method with its own score still calls it "cosine").
    @classmethod
    def score_description(cls, options=None) -> str:
        return "cosine"

    # Defaults of a background run (explorer.jobs), each number with where it comes from.
    job_defaults = {{
        "train": {{"batch_size": 32, "lr_backbone": 1e-5, "lr_new": 1e-4}},
        "sources": {{"batch_size": "TODO: the paper's batch", "lr_backbone": "TODO", "lr_new": "TODO"}},
        "fixed": {{}},
        "notes": [],
    }}

    # ---- YOUR METHOD (1/3): the score ----------------------------------------------------------------
    def similarity(self, image: ImageFeatures, text: TextFeatures) -> torch.Tensor:
        """[n_images, n_texts]. Here: the cosine of the global embeddings (CLIP's). It must be
        differentiable (the explainers take its gradient) and score a pair alone as in a batch."""
        return cosine_matrix(image.cls, text.eot)

    # ---- YOUR METHOD (2/3): the method's own map ----------------------------------------------------
    def sentence_maps(self, image: ImageFeatures, text: TextFeatures, kind: str = GENERIC_MAP) -> torch.Tensor:
        """[M, rows, cols] over the patch grid of one image. Here: each sentence's softmax over the patches
        of its cosine with them, sharpened by MAP_TEMPERATURE."""
        if kind != NATIVE_MAP:
            return super().sentence_maps(image, text, kind)
        rows, cols = image.grid_hw
        scores = cosine_matrix(text.eot, image.patches[0])  # [M, P]
        return torch.softmax(scores / MAP_TEMPERATURE, dim=-1).reshape(len(text), rows, cols)

    # ---- YOUR METHOD (3/3): the loss ----------------------------------------------------------------
    def losses(self, batch: TrainingBatch) -> dict[str, torch.Tensor]:
        """Named terms, each already weighted; training minimises their sum. Here: CLIP's symmetric
        InfoNCE on the long captions (gathered across ranks under DDP by ``info_nce_pairs``)."""
        image = F.normalize(self.encode_image(batch.pixels).cls, dim=-1)
        text = F.normalize(self.encode_captions(batch.captions).eot, dim=-1)
        scale = self.logit_scale.exp()
        return {{"contrastive": info_nce_pairs(image, text, lambda rows, columns: scale * rows @ columns.T)}}
'''

TEST = '''"""{title} fits explorer: the conformance kit, and the entry point once the package is installed."""

from explorer.testing import check_method

from {package}.method import {cls}


def test_it_passes_the_conformance_kit():
    check_method({cls})  # raises with one line per failed check


def test_explorer_finds_it_through_its_entry_point():
    from explorer.models.methods import get_method

    assert get_method("{name}") is {cls}
'''

README = '''# {title} for explorer

A method for explorer (the long-text CLIP workbench) packaged as a plugin: explorer finds it through the
entry point `{name}` in the group `explorer.methods` (pyproject.toml), so it works wherever a built-in
method does (the page, `explorer train`, Jobs, `explorer eval`, figures) without a fork.

1. Install it, with its test extra (pytest), into the environment explorer is installed in:
   `pip install -e '.[test]'` in this folder (from elsewhere: `pip install -e 'PATH/TO/THIS/FOLDER[test]'`).
2. `explorer methods` lists `{name}` with this package as its source.
3. Edit `{package}/method.py` at the three places marked `YOUR METHOD`: the score (`similarity`),
   the method's own map (`sentence_maps`, kind `{name}-map`) and the loss (`losses`). Set
   `job_defaults` to the paper's numbers, each with its source, and keep `cosine_score`,
   `score_description` and `export_leaves_out` true to what the method computes (their comments say how).
4. Check it after each change: `explorer check-method {name}` (one line per check, exit code 0 or 1)
   or `python -m pytest tests/` in this folder (runs `explorer.testing.check_method`; `python -m`
   runs the pytest of explorer's environment, which the test extra installed).
5. Train it: `explorer train --method {name} --data DATA --init CHECKPOINT` or from the Jobs tab;
   the result joins the zoo and opens on the page like any model.
'''

FILES = {
    "pyproject.toml": PYPROJECT,
    "README.md": README,
    "{package}/__init__.py": INIT,
    "{package}/method.py": METHOD,
    "tests/test_{name}.py": TEST,
}


def new_method(name: str, out: str | Path, title: str | None = None) -> list[Path]:
    """Write the package for method ``name`` into ``out`` (new or empty); the files written."""
    if not NAME_PATTERN.fullmatch(name):
        raise ExplorerError(f"{name!r} cannot be a method name: lowercase letters, digits and _ (a letter "
                            "first, at most 40)")
    out = Path(out).expanduser()
    if out.exists() and any(out.iterdir()):
        raise ExplorerError(f"{out} is not empty; give a new folder")
    fields = {"name": name, "title": title or name.replace("_", " ").title().replace(" ", ""),
              "package": f"explorer_{name}", "dist": name.replace("_", "-"),
              "cls": "".join(part.title() for part in name.split("_")) + "Method"}
    written = []
    for relative, template in FILES.items():
        path = out / relative.format(**fields)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(template.format(**fields), encoding="utf-8")
        written.append(path)
    return written
