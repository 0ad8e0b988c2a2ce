"""SDXL with a long text tower swapped in: a tiny SDXL built in code, saved as a diffusers folder and
loaded through the same path as a real one."""

from __future__ import annotations

import json
import shutil
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from explorer.core.background import BackgroundWorker, Task, TaskStopped
from explorer.core.errors import CaptionError
from explorer.generation.conditioning import check_tower, stock_conditioning
from explorer.generation.generate import CUT_MARK, Generator, mark_stock_cut
from explorer.generation.sdxl_source import SdxlError, SdxlOptions, check_source, load_pipeline
from explorer.generation.settings import GenerationSettings
from explorer.generation.tiny_sdxl import build_tiny_sdxl
from explorer.models.methods.clip import ClipMethod, LongClipMethod
from explorer.models.model import Model
from explorer.models.nn.positional import stretch_positions
from explorer.models.tokenizer import CLIP_TOKENS, tokenize

SHORT = "A red cube sits on the left. A blue ball rests on the right."
FILLER = " ".join(["A small green cone stands behind them."] * 9)  # pushes the last sentence past token 77
LATE = "A {} star hangs at the top."
CPU = torch.device("cpu")


def long_prompt(colour: str = "yellow") -> str:
    return f"{SHORT} {FILLER} {LATE.format(colour)}"


@pytest.fixture(scope="module")
def sdxl_dir(tmp_path_factory):
    return build_tiny_sdxl(tmp_path_factory.mktemp("sdxl") / "sdxl-tiny")


@pytest.fixture(scope="module")
def models():
    return {"tiny-longclip": Model(LongClipMethod.example(seed=1), name="tiny-longclip", device="cpu"),
            "tiny-longclip-2": Model(LongClipMethod.example(seed=2), name="tiny-longclip-2", device="cpu"),
            "tiny-clip": Model(ClipMethod.example(), name="tiny-clip", device="cpu")}


@pytest.fixture(scope="module")
def generator(models):
    return Generator(load_model=models.__getitem__)


@pytest.fixture(scope="module")
def pipe(generator, sdxl_dir):
    return generator.pipeline(settings(sdxl_dir))


def settings(sdxl_dir, **changes) -> GenerationSettings:
    base = dict(prompt=long_prompt(), models=["tiny-longclip"], seeds=[0], steps=2, size=64, guidance=5.0,
                sdxl=str(sdxl_dir), device="cpu")
    return GenerationSettings(**{**base, **changes})


def pixels(image) -> np.ndarray:
    return np.asarray(image, dtype=np.int16)


def test_the_prompt_really_crosses_77_tokens_where_the_test_needs_it():
    assert CLIP_TOKENS.count(long_prompt()) > 77
    assert CLIP_TOKENS.budget(f"{SHORT} {FILLER}", 77).n_cut > 0  # the late sentence starts past the cut
    assert CLIP_TOKENS.count(long_prompt()) <= 248


def test_swapped_embeddings_have_the_shapes_sdxl_expects(pipe, generator, sdxl_dir):
    conditioning = generator.conditioning("tiny-longclip", pipe, settings(sdxl_dir))
    long_width, bigg_width = 64, pipe.text_encoder_2.config.hidden_size
    assert conditioning.prompt_embeds.shape == (1, 248, long_width + bigg_width)
    assert long_width + bigg_width == pipe.unet.config.cross_attention_dim
    assert conditioning.pooled.shape == (1, pipe.text_encoder_2.config.projection_dim)
    # empty negative prompt + force_zeros_for_empty_prompt: zeros, as stock SDXL
    assert conditioning.negative_embeds.shape == conditioning.prompt_embeds.shape
    assert torch.count_nonzero(conditioning.negative_embeds) == 0 and torch.count_nonzero(conditioning.negative_pooled) == 0
    with_negative = generator.conditioning("tiny-longclip", pipe, settings(sdxl_dir, negative="blurry, dark"))
    assert torch.count_nonzero(with_negative.negative_embeds) > 0
    stock = stock_conditioning(pipe, long_prompt(), "", 5.0, CPU)
    assert stock.prompt_embeds.shape == (1, 77, long_width + bigg_width)


