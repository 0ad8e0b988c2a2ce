"""`explorer generate` and `explorer export-text-encoder`: SDXL with a long text tower, from the shell.

    explorer generate --sdxl DIR_OR_FILE --model NAME --prompt "..." --out out.png [--compare]
    explorer export-text-encoder --model NAME --out DIR

``generate`` draws with the swapped pipeline (the model's long text tower in ``text_encoder``,
bigG stretched to 248), or the stock one with ``--stock``, or both side by side with
``--compare``; several ``--seed`` values make one row each. Beside OUT.png it writes OUT.json:
the settings (enough to draw it again with ``--settings OUT.json``), what each column read,
timings, and, with ``--score-with MODEL``, how well each picture matches each sentence.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from explorer.cli.common import model_loader, read_text
from explorer.core.errors import ExplorerError


def add_commands(commands) -> None:
    generate = commands.add_parser("generate", help="SDXL long-text-to-image with a long text tower swapped in")
    generate.add_argument("--sdxl", help="SDXL base: a local diffusers folder or one .safetensors file "
                                         "(default: $EXPLORER_SDXL)")
    generate.add_argument("--sdxl-config", help="the diffusers configs a single-file SDXL is read with")
    generate.add_argument("--refiner", help="SDXL refiner folder (optional): it finishes the last 20 %% of the steps")
    generate.add_argument("--model", action="append", default=[], help="long-text model (zoo name or file); "
                                                                       "repeat for another column")
    prompt = generate.add_mutually_exclusive_group()
    prompt.add_argument("--prompt", help="the long caption")
    prompt.add_argument("--prompt-file", type=Path, help="read the caption from a file")
    generate.add_argument("--settings", type=Path, help="draw again from a saved OUT.json (flags given override it)")
    generate.add_argument("--negative", help="negative prompt (empty: zeros, as SDXL base does)")
    generate.add_argument("--seed", type=int, nargs="+", help="one or more seeds (one row each; default 0)")
    generate.add_argument("--steps", type=int)
    generate.add_argument("--size", type=int, help="side in pixels (default 1024)")
    generate.add_argument("--guidance", type=float)
    generate.add_argument("--layer", choices=("last", "penultimate"),
                          help="long tower's layer: last after the final LayerNorm (Long-CLIP's and FineLIP's code; "
                               "default) or penultimate without it (stock SDXL's, ComfyUI's)")
    mode = generate.add_mutually_exclusive_group()
    mode.add_argument("--stock", action="store_true", help="render the unswapped pipeline only")
    mode.add_argument("--compare", action="store_true", help="stock and swapped side by side")
    generate.add_argument("--allow-cut", action="store_true", help="a prompt past 248 tokens: cut it and go on")
    generate.add_argument("--score-with", help="a long-text model that scores each picture against each sentence")
    generate.add_argument("--fid-reference", type=Path, help="a folder of reference pictures: FID per column "
                                                              "(optional extra: pip install 'explorer[fid]')")
    generate.add_argument("--inception-weights", type=Path, help="torch-fidelity's InceptionV3 weights file, for FID")
    generate.add_argument("--device", default="auto")
    generate.add_argument("--precision", choices=("fp16", "fp32"), default=None, help="fp16 on GPU (default)")
    generate.add_argument("--cpu-offload", action="store_true", help="model CPU offload (GPU; needs accelerate)")
    generate.add_argument("--attention-slicing", action="store_true")
    generate.add_argument("--vae-tiling", action="store_true")
    generate.add_argument("--allow-pickle", action="store_true", help="trust a model file that needs unpickling")
    generate.add_argument("--out", type=Path, required=True, help="OUT.png (the settings go to OUT.json)")
    generate.set_defaults(run=_run_generate)

    export = commands.add_parser("export-text-encoder",
                                 help="write a model's long text tower as a transformers CLIPTextModel folder")
    export.add_argument("--model", required=True, help="zoo name, manifest or weights file")
    export.add_argument("--out", type=Path, required=True, help="the folder to write")
    export.add_argument("--device", default="cpu")
    export.add_argument("--allow-pickle", action="store_true", help="trust a file that needs unpickling")
    export.set_defaults(run=_run_export)


def settings_from_args(args):
    from explorer.core.paths import sdxl_default
    from explorer.generation.settings import GenerationSettings

    base = GenerationSettings.read(args.settings).to_json() if args.settings else {}
    given = {
        "prompt": read_text(args.prompt_file) if args.prompt_file else args.prompt,
        "negative": args.negative, "seeds": args.seed, "steps": args.steps, "size": args.size,
        "guidance": args.guidance, "layer": args.layer, "sdxl": args.sdxl, "refiner": args.refiner,
        "sdxl_config": args.sdxl_config,
        "precision": args.precision,
    }
    data = {**base, **{key: value for key, value in given.items() if value is not None}}
    data.setdefault("prompt", "")
    if args.model or not base:
        data["models"] = [] if args.stock else list(args.model)
    if args.stock or args.compare or not base:
        data["stock"] = args.stock or args.compare
    data.update(device=args.device, allow_cut=args.allow_cut or base.get("allow_cut", False),
                cpu_offload=args.cpu_offload, attention_slicing=args.attention_slicing, vae_tiling=args.vae_tiling)
    if not data.get("sdxl"):
        default = sdxl_default()
        data["sdxl"] = str(default) if default else ""
    settings = GenerationSettings.from_json(data)
    if not settings.stock and not settings.models:
        raise ExplorerError("name a long-text model with --model (or draw stock SDXL with --stock)")
    return settings


def _run_generate(args) -> int:
    from tqdm import tqdm

    from explorer.cli.common import zoo_from_args
    from explorer.generation.generate import Generator
    from explorer.views.generation_view import budget_line, save_generation

    settings = settings_from_args(args).check()
    if args.fid_reference and not args.inception_weights:
        raise ExplorerError("FID needs --inception-weights FILE (torch-fidelity's InceptionV3; nothing is downloaded)")
    load = model_loader(args, zoo_from_args(args))
    print(budget_line(settings.prompt), file=sys.stderr)
    bars: list = []  # made at the first step, so that a refusal prints no empty bar

    def progress(done: int, total: int, phase: str) -> None:
        if not bars:
            bars.append(tqdm(total=total, unit="step", file=sys.stderr))
        bars[0].n = done
        bars[0].set_description(phase)
        bars[0].refresh()

    result = Generator(load_model=load).run(settings, progress=progress)
    for bar in bars:
        bar.close()
    out = args.out if args.out.suffix else args.out.with_suffix(".png")
    extra = {}
    if args.fid_reference:
        from explorer.generation.fid import fid_per_column

        scores = fid_per_column(result, args.fid_reference, args.inception_weights)
        for column, fid in scores.items():
            print(f"{column}: {fid.line()}", file=sys.stderr)
        extra["fid"] = {column: {"fid": fid.fid, "generated": fid.n_generated, "reference": fid.n_reference}
                        for column, fid in scores.items()}
    save_generation(result, out, load(args.score_with) if args.score_with else None, extra)
    for column, reads in result.reads.items():
        print(f"{column}: {reads} (text encoding {result.encode_seconds[column]:.3f} s)", file=sys.stderr)
    for note in result.notes:
        print(f"note: {note}", file=sys.stderr)
    print(json.dumps({"image": str(out), "settings": str(out.with_suffix(".json"))}))
    return 0


def _run_export(args) -> int:
    from explorer.cli.common import zoo_from_args
    from explorer.generation.export import export_text_encoder

    model = model_loader(args, zoo_from_args(args))(args.model)
    written = export_text_encoder(model.text_tower(), args.out, name=model.name)
    for path in written:
        print(path)
    return 0
