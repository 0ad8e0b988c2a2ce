"""Does each model's map peak inside the named object on the page's default example? (issue 34)

    python zoo_research/default_example_peaks.py [--zoo checkpoints/demo] [--example synthetic-test-000000]

For every model of the zoo and every map kind it draws, and every object sentence of the example (from
``assets/manifest.json``), the map's highest pixel is looked up in the object's truth mask. Prints one line
per model and kind: the sentences whose peak lies inside their object, and the count.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
from PIL import Image

ROOT = Path(__file__).resolve().parents[1]


def peaks(model, picture: Image.Image, sentences: list[dict], assets: Path) -> dict[str, list[bool]]:
    """{map kind: [peak inside the named object, per object sentence]}."""
    texts = [s["text"] for s in sentences]
    masks = [np.array(Image.open(assets / s["masks"][0])) > 0 for s in sentences]
    out = {}
    for kind in model.map_kinds:
        maps = model.sentence_maps(picture, texts, kind=kind).maps  # [n, H, W] at the picture's size
        out[kind] = [bool(mask.flat[int(np.argmax(m))]) for m, mask in zip(maps, masks)]
    return out


def main() -> None:
    import explorer
    from explorer.zoo import Zoo

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--zoo", type=Path, default=ROOT / "checkpoints" / "demo")
    parser.add_argument("--assets", type=Path, default=ROOT / "assets")
    parser.add_argument("--example", default="synthetic-test-000000")
    args = parser.parse_args()
    manifest = json.loads((args.assets / "manifest.json").read_text())
    example = next(e for e in manifest["examples"] if e["name"] == args.example)
    picture = Image.open(args.assets / example["picture"]).convert("RGB")
    sentences = [s for s in example["sentences"] if s["kind"] == "object"]
    print(f"{args.example}: {len(sentences)} object sentences")
    for entry in Zoo(args.zoo).manifests():
        model = explorer.load(args.zoo / f"{entry.weights.removesuffix('.safetensors')}.json", device="cpu")
        for kind, inside in peaks(model, picture, sentences, args.assets).items():
            print(f"  {entry.name:22s} {kind:20s} {sum(inside)}/{len(inside)}  {''.join('x' if i else '.' for i in inside)}")


if __name__ == "__main__":
    main()
