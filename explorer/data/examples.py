"""The page's examples as files: the pictures the Grounding tab opens on, their long captions and
per-object truth masks, listed by a manifest in one folder (``assets/`` at the top of the checkout).

``write_examples(out)`` writes the folder from code, byte for byte the same each time: held-out
scenes of the synthetic world (the demo models' world, with truth), then photos that scikit-image
ships (no truth). ``read_examples(folder)`` reads it back for the page, and says plainly when the
folder is missing or damaged (``ExamplesError``): an installed package carries no ``assets/``.

Layout: ``manifest.json``; ``<name>.png`` and ``<name>.txt`` (its caption) per example;
``masks/<name>.object-<k>.png`` (1-bit, object k's pixels) per object of a synthetic scene. A
sentence's truth is the union of the masks it lists.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from PIL import Image

from explorer.core.errors import ExplorerError
from explorer.core.files import write_text_atomic
from explorer.core.images import image_digest

MANIFEST = "manifest.json"
MASKS = "masks"
VERSION = 1
COMMAND = "explorer assets write"
DIGESTS = Path(__file__).with_name("example_scenes.json")  # the scenes known by their pixels (``example_scenes``)

# The synthetic scenes: the first test-split scenes of world seed 0 (the split the demo models never trained
# on), drawn at 224 px. The first is the page's default example.
SYNTHETIC = {"seed": 0, "split": "test", "count": 4, "image_size": 224}
PHOTO_SIDE = 320  # photos are shrunk to this longest side: the folder stays small, the models read 224 px anyway
PHOTOS = {  # scikit-image name -> (a caption that talks about it sentence by sentence, its licence)
    "astronaut": ("An astronaut in a white space suit smiles at the camera. An American flag hangs behind her "
                  "on the left. She holds a helmet in her arm. The background is a dark studio wall.",
                  "Eileen Collins, NASA Great Images database; public domain (scikit-image data.astronaut)"),
    "chelsea": ("A ginger tabby cat looks to the left. Its whiskers are long and white. "
                "The background is a blurred wooden floor.",
                "CC0, photographer Stefan van der Walt (scikit-image data.chelsea)"),
    "coffee": ("A cup of coffee sits on a saucer. A spoon lies beside the cup. "
               "The table under it is made of dark wood.",
               "CC0, photographer Rachel Michetti, courtesy of Pikolo Espresso Bar (scikit-image data.coffee)"),
    "rocket": ("A rocket stands on a launch pad. The sky behind it is clear and blue. "
               "A tall service tower rises on the right.",
               "SpaceX launch of DSCOVR on Falcon 9; public domain (scikit-image data.rocket)"),
}


class ExamplesError(ExplorerError):
    """The examples folder is missing, or its manifest or files cannot be read."""


@dataclass(frozen=True)
class Example:
    """One example as read back: a picture, its caption and (synthetic scenes) its sentences' truth."""

    name: str  # 'synthetic-test-000000', 'astronaut'
    kind: str  # 'synthetic' | 'photo'
    picture: Path
    caption: str
    sentence_texts: tuple[str, ...] = ()  # the sentences that have truth (synthetic scenes)
    sentence_mask_files: tuple[tuple[Path, ...], ...] = ()  # per sentence, the object masks it covers
    licence: str = ""
    scene_id: str = ""  # the synthetic world's id of the scene ('test-000000'); '' for a photo

    @property
    def id(self) -> str:  # what the truth registry names it by (``save_scene_truth``): 'synthetic scene <id>'
        return self.scene_id or self.name

    @property
    def image(self) -> Image.Image:
        with Image.open(self.picture) as opened:
            return opened.convert("RGB")

    def sentence_masks(self) -> np.ndarray:
        """bool [M, H, W]: each sentence's truth, the union of its objects' masks."""
        size = self.image.size
        masks = {file: _read_mask(file, size) for files in self.sentence_mask_files for file in files}
        return np.stack([np.any([masks[f] for f in files], axis=0) for files in self.sentence_mask_files])