def test_the_long_tower_reads_its_last_layer_after_the_final_layernorm(pipe, generator, models, sdxl_dir):
    method = models["tiny-longclip"].method
    ids = tokenize([long_prompt()], 248).ids
    last = generator.conditioning("tiny-longclip", pipe, settings(sdxl_dir)).prompt_embeds[..., :64]
    torch.testing.assert_close(last, method.text_tokens(ids), rtol=0, atol=1e-5)
    # penultimate: the states entering the last block, without the final LayerNorm (stock SDXL's choice)
    with torch.no_grad():
        x = method.token_embedding(ids) + method.positional_embedding
        for block in method.transformer.resblocks[:-1]:
            x = block(x, attn_mask=method.attn_mask)
    penultimate = generator.conditioning("tiny-longclip", pipe, settings(sdxl_dir, layer="penultimate"))
    torch.testing.assert_close(penultimate.prompt_embeds[..., :64], x, rtol=0, atol=1e-5)


def test_bigg_is_stretched_by_the_knowledge_preserving_rule_and_shares_its_weights(pipe, generator, sdxl_dir):
    conditioner = generator.conditioner("tiny-longclip", pipe)
    original = pipe.text_encoder_2.get_input_embeddings().weight
    table = dict(pipe.text_encoder_2.state_dict())
    key = next(k for k in table if k.endswith("position_embedding.weight"))
    stretched = dict(conditioner.bigg.state_dict())[key]
    assert stretched.shape == (248, table[key].shape[1])
    torch.testing.assert_close(stretched, stretch_positions(table[key]))
    torch.testing.assert_close(stretched[:20], table[key][:20], rtol=0, atol=0)
    assert conditioner.bigg.get_input_embeddings().weight.data_ptr() == original.data_ptr()  # not copied
    assert pipe.text_encoder_2.config.max_position_embeddings == 77  # the stock encoder is untouched


def test_a_word_past_token_77_changes_the_swapped_picture_and_not_the_stock_one(generator, sdxl_dir):
    first = generator.run(settings(sdxl_dir, prompt=long_prompt("yellow"), stock=True))
    second = generator.run(settings(sdxl_dir, prompt=long_prompt("purple"), stock=True))
    assert np.array_equal(pixels(first.picture("stock", 0)), pixels(second.picture("stock", 0)))
    assert not np.array_equal(pixels(first.picture("tiny-longclip", 0)), pixels(second.picture("tiny-longclip", 0)))
    pipe = generator.pipeline(settings(sdxl_dir))
    a = generator.conditioning("tiny-longclip", pipe, settings(sdxl_dir, prompt=long_prompt("yellow")))
    b = generator.conditioning("tiny-longclip", pipe, settings(sdxl_dir, prompt=long_prompt("purple")))
    changed = (a.prompt_embeds - b.prompt_embeds).abs().amax(dim=-1)[0]
    assert changed[:77].max() == 0 and changed[77:].max() > 0  # causal: only positions from the word on
    assert CUT_MARK in first.stock_prompt and "yellow" in first.stock_prompt.split(CUT_MARK)[1]


def test_a_seed_draws_the_same_picture_again_and_another_seed_another(generator, sdxl_dir):
    one = generator.run(settings(sdxl_dir, seeds=[3, 4]))
    again = generator.run(settings(sdxl_dir, seeds=[3]))
    assert np.array_equal(pixels(one.picture("tiny-longclip", 3)), pixels(again.picture("tiny-longclip", 3)))
    assert not np.array_equal(pixels(one.picture("tiny-longclip", 3)), pixels(one.picture("tiny-longclip", 4)))


