"""`explorer export` on a zoo: time to write, and how close each library's embeddings are to explorer's.

For each model of the zoo (default: the demo zoo, every model in it; ``--model`` picks some) and each format,
the folder is written (``--backbone-only`` where the method needs it; a model with no CLIP backbone, SEPS,
is listed as skipped with the reason),
loaded with the library's own loader, and fed (a) explorer's own pixels and token ids (the weights'
fidelity) and (b) the library's own preprocessing and tokenizer on the same pictures and captions (end
to end). The cosine error is max(1 - cos) over the pictures and captions, against the CLIP backbone's own
embeddings as explorer computes them (class-token pooled for transformers, which has no mean pooling) and,
``*_vs_method``, against the method's own global embeddings (what a backbone-only export gives up). Pictures: 16 synthetic scenes
(seed 3, 224 px, the demo's world) and four photos of scikit-image (odd sizes: the rocket's resized side
exceeds the crop by 4k + 3 pixels, where OpenAI's crop rounds and CLIPImageProcessor floors).

    python bench/export.py [--zoo DIR] [--model NAME ...] [--scenes N] [--out bench/results/export.json]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
DEMO_ZOO = REPO / "checkpoints" / "demo"


def pictures_and_captions(n_scenes: int = 16):
    import skimage.data
    from PIL import Image

    from explorer.data import generate_scenes

    scenes = list(generate_scenes(n_scenes, seed=3, image_size=224, split="test"))
    photos = [Image.fromarray(getattr(skimage.data, name)()).convert("RGB")
              for name in ("astronaut", "chelsea", "coffee", "rocket")]
    captions = [scene.long_caption for scene in scenes] + [scene.short_caption for scene in scenes[:4]]
    return [scene.image for scene in scenes], photos, captions


def cosine_error(ours, theirs) -> float:
    import torch.nn.functional as F

    return float((1 - F.cosine_similarity(ours.double(), theirs.double(), dim=-1)).abs().max())


def library_embeddings(fmt: str, folder: Path, pixels, ids, pictures, captions):
    """(image, text) from explorer's inputs, then (image, text) from the library's own preprocessing."""
    import numpy as np
    import torch

    from explorer.core.runtime import prepared_import

    with torch.no_grad():
        if fmt == "transformers":
            transformers = prepared_import("transformers")
            model = transformers.CLIPModel.from_pretrained(folder).eval()
            processor = transformers.CLIPProcessor.from_pretrained(folder)

            def image(p):
                return model.get_image_features(pixel_values=p).pooler_output

            def text(i, mask=None):
                return model.get_text_features(input_ids=i, attention_mask=mask).pooler_output

            own_pixels = torch.as_tensor(np.asarray(processor(images=pictures, return_tensors="np")["pixel_values"]))
            tokens = processor.tokenizer(captions, padding="max_length", truncation=True, return_tensors="pt")
            return (image(pixels), text(ids)), (image(own_pixels), text(tokens.input_ids, tokens.attention_mask))
        open_clip = prepared_import("open_clip")
        model, _, transform = open_clip.create_model_and_transforms(f"local-dir:{folder}")
        tokenizer = open_clip.get_tokenizer(f"local-dir:{folder}")
        model.eval()
        own_pixels = torch.stack([transform(p) for p in pictures])
        return ((model.encode_image(pixels), model.encode_text(ids)),
                (model.encode_image(own_pixels), model.encode_text(tokenizer(captions))))


def backbone_embeddings(method, pixels, ids, class_token: bool):
    """The CLIP backbone's own global embeddings as explorer computes them (``ClipBackbone``), pooled by the
    class token where the library can only do that (transformers; either library for an attention-pooled
    model), else as the model pools."""
    from explorer.models.nn.backbone import ClipBackbone

    projected = method.project_image(method.image_tokens(pixels))
    image = projected[:, 0] if class_token else method.pool_image(projected)
    return image, ClipBackbone.encode_text(method, ids).eot


def zoo_models(zoo, names=None) -> list[str]:
    """The names to measure: ``names`` as given (each must be in the zoo), else every model of the zoo's
    manifests, in the page's order (real checkpoints first)."""
    from explorer.core.errors import InputError

    known = [manifest.name for manifest in zoo.choice_order()]
    if not names:
        if not known:
            raise InputError(f"{zoo.root} holds no model manifest (*.json): give --zoo a zoo folder")
        return known
    missing = [name for name in names if name not in known]
    if missing:
        raise InputError(f"no model named {', '.join(map(repr, missing))} in {zoo.root}; it has "
                         f"{', '.join(known) or 'none'}")
    return list(names)


