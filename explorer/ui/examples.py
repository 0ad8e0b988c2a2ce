"""Example pictures for the Grounding tab: real photos that scikit-image ships (no download)."""

from __future__ import annotations

from pathlib import Path

from PIL import Image

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
    path = Path.home() / ".cache" / "explorer" / "examples"
    path.mkdir(parents=True, exist_ok=True)
    return path


def example_images() -> list[tuple[Path, str]]:
    """(path, caption) pairs, writing the photos to the cache the first time."""
    from skimage import data

    pairs = []
    for name, caption in PHOTOS.items():
        path = cache_dir() / f"{name}.png"
        if not path.exists():
            try:
                Image.fromarray(getattr(data, name)()).save(path)
            except Exception:  # noqa: BLE001 - an example that cannot be made is simply not offered
                continue
        pairs.append((path, caption))
    return pairs