def test_columns_share_seed_scheduler_and_settings_and_a_third_model_adds_a_column(generator, sdxl_dir):
    result = generator.run(settings(sdxl_dir, models=["tiny-longclip", "tiny-longclip-2"], stock=True, seeds=[0, 1]))
    assert [(p.column, p.seed) for p in result.pictures] == [
        (c, s) for s in (0, 1) for c in ("stock", "tiny-longclip", "tiny-longclip-2")]
    assert result.settings.scheduler == "EulerDiscreteScheduler"
    assert set(result.reads) == {"stock", "tiny-longclip", "tiny-longclip-2"}
    assert "penultimate" in result.reads["stock"] and "last layer" in result.reads["tiny-longclip"]


def test_progress_is_reported_per_step_and_a_stop_ends_the_run_between_steps(generator, sdxl_dir):
    seen = []
    generator.run(settings(sdxl_dir, steps=3, stock=True), progress=lambda d, t, phase: seen.append((d, t)))
    assert seen == [(i, 6) for i in range(1, 7)]
    calls = []
    with pytest.raises(TaskStopped):
        generator.run(settings(sdxl_dir, steps=5), progress=lambda d, t, p: calls.append(d),
                      should_stop=lambda: len(calls) >= 2)
    assert calls == [1, 2]


def test_generation_in_the_background_worker_can_be_cancelled(generator, sdxl_dir):
    worker = BackgroundWorker("test-generation")
    task = Task(key="g", title="generation")
    stops = []
    worker.submit(task, lambda t: generator.run(settings(sdxl_dir, steps=50), progress=t.progress,
                                                should_stop=lambda: stops.append(1) or t.done >= 3))
    import time

    deadline = time.monotonic() + 60
    while task.active and time.monotonic() < deadline:
        time.sleep(0.02)
    assert task.state == "stopped" and task.done == 3
    worker.shutdown()


# ---- export -----------------------------------------------------------------------------------

def test_the_exported_text_encoder_loads_as_a_plain_clip_text_model_with_the_same_hidden_states(models, tmp_path):
    from safetensors import safe_open
    from transformers import CLIPTextModel, CLIPTokenizer

    from explorer.generation.export import export_text_encoder

    model = models["tiny-longclip"]
    export_text_encoder(model.text_tower(), tmp_path / "enc", name=model.name)
    encoder = CLIPTextModel.from_pretrained(tmp_path / "enc")
    tokenizer = CLIPTokenizer.from_pretrained(tmp_path / "enc")
    assert encoder.config.max_position_embeddings == 248 and tokenizer.model_max_length == 248
    with safe_open(str(tmp_path / "enc" / "model.safetensors"), "pt") as file:
        assert all(key.startswith("text_model.") for key in file.keys())  # SDXL's own text_encoder layout
    prompt = long_prompt()
    ours = tokenize([prompt], 248).ids
    theirs = tokenizer(prompt, return_tensors="pt").input_ids
    assert torch.equal(theirs[0], ours[0, : theirs.shape[1]])
    with torch.no_grad():
        hidden = encoder(input_ids=ours, output_hidden_states=True)
    torch.testing.assert_close(hidden.last_hidden_state, model.method.text_tokens(ours), rtol=0, atol=1e-5)


def test_export_refuses_a_model_without_a_long_tower(models, tmp_path):
    from explorer.core.errors import ExplorerError
    from explorer.generation.export import export_text_encoder

    with pytest.raises(ExplorerError, match="77 tokens"):
        export_text_encoder(models["tiny-clip"].text_tower(), tmp_path / "x", name="tiny-clip")
    with pytest.raises(ExplorerError, match="no CLIP text tower"):
        export_text_encoder(None, tmp_path / "x", name="seps")


# ---- bad input --------------------------------------------------------------------------------

