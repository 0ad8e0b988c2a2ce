"""The figure gallery (``docs/figures/``): one figure of each kind from the demo zoo, written by one command.

    explorer figure gallery                 # docs/figures/{maps,regions,pca,kinds,retrieval}.png + .json

Its inputs are made here, in the folder, from the synthetic world (two test scenes at 224 px with their
truth, a 24-scene retrieval set at 64 px), and the settings files name them relative to the folder, so
``explorer figure replay docs/figures/maps.png.json`` redraws the same picture from any clone.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Callable

from explorer.views.settings import PATH_FIELDS, SettingsError, ViewSettings

GALLERY = Path("docs") / "figures"  # from the repository's root
KINDS = ("maps", "regions", "pca", "kinds", "retrieval")
RETRIEVAL_SCENES = 24
DPI = 150  # enough for the docs' gallery; a paper's figure is written at 300 (the default)


def gallery_settings(inputs: Path, scenes: list[tuple[Path, str]]) -> dict[str, ViewSettings]:
    """What each figure shows: demo models that differ, the scenes' long captions."""
    (first, caption), (second, _) = scenes
    truth = str(inputs / "truth")
    common = dict(image=str(first), caption=caption, truth_dir=truth, dpi=DPI)
    return {
        # as the gallery's maps.png was drawn (a sentence per column); maps-column.pdf shows the page's layout
        "maps": ViewSettings(view="maps", models=["demo-mulclip", "demo-flair", "demo-clip-base"], per_page=4,
                             layout="models-as-rows", **common),
        "regions": ViewSettings(view="regions", models=["demo-flair"], detector="felzenszwalb", **common),
        "pca": ViewSettings(view="pca", models=["demo-clip-base", "demo-caft"], images=[str(second)],
                            image=str(first), dpi=DPI),
        "kinds": ViewSettings(view="kinds", models=["demo-flair", "demo-clip-base"], page=1, per_page=1, **common),
        "retrieval": ViewSettings(view="retrieval", data=str(inputs / "retrieval"), models=["demo-finelip",
                                                                                           "demo-clip-base"],
                                  queries=["3", "11"], k=5, dpi=DPI),
    }


def make_inputs(folder: Path) -> list[tuple[Path, str]]:
    """Two test scenes (pictures, truth) and the retrieval set, written into ``folder``/inputs."""
    from explorer.data import generate_scenes, write_dataset
    from explorer.grounding.truth import save_scene_truth

    inputs = folder / "inputs"
    if inputs.exists():
        shutil.rmtree(inputs)
    (inputs / "truth").mkdir(parents=True)
    scenes = []
    for scene in generate_scenes(2, seed=0, image_size=224, split="test"):
        path = inputs / f"scene-{scene.id}.png"
        scene.image.save(path)
        save_scene_truth(scene, inputs / "truth")
        scenes.append((path, scene.long_caption))
    write_dataset(inputs / "retrieval", RETRIEVAL_SCENES, seed=0, image_size=64, split_fractions={"test": 1.0})
    return scenes


def relative(settings: ViewSettings, folder: Path) -> dict:
    """The settings with every path under ``folder`` written relative to it (read back by ``ViewSettings.load``)."""
    data = json.loads(settings.to_json())
    base = folder.resolve()

    def short(value: str) -> str:
        path = Path(value)
        return str(path.resolve().relative_to(base)) if value and base in path.resolve().parents else value

    for name in PATH_FIELDS:
        data[name] = short(data[name])
    data["images"] = [short(p) for p in data["images"]]
    return data


def write_gallery(load: Callable, folder: Path = GALLERY, kinds=KINDS) -> list[Path]:
    """Every figure of the gallery and its settings (paths relative to ``folder``); the figures written."""
    from explorer.grounding.sentence_maps import MapCache
    from explorer.views.figure_pages import write_figure_pages
    from explorer.views.pipeline import compute_view

    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise SettingsError(f"cannot write the gallery into {folder}: {error.strerror or error}; give a folder "
                            "with --out") from None
    chosen = gallery_settings(folder / "inputs", make_inputs(folder))
    cache, written = MapCache(), []
    for kind in kinds:
        settings = chosen[kind]
        view = compute_view(load, settings, cache)
        settings.precision = load(settings.models[0]).precision  # the format that ran: a replay runs it again
        written_figure = write_figure_pages(view, settings, folder / f"{kind}.png")
        figure, settings_file = written_figure.figure, written_figure.settings_file
        settings_file.write_text(json.dumps(relative(settings, folder), indent=2) + "\n")
        written.append(figure)
    return written


__all__ = ["GALLERY", "KINDS", "write_gallery"]
