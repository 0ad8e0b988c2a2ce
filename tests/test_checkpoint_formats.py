"""Released checkpoint layouts, written in code at tiny sizes, read back through ``explorer.load``.

Every file here is built in exactly the layout the official code releases
(key names, shapes, wrappers), with random values so that a loader that
reads the wrong tensor, forgets a transpose or fuses q/k/v in the wrong
order is caught. Nothing is downloaded.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field

import pytest
import torch
from torch import nn

import explorer
from explorer.core.errors import CheckpointError, CheckpointMismatchError, ExplorerError, UnsafeCheckpointError
from explorer.models.architecture import ClipArchitecture
from explorer.models.io.checkpoints import KeyReport, read_checkpoint, strict_load
from explorer.models.io.loading import check, load_method, save_method
from explorer.models.methods.clip import ClipMethod
from explorer.models.methods.finelip import FineLipMethod
from explorer.models.methods.flair import FlairMethod

SOT, EOT = 49406, 49407  # CLIP's BPE vocabulary (49408 ids), used by the Hugging Face model
VOCAB = 1000  # the in-code CLIP models keep a small vocabulary (fast); their EOT is id 999, the largest


def tiny_arch(context: int = 77, quick_gelu: bool = True, vision_layers: int = 2, text_layers: int = 1):
    return ClipArchitecture(
        embed_dim=32, image_size=32, patch_size=16, vision_width=64, vision_layers=vision_layers, vision_heads=1,
        vision_mlp_ratio=4.0, context_length=context, vocab_size=VOCAB, text_width=64, text_layers=text_layers,
        text_heads=1, text_mlp_ratio=4.0, quick_gelu=quick_gelu)


def randomized(state: dict, seed: int) -> dict:
    """The same keys and shapes, fresh random values (so every tensor is distinguishable)."""
    gen = torch.Generator().manual_seed(seed)
    return {k: torch.randn(v.shape, generator=gen) * 0.1 if v.is_floating_point() else v.clone()
            for k, v in state.items()}


def openai_ints() -> dict:
    return {"input_resolution": torch.tensor(32), "context_length": torch.tensor(77),
            "vocab_size": torch.tensor(VOCAB)}


def token_ids(lengths, context: int, seed: int = 0, sot: int = VOCAB - 2, eot: int = VOCAB - 1) -> torch.Tensor:
    """SOT, random word ids, EOT, then zero padding; one row per length (SOT and EOT included).

    EOT is the largest id, as in CLIP's vocabulary, so argmax pooling finds it.
    """
    gen = torch.Generator().manual_seed(seed)
    ids = torch.zeros(len(lengths), context, dtype=torch.long)
    for row, n in enumerate(lengths):
        ids[row, 0] = sot
        ids[row, 1:n - 1] = torch.randint(1, sot, (n - 2,), generator=gen)
        ids[row, n - 1] = eot
    return ids


@dataclass
class Case:
    path: object
    expected: dict  # our module's state dict, as the file's tensors should fill it
    method: str
    fmt: str
    context: int
    quick_gelu: bool
    file_tensors: dict = field(default_factory=dict)  # the tensors as stored (unwrapped)


# ---- the released layouts ---------------------------------------------------------------------


def build_openai(tmp_path, seed=1) -> Case:
    """OpenAI CLIP: a plain state dict in OpenAI's key names plus three int tensors."""
    state = randomized(ClipMethod(tiny_arch()).state_dict(), seed)
    stored = {**state, **openai_ints()}
    path = tmp_path / "ViT-tiny-openai.pt"
    torch.save(stored, path)
    return Case(path, state, "clip", "openai-clip", 77, True, stored)


def build_open_clip(tmp_path, seed=2) -> Case:
    """open_clip's trainer: {'epoch', 'name', 'state_dict': {'module.' + key}, 'optimizer'}."""
    state = randomized(ClipMethod(tiny_arch(quick_gelu=False)).state_dict(), seed)
    optimizer = {"state": {}, "param_groups": [{"lr": 1e-4, "weight_decay": 0.2, "params": [0, 1, 2]}]}
    path = tmp_path / "epoch_3.pt"
    torch.save({"epoch": 3, "name": "tiny-run", "state_dict": {"module." + k: v for k, v in state.items()},
                "optimizer": optimizer}, path)
    return Case(path, state, "clip", "open_clip", 77, False, state)