def test_missing_partial_and_broken_sdxl_folders_get_clear_messages(sdxl_dir, tmp_path):
    with pytest.raises(SdxlError, match="No SDXL weights given"):
        check_source("")
    with pytest.raises(SdxlError, match="SDXL not found at .*EXPLORER_SDXL"):
        check_source(tmp_path / "nowhere")
    with pytest.raises(SdxlError, match="not a diffusers folder"):
        check_source(tmp_path)
    partial = tmp_path / "partial"
    shutil.copytree(sdxl_dir, partial)
    shutil.rmtree(partial / "unet")
    for weights in (partial / "vae").glob("*.safetensors"):
        weights.unlink()
    with pytest.raises(SdxlError, match=r"unet/ is missing; vae/ has no weights"):
        check_source(partial)
    broken = tmp_path / "broken"
    shutil.copytree(sdxl_dir, broken)
    next((broken / "unet").glob("*.safetensors")).write_bytes(b"not a safetensors file")
    with pytest.raises(SdxlError, match="could not be loaded"):
        load_pipeline(check_source(broken), SdxlOptions(device="cpu"))
    single = tmp_path / "sdxl.safetensors"
    single.write_bytes(b"x")
    with pytest.raises(SdxlError, match="--sdxl-config"):
        check_source(single)


def test_models_that_cannot_take_the_text_encoder_slot_are_refused_with_the_reason(generator, pipe, sdxl_dir):
    with pytest.raises(SdxlError, match="reads 77 tokens, not a long text tower"):
        generator.run(settings(sdxl_dir, models=["tiny-clip"]))
    with pytest.raises(SdxlError, match="has no CLIP text tower"):
        check_tower(None, pipe, "seps")
    narrow = SimpleNamespace(text_encoder_2=SimpleNamespace(config=SimpleNamespace(hidden_size=1280)),
                             unet=SimpleNamespace(config=SimpleNamespace(cross_attention_dim=2048)))
    with pytest.raises(SdxlError, match="64 wide.*768-wide tower"):
        check_tower(LongClipMethod.example().text_tower("tiny"), narrow, "tiny-longclip")


def test_a_prompt_past_248_tokens_is_refused_unless_the_cut_is_allowed(generator, sdxl_dir):
    too_long = " ".join(["A small green cone stands behind the red cube."] * 30)
    with pytest.raises(SdxlError, match=r"takes \d+ tokens; the long text tower reads 248"):
        generator.run(settings(sdxl_dir, prompt=too_long))
    result = generator.run(settings(sdxl_dir, prompt=too_long, allow_cut=True))
    assert any("past 248 tokens" in note for note in result.notes)


def test_bad_settings_are_refused_before_anything_loads(sdxl_dir):
    with pytest.raises(CaptionError):
        settings(sdxl_dir, prompt="  ").check()
    for change in ({"size": 100}, {"steps": 0}, {"layer": "first"}, {"seeds": []}, {"models": [], "stock": False}):
        with pytest.raises(Exception, match="size|steps|layer|seed|Nothing to draw"):
            settings(sdxl_dir, **change).check()


def test_the_stock_cut_is_marked_where_77_tokens_end():
    assert mark_stock_cut(SHORT) == SHORT
    marked = mark_stock_cut(long_prompt())
    before, after = marked.split(CUT_MARK)
    assert CLIP_TOKENS.count(before) <= 77 and "yellow" in after


# ---- caption match ----------------------------------------------------------------------------

def test_each_picture_is_scored_against_the_whole_caption_and_each_sentence(generator, models, sdxl_dir):
    from explorer.generation.caption_match import score_pictures

    result = generator.run(settings(sdxl_dir, stock=True, seeds=[0, 1]))
    match = score_pictures(models["tiny-longclip"], result)
    assert len(match.whole) == 4 and len(match.per_sentence[0]) == len(match.sentences) == 12
    assert match.past_stock_cut[-1] and not match.past_stock_cut[0]
    expected = models["tiny-longclip"].similarity([result.picture("stock", 1)], [long_prompt()])[0, 0]
    assert match.whole[match.keys.index(("stock", 1))] == pytest.approx(float(expected), abs=1e-6)
    assert set(match.best_picture(0)) <= {"stock", "tiny-longclip"}
    assert sum(match.wins(1).values()) == len(match.sentences)
    assert json.dumps(match.to_json())