def measure(zoo_root: Path, work: Path, names=None, n_scenes: int = 16) -> list[dict]:
    import torch

    from explorer.core.errors import ExplorerError, ExportError
    from explorer.models.export import export_model
    from explorer.zoo import Zoo

    zoo = Zoo(zoo_root, device="cpu")
    names = zoo_models(zoo, names)
    scenes, photos, captions = pictures_and_captions(n_scenes)
    rows = []
    for name in names:
        try:
            model = zoo.load(name)
        except ExplorerError as error:  # a manifest whose weights are gone or unreadable: said, not fatal
            rows.append({"model": name, "skipped": f"does not load: {error}"})
            print(json.dumps(rows[-1]), flush=True)
            continue
        method = model.method
        for fmt in ("transformers", "open_clip"):
            folder = work / f"{name}-{fmt}"
            started = time.perf_counter()
            try:
                result = export_model(method, fmt, folder, name=model.name)
            except ExportError:
                try:
                    result = export_model(method, fmt, folder, backbone_only=True, name=model.name)
                except ExportError as error:  # no CLIP backbone at all (SEPS): nothing to measure
                    row = {"model": model.name, "method": method.name, "format": fmt, "skipped": str(error)}
                    rows.append(row)
                    print(json.dumps(row), flush=True)
                    continue
            seconds = time.perf_counter() - started
            row = {"model": model.name, "method": method.name, "format": fmt, "whole": result.whole,
                   "left_out": result.left_out, "export_s": round(seconds, 2)}
            for label, pictures in (("synthetic", scenes), ("photos", photos)):
                pixels = method.preprocess(pictures)
                ids = method.tokenize(captions).ids
                with torch.no_grad():
                    own = method.encode_image(pixels).cls, method.encode_text(ids).eot
                    backbone = backbone_embeddings(method, pixels, ids,
                                                   class_token=fmt == "transformers" or method.arch.pool == "attn")
                same_inputs, own_inputs = library_embeddings(fmt, folder, pixels, ids, pictures, captions)
                row[label] = {
                    "image": cosine_error(backbone[0], same_inputs[0]), "text": cosine_error(backbone[1], same_inputs[1]),
                    "image_own_preprocessing": cosine_error(backbone[0], own_inputs[0]),
                    "text_own_tokenizer": cosine_error(backbone[1], own_inputs[1]),
                    "image_vs_method": cosine_error(own[0], same_inputs[0]),
                    "text_vs_method": cosine_error(own[1], same_inputs[1])}
            rows.append(row)
            print(json.dumps(row), flush=True)
    return rows


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--zoo", type=Path, default=DEMO_ZOO, help="a zoo folder (its *.json manifests); "
                                                                   "default: the demo zoo")
    parser.add_argument("--model", action="append", dest="models", metavar="NAME",
                        help="a model of the zoo (repeat for more); default: every model in it")
    parser.add_argument("--scenes", type=int, default=16, help="synthetic scenes to feed (default 16)")
    parser.add_argument("--out", type=Path, help="write the rows as JSON here")
    args = parser.parse_args(argv)
    from explorer.core.errors import ExplorerError
    from explorer.core.runtime import prepare_process

    prepare_process()
    with tempfile.TemporaryDirectory() as work:
        try:
            rows = measure(args.zoo, Path(work), args.models, args.scenes)
        except ExplorerError as error:
            print(f"error: {error}", file=sys.stderr)
            return 2
    if args.out:
        args.out.write_text(json.dumps(rows, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
