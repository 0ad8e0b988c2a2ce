"""The public Model surface: PIL images and strings in, typed features, scores and maps out."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from PIL import Image

import explorer
from explorer.core.errors import CaptionError, ImageError
from explorer.models.architecture import ClipArchitecture
from explorer.models.features import ImageFeatures, TextFeatures
from explorer.models.io.loading import save_method
from explorer.models.methods.clip import ClipMethod, LongClipMethod
from explorer.models.model import Model, SentenceMaps
from explorer.zoo.builtin import TINY_ARCH, tiny_clip

LONG_CAPTION = " ".join(
    f"the {i}th small red cube sits to the left of a tall blue cylinder on the table" for i in range(8))
SHORT_ARCH = ClipArchitecture(
    embed_dim=32, image_size=64, patch_size=16, vision_width=64, vision_layers=1, vision_heads=1,
    vision_mlp_ratio=2.0, context_length=77, vocab_size=49408, text_width=64, text_layers=1,
    text_heads=1, text_mlp_ratio=2.0, quick_gelu=True,
)


@pytest.fixture(scope="module")
def tiny() -> Model:
    mp = pytest.MonkeyPatch()
    mp.delenv("EXPLORER_CHECKPOINTS", raising=False)  # resolve through the repository's checkpoints/
    try:
        return explorer.load("tiny-untrained", device="cpu")
    finally:
        mp.undo()


@pytest.fixture(scope="module")
def short() -> Model:
    torch.manual_seed(0)
    return Model(ClipMethod(SHORT_ARCH), name="short", device="cpu")


def _picture(width: int, height: int, seed: int = 0) -> Image.Image:
    rng = np.random.default_rng(seed)
    return Image.fromarray(rng.integers(0, 256, (height, width, 3), dtype=np.uint8), "RGB")


# ---- what the model is ------------------------------------------------------------------------


def test_tiny_untrained_resolves_through_the_zoo(tiny):
    assert isinstance(tiny, Model)
    assert tiny.name == "tiny-untrained"
    assert tiny.method_name == "longclip"
    assert tiny.context_length == 248
    assert tiny.trained is False
    assert tiny.device.type == "cpu"
    assert "generic" in tiny.map_kinds


def test_built_in_tiny_model_is_deterministic():
    a, b = tiny_clip(), tiny_clip()
    for (key, x), (_, y) in zip(a.state_dict().items(), b.state_dict().items()):
        assert torch.equal(x, y), key
    assert not torch.equal(tiny_clip(seed=1).visual.conv1.weight, a.visual.conv1.weight)


# ---- encoders ---------------------------------------------------------------------------------


def test_encode_image_shapes(tiny):
    images = [_picture(160, 90, seed) for seed in range(3)]
    features = tiny.encode_image(images)
    assert isinstance(features, ImageFeatures)
    d = TINY_ARCH.embed_dim
    rows, cols = features.grid_hw
    assert (rows, cols) == (TINY_ARCH.grid, TINY_ARCH.grid)
    assert features.cls.shape == (3, d)
    assert features.patches.shape == (3, rows * cols, d)
    assert len(features) == 3 and len(features[1]) == 1
    assert torch.isfinite(features.patches).all()
    # different pictures, different features
    assert not torch.allclose(features.cls[0], features.cls[1])


def test_encode_text_shapes_and_mask(tiny):
    texts = ["a cat", "a dog sleeping on a red mat", "x"]
    features = tiny.encode_text(texts)
    batch = tiny.tokenize(texts)
    assert isinstance(features, TextFeatures)
    d, k = TINY_ARCH.embed_dim, max(batch.n_tokens)  # padding past the last EOT is dropped (causal mask)
    assert features.eot.shape == (3, d)
    assert features.tokens.shape == (3, k, d)
    assert features.mask.shape == (3, k) and features.mask.dtype == torch.bool
    assert features.mask.sum(dim=1).tolist() == batch.n_tokens  # SOT, words, EOT
    assert batch.n_cut == [0, 0, 0]
    # the pooled embedding is the projected EOT token
    for row, n in enumerate(batch.n_tokens):
        assert torch.allclose(features.eot[row], features.tokens[row, n - 1])


def test_features_are_not_normalised(tiny):
    image = tiny.encode_image([_picture(64, 64)])
    text = tiny.encode_text(["a cat", "a bird"])
    for norms in (image.cls.norm(dim=-1), image.patches.norm(dim=-1).flatten(), text.eot.norm(dim=-1)):
        assert not torch.allclose(norms, torch.ones_like(norms), atol=1e-2)


def test_similarity_is_the_cosine_of_global_embeddings(tiny):
    images = [_picture(120, 80, seed) for seed in range(2)]
    texts = ["a cat", "a dog", "a long description of a kitchen with a kettle"]
    scores = tiny.similarity(images, texts)
    assert scores.shape == (2, 3)
    image = tiny.encode_image(images)
    text = tiny.encode_text(texts)
    by_hand = F.normalize(image.cls, dim=-1) @ F.normalize(text.eot, dim=-1).T
    assert torch.allclose(scores, by_hand, atol=1e-5)
    assert scores.abs().max() <= 1 + 1e-5
    # precomputed features give the same scores
    assert torch.allclose(tiny.similarity(image, text), scores, atol=1e-6)


# ---- maps -------------------------------------------------------------------------------------


def test_sentence_maps_match_patch_cosines_at_image_resolution(tiny):
    picture = _picture(150, 90, seed=3)  # non-square: width 150, height 90
    sentences = ["a cat on the left.", "a dog on the right.", "the sky is blue."]
    out = tiny.sentence_maps(picture, sentences)
    assert isinstance(out, SentenceMaps)
    assert out.kind == "generic"
    assert len(out) == 3 and out.sentences == sentences
    assert out.maps.shape == (3, 90, 150)  # [M, H, W]
    assert out.maps.dtype == np.float32
    rows, cols = TINY_ARCH.grid, TINY_ARCH.grid
    assert out.grid.shape == (3, rows, cols)
    assert out.n_cut == [0, 0, 0]

    image = tiny.encode_image([picture], fit="squash")
    text = tiny.encode_text(sentences)
    patches = F.normalize(image.patches[0], dim=-1)  # [P, d], row-major over the grid
    eot = F.normalize(text.eot, dim=-1)  # [M, d]
    by_hand = torch.einsum("md,pd->mp", eot, patches).reshape(3, rows, cols).numpy()
    np.testing.assert_allclose(out.grid, by_hand, atol=1e-5)
    # 'squash' covers the whole picture; a centre crop would give other patches
    cropped = tiny.encode_image([picture], fit="crop")
    assert not torch.allclose(cropped.patches, image.patches)
    # upsampling keeps the values within the grid's range
    assert out.maps.min() >= out.grid.min() - 1e-5 and out.maps.max() <= out.grid.max() + 1e-5


def test_sentence_maps_accept_a_non_rgb_image(tiny):
    gray = Image.fromarray(np.tile(np.arange(70, dtype=np.uint8), (40, 1)), "L")
    out = tiny.sentence_maps(gray, ["a gradient"])
    assert out.maps.shape == (1, 40, 70)


@pytest.mark.parametrize("sentences", [[], [""], ["   ", "\n\t"]], ids=["none", "empty", "whitespace"])
def test_empty_captions_raise_caption_error(tiny, sentences):
    with pytest.raises(CaptionError):
        tiny.sentence_maps(_picture(32, 32), sentences)


def test_unreadable_image_raises_image_error(tiny, tmp_path):
    path = tmp_path / "not-an-image.png"
    path.write_text("hello")
    with pytest.raises(ImageError):
        tiny.sentence_maps(path, ["a cat"])
    with pytest.raises(ImageError):
        tiny.encode_image([path])


def test_no_image_raises_image_error(tiny):
    with pytest.raises(ImageError):
        tiny.encode_image([])
    with pytest.raises(ImageError):
        tiny.similarity([], ["a cat"])


# ---- context length ---------------------------------------------------------------------------


def test_long_caption_is_cut_at_77_but_not_at_248(tiny, short):
    assert short.context_length == 77
    picture = _picture(64, 48)
    cut = short.sentence_maps(picture, [LONG_CAPTION, "a cube."])
    assert cut.n_cut[0] > 0 and cut.n_cut[1] == 0
    n_tokens = short.tokenize([LONG_CAPTION]).n_tokens[0]
    assert 77 < n_tokens <= 248
    assert cut.n_cut[0] == n_tokens - 77
    whole = tiny.sentence_maps(picture, [LONG_CAPTION, "a cube."])
    assert whole.n_cut == [0, 0]
    # at 77 every slot is used, and the last one is the EOT the embedding is pooled from
    text = short.encode_text([LONG_CAPTION])
    assert text.tokens.shape[1] == 77 and int(text.mask.sum()) == 77
    assert torch.allclose(text.eot[0], text.tokens[0, -1])
    assert int(tiny.encode_text([LONG_CAPTION]).mask.sum()) == n_tokens


# ---- precision and loading --------------------------------------------------------------------


def test_fp16_on_cpu_falls_back_to_fp32_with_a_note():
    model = Model(ClipMethod(SHORT_ARCH), device="cpu", precision="fp16")
    assert model.precision == "fp32"
    assert any("fp16" in note and "fp32" in note for note in model.notes)
    assert model.method.visual.conv1.weight.dtype == torch.float32
    assert model.encode_image([_picture(40, 40)]).cls.dtype == torch.float32


def test_fp16_through_explorer_load_on_cpu():
    model = explorer.load("tiny-untrained", device="cpu", precision="fp16")
    assert model.precision == "fp32"
    assert any("fp16" in note for note in model.notes)


def test_unknown_precision_is_refused():
    from explorer.models.precision import PrecisionError

    with pytest.raises(PrecisionError, match="precision"):
        Model(ClipMethod(SHORT_ARCH), device="cpu", precision="fp8")


def test_saved_model_loads_back_with_the_same_features(tmp_path, tiny):
    path = save_method(tiny.method, tmp_path / "tiny.safetensors")
    again = explorer.load(path, device="cpu")
    assert isinstance(again.method, LongClipMethod)
    assert again.context_length == 248
    assert again.key_report is not None and again.key_report.ok
    picture = _picture(80, 60)
    assert torch.allclose(again.encode_image([picture]).cls, tiny.encode_image([picture]).cls, atol=1e-6)
    assert torch.allclose(again.encode_text(["a cat"]).eot, tiny.encode_text(["a cat"]).eot, atol=1e-6)


def test_sentence_maps_made_on_demand_survive_pickling_and_large_sizes(monkeypatch):
    """Maps at picture size come from the grid, once; a pickled copy gets its own cache key; maps larger
    than the shared cache are kept on the result rather than remade at every access."""
    import pickle

    import numpy as np

    from explorer.models.model import FULL_MAPS, SentenceMaps

    grid = np.random.default_rng(0).random((2, 4, 4)).astype(np.float32)
    first = SentenceMaps(kind="generic", grid=grid, sentences=["a", "b"], n_cut=[0, 0], size=(40, 40))
    copy = pickle.loads(pickle.dumps(first))
    assert copy._key != first._key and np.array_equal(copy.maps, first.maps)
    other = SentenceMaps(kind="generic", grid=grid[::-1].copy(), sentences=["b", "a"], n_cut=[0, 0], size=(40, 40))
    assert not np.array_equal(other.maps, first.maps)
    monkeypatch.setattr(FULL_MAPS, "max_bytes", 2 * 40 * 40 * 4 - 1)  # two 40x40 maps: just past the bound
    big = SentenceMaps(kind="generic", grid=grid, sentences=["a", "b"], n_cut=[0, 0], size=(40, 40))
    assert big.maps is big.maps  # made once, kept on the result


def test_a_caption_change_on_the_same_picture_reuses_its_image_features(monkeypatch):
    """Only the text tower runs again for a new caption on the same picture (kinds that read the features);
    an explainer needs the tower's graph and runs it each time; another picture runs it again."""
    torch.manual_seed(0)
    model = Model(ClipMethod(SHORT_ARCH), name="counted", device="cpu")
    calls = []
    encode = model.method.encode_image
    monkeypatch.setattr(model.method, "encode_image", lambda pixels: calls.append(1) or encode(pixels))
    picture = Image.fromarray((np.random.default_rng(1).random((48, 64, 3)) * 255).astype(np.uint8))
    first = model.sentence_maps(picture, ["A cat.", "A dog."])
    model.sentence_maps(picture, ["A tree on the left."])
    assert len(calls) == 1
    again = model.sentence_maps(picture, ["A cat.", "A dog."])
    assert len(calls) == 1 and np.allclose(first.maps, again.maps)  # the same features, the same maps
    model.sentence_maps(picture.rotate(90, expand=True), ["A cat."])
    assert len(calls) == 2
    before = len(calls)
    model.sentence_maps(picture, ["A cat."], kind="gradcam")
    model.sentence_maps(picture, ["A dog."], kind="gradcam")
    assert len(calls) - before == 2  # Grad-CAM runs the tower (with its graph) for each caption


