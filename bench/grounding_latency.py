"""Latency of a Grounding request against a bare open_clip forward of the same work.

    python bench/grounding_latency.py [--runs 5] [--sentences 8] [--device cpu]

Builds open_clip's ViT-B-16 with random weights (no download), writes its
state dict as an OpenAI-layout .pt file in a temporary folder and loads that
through the public path (``explorer.load``), so both sides hold the same
weights. open_clip's ViT-B-16 uses GELU (only the ``-quickgelu`` variants use
QuickGELU) while a plain OpenAI-layout file is read as QuickGELU, so the file
is loaded with ``options={'quick_gelu': False}``; the script checks once that
both sides give the same embeddings before timing anything.

It then times, median of ``--runs`` runs after one warm-up, with torch's
default thread count:
  (a) ``m.sentence_maps(image, sentences)``: the whole request through the
      public API (tokenize, preprocess, both towers, maps, upsampling);
  (b) ``model.encode_image(pixels)`` + ``model.encode_text(ids)`` on open_clip
      with the image tensor and token ids already made (the bare forward).
The two are interleaved run by run so that a change in machine load hits both.
Target: (a) / (b) <= 1.2.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from PIL import Image

import explorer
from explorer.core.compat import ensure_torchvision_importable

TARGET_RATIO = 1.2
SENTENCES = [
    "A wooden table stands in the middle of a sunlit kitchen.",
    "On the table there is a white bowl filled with green apples.",
    "To the left of the bowl, a red kettle rests on a folded cloth.",
    "A black cat sleeps on the windowsill behind the table.",
    "The window shows a garden with tall yellow flowers.",
    "Two chairs with blue cushions are pushed under the table.",
    "A clock on the far wall reads a quarter past ten.",
    "Steam rises from a mug of tea near the edge of the table.",
    "A striped rug covers the tiled floor beneath the chairs.",
    "Copper pans hang from a rail above the stove.",
    "A child's drawing of a house is pinned to the fridge.",
    "A potted basil plant sits on the counter by the sink.",
]


def picture(size: int = 224, seed: int = 0) -> Image.Image:
    """A smooth synthetic photo-like image (gradients plus a few shapes), size x size."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:size, 0:size] / size
    array = np.stack([x, y, 1 - x * y], axis=-1) * 200
    for _ in range(6):
        cx, cy, r = rng.uniform(0.1, 0.9), rng.uniform(0.1, 0.9), rng.uniform(0.05, 0.2)
        array[(x - cx) ** 2 + (y - cy) ** 2 < r * r] = rng.uniform(0, 255, 3)
    return Image.fromarray(array.clip(0, 255).astype(np.uint8), "RGB")