# ---- CLI ---------------------------------------------------------------------------------------

@pytest.mark.slow(reason="generates with the tiny SDXL twice (stock and swapped, two seeds) and again from its settings")
def test_cli_generate_compare_saves_the_grid_and_settings_that_draw_it_again(tmp_path, sdxl_dir, monkeypatch):
    from PIL import Image

    from explorer.cli import main
    from explorer.models.io.loading import save_method

    monkeypatch.setenv("EXPLORER_HOME", str(tmp_path / "home"))
    weights = save_method(LongClipMethod.example(seed=1), tmp_path / "tiny-longclip.safetensors")
    args = ["--checkpoints", str(tmp_path / "zoo"), "generate", "--sdxl", str(sdxl_dir), "--model", str(weights),
            "--prompt", long_prompt(), "--seed", "0", "1", "--steps", "2", "--size", "64"]
    assert main([*args, "--compare", "--score-with", str(weights), "--out", str(tmp_path / "a.png")]) == 0
    saved = json.loads((tmp_path / "a.json").read_text())
    assert saved["seeds"] == [0, 1] and saved["stock"] and saved["layer"] == "last"
    assert saved["explorer"]["match"]["past_stock_cut"][-1] is True
    grid = Image.open(tmp_path / "a.png")
    assert grid.size[0] > 2 * 64 and grid.size[1] > 2 * 64
    again = ["--checkpoints", str(tmp_path / "zoo"), "generate", "--settings", str(tmp_path / "a.json")]
    assert main([*again, "--out", str(tmp_path / "b.png")]) == 0
    assert np.array_equal(pixels(Image.open(tmp_path / "a.png")), pixels(Image.open(tmp_path / "b.png")))
    assert main([*args, "--seed", "0", "--stock", "--out", str(tmp_path / "s.png")]) == 0
    assert Image.open(tmp_path / "s.png").size == (64, 64)
    assert json.loads((tmp_path / "s.json").read_text())["models"] == []
    assert main([*args, "--seed", "0", "--out", str(tmp_path / "w.png")]) == 0  # swapped only, the default
    swapped = json.loads((tmp_path / "w.json").read_text())
    assert swapped["models"] == [str(weights)] and swapped["stock"] is False


def test_cli_refusals_are_one_line_and_exit_2(tmp_path, sdxl_dir, capsys):
    from explorer.cli import main
    from explorer.models.io.loading import save_method

    clip = save_method(ClipMethod.example(), tmp_path / "tiny-clip.safetensors")
    base = ["--checkpoints", str(tmp_path / "zoo"), "generate", "--prompt", "a cat", "--out", str(tmp_path / "x.png")]
    assert main([*base, "--sdxl", str(tmp_path / "nowhere"), "--model", str(clip)]) == 2
    assert "SDXL not found" in capsys.readouterr().err
    assert main([*base, "--sdxl", str(sdxl_dir), "--model", str(clip)]) == 2
    assert "not a long text tower" in capsys.readouterr().err
    assert main(["--checkpoints", str(tmp_path / "zoo"), "export-text-encoder", "--model", str(clip),
                 "--out", str(tmp_path / "enc")]) == 2
    assert not (tmp_path / "x.png").exists()


# ---- FID (optional extra) ----------------------------------------------------------------------

