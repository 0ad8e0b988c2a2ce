"""The line under the map-kind picker: what the chosen kind computes, and what "native" draws for each model.

"native" draws a method's own sentence map; a method without one opens on the kind it measured best on the
held-out world (``Method.measured_grounding``), and the note gives those figures and where they came from,
so nobody has to take "best" on trust.
"""

from __future__ import annotations

from explorer.core.errors import ExplorerError
from explorer.models.map_kinds import DESCRIPTIONS, GENERIC_MAP, LEGRAD, UNMEASURED_DEFAULT
from explorer.models.methods import get_method
from explorer.ui.view_controls import as_list
from explorer.views.settings import NATIVE

NATIVE_NOTE = ("**native**: each model's own sentence map; a model without one opens on the kind its method "
               "measured best (the mean of mIoU and pointing on the held-out world).")
GENERIC_NOTE = ("**generic**: the cosine of the sentence embedding with each projected patch token (it often lights "
                "the background: CLIP's opposite visualisation).")
# docs/explainers.md: on the demo zoo's 64-px models (a 4 x 4 patch grid) LeGrad's attention gradients spread
# over every patch alike; the map comes out as a regular lattice.
LEGRAD_SMALL = ("On small models (the demo zoo's 64-px pictures) it draws a regular lattice over the whole picture "
                "(held-out mIoU 3-8 %, AUROC against the background 38-73 %): read it on a full-size checkpoint.")
OWN_MAP_NOTE = "the method's own map (the Models tab's method list says what each method computes)"


def kind_note(kind, zoo=None, names=(), method=get_method) -> str:
    """What ``kind`` computes; for "native", what each of the chosen models (``names`` in ``zoo``) draws.
    ``method``: name -> class, or None for a method not imported yet (the page being built)."""
    if kind == NATIVE:
        return "\n".join([NATIVE_NOTE, *native_lines(zoo, names, method)])
    if kind == GENERIC_MAP:
        return GENERIC_NOTE
    if kind == LEGRAD:
        return f"**{kind}**: {DESCRIPTIONS[kind]}. {LEGRAD_SMALL}"
    if kind in DESCRIPTIONS:
        return f"**{kind}**: {DESCRIPTIONS[kind]}."
    return f"**{kind}**: {OWN_MAP_NOTE}."


def native_lines(zoo, names, method=get_method) -> list[str]:
    """A line per chosen model: the kind "native" draws for it and, where measured, its figures."""
    lines, sources = [], []
    for name in as_list(names) if zoo is not None else []:
        try:
            cls = method(zoo.get(name).method)
        except ExplorerError:
            continue
        if cls is None:
            continue
        if cls.preferred_native_map:
            lines.append(f"- **{name}**: its own `{cls.preferred_native_map}` map")
            continue
        measured = cls.measured_grounding
        if measured is None:
            lines.append(f"- **{name}**: `{UNMEASURED_DEFAULT}` ({cls.title} declares no measured grounding)")
            continue
        best = measured.best((GENERIC_MAP, *cls.native_map_kinds, *cls.explainer_kinds))
        lines.append(f"- **{name}**: `{best}`, {cls.title}'s best measured ({measured.describe(best)})")
        if (measured.command, measured.results) not in sources:
            sources.append((measured.command, measured.results))
    if sources:  # folded: the command is long, and most readers want the figures only
        lines.append("\n<details><summary>How these were measured</summary>\n")
        lines += [f"`{command}` ({results})\n" for command, results in sources]
        lines.append("</details>")
    return lines


__all__ = ["kind_note", "native_lines"]