def longclip_tables(seed: int, rows: int = 248, width: int = 64):
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(rows, width, generator=gen), torch.randn(rows, width, generator=gen)


def build_longclip(tmp_path, seed=3) -> Case:
    """longclip-B.pt: OpenAI keys, `positional_embedding` and `positional_embedding_res` both [248, w]."""
    state = randomized(ClipMethod(tiny_arch(context=248)).state_dict(), seed)
    pe, pe_res = longclip_tables(seed + 100)
    stored = {**state, "positional_embedding": pe, "positional_embedding_res": pe_res}
    path = tmp_path / "longclip-tiny.pt"
    torch.save(stored, path)
    expected = {**state, "positional_embedding": torch.cat([pe[:20], pe_res[20:]])}
    return Case(path, expected, "longclip", "longclip", 248, True, stored)


FINELIP_IMAGE = {"dim": 32, "hidden": 10, "n_out": 7}  # defaults would be hidden 6, N' 39
FINELIP_TEXT = {"dim": 32, "hidden": 5, "n_out": 11}


def build_finelip(tmp_path, seed=4) -> Case:
    """FineLIP: Long-CLIP keys + cross_net.aggr_net.* and cross_net.cap_aggr_net.* (plain torch.save)."""
    model = FineLipMethod(tiny_arch(context=248), image_refiner=FINELIP_IMAGE, text_refiner=FINELIP_TEXT)
    state = randomized(model.state_dict(), seed)
    pe, pe_res = longclip_tables(seed + 100)
    stored = {**state, "positional_embedding": pe, "positional_embedding_res": pe_res}
    for prefix in ("cross_net.aggr_net.", "cross_net.cap_aggr_net."):  # the released key names, spelled out
        for i in (0, 1, 3):
            assert f"{prefix}weight.{i}.weight" in stored and f"{prefix}weight.{i}.bias" in stored
        assert stored[prefix + "scale"].shape == (1, 1, 1)
    path = tmp_path / "finelip-tiny.pt"
    torch.save(stored, path)
    expected = {**state, "positional_embedding": torch.cat([pe[:20], pe_res[20:]])}
    return Case(path, expected, "finelip", "finelip", 248, True, stored)


def build_flair(tmp_path, seed=5) -> Case:
    """FLAIR: {'state_dict': {'module.' + key}}, image_post.proj / text_post.proj, no text_projection."""
    state = randomized(FlairMethod(tiny_arch(quick_gelu=False)).state_dict(), seed)
    released = {("image_post.proj" if k == "visual.proj" else "text_post.proj" if k == "text_projection" else k): v
                for k, v in state.items()}
    assert "text_projection" not in released and "visual.proj" not in released
    assert released["image_post.proj"].shape == (64, 32) and released["text_post.proj"].shape == (64, 32)
    assert released["visual_proj.attn.in_proj_weight"].shape == (3 * 32, 32)
    for ln in ("ln_q", "ln_k", "ln_v"):
        assert f"visual_proj.{ln}.weight" in released and f"visual_proj.{ln}.bias" in released
    assert "logit_scale" in released and "logit_bias" in released
    path = tmp_path / "flair-tiny.pt"
    torch.save({"epoch": 10, "state_dict": {"module." + k: v for k, v in released.items()}}, path)
    return Case(path, state, "flair", "flair", 77, False, released)


# ---- GOAL: a real transformers CLIPModel ------------------------------------------------------