def median_ms(times: list[float]) -> float:
    return statistics.median(times) * 1000


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--sentences", type=int, default=8)
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args(argv)
    device = torch.device(args.device)

    ensure_torchvision_importable()
    import open_clip

    torch.manual_seed(0)
    reference = open_clip.create_model("ViT-B-16", pretrained=None).to(device).eval()
    activation = type(reference.visual.transformer.resblocks[0].mlp.gelu).__name__

    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "vit-b-16-random.pt"
        torch.save(reference.state_dict(), path)  # OpenAI layout: visual.*, transformer.*, ln_final ...
        model = explorer.load(path, device=args.device, options={"quick_gelu": False})
    report = model.key_report

    image = picture(224)
    sentences = SENTENCES[: args.sentences]
    tokenizer = open_clip.get_tokenizer("ViT-B-16")
    ids = tokenizer(sentences).to(device)
    pixels = model.method.preprocess([image], fit="squash").to(device)  # what sentence_maps feeds the tower

    # ---- the comparison is fair: same ids, same pixels, same embeddings ---------------------------
    assert torch.equal(model.tokenize(sentences).ids.to(device), ids), "token ids differ"
    with torch.inference_mode():
        ours_text = model.encode_text(sentences)
        ours_image = model.encode_image([image], fit="squash")
        ref_text = reference.encode_text(ids)
        ref_image = reference.encode_image(pixels)
    text_diff = (ours_text.eot - ref_text).abs().max().item()
    image_diff = (ours_image.cls - ref_image).abs().max().item()
    same = (torch.allclose(ours_text.eot, ref_text, rtol=1e-4, atol=1e-4)
            and torch.allclose(ours_image.cls, ref_image, rtol=1e-4, atol=1e-4))

    # ---- timing -----------------------------------------------------------------------------------
    def grounding():
        return model.sentence_maps(image, sentences)

    def bare():
        with torch.inference_mode():
            reference.encode_image(pixels)
            reference.encode_text(ids)
        if device.type == "cuda":
            torch.cuda.synchronize()

    def timed(fn, cpu: list[float]) -> float:
        start, start_cpu = time.perf_counter(), time.process_time()
        fn()
        if device.type == "cuda":
            torch.cuda.synchronize()
        cpu.append(time.process_time() - start_cpu)
        return time.perf_counter() - start

    result = grounding()
    assert result.maps.shape == (len(sentences), 224, 224) and result.kind == "generic"
    bare()  # warm-up of both
    ours, theirs, ours_cpu, theirs_cpu = [], [], [], []
    for _ in range(args.runs):
        ours.append(timed(grounding, ours_cpu))
        theirs.append(timed(bare, theirs_cpu))
    a, b = median_ms(ours), median_ms(theirs)
    ratio = a / b
    paired = statistics.median(x / y for x, y in zip(ours, theirs))  # robust to load drifting between pairs

    print("grounding latency: explorer sentence_maps vs bare open_clip forward")
    print(f"  torch {torch.__version__}, open_clip {open_clip.__version__}, device {device}, "
          f"threads {torch.get_num_threads()}")
    print(f"  model: open_clip ViT-B-16, random weights (seed 0), activation {activation}; loaded as "
          f"{model.method_name} {model.method.arch.name}, quick_gelu={model.method.arch.quick_gelu}, "
          f"key report {'clean' if report is not None and report.ok else 'NOT clean'}")
    print(f"  input: one {image.width}x{image.height} image, {len(sentences)} sentences "
          f"(ids {tuple(ids.shape)}), {args.runs} timed runs after 1 warm-up, interleaved")
    print(f"  same embeddings: {'yes' if same else 'NO'} (max |diff| text {text_diff:.2e}, image {image_diff:.2e})")
    print(f"  (a) m.sentence_maps(image, sentences):      median {a:8.1f} ms   "
          f"(runs: {', '.join(f'{t * 1000:.0f}' for t in ours)})")
    print(f"  (b) open_clip encode_image + encode_text:   median {b:8.1f} ms   "
          f"(runs: {', '.join(f'{t * 1000:.0f}' for t in theirs)})")
    print(f"  CPU time (all threads): (a) median {median_ms(ours_cpu):.1f} ms, (b) median {median_ms(theirs_cpu):.1f} ms, "
          f"ratio {median_ms(ours_cpu) / median_ms(theirs_cpu):.3f}")
    print(f"  median of per-run ratios (a_i/b_i): {paired:.3f}")
    print(f"  ratio (a)/(b): {ratio:.3f}   target <= {TARGET_RATIO}: {'met' if ratio <= TARGET_RATIO else 'NOT met'}")
    print_preprocess_times(model)
    return 0 if same else 1


def print_preprocess_times(model, runs: int = 30) -> None:
    """Pixels alone, for a 640x427 photo-like picture: each official pipeline (crop) and the maps' squash."""
    from explorer.models.preprocess import Preprocess

    photo = picture(640).resize((640, 427))
    pipelines = {"openai (crop)": (model.method.preprocess, "crop"), "openai (squash, maps)": (model.method.preprocess,
                 "squash"), "hf-clip (GOAL, crop)": (Preprocess(224, pipeline="hf-clip"), "crop")}
    parts = []
    for label, (preprocess, fit) in pipelines.items():
        preprocess([photo], fit=fit)  # warm-up (GOAL's builds its processor once)
        times = []
        for _ in range(runs):
            start = time.perf_counter()
            preprocess([photo], fit=fit)
            times.append(time.perf_counter() - start)
        parts.append(f"{label} {median_ms(times):.2f} ms")
    print(f"  preprocess one 640x427 picture, median of {runs}: " + ", ".join(parts))


if __name__ == "__main__":
    sys.exit(main())