# ---- writing -------------------------------------------------------------------------------------------


def write_examples(out: str | os.PathLike) -> list[Path]:
    """Write every example, its caption and masks, and the manifest into ``out``; returns the files written.
    Files an earlier manifest listed and this one does not are removed (nothing else in ``out`` is touched)."""
    from explorer.data.synthetic import generate_scenes

    out = Path(out)
    try:
        (out / MASKS).mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise ExamplesError(f"cannot write the examples into {out}: {error}") from error
    before = set(_listed_files(out)) if (out / MANIFEST).is_file() else set()
    entries, written = [], []
    scenes = list(generate_scenes(SYNTHETIC["count"], seed=SYNTHETIC["seed"], image_size=SYNTHETIC["image_size"],
                                  split=SYNTHETIC["split"]))
    _refresh_digests(scenes)
    for index, scene in enumerate(scenes):
        entry, files = _write_scene(out, scene, index)
        entries.append(entry)
        written += files
    for name, (caption, licence) in PHOTOS.items():
        entry, files = _write_photo(out, name, caption, licence)
        entries.append(entry)
        written += files
    manifest = {"version": VERSION, "written_by": COMMAND,
                "note": "Written by code, never by hand: run the command again to change these files.",
                "examples": entries}
    written.append(write_text_atomic(out / MANIFEST, json.dumps(manifest, indent=2, ensure_ascii=False) + "\n"))
    for stale in before - {p.relative_to(out).as_posix() for p in written}:
        (out / stale).unlink(missing_ok=True)
    return written


def _refresh_digests(scenes) -> None:
    """The package's table of the scenes' digests (``example_scenes``): how a picture is known without files."""
    try:
        write_scene_digests(scenes)
    except OSError:  # an installed, read-only package keeps the table it shipped with
        pass


def write_scene_digests(scenes, out: Path | None = None) -> Path:
    """The table for ``scenes`` (the examples' synthetic scenes, in order), written where ``example_scenes``
    reads it: digest of each scene's picture -> its index among the examples."""
    out = DIGESTS if out is None else out
    table = {"written_by": COMMAND, "scenes": {image_digest(s.image): i for i, s in enumerate(scenes)}}
    out.write_text(json.dumps(table, indent=2) + "\n", encoding="utf-8")
    return out


def _write_scene(out: Path, scene, index: int) -> tuple[dict, list[Path]]:
    name = f"synthetic-{scene.id}"
    files = [_save_png(scene.image, out / f"{name}.png"),
             write_text_atomic(out / f"{name}.txt", scene.long_caption + "\n")]
    objects = []
    for obj in scene.objects:
        mask = f"{MASKS}/{name}.object-{obj.index + 1}.png"
        files.append(_save_png(Image.fromarray(scene.mask(obj.index)).convert("1"), out / mask))
        objects.append({"label": obj.index + 1, "mask": mask, **obj.attributes()})
    sentences = [{"text": s.text, "kind": s.kind, "objects": [k + 1 for k in s.objects],
                  "masks": [objects[k]["mask"] for k in s.objects]} for s in scene.sentences]
    source = {"synthetic_world": {**SYNTHETIC, "index": index, "scene_id": scene.id}}
    return ({"name": name, "kind": "synthetic", "picture": f"{name}.png", "caption_file": f"{name}.txt",
             "caption": scene.long_caption, "source": source,
             "licence": "made by explorer's synthetic world (the project's own)",
             "objects": objects, "sentences": sentences}, files)


def _write_photo(out: Path, name: str, caption: str, licence: str) -> tuple[dict, list[Path]]:
    from skimage import data

    photo = Image.fromarray(getattr(data, name)())
    scale = PHOTO_SIDE / max(photo.size)
    size = (round(photo.width * scale), round(photo.height * scale))
    files = [_save_png(photo.resize(size, Image.Resampling.LANCZOS), out / f"{name}.png"),
             write_text_atomic(out / f"{name}.txt", caption + "\n")]
    source = {"scikit_image": f"skimage.data.{name}", "original_size": list(photo.size), "resized_to": list(size)}
    return ({"name": name, "kind": "photo", "picture": f"{name}.png", "caption_file": f"{name}.txt",
             "caption": caption, "source": source, "licence": licence, "objects": [], "sentences": []}, files)