def test_auto_precision_holds_bf16_weights_where_the_cpu_has_them_and_returns_fp32():
    from explorer.models.precision import cpu_has_native_bf16

    torch.manual_seed(0)
    model = Model(ClipMethod(SHORT_ARCH), name="auto", device="cpu", precision="auto")
    expected = "bf16" if cpu_has_native_bf16() else "fp32"
    assert model.precision == expected
    assert next(model.method.parameters()).dtype == (torch.bfloat16 if expected == "bf16" else torch.float32)
    picture = Image.fromarray((np.random.default_rng(2).random((40, 40, 3)) * 255).astype(np.uint8))
    features = model.encode_image([picture])
    assert features.cls.dtype == features.patches.dtype == torch.float32  # features leave the model in fp32
    assert model.similarity([picture], ["A cat."]).dtype == torch.float32
    assert model.sentence_maps(picture, ["A cat."]).maps.dtype == np.float32
    fp16 = Model(ClipMethod(SHORT_ARCH), name="fp16", device="cpu", precision="fp16")
    assert fp16.precision == "fp32" and any("fp16" in note for note in fp16.notes)


def test_the_page_computes_in_auto_unless_told(app_command):
    """The command line builds the page's one zoo (its precision, device and folder) and passes it in."""
    run, seen = app_command
    assert run() == 0 and seen["zoo"].precision == "auto" and seen["access"].roots[0] == seen["zoo"].root
    assert run("--precision", "fp32") == 0 and seen["zoo"].precision == "fp32"