@pytest.fixture(scope="module")
def hf_clip():
    from explorer.core.compat import ensure_torchvision_importable

    ensure_torchvision_importable()  # before transformers: its image utilities import torchvision
    from transformers import CLIPConfig, CLIPModel

    config = CLIPConfig(
        text_config=dict(vocab_size=49408, hidden_size=64, intermediate_size=256, num_hidden_layers=1,
                         num_attention_heads=1, max_position_embeddings=248, hidden_act="quick_gelu",
                         bos_token_id=SOT, eos_token_id=EOT, layer_norm_eps=1e-5),
        vision_config=dict(hidden_size=64, intermediate_size=256, num_hidden_layers=2, num_attention_heads=1,
                           image_size=32, patch_size=16, hidden_act="quick_gelu", layer_norm_eps=1e-5),
        projection_dim=32)
    torch.manual_seed(0)
    model = CLIPModel(config).eval()
    gen = torch.Generator().manual_seed(7)
    with torch.no_grad():  # move every tensor off its init value (LayerNorms stay near 1)
        for param in model.parameters():
            param.add_(torch.randn(param.shape, generator=gen) * 0.05)
    assert model.text_model.eos_token_id == EOT  # pool at the first EOT == argmax for well-formed ids
    return model


def hf_expected(hf: dict, vision_layers: int = 2, text_layers: int = 1) -> dict:
    """Our (OpenAI-layout) state dict from HF tensors: q/k/v fused in order, projections transposed."""
    out = {
        "visual.class_embedding": hf["vision_model.embeddings.class_embedding"],
        "visual.conv1.weight": hf["vision_model.embeddings.patch_embedding.weight"],
        "visual.positional_embedding": hf["vision_model.embeddings.position_embedding.weight"],
        "visual.ln_pre.weight": hf["vision_model.pre_layrnorm.weight"],
        "visual.ln_pre.bias": hf["vision_model.pre_layrnorm.bias"],
        "visual.ln_post.weight": hf["vision_model.post_layernorm.weight"],
        "visual.ln_post.bias": hf["vision_model.post_layernorm.bias"],
        "visual.proj": hf["visual_projection.weight"].T,
        "token_embedding.weight": hf["text_model.embeddings.token_embedding.weight"],
        "positional_embedding": hf["text_model.embeddings.position_embedding.weight"],
        "ln_final.weight": hf["text_model.final_layer_norm.weight"],
        "ln_final.bias": hf["text_model.final_layer_norm.bias"],
        "text_projection": hf["text_projection.weight"].T,
        "logit_scale": hf["logit_scale"],
    }
    block = {"self_attn.out_proj": "attn.out_proj", "layer_norm1": "ln_1", "layer_norm2": "ln_2",
             "mlp.fc1": "mlp.c_fc", "mlp.fc2": "mlp.c_proj"}
    for tower, ours, layers in (("vision_model.", "visual.transformer.resblocks.", vision_layers),
                                ("text_model.", "transformer.resblocks.", text_layers)):
        for i in range(layers):
            src, dst = f"{tower}encoder.layers.{i}.", f"{ours}{i}."
            for kind in ("weight", "bias"):
                out[f"{dst}attn.in_proj_{kind}"] = torch.cat(
                    [hf[f"{src}self_attn.{p}_proj.{kind}"] for p in ("q", "k", "v")])
                for a, b in block.items():
                    out[f"{dst}{b}.{kind}"] = hf[f"{src}{a}.{kind}"]
    return out


def build_goal(tmp_path, hf_model, with_position_ids: bool = True) -> Case:
    """GOAL: a Hugging Face CLIPModel state dict with a 248-row text position table."""
    hf = {k: v.detach().clone() for k, v in hf_model.state_dict().items()}
    assert hf["text_model.embeddings.position_embedding.weight"].shape == (248, 64)
    stored = dict(hf)
    if with_position_ids:  # older transformers saved these index buffers
        stored["text_model.embeddings.position_ids"] = torch.arange(248)[None]
        stored["vision_model.embeddings.position_ids"] = torch.arange(5)[None]
    path = tmp_path / "goal-tiny.pth"
    torch.save(stored, path)
    return Case(path, hf_expected(hf), "goal", "goal-hf", 248, True, stored)


BUILDERS = {"openai": build_openai, "open_clip": build_open_clip, "longclip": build_longclip,
            "finelip": build_finelip, "flair": build_flair}


@pytest.fixture(params=[*BUILDERS, "goal"])
def case(request, tmp_path):
    if request.param == "goal":
        return build_goal(tmp_path, request.getfixturevalue("hf_clip"))
    return BUILDERS[request.param](tmp_path)


# ---- 1. every layout loads, into the right tensors --------------------------------------------


