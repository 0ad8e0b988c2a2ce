"""Example pictures for the Grounding tab, read from the examples folder (``assets/``, written by
``explorer assets write``): held-out scenes of the synthetic world (the demo models were trained on
that world, so their maps mean something there, and each carries its truth), then photos that
scikit-image ships, labelled as what they are for the demo models."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path

from explorer.core import paths
from explorer.core.errors import ExplorerError

log = logging.getLogger("explorer.ui")

PHOTO_NOTE = ("**Photos:** the demo models (`demo-…`) were trained on synthetic shapes only, so their maps on "
              "these photos mean nothing until a real checkpoint is added (Models tab); real checkpoints are "
              "listed first in the model choice.")


@dataclass
class PageExamples:
    """What the tab offers: (picture, caption) pairs of each kind, and a line when something is missing."""

    scenes: list[tuple[Path, str]] = field(default_factory=list)
    photos: list[tuple[Path, str]] = field(default_factory=list)
    problem: str = ""

    @property
    def first(self) -> tuple[Path, str] | None:
        return (self.scenes + self.photos or [None])[0]


def truth_dir() -> Path:
    """Where the example scenes' ground truth is kept, keyed by picture content (``explorer.grounding.truth``)."""
    return paths.ensure(paths.example_truth_dir())


def page_examples(folder: Path | None = None) -> PageExamples:
    """The examples in ``folder`` (default ``paths.assets_dir()``), each scene's truth registered for the maps.
    A missing or damaged folder is a line on the page, never a failed build."""
    from explorer.data.examples import read_examples

    try:
        examples = read_examples(folder or paths.assets_dir())
    except ExplorerError as error:
        log.warning("no examples: %s", error)
        return PageExamples(problem=f"No examples: {error}")
    found = PageExamples()
    for example in examples:
        if example.sentence_texts:
            register_truth(example)
        (found.scenes if example.kind == "synthetic" else found.photos).append((example.picture, example.caption))
    return found


def register_truth(example) -> None:
    """Store a scene's truth under its picture's digest, once (the maps find it by the picture's pixels)."""
    from explorer.grounding.truth import save_scene_truth, truth_path

    try:
        if not truth_path(example.image, truth_dir()).exists():
            save_scene_truth(example, truth_dir())
    except (OSError, ExplorerError) as error:  # the example still works, only without scores
        log.warning("could not store the truth of %s: %s", example.name, error)