def _save_png(image: Image.Image, path: Path) -> Path:
    image.save(path, format="PNG")  # Pillow writes no time stamp: the same pixels give the same bytes
    return path


# ---- reading -------------------------------------------------------------------------------------------


def read_examples(folder: str | os.PathLike) -> list[Example]:
    """The examples listed in ``folder``/manifest.json, in its order; ``ExamplesError`` if they cannot be read."""
    folder = Path(folder)
    manifest = _read_manifest(folder)
    examples = []
    for entry in manifest["examples"]:
        try:
            examples.append(_example(folder, entry))
        except (AttributeError, KeyError, TypeError, ValueError) as error:
            raise ExamplesError(f"{folder / MANIFEST}: a malformed example entry ({error!r}); write the folder "
                                f"again with `{COMMAND} --out {folder}`.") from error
    return examples


def _read_manifest(folder: Path) -> dict:
    path = folder / MANIFEST
    if not path.is_file():
        raise ExamplesError(f"No examples at {folder} (no {MANIFEST}): a checkout has them in assets/; otherwise "
                            f"write them with `{COMMAND} --out DIR` and set $EXPLORER_ASSETS=DIR.")
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ExamplesError(f"{path} cannot be read ({error}); write it again with `{COMMAND}`.") from error
    if not isinstance(manifest, dict) or manifest.get("version") != VERSION or \
            not isinstance(manifest.get("examples"), list):
        raise ExamplesError(f"{path} is not an examples manifest of version {VERSION}; write it again with "
                            f"`{COMMAND}`.")
    return manifest


def _example(folder: Path, entry: dict) -> Example:
    picture = _existing(folder, entry["picture"])
    sentences = [s for s in entry["sentences"] if s["masks"]]  # a sentence with no object has no truth
    return Example(name=str(entry["name"]), kind=str(entry["kind"]), picture=picture, caption=str(entry["caption"]),
                   sentence_texts=tuple(str(s["text"]) for s in sentences),
                   sentence_mask_files=tuple(tuple(_existing(folder, m) for m in s["masks"]) for s in sentences),
                   licence=str(entry.get("licence", "")),
                   scene_id=str(entry["source"].get("synthetic_world", {}).get("scene_id", "")))


def _existing(folder: Path, relative: str) -> Path:
    path = folder / relative
    if Path(relative).is_absolute() or ".." in Path(relative).parts or not path.is_file():
        raise ExamplesError(f"{folder / MANIFEST} lists {relative!r}, which is not a file in {folder}; write the "
                            f"folder again with `{COMMAND} --out {folder}`.")
    return path


def _read_mask(path: Path, size: tuple[int, int]) -> np.ndarray:
    with Image.open(path) as opened:
        mask = np.asarray(opened.convert("L")) > 0
    if (mask.shape[1], mask.shape[0]) != size:
        raise ExamplesError(f"{path} is {mask.shape[1]}x{mask.shape[0]}, its picture {size[0]}x{size[1]}.")
    return mask


def _listed_files(folder: Path) -> list[str]:
    """Every file an existing manifest lists (pictures, captions, masks), relative to ``folder``."""
    try:
        entries = _read_manifest(folder)["examples"]
    except ExamplesError:
        return []
    listed = []
    for entry in (e for e in entries if isinstance(e, dict)):
        listed += [str(entry.get(key)) for key in ("picture", "caption_file") if entry.get(key)]
        listed += [str(obj.get("mask")) for obj in entry.get("objects", []) if isinstance(obj, dict)]
    return [name for name in listed if ".." not in Path(name).parts and not Path(name).is_absolute()]