def test_released_layout_loads_exactly(case):
    model = explorer.load(case.path, device="cpu")
    assert model.method_name == case.method
    assert model.key_report.format == case.fmt
    assert model.key_report.ok, model.key_report.summary()
    assert model.context_length == case.context
    assert model.method.arch.quick_gelu is case.quick_gelu
    loaded = model.method.state_dict()
    assert set(loaded) == set(case.expected), "every parameter of the model is filled from the file"
    wrong = [k for k, v in case.expected.items() if not torch.equal(loaded[k], v)]
    assert not wrong, f"loaded tensors differ from the file's: {wrong}"
    assert model.key_report.n_loaded == len(case.expected)

    result = check(case.path)
    assert (result.format, result.method, result.context_length) == (case.fmt, case.method, case.context)
    assert result.report.ok


def test_openai_int_tensors_are_listed_as_ignored(tmp_path):
    case = build_openai(tmp_path)
    report = explorer.load(case.path, device="cpu").key_report
    for key in ("input_resolution", "context_length", "vocab_size"):
        assert report.ignored.get(key), f"{key} must be reported as ignored, with a reason"
    assert report.ok
    assert "ignored" in report.summary() and "input_resolution" in report.summary()


def test_open_clip_wrapper_and_gelu_note(tmp_path):
    case = build_open_clip(tmp_path)
    model = explorer.load(case.path, device="cpu")
    assert isinstance(model.method.visual.transformer.resblocks[0].mlp.gelu, nn.GELU)
    assert any("GELU" in note for note in model.key_report.notes)
    result = check(case.path)
    assert "state_dict" in result.wrapper and "module." in result.wrapper
    # the OpenAI file, by contrast, runs QuickGELU
    openai = explorer.load(build_openai(tmp_path).path, device="cpu")
    assert not isinstance(openai.method.visual.transformer.resblocks[0].mlp.gelu, nn.GELU)


def test_longclip_uses_both_tables(tmp_path):
    case = build_longclip(tmp_path)
    model = explorer.load(case.path, device="cpu")
    table = model.method.positional_embedding.detach()
    pe, pe_res = case.file_tensors["positional_embedding"], case.file_tensors["positional_embedding_res"]
    assert table.shape == (248, 64)
    assert torch.equal(table[:20], pe[:20])
    assert torch.equal(table[20:], pe_res[20:])
    assert not torch.equal(table, pe), "reading only positional_embedding is wrong beyond token 20"
    assert any("positional_embedding_res" in note for note in model.key_report.notes)
    # the text tower really uses it: a 248-token caption changes if pe_res changes past row 20
    ids = token_ids([248, 120], 248)
    before = model.method.encode_text(ids).eot
    with torch.no_grad():
        model.method.positional_embedding[20:] = pe[20:]
    assert not torch.allclose(model.method.encode_text(ids).eot, before)


def test_longclip_single_table_file(tmp_path):
    """A Long-CLIP-sized file with only `positional_embedding` [248] is read as such, not as CLIP."""
    state = randomized(ClipMethod(tiny_arch(context=248)).state_dict(), 9)
    path = tmp_path / "stretched.pt"
    torch.save(state, path)
    model = explorer.load(path, device="cpu")
    assert model.method_name == "longclip" and model.key_report.format == "longclip-single-table"
    assert torch.equal(model.method.positional_embedding.detach(), state["positional_embedding"])


def test_finelip_sizes_come_from_tensors(tmp_path):
    case = build_finelip(tmp_path)
    model = explorer.load(case.path, device="cpu")
    cross = model.method.cross_net
    assert (cross.aggr_net.n_out, cross.aggr_net.weight[1].out_features) == (7, 10)
    assert (cross.cap_aggr_net.n_out, cross.cap_aggr_net.weight[1].out_features) == (11, 5)
    assert torch.equal(model.method.positional_embedding.detach(), case.expected["positional_embedding"])
    method = model.method
    with torch.no_grad():
        image = method.encode_image(torch.randn(2, 3, 32, 32))
        text = method.encode_text(token_ids([30, 248], 248))
        assert method.refined_image_tokens(image).shape == (2, 1 + 7, 32)
        assert method.refined_text_tokens(text).shape == (2, 11 + 1, 32)
        scores = method.similarity(image, text)
    assert scores.shape == (2, 2) and torch.isfinite(scores).all()


