"""Class names and prompt templates for zero-shot classification, from packages already installed.

- ImageNet's 1000 class names and CLIP's 80 prompt templates (and the 7 "simple" ones): open_clip's
  ``open_clip.zero_shot_metadata`` (``IMAGENET_CLASSNAMES``, ``OPENAI_IMAGENET_TEMPLATES``,
  ``SIMPLE_IMAGENET_TEMPLATES``). CLIP's 18 CIFAR templates ("cifar"): ``reference_lists.CIFAR_TEMPLATES``.
  open_clip ships no CIFAR names: CIFAR's come from the release's own meta files (``batches.meta.txt``,
  ``fine_label_names.txt``), underscores read as spaces.
- ImageNet's WordNet ids in class-index order (ImageNet-O's folders are named by them): timm's
  ``imagenet_synsets.txt`` (timm comes with open_clip), read as a file, without importing timm. Where it
  is missing, ``--classnames FILE`` gives the names (``wnid name`` or ``name`` per line).
- ``--templates FILE``: one template a line, ``{}`` where the class name goes.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

from explorer.core.errors import InputError
from explorer.data.errors import DatasetError

TEMPLATE_SETS = ("openai", "simple", "cifar")


def _metadata():
    from explorer.core.runtime import prepared_import

    return prepared_import("open_clip.zero_shot_metadata")


def imagenet_classnames() -> list[str]:
    return list(_metadata().IMAGENET_CLASSNAMES)


def imagenet_wnids() -> list[str] | None:
    """ImageNet-1k's WordNet ids in class-index order (sorted), from timm's file; None when it is absent."""
    spec = importlib.util.find_spec("timm")
    for folder in (spec.submodule_search_locations or []) if spec else []:
        file = Path(folder) / "data" / "_info" / "imagenet_synsets.txt"
        if file.is_file():
            wnids = [line.strip() for line in file.read_text(encoding="utf-8").splitlines() if line.strip()]
            return wnids if len(wnids) == 1000 else None
    return None


def templates(source: str | None) -> tuple[list[str], str]:
    """(templates with ``{}``, where they came from): "openai" (default, CLIP's 80), "simple" (7), "cifar" (CLIP's
    18 for CIFAR) or a file."""
    if source == "cifar":
        from explorer.data.class_sets.reference_lists import CIFAR_TEMPLATES

        return list(CIFAR_TEMPLATES), f"CLIP's CIFAR templates, openai/CLIP data/prompts.md ({len(CIFAR_TEMPLATES)})"
    if source in (None, "openai", "simple"):
        chosen = _metadata().OPENAI_IMAGENET_TEMPLATES if source != "simple" else _metadata().SIMPLE_IMAGENET_TEMPLATES
        found = [template("{}") for template in chosen]
        return found, f"open_clip's {'SIMPLE' if source == 'simple' else 'OPENAI'}_IMAGENET_TEMPLATES ({len(found)})"
    path = Path(source)
    try:
        lines = [line.strip() for line in path.read_text(encoding="utf-8").splitlines()]
    except (OSError, UnicodeDecodeError) as error:
        raise InputError(f"cannot read the templates file {path}: {error}") from error
    found = [line for line in lines if line and not line.startswith("#")]
    bad = [line for line in found if line.count("{}") != 1]
    if not found or bad:
        raise InputError(f"{path}: every template needs exactly one {{}} where the class name goes"
                         + (f" (not {bad[0]!r})" if bad else " (the file holds none)"))
    return found, f"{path} ({len(found)})"


def read_classnames(path: Path) -> dict[str, str] | list[str]:
    """``--classnames FILE``: lines ``key name`` (a WordNet id or folder name, then the name) -> a mapping;
    lines with one name each -> a list in class-index order."""
    try:
        lines = [line.strip() for line in Path(path).read_text(encoding="utf-8").splitlines() if line.strip()]
    except (OSError, UnicodeDecodeError) as error:
        raise DatasetError(f"cannot read the class names file {path}: {error}") from error
    if not lines:
        raise DatasetError(f"{path} holds no class names")
    pairs = [line.split(None, 1) for line in lines]
    if all(len(p) == 2 and p[0].startswith("n") and p[0][1:].isdigit() for p in pairs):
        return {key: name.strip() for key, name in pairs}
    return lines


__all__ = ["TEMPLATE_SETS", "imagenet_classnames", "imagenet_wnids", "read_classnames", "templates"]
