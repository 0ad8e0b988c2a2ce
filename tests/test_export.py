"""`explorer export`: models out as transformers and open_clip folders, read back by those libraries.

Tiny models are built in code (two heads per tower, so a wrong q/k/v split shows; every parameter
perturbed, so a dropped bias or a swapped tensor shows). Each is written, loaded with the library's
own loader, and its image and text embeddings compared with explorer's: cosine error (1 - cos) under
1e-4. The Long-CLIP is read from a released two-table file whose tables differ past row 20, so the
folding into the effective table is what is checked. The tokenizers must give explorer's ids, at 248
tokens for the long models.
"""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from PIL import Image

import explorer
from explorer.core.errors import ExportError
from explorer.core.runtime import prepared_import
from explorer.models.export import ABOUT, export_model
from explorer.models.methods import discover_methods, get_method
from explorer.models.methods.clip import ClipMethod

TOLERANCE = 1e-4  # cosine error the issue asks for; measured: below 1e-12 (float32 rounding)
WHOLE = {"clip": True, "longclip": True, "finelip": False, "goal": True}  # FineLIP: backbone only
CAPTIONS = ["A red cube sits left of a small blue sphere.",
            "On a wooden table, " + "a green cone stands beside a yellow ring and a purple cylinder, " * 30,
            "Three grey pyramids, one striped torus! And a tiny white star above them."]
open_clip = prepared_import("open_clip")
transformers = prepared_import("transformers")


def tiny(name: str, pool: str = "tok", quick_gelu: bool = True, seed: int = 0):
    """A tiny model of the method with two heads per tower and every parameter perturbed."""
    example = get_method(name).example("tiny")
    arch = replace(example.arch, vision_heads=2, text_heads=2, pool=pool, quick_gelu=quick_gelu)
    torch.manual_seed(seed)
    method = type(example)(arch, **example.extra_config)
    with torch.no_grad():
        for parameter in method.parameters():
            parameter.add_(torch.randn_like(parameter) * 0.05)
    return method.eval()


@pytest.fixture(scope="module")
def methods(tmp_path_factory) -> dict:
    folder = tmp_path_factory.mktemp("released")
    longclip = tiny("longclip", seed=1)
    released = longclip.released_state_dict()
    gen = torch.Generator().manual_seed(5)
    released["positional_embedding"] = torch.randn(released["positional_embedding"].shape, generator=gen) * 0.1
    released["positional_embedding_res"] = torch.randn(released["positional_embedding"].shape, generator=gen) * 0.1
    torch.save(released, folder / "longclip-tiny.pt")  # Long-CLIP's release: a plain state dict, two tables
    loaded = explorer.load(folder / "longclip-tiny.pt", device="cpu").method
    effective = torch.cat([released["positional_embedding"][:20], released["positional_embedding_res"][20:]])
    assert torch.equal(loaded.positional_embedding.detach(), effective)
    return {"clip": tiny("clip"), "longclip": loaded, "finelip": tiny("finelip", seed=2), "goal": tiny("goal", seed=3),
            "longclip-effective-table": effective}


def picture(width: int, height: int, seed: int = 0) -> Image.Image:
    """A smooth photo-like picture (bicubic resizes of noise differ more than of photos)."""
    gen = np.random.default_rng(seed)
    small = gen.integers(0, 256, size=(6, 8, 3), dtype=np.uint8)
    return Image.fromarray(small).resize((width, height), Image.BICUBIC)


@pytest.fixture(scope="module")
def pictures():
    # At the tiny input (64 px) their resized long sides are 76 and 84: crop offsets 6 and 10, whole numbers
    # that torchvision's rounding and Hugging Face's flooring give alike.
    return [picture(96, 80), picture(80, 106, seed=1)]


def cosine_error(ours: torch.Tensor, theirs: torch.Tensor) -> float:
    return float((1 - F.cosine_similarity(ours.double(), theirs.double(), dim=-1)).abs().max())


def assert_same_embeddings(ours: torch.Tensor, theirs: torch.Tensor) -> float:
    """The issue's bound (cosine error < 1e-4), and the vectors themselves to float32 rounding: at these
    tiny sizes a wrong activation (GELU for QuickGELU) moves the cosine by only ~1e-5, the values by 1e-2."""
    error = cosine_error(ours, theirs)
    assert error < TOLERANCE
    torch.testing.assert_close(theirs, ours, rtol=1e-4, atol=1e-5)
    return error


def features(output) -> torch.Tensor:
    """transformers 5 returns the projected embedding as ``pooler_output``; transformers 4 the tensor."""
    return output.pooler_output if hasattr(output, "pooler_output") else output