def test_flair_projections_and_pooling(tmp_path):
    case = build_flair(tmp_path)
    model = explorer.load(case.path, device="cpu")
    method = model.method
    assert torch.equal(method.visual.proj.detach(), case.file_tensors["image_post.proj"])
    assert torch.equal(method.text_projection.detach(), case.file_tensors["text_post.proj"])
    assert torch.equal(method.logit_bias.detach(), case.file_tensors["logit_bias"])
    assert torch.equal(method.visual_proj.attn.in_proj_weight.detach(),
                       case.file_tensors["visual_proj.attn.in_proj_weight"])
    assert method.visual_proj.attn.add_zero_attn
    assert isinstance(method.visual.transformer.resblocks[0].mlp.gelu, nn.GELU)
    with torch.no_grad():
        scores = method.similarity(method.encode_image(torch.randn(2, 3, 32, 32)),
                                   method.encode_text(token_ids([10, 77], 77)))
    assert scores.shape == (2, 2) and torch.isfinite(scores).all()


def test_goal_conversion_and_position_ids(tmp_path, hf_clip):
    case = build_goal(tmp_path, hf_clip)
    model = explorer.load(case.path, device="cpu")
    report = model.key_report
    for key in ("text_model.embeddings.position_ids", "vision_model.embeddings.position_ids"):
        assert report.ignored.get(key), f"{key} must be listed as ignored"
    hf = case.file_tensors
    block = model.method.transformer.resblocks[0].attn
    q, k, v = block.in_proj_weight.detach().chunk(3)
    assert torch.equal(q, hf["text_model.encoder.layers.0.self_attn.q_proj.weight"])
    assert torch.equal(k, hf["text_model.encoder.layers.0.self_attn.k_proj.weight"])
    assert torch.equal(v, hf["text_model.encoder.layers.0.self_attn.v_proj.weight"])
    assert torch.equal(model.method.visual.proj.detach(), hf["visual_projection.weight"].T)
    assert torch.equal(model.method.text_projection.detach(), hf["text_projection.weight"].T)
    # a file saved by newer transformers (no position_ids buffers) is just as clean
    (tmp_path / "newer").mkdir()
    newer = build_goal(tmp_path / "newer", hf_clip, with_position_ids=False)
    report = explorer.load(newer.path, device="cpu").key_report
    assert report.ok and not report.ignored


# ---- 2. GOAL numerics against transformers ----------------------------------------------------


def _features(output):
    return output if torch.is_tensor(output) else output.pooler_output