@pytest.fixture(scope="module")
def inception_weights(tmp_path_factory):
    """torch-fidelity's InceptionV3 with random weights, saved as a plain state dict (no download)."""
    fidelity = pytest.importorskip("torch_fidelity.feature_extractor_inceptionv3")
    module = fidelity.FeatureExtractorInceptionV3.__new__(fidelity.FeatureExtractorInceptionV3)
    real_load, real_fetch = torch.nn.Module.load_state_dict, fidelity.load_state_dict_from_url
    try:  # build the network without its weights (nothing fetched), then keep its random ones
        fidelity.load_state_dict_from_url = lambda *a, **k: {}
        torch.nn.Module.load_state_dict = lambda self, *a, **k: None
        module.__init__("inception-v3-compat", ["2048"])
    finally:
        torch.nn.Module.load_state_dict, fidelity.load_state_dict_from_url = real_load, real_fetch
    for layer in module.modules():  # keep the signal's scale through 90 layers (default init fades it to 0)
        if isinstance(layer, torch.nn.Conv2d):
            torch.nn.init.kaiming_normal_(layer.weight, nonlinearity="relu")
    path = tmp_path_factory.mktemp("inception") / "inception.pth"
    torch.save(module.state_dict(), path)
    return path


@pytest.mark.slow
def test_fid_of_a_set_against_itself_is_near_zero_and_against_others_larger(inception_weights, tmp_path, monkeypatch):
    from PIL import Image

    from explorer.generation import fid
    from explorer.generation.fid import fid_of_sets, reference_pictures

    rng = np.random.default_rng(0)
    for i in range(3):
        Image.fromarray(rng.integers(0, 255, (64, 64, 3), dtype=np.uint8)).save(tmp_path / f"ref{i}.png")
    reference = reference_pictures(tmp_path)
    flat = [Image.new("RGB", (64, 64), (60 * i, 90, 200)) for i in range(3)]
    embedded, real_batch = [], fid._batch  # the size of every batch that goes through Inception
    monkeypatch.setattr(fid, "_batch", lambda pictures: embedded.append(len(pictures)) or real_batch(pictures))
    monkeypatch.setattr(fid, "BATCH", 2)
    scores = fid_of_sets({"same": reference, "other": flat}, reference, inception_weights)
    same, other = scores["same"], scores["other"]
    assert abs(same.fid) < 1e-3 * other.fid and other.fid > 1e-3 and same.n_reference == 3
    assert embedded == [2, 1, 2, 1, 2, 1]  # the reference once for both sets, in batches of 2


def test_fid_refuses_pickled_weights_and_too_few_pictures(tmp_path):
    from explorer.core.errors import ExplorerError, UnsafeCheckpointError
    from explorer.generation.fid import frechet_inception_distance, reference_pictures

    pickled = tmp_path / "evil.pth"
    torch.save({"weights": torch.zeros(1), "object": SimpleNamespace(a=1)}, pickled)
    from PIL import Image

    pictures = [Image.new("RGB", (8, 8))] * 2
    with pytest.raises(UnsafeCheckpointError):
        frechet_inception_distance(pictures, pictures, pickled)
    with pytest.raises(ExplorerError, match="at least 2"):
        reference_pictures(tmp_path)


@pytest.mark.slow
def test_cli_generate_writes_fid_per_column(tmp_path, sdxl_dir, inception_weights, monkeypatch):
    from PIL import Image

    from explorer.cli import main
    from explorer.models.io.loading import save_method

    monkeypatch.setenv("EXPLORER_HOME", str(tmp_path / "home"))
    weights = save_method(LongClipMethod.example(seed=1), tmp_path / "tiny-longclip.safetensors")
    (tmp_path / "ref").mkdir()
    for i in range(2):
        Image.new("RGB", (64, 64), (100 * i, 50, 50)).save(tmp_path / "ref" / f"{i}.png")
    assert main(["--checkpoints", str(tmp_path / "zoo"), "generate", "--sdxl", str(sdxl_dir), "--model", str(weights),
                 "--prompt", SHORT, "--seed", "0", "1", "--steps", "1", "--size", "64", "--compare",
                 "--fid-reference", str(tmp_path / "ref"), "--inception-weights", str(inception_weights),
                 "--out", str(tmp_path / "f.png")]) == 0
    fid = json.loads((tmp_path / "f.json").read_text())["explorer"]["fid"]
    assert set(fid) == {"stock", str(weights)} and all(v["generated"] == 2 and v["reference"] == 2 for v in fid.values())