def explorer_embeddings(method, pictures):
    pixels = method.preprocess(pictures)
    ids = method.tokenize(CAPTIONS).ids
    with torch.no_grad():
        return pixels, ids, method.encode_image(pixels).cls, method.encode_text(ids).eot


def assert_same_ids(theirs: torch.Tensor, ours: torch.Tensor, pad: int) -> None:
    """Equal up to each row's first EOT; after it explorer pads with 0 and the other tokenizer with ``pad``."""
    assert theirs.shape == ours.shape
    eot = ours.argmax(dim=-1)
    for row, end in enumerate(eot.tolist()):
        assert torch.equal(theirs[row, : end + 1], ours[row, : end + 1])
        assert (theirs[row, end + 1:] == pad).all() and (ours[row, end + 1:] == 0).all()


# ---- transformers ------------------------------------------------------------------------------

@pytest.mark.parametrize("name", list(WHOLE))
def test_transformers_clip_model_gives_explorers_embeddings_and_ids(name, methods, pictures, tmp_path):
    method = methods[name]
    result = export_model(method, "transformers", tmp_path, backbone_only=not WHOLE[name])
    assert result.whole == WHOLE[name]
    model, info = transformers.CLIPModel.from_pretrained(tmp_path, output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"] and not info["mismatched_keys"]
    assert model.config.text_config.max_position_embeddings == method.context_length
    processor = transformers.CLIPProcessor.from_pretrained(tmp_path)
    pixels, ids, image, text = explorer_embeddings(method, pictures)
    tokens = processor.tokenizer(CAPTIONS, padding="max_length", truncation=True, return_tensors="pt")
    assert processor.tokenizer.model_max_length == method.context_length
    assert_same_ids(tokens.input_ids, ids, pad=processor.tokenizer.pad_token_id)
    with torch.no_grad():
        their_image = features(model.eval().get_image_features(pixel_values=pixels))
        their_text = features(model.get_text_features(input_ids=tokens.input_ids,
                                                      attention_mask=tokens.attention_mask))
    errors = assert_same_embeddings(image, their_image), assert_same_embeddings(text, their_text)
    print(f"transformers {name}: cosine error image {errors[0]:.1e}, text {errors[1]:.1e}")


def test_the_processor_reads_a_picture_as_explorer_does(methods, pictures, tmp_path):
    """The default (torchvision) backend resizes tensors, not PIL pictures: at most one grey level off.
    The PIL backend gives explorer's pixels exactly, for OpenAI's pipeline (where the crop offsets agree)
    and for GOAL's, which is ``CLIPImageProcessor`` itself, even where OpenAI's rounding would differ."""
    export_model(methods["clip"], "transformers", tmp_path / "clip")
    export_model(methods["goal"], "transformers", tmp_path / "goal")
    grey_level = 1 / 255 / min(methods["clip"].preprocess.std)  # one 8-bit step, normalised
    odd = picture(107, 64, seed=3)  # 107 - 64 = 43: torchvision rounds the offset 21.5 to 22, GOAL's processor floors
    for name, shown in (("clip", pictures), ("goal", [*pictures, odd])):
        ours = methods[name].preprocess(shown)
        pil = transformers.CLIPProcessor.from_pretrained(tmp_path / name, backend="pil")
        theirs = torch.as_tensor(np.asarray(pil(images=shown, return_tensors="np")["pixel_values"]))
        torch.testing.assert_close(theirs, ours, rtol=0, atol=1e-6)
        default = transformers.CLIPProcessor.from_pretrained(tmp_path / name)
        theirs = torch.as_tensor(np.asarray(default(images=shown, return_tensors="np")["pixel_values"]))
        assert float((theirs - ours).abs().max()) <= grey_level * 1.001


# ---- open_clip ---------------------------------------------------------------------------------

@pytest.mark.parametrize("name", list(WHOLE))
def test_open_clip_local_dir_gives_explorers_embeddings_ids_and_pixels(name, methods, pictures, tmp_path):
    method = methods[name]
    result = export_model(method, "open_clip", tmp_path, backbone_only=not WHOLE[name])
    assert result.whole == WHOLE[name]
    model, _, transform = open_clip.create_model_and_transforms(f"local-dir:{tmp_path}")
    tokenizer = open_clip.get_tokenizer(f"local-dir:{tmp_path}")
    pixels, ids, image, text = explorer_embeddings(method, pictures)
    assert torch.equal(tokenizer(CAPTIONS), ids)  # SimpleTokenizer pads with 0 and cuts as explorer does
    their_pixels = torch.stack([transform(p) for p in pictures])
    torch.testing.assert_close(their_pixels, pixels, rtol=0, atol=1e-6)
    with torch.no_grad():
        their_image, their_text = model.eval().encode_image(pixels), model.encode_text(ids)
    errors = assert_same_embeddings(image, their_image), assert_same_embeddings(text, their_text)
    print(f"open_clip {name}: cosine error image {errors[0]:.1e}, text {errors[1]:.1e}")


def test_longclip_goes_out_with_its_two_tables_folded_into_the_one_it_uses(methods, tmp_path):
    effective = methods["longclip-effective-table"]  # cat(pe[:20], pe_res[20:]) of the released file
    export_model(methods["longclip"], "open_clip", tmp_path / "oc")
    export_model(methods["longclip"], "transformers", tmp_path / "hf")
    model, _, _ = open_clip.create_model_and_transforms(f"local-dir:{tmp_path / 'oc'}")
    assert torch.equal(model.positional_embedding.detach(), effective)
    hf = transformers.CLIPModel.from_pretrained(tmp_path / "hf")
    assert torch.equal(hf.text_model.embeddings.position_embedding.weight.detach(), effective)


def test_open_clip_keeps_the_mean_pooling_that_transformers_cannot(pictures, tmp_path):
    """The demo zoo pools the patch tokens: open_clip's pool_type="avg" says it, CLIPModel cannot."""
    method = tiny("clip", pool="avg", quick_gelu=False)  # exact GELU too: open_clip's default activation
    with pytest.raises(ExportError, match="mean pooling.*--backbone-only"):
        export_model(method, "transformers", tmp_path / "hf")
    assert not (tmp_path / "hf").exists()
    assert export_model(method, "open_clip", tmp_path / "oc").whole
    model, _, _ = open_clip.create_model_and_transforms(f"local-dir:{tmp_path / 'oc'}")
    pixels, ids, image, text = explorer_embeddings(method, pictures)
    with torch.no_grad():
        assert_same_embeddings(image, model.eval().encode_image(pixels))
        assert_same_embeddings(text, model.encode_text(ids))


@pytest.mark.parametrize("fmt", ["transformers", "open_clip"])
def test_the_attention_pool_goes_out_in_neither_library_and_its_backbone_only_when_asked(pictures, fmt, tmp_path):
    """The demo zoo's readout (pool "attn") is ours: refused whole; --backbone-only writes the CLIP without the
    pool's tensors, which the library loads as a class-token CLIP (the text tower the same as explorer's)."""
    method = tiny("clip", pool="attn", quick_gelu=False)
    with pytest.raises(ExportError, match="attention pooling.*--backbone-only"):
        export_model(method, fmt, tmp_path / "refused")
    assert not (tmp_path / "refused").exists()
    result = export_model(method, fmt, tmp_path / "out", backbone_only=True)
    assert "attention pooling" in result.left_out and not result.whole
    pixels, ids, image, text = explorer_embeddings(method, pictures)
    if fmt == "open_clip":
        model, _, _ = open_clip.create_model_and_transforms(f"local-dir:{tmp_path / 'out'}")
        image_out, text_out = model.eval().encode_image, model.encode_text
    else:
        model = transformers.CLIPModel.from_pretrained(tmp_path / "out").eval()
        image_out = lambda p: features(model.get_image_features(pixel_values=p))  # noqa: E731
        text_out = lambda i: features(model.get_text_features(input_ids=i))  # noqa: E731
    with torch.no_grad():
        class_token = method.project_image(method.image_tokens(pixels))[:, 0]
        assert_same_embeddings(class_token, image_out(pixels))
        assert cosine_error(image, image_out(pixels)) > 1e-2  # not the model's own image embedding: said so
        assert_same_embeddings(text, text_out(ids))


# ---- what cannot go out whole ------------------------------------------------------------------

def test_each_built_in_method_says_what_an_export_leaves_out():
    from explorer.models.methods import BUILT_IN, SOURCES

    left = {name: cls.example("tiny").export_left_out("open_clip") for name, cls in discover_methods().items()
            if SOURCES[name] == BUILT_IN}  # an installed plugin (the worked DreamLIP) says its own
    assert {name for name, what in left.items() if what == ""} == {"clip", "longclip", "goal"}
    assert left["seps"] is None  # no CLIP backbone at all
    for name in ("finelip", "flair", "caft", "mulclip"):
        assert left[name], name


def test_a_method_that_cannot_go_out_whole_is_refused_and_exports_its_backbone_when_asked(pictures, tmp_path):
    flair = tiny("flair", quick_gelu=False)
    with pytest.raises(ExportError, match=r"attention pooling.*--backbone-only"):
        export_model(flair, "open_clip", tmp_path / "refused")
    assert not (tmp_path / "refused").exists()
    result = export_model(flair, "transformers", tmp_path / "backbone", backbone_only=True)
    assert "attention pooling" in result.left_out
    about = json.loads((tmp_path / "backbone" / ABOUT).read_text())
    assert about["whole"] is False and about["left_out"] == result.left_out and about["method"] == "flair"
    model = transformers.CLIPModel.from_pretrained(tmp_path / "backbone").eval()
    pixels, ids, image, text = explorer_embeddings(flair, pictures)
    with torch.no_grad():  # the backbone's own global embeddings: FLAIR's class token and EOT
        assert_same_embeddings(image, features(model.get_image_features(pixel_values=pixels)))
        assert_same_embeddings(text, features(model.get_text_features(input_ids=ids)))


def test_a_method_with_modules_of_its_own_that_says_nothing_is_not_exported_whole(tmp_path):
    class WithHead(ClipMethod):  # a plugin's method on the CLIP base that forgot ``export_leaves_out``
        def __init__(self, arch):
            super().__init__(arch)
            self.head = torch.nn.Linear(arch.embed_dim, arch.embed_dim)

    with pytest.raises(ExportError, match=r"own modules \(head\)"):
        export_model(WithHead(ClipMethod.example().arch), "open_clip", tmp_path / "x")


@pytest.mark.parametrize("fmt", ["transformers", "open_clip"])
def test_a_picture_pipeline_neither_library_has_is_refused_before_anything_is_written(fmt, tmp_path):
    class Squashing(ClipMethod):  # LAPS's squash to the square with ImageNet statistics (SEPS's pipeline)
        preprocess_pipeline = "laps"

    with pytest.raises(ExportError, match="laps"):
        export_model(Squashing(ClipMethod.example().arch), fmt, tmp_path / "x")
    assert not (tmp_path / "x").exists()


def test_seps_has_no_clip_backbone_to_export(tmp_path):
    with pytest.raises(ExportError, match="no CLIP backbone"):
        export_model(get_method("seps").example("tiny"), "transformers", tmp_path / "x", backbone_only=True)


def test_an_export_never_writes_into_a_folder_of_other_files(tmp_path):
    (tmp_path / "notes.txt").write_text("mine")
    with pytest.raises(ExportError, match="no earlier export"):
        export_model(tiny("clip"), "open_clip", tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]


# ---- the command -------------------------------------------------------------------------------

def test_the_export_command(tmp_path, capsys):
    from explorer.cli import main
    from explorer.models.io.loading import save_method

    zoo = ["--checkpoints", str(tmp_path / "zoo")]
    flair = save_method(tiny("flair", quick_gelu=False), tmp_path / "tiny-flair.safetensors")
    refused = [*zoo, "export", "--model", str(flair), "--format", "open_clip", "--out", str(tmp_path / "flair")]
    assert main(refused) == 2
    error = capsys.readouterr().err.strip()
    assert error.count("\n") == 0 and "--backbone-only" in error and "attention pooling" in error
    assert not (tmp_path / "flair").exists()
    # issue 66: the refusal names the exact command that succeeds (its scores are not FLAIR's: both flags)
    import shlex

    command = shlex.split(error.split("The command that writes it: ", 1)[1].split(" (its backbone", 1)[0])
    assert command == ["explorer", *refused, "--backbone-only", "--accept-disagreement"], command
    assert main(command[1:]) == 0
    out, err = capsys.readouterr()
    assert {line for line in out.splitlines()} == {str(tmp_path / "flair" / name) for name in
                                                  ("open_clip_config.json", "open_clip_model.safetensors", ABOUT,
                                                   "README.md")}
    assert "left out the text-conditioned attention pooling" in err and "its CLIP backbone" in err
    clip = save_method(tiny("longclip"), tmp_path / "tiny-longclip.safetensors")
    assert main([*zoo, "export", "--model", str(clip), "--format", "transformers", "--out", str(tmp_path / "hf")]) == 0
    out, err = capsys.readouterr()
    assert all((tmp_path / "hf" / line.split("/")[-1]).exists() for line in out.splitlines())
    assert "context 248" in err and "whole" in err
    config = json.loads((tmp_path / "hf" / "config.json").read_text())
    assert config["text_config"]["max_position_embeddings"] == 248
    seps = save_method(get_method("seps").example("tiny"), tmp_path / "tiny-seps.safetensors")
    assert main([*zoo, "export", "--model", str(seps), "--format", "transformers", "--out", str(tmp_path / "s"),
                 "--backbone-only"]) == 2
    assert "no CLIP backbone" in capsys.readouterr().err