def test_goal_matches_transformers(tmp_path, hf_clip):
    case = build_goal(tmp_path, hf_clip)
    method = explorer.load(case.path, device="cpu").method
    pixels = torch.randn(2, 3, 32, 32, generator=torch.Generator().manual_seed(3))
    ids = token_ids([12, 248, 90], 248, seed=4, sot=SOT, eot=EOT)  # one caption fills all 248 positions
    with torch.no_grad():
        ours_image = method.encode_image(pixels).cls
        ours_text = method.encode_text(ids).eot
        hf_image = _features(hf_clip.get_image_features(pixel_values=pixels))
        hf_text = _features(hf_clip.get_text_features(input_ids=ids))
    assert ours_image.shape == hf_image.shape == (2, 32)
    assert ours_text.shape == hf_text.shape == (3, 32)
    torch.testing.assert_close(ours_image, hf_image, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(ours_text, hf_text, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(method.logit_scale.detach(), hf_clip.logit_scale.detach())


# ---- 3. strictness ----------------------------------------------------------------------------


def _save_openai_variant(tmp_path, name, change):
    state = {**randomized(ClipMethod(tiny_arch()).state_dict(), 11), **openai_ints()}
    change(state)
    path = tmp_path / name
    torch.save(state, path)
    return path


def _expect_mismatch(path, key, kind):
    with pytest.raises(CheckpointMismatchError) as info:
        explorer.load(path, device="cpu")
    message = str(info.value)
    assert key in message and str(path) in message, message
    report = info.value.report
    named = [k for k, *_ in report.mismatched] if kind == "mismatched" else getattr(report, kind)
    assert key in named
    with pytest.raises(CheckpointMismatchError):  # `models check` says the same without loading
        check(path)
    return info.value


def test_extra_key_is_an_error(tmp_path):
    path = _save_openai_variant(tmp_path, "extra.pt", lambda s: s.__setitem__("visual.adapter.weight", torch.ones(3)))
    error = _expect_mismatch(path, "visual.adapter.weight", "unexpected")
    assert error.report.unexpected == ["visual.adapter.weight"] and not error.report.missing


def test_missing_key_is_an_error(tmp_path):
    path = _save_openai_variant(tmp_path, "missing.pt", lambda s: s.pop("transformer.resblocks.0.ln_2.bias"))
    error = _expect_mismatch(path, "transformer.resblocks.0.ln_2.bias", "missing")
    assert error.report.missing == ["transformer.resblocks.0.ln_2.bias"] and not error.report.unexpected


def test_wrong_shape_is_an_error(tmp_path):
    path = _save_openai_variant(tmp_path, "shape.pt", lambda s: s.__setitem__("visual.ln_post.bias", torch.ones(63)))
    error = _expect_mismatch(path, "visual.ln_post.bias", "mismatched")
    assert error.report.mismatched == [("visual.ln_post.bias", (63,), (64,))]


def test_goal_extra_and_incomplete_attention_are_errors(tmp_path, hf_clip):
    """GOAL's official loader uses strict=False; ours names what does not fit."""
    hf = {k: v.clone() for k, v in hf_clip.state_dict().items()}
    extra = {**hf, "text_model.pooler.weight": torch.ones(2)}
    torch.save(extra, tmp_path / "extra.pth")
    with pytest.raises(CheckpointMismatchError, match="text_model.pooler.weight"):
        explorer.load(tmp_path / "extra.pth", device="cpu")
    hf.pop("vision_model.encoder.layers.1.self_attn.k_proj.weight")
    torch.save(hf, tmp_path / "no_k.pth")
    with pytest.raises(CheckpointMismatchError) as info:
        explorer.load(tmp_path / "no_k.pth", device="cpu")
    assert "visual.transformer.resblocks.1.attn.in_proj_weight" in info.value.report.missing
    assert "vision_model.encoder.layers.1.self_attn.q_proj.weight" in info.value.report.unexpected


def test_strict_load_touches_nothing_on_mismatch():
    model = ClipMethod(tiny_arch())
    before = {k: v.clone() for k, v in model.state_dict().items()}
    tensors = randomized(before, 12)
    tensors["unexpected.weight"] = torch.ones(1)
    with pytest.raises(CheckpointMismatchError, match="unexpected.weight"):
        strict_load(model, tensors, KeyReport(source="memory", format="openai-clip"))
    assert all(torch.equal(model.state_dict()[k], v) for k, v in before.items()), "nothing may be loaded"


# ---- 4. safety --------------------------------------------------------------------------------


def test_pickled_objects_need_an_explicit_opt_in(tmp_path):
    state = randomized(ClipMethod(tiny_arch()).state_dict(), 13)
    path = tmp_path / "model_best.pth"
    torch.save({"model": state, "opt": argparse.Namespace(lr=1e-4, batch_size=32), "epoch": 4}, path)
    with pytest.raises(UnsafeCheckpointError, match="allow_pickle"):
        explorer.load(path, device="cpu")
    with pytest.raises(UnsafeCheckpointError):
        check(path)
    model = explorer.load(path, device="cpu", allow_pickle=True)
    assert model.method_name == "clip" and model.key_report.ok
    assert torch.equal(model.method.visual.proj.detach(), state["visual.proj"])
    raw = read_checkpoint(path, allow_pickle=True)
    assert isinstance(raw.extras["opt"], argparse.Namespace)


CORRUPT = {
    "random.pt": bytes((i * 37 + 11) % 256 for i in range(4096)),
    "zeros.pth": b"\x00" * 100,
    "empty.pt": b"",
    "notes.pt": b"hello world, this is not a checkpoint\n" * 20,
    "random.safetensors": bytes((i * 53 + 7) % 256 for i in range(4096)),
    "broken-zip.bin": b"PK\x03\x04" + bytes(range(200)),
}


@pytest.mark.parametrize("name", list(CORRUPT))
def test_corrupt_files_say_so(tmp_path, name):
    path = tmp_path / name
    path.write_bytes(CORRUPT[name])
    for allow_pickle in (False, True):
        with pytest.raises(CheckpointError) as info:
            explorer.load(path, device="cpu", allow_pickle=allow_pickle)
        assert not isinstance(info.value, UnsafeCheckpointError), \
            f"a corrupt file is not an 'unsafe' one: {info.value}"
        assert str(path) in str(info.value) and "Cannot read" in str(info.value)


def test_truncated_checkpoint(tmp_path):
    good = build_openai(tmp_path).path
    data = good.read_bytes()
    path = tmp_path / "truncated.pt"
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(CheckpointError, match="Cannot read"):
        explorer.load(path, device="cpu")


def test_missing_path(tmp_path):
    missing = tmp_path / "nowhere" / "longclip-B.pt"
    with pytest.raises(CheckpointError, match="No weights file"):
        check(missing)
    with pytest.raises(CheckpointError, match="No weights file"):
        load_method(missing)
    with pytest.raises(ExplorerError, match="longclip-B"):  # explorer.load falls back to the zoo names
        explorer.load(missing, device="cpu", zoo_root=tmp_path)
    with pytest.raises(CheckpointError, match="folder"):
        check(tmp_path)


@pytest.mark.parametrize("name", ["finelip", "flair"])  # both carry a config beyond the architecture
def test_safetensors_round_trip(tmp_path, name):
    first = explorer.load(BUILDERS[name](tmp_path).path, device="cpu")
    path = save_method(first.method, tmp_path / "saved" / f"{name}.safetensors")
    second = explorer.load(path, device="cpu")
    assert second.method_name == first.method_name
    assert second.key_report.ok and second.key_report.format == f"explorer ({first.method_name})"
    assert not second.key_report.ignored and not second.key_report.missing
    assert second.context_length == first.context_length
    assert second.method.config() == first.method.config()
    a, b = first.method.state_dict(), second.method.state_dict()
    assert set(a) == set(b) and all(torch.equal(a[k], b[k]) for k in a)
    pixels = torch.randn(2, 3, 32, 32, generator=torch.Generator().manual_seed(5))
    ids = token_ids([9, first.context_length], first.context_length)
    with torch.no_grad():
        out = [(m.method.encode_image(pixels), m.method.encode_text(ids)) for m in (first, second)]
        sims = [m.method.similarity(*o) for m, o in zip((first, second), out)]
    assert torch.equal(out[0][0].cls, out[1][0].cls) and torch.equal(out[0][0].patches, out[1][0].patches)
    assert torch.equal(out[0][1].eot, out[1][1].eot) and torch.equal(out[0][1].tokens, out[1][1].tokens)
    assert torch.equal(sims[0], sims[1])
    assert check(path).format == f"explorer ({first.method_name})"


# ---- 5. OpenAI's original TorchScript archive -------------------------------------------------


class _Node(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x


class _ScriptedClip(nn.Module):
    """A scriptable module whose state dict has exactly the given keys (nested like OpenAI's JIT model)."""

    def __init__(self, state: dict):
        super().__init__()
        for key, value in state.items():
            *path, leaf = key.split(".")
            module = self
            for part in path:
                if part not in module._modules:
                    module.add_module(part, _Node())
                module = module._modules[part]
            if value.is_floating_point():
                module.register_parameter(leaf, nn.Parameter(value.clone()))
            else:
                module.register_buffer(leaf, value.clone())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x


def test_torchscript_archive(tmp_path):
    state = randomized(ClipMethod(tiny_arch()).state_dict(), 14)
    scripted = torch.jit.script(_ScriptedClip({**state, **openai_ints()}))
    path = tmp_path / "ViT-tiny.pt"
    scripted.save(str(path))
    with pytest.raises(UnsafeCheckpointError, match="TorchScript archive"):  # it runs its program: opt-in only
        check(path)
    model = explorer.load(path, device="cpu", allow_pickle=True)
    assert model.method_name == "clip" and model.key_report.format == "openai-clip"
    assert model.key_report.ok, model.key_report.summary()
    assert set(model.key_report.ignored) >= {"input_resolution", "context_length", "vocab_size"}
    loaded = model.method.state_dict()
    assert all(torch.equal(loaded[k], v) for k, v in state.items())
    result = check(path, allow_pickle=True)
    assert result.wrapper == "torchscript" and result.format == "openai-clip"


def pooled_tiny(method_name: str, **pool):
    """A tiny model of the method with ``pool`` set on its architecture, and two random pictures."""
    import dataclasses

    from explorer.models.methods import get_method
    from explorer.models.methods.clip import example_architecture

    arch = dataclasses.replace(example_architecture("tiny", 77), **pool)
    torch.manual_seed(0)
    model = get_method(method_name)(arch).eval()
    return model, torch.randn(2, 3, arch.image_size, arch.image_size)


@pytest.mark.parametrize("method_name", ["clip", "goal"])
def test_average_pool_makes_the_global_embedding_the_mean_patch_and_is_saved(tmp_path, method_name):
    from explorer.models.architecture import ClipArchitecture
    from explorer.models.io.loading import load_method, save_method

    model, pixels = pooled_tiny(method_name, pool="avg")
    arch = model.arch
    assert arch.name.endswith("-avgpool")
    with torch.no_grad():
        features = model.encode_image(pixels)
    assert torch.allclose(features.cls, features.patches.mean(dim=1), atol=1e-6)
    path = save_method(model, tmp_path / "avg.safetensors")
    loaded, report = load_method(path)
    assert loaded.arch.pool == "avg" and not report.missing and not report.unexpected
    with torch.no_grad():
        assert torch.allclose(loaded.encode_image(pixels).cls, features.cls, atol=1e-6)
    with pytest.raises(ExplorerError, match="pool"):
        ClipArchitecture(**{**arch.to_dict(), "pool": "max"})


@pytest.mark.parametrize("method_name", ["clip", "goal"])
def test_attention_pool_weights_the_patch_values_and_is_saved_with_its_heads(tmp_path, method_name):
    """pool "attn": with one head the global embedding is the attention-weighted mean of the patch features
    (the pool's values), so maps compare sentences with what the embedding mixes; keys carry place, so moving
    the same content to another patch changes the weights; the file holds the pool and its head count."""
    from explorer.models.io.loading import load_method, save_method

    model, pixels = pooled_tiny(method_name, pool="attn", pool_heads=1)
    arch = model.arch
    assert arch.name.endswith("-attnpool")
    with torch.no_grad():
        features = model.encode_image(pixels)
        projected = model.project_image(model.image_tokens(pixels)).double()
        model.image_pool.double()  # float64 for the place checks: an untrained pool's weights differ by 1e-5
        weights = model.image_pool.weights(projected[:, 1:])[:, 0]  # [B, P], the one head
        same = torch.einsum("bp,bpd->bd", weights.float(), features.patches)
        assert torch.allclose(features.cls, same, atol=1e-5)
        assert not torch.allclose(features.cls, features.patches.mean(dim=1), atol=1e-3)
        rolled = model.image_pool.weights(projected[:, 1:].roll(1, dims=1))[:, 0]
        assert (rolled - weights.roll(1, dims=1)).abs().max() > 1e-6  # the keys know each patch's place
        model.image_pool.position.zero_()  # without the position embedding, moving the content moves the weights
        unplaced = model.image_pool.weights(projected[:, 1:])[:, 0]
        rolled = model.image_pool.weights(projected[:, 1:].roll(1, dims=1))[:, 0]
        assert torch.allclose(rolled, unplaced.roll(1, dims=1), atol=1e-12)
        model.float()
    path = save_method(model, tmp_path / "attn.safetensors")
    loaded, report = load_method(path)
    assert (loaded.arch.pool, loaded.arch.pool_heads) == ("attn", 1) and report.ok, report.summary()
    with torch.no_grad():
        assert torch.allclose(loaded.encode_image(pixels).cls, model.encode_image(pixels).cls, atol=1e-6)
    with pytest.raises(ExplorerError, match="pool_heads"):
        ClipArchitecture(**{**arch.to_dict(), "pool_heads": 5})