def test_the_refiner_finishes_the_schedule_reading_the_bigg_part(generator, sdxl_dir, tmp_path):
    from explorer.generation.tiny_sdxl import build_tiny_refiner

    refiner = build_tiny_refiner(tmp_path / "refiner")
    seen = []
    with_refiner = generator.run(settings(sdxl_dir, steps=5, refiner=str(refiner)),
                                 progress=lambda done, total, phase: seen.append(done))
    plain = generator.run(settings(sdxl_dir, steps=5))
    assert seen == list(range(1, 11))  # two columns of 5: base 4 steps (80 %), refiner 1
    assert not np.array_equal(pixels(with_refiner.picture("tiny-longclip", 0)), pixels(plain.picture("tiny-longclip", 0)))
    with pytest.raises(SdxlError, match="refiner not found"):
        generator.run(settings(sdxl_dir, refiner=str(tmp_path / "none")))


def test_another_sdxl_drops_the_conditioners_that_hold_the_old_ones_bigg(models, sdxl_dir, tmp_path):
    fresh = Generator(load_model=models.__getitem__)
    fresh.conditioner("tiny-longclip", fresh.pipeline(settings(sdxl_dir)))
    assert len(fresh._conditioners) == 1
    shutil.copytree(sdxl_dir, tmp_path / "other")
    fresh.pipeline(settings(tmp_path / "other"))
    assert len(fresh._conditioners) == 0


def test_the_refiners_negative_is_its_own_encoding_of_the_empty_prompt(generator, sdxl_dir, tmp_path, monkeypatch):
    """SDXL base forces zeros for an empty negative prompt; the refiner (force_zeros_for_empty_prompt=False, as
    refiner 1.0) encodes "" through its bigG, as stock diffusers does: for the stock column and the swapped one
    (whose "" goes through the stretched bigG at 248 tokens, the prompt's length). Zeros only when the
    refiner's own config forces them."""
    from diffusers import StableDiffusionXLImg2ImgPipeline

    from explorer.generation.tiny_sdxl import build_tiny_refiner

    calls = []
    original = StableDiffusionXLImg2ImgPipeline.__call__

    def spy(self, *args, **kwargs):
        calls.append({k: kwargs[k] for k in ("prompt_embeds", "negative_prompt_embeds", "negative_pooled_prompt_embeds")})
        return original(self, *args, **kwargs)

    monkeypatch.setattr(StableDiffusionXLImg2ImgPipeline, "__call__", spy)
    chosen = settings(sdxl_dir, steps=5, refiner=str(build_tiny_refiner(tmp_path / "refiner")), negative="")
    generator.run(chosen)
    assert len(calls) == 2  # the stock column, then tiny-longclip
    refiner = generator.sdxl.refiner(chosen.refiner, generator.pipeline(chosen), chosen.options())
    with torch.inference_mode():
        own, _, own_pooled, _ = refiner.encode_prompt(prompt="", device="cpu", num_images_per_prompt=1,
                                                      do_classifier_free_guidance=False)
    stock, swapped = calls
    torch.testing.assert_close(stock["negative_prompt_embeds"], own)  # what stock diffusers' refiner reads
    torch.testing.assert_close(stock["negative_pooled_prompt_embeds"], own_pooled)
    for call in calls:
        assert call["negative_prompt_embeds"].shape == call["prompt_embeds"].shape
        assert call["negative_prompt_embeds"].abs().sum() > 0
    assert swapped["prompt_embeds"].shape[1] == 248
    refiner.register_to_config(force_zeros_for_empty_prompt=True)
    calls.clear()
    try:
        generator.run(chosen)
    finally:
        refiner.register_to_config(force_zeros_for_empty_prompt=False)
    assert all(call["negative_prompt_embeds"].abs().sum() == 0 for call in calls)
