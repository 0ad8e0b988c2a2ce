"""A model written out for the two libraries the ecosystem reads CLIPs with.

    explorer export --model NAME --format transformers|open_clip --out DIR [--backbone-only]

- ``transformers``: a folder that ``CLIPModel.from_pretrained(DIR)`` and ``CLIPProcessor.from_pretrained(DIR)``
  load (``transformers_folder``);
- ``open_clip``: a folder that ``open_clip.create_model_and_transforms("local-dir:DIR")`` and
  ``open_clip.get_tokenizer("local-dir:DIR")`` load (``open_clip_folder``).

Both hold the model's CLIP backbone as explorer computes it: the effective position table (Long-CLIP's
two tables folded into one), the model's context (248 for the long models), its activation, and the
image pipeline of its preprocessing. Whether that is the whole model is the method's to say
(``Method.export_left_out``): a method whose pooling or score neither library can express exports
its backbone only when asked (``backbone_only``), and the result says what was left out.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from explorer.core.errors import ExportError
from explorer.models.export.weights import backbone_tensors, save_weights

if TYPE_CHECKING:  # the CLI's parser reads FORMATS from here: importing this module imports no torch
    import torch

    from explorer.models.methods.base import Method

FORMATS = ("transformers", "open_clip")
ABOUT = "explorer_export.json"
README = "README.md"


@dataclass
class Exported:
    """What ``export_model`` wrote: the folder, its files, and what of the method it does not hold."""

    out: Path
    format: str
    files: list[Path]
    left_out: str = ""  # "" when the folder computes the method's own embeddings and score
    notes: list[str] = field(default_factory=list)

    @property
    def whole(self) -> bool:
        return not self.left_out


def export_scope(method: Method, fmt: str, backbone_only: bool = False, name: str = "") -> str:
    """What an export would leave out of the method, or a refusal.

    Args:
        method: The loaded method (``Model.method``).
        fmt: "transformers" or "open_clip".
        backbone_only: Whether exporting the CLIP backbone alone is acceptable.
        name: The model's name, for the messages.

    Returns:
        "" for a whole export, else what ``Method.export_left_out(fmt)`` says is left out.

    Raises:
        ExportError: An unknown format; a method with no CLIP backbone; or one that would leave something
            out when ``backbone_only`` is False (the message names what, and says to add --backbone-only).
    """
    if fmt not in FORMATS:
        raise ExportError(f"export format must be one of {', '.join(FORMATS)}, not {fmt!r}")
    who = name or method.title
    left_out = method.export_left_out(fmt)
    if left_out is None or not hasattr(method, "backbone_state_dict"):  # not a ``ClipBackbone``
        raise ExportError(f"{who} ({method.title}) has no CLIP backbone to export in the {fmt} format: "
                          "its towers are not CLIP's")
    if left_out and not backbone_only:
        raise ExportError(f"{who} ({method.title}) cannot be exported whole in the {fmt} format: it would leave out "
                          f"{left_out}. Add --backbone-only to export its CLIP backbone alone.")
    return left_out


def export_model(method: Method, fmt: str, out: Path, backbone_only: bool = False, name: str = "") -> Exported:
    """Write ``method`` as a folder the ``fmt`` library loads with its own loader.

    Args:
        method: The loaded method (``Model.method``).
        fmt: "transformers" (``CLIPModel.from_pretrained(out)``) or "open_clip"
            (``open_clip.create_model_and_transforms("local-dir:" + out)``).
        out: The folder: new, empty, or an earlier export (never one holding other files).
        backbone_only: Export the CLIP backbone alone when the method cannot go out whole.
        name: The model's name, recorded in ``explorer_export.json``.

    Returns:
        ``Exported``: the folder, its files, and what was left out ("" when whole).

    Raises:
        ExportError: Before anything is written, for everything ``export_scope`` refuses and for a
            folder that holds other files.
    """
    from explorer.core.runtime import prepare_libraries

    prepare_libraries()  # torchvision importable where its ops are missing: the writer imports transformers, and
    # the caller's next line often reads the folder back (`import open_clip`)
    left_out = export_scope(method, fmt, backbone_only, name)
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise ExportError(f"{out} is a file; the export writes a folder")
    if out.is_dir() and any(out.iterdir()) and not (out / ABOUT).exists():  # never mix with someone's files
        raise ExportError(f"{out} already holds files that are no earlier export: choose a new or empty folder")
    if fmt == "transformers":
        from explorer.models.export.transformers_folder import write_transformers_folder as write
    else:
        from explorer.models.export.open_clip_folder import write_open_clip_folder as write
    files, notes = write(method, out)
    result = Exported(out=out, format=fmt, files=files, left_out=left_out, notes=notes)
    result.files.append(_write_about(result, method, name))
    return result


def record_agreement(result: Exported, agreement: dict, summary: str) -> list[Path]:
    """Write how far the folder keeps the method's ranking (``explorer.evaluation.export_agreement``) into its
    ``explorer_export.json`` (``agreement``) and a ``README.md`` beside it; the files written."""
    about = result.out / ABOUT
    record = json.loads(about.read_text(encoding="utf-8"))
    record["agreement"] = agreement
    about.write_text(json.dumps(record, indent=2), encoding="utf-8")
    loader = ('transformers.CLIPModel.from_pretrained(DIR)' if result.format == "transformers"
              else 'open_clip.create_model_and_transforms("local-dir:DIR")')
    kept = "the whole model" if result.whole else f"its CLIP backbone only: left out {result.left_out}"
    verdict = ("The exported scores rank captions as the method does." if agreement.get("keeps_ranking") else
               "WARNING: the exported scores do not rank captions as the method does (below "
               f"{100 * agreement.get('floor', 0.9):.0f} % of pairs): use this folder as a CLIP backbone to "
               "fine-tune or probe, not as the method.")
    text = "\n".join([
        f"# {record['source']} as a {result.format} folder", "",
        f"Written by `explorer export`: {kept}. Load it with `{loader}`; the score is the cosine of the global "
        "image and text embeddings.", "",
        "## What it keeps", "", f"{summary[0].upper()}{summary[1:]}.", "", f"Probe set: {agreement.get('probe', '')}.",
        "", verdict, "", "The same numbers are in explorer_export.json (`agreement`).", ""])
    readme = result.out / README
    readme.write_text(text, encoding="utf-8")
    return [about, readme]


def _write_about(result: Exported, method: Method, name: str) -> Path:
    path = result.out / ABOUT
    path.write_text(json.dumps({
        "source": name or method.title, "method": method.name, "format": result.format,
        "whole": result.whole, "left_out": result.left_out, "context_length": method.context_length,
        "score": "cosine of the global image and text embeddings", "notes": result.notes}, indent=2),
        encoding="utf-8")
    return path


__all__ = ["ABOUT", "FORMATS", "README", "Exported", "backbone_tensors", "export_model", "export_scope",
           "record_agreement", "save_weights"]
