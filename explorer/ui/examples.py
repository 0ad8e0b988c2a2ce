"""Example pictures for the Grounding tab: held-out scenes of the synthetic world (the demo
models were trained on that world, so their maps mean something there), then real photos that
scikit-image ships (no download)."""

from __future__ import annotations

import logging
from pathlib import Path

from PIL import Image

from explorer.core import paths

PHOTOS = {  # scikit-image name -> a caption that talks about it sentence by sentence
    "astronaut": "An astronaut in a white space suit smiles at the camera. An American flag hangs behind her "
                 "on the left. She holds a helmet in her arm. The background is a dark studio wall.",
    "chelsea": "A ginger tabby cat looks to the left. Its whiskers are long and white. "
               "The background is a blurred wooden floor.",
    "coffee": "A cup of coffee sits on a saucer. A spoon lies beside the cup. "
              "The table under it is made of dark wood.",
    "rocket": "A rocket stands on a launch pad. The sky behind it is clear and blue. "
              "A tall service tower rises on the right.",
}


def cache_dir() -> Path:
    return paths.ensure(paths.examples_dir())


def truth_dir() -> Path:
    """Where the example scenes' ground truth is kept, keyed by picture content (``explorer.grounding.truth``)."""
    return paths.ensure(paths.example_truth_dir())


SYNTHETIC_EXAMPLES = 4


def synthetic_examples() -> list[tuple[Path, str]]:
    """Test-split scenes (never trained on) with their long captions, rendered once into the cache,
    their ground truth alongside (so the Grounding tab can score maps drawn on them)."""
    from explorer.data import generate_scenes
    from explorer.grounding.truth import save_scene_truth, truth_path

    pairs = []
    for scene in generate_scenes(SYNTHETIC_EXAMPLES, seed=0, image_size=224, split="test"):
        path = cache_dir() / f"synthetic-{scene.id}.png"
        if not path.exists():
            scene.image.save(path)
        if not truth_path(scene.image, truth_dir()).exists():
            try:
                save_scene_truth(scene, truth_dir())
            except OSError as error:  # the example still works, only without scores
                logging.getLogger("explorer.ui").warning("could not store the truth of %s: %s", scene.id, error)
        pairs.append((path, scene.long_caption))
    return pairs


def example_images() -> list[tuple[Path, str]]:
    """(path, caption) pairs, writing the pictures to the cache the first time."""
    from skimage import data

    pairs = synthetic_examples()
    for name, caption in PHOTOS.items():
        path = cache_dir() / f"{name}.png"
        if not path.exists():
            try:
                Image.fromarray(getattr(data, name)()).save(path)
            except Exception:  # noqa: BLE001 - an example that cannot be made is simply not offered
                continue
        pairs.append((path, caption))
    return pairs
