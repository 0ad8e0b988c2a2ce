"""The training-free explainers (explorer/models/explainers.py): known answers on hand-built towers,
independent computations of the forward readouts, batching, no gradient state left behind, bad input."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from explorer.models.explainers import (CLEARCLIP, EXPLAINER_KINDS, GRADCAM, LEGRAD, NACLIP, ExplainerError,
                                        block_with_attention, explain, neighbourhood, trunk)
from explorer.models.features import TextFeatures
from explorer.models.methods.clip import ClipMethod
from explorer.models.methods.finelip import FineLipMethod
from explorer.core.errors import ExplorerError

SENTENCES = ["A red cube on the left.", "A blue ball at the top.", "Sky.", "Grass at the bottom."]


def text_of(method, sentences=SENTENCES) -> TextFeatures:
    with torch.no_grad():
        return method.encode_text(method.tokenize(list(sentences)).ids)


def random_pixels(method, seed: int = 0) -> torch.Tensor:
    size = method.arch.image_size
    return torch.randn(1, 3, size, size, generator=torch.Generator().manual_seed(seed))


@pytest.fixture(scope="module")
def clip():
    return ClipMethod.example("tiny", seed=0).eval()


# ---- a hand-built tower: one lit patch, every other patch's token exactly zero -----------------------------


def one_patch_tower(pool: str = "tok", mixing: bool = True) -> tuple[ClipMethod, torch.Tensor, int]:
    """A tiny CLIP whose patch tokens are zero except at one patch: no positional embedding, zero LayerNorm
    biases and attention biases, no MLP (its output projection is zero); without ``mixing`` the attention's
    output projection is zero too, so every block passes its tokens on unchanged. Returns (method, pixels,
    patch)."""
    method = ClipMethod.example("tiny", seed=3)
    method.arch = type(method.arch)(**{**method.arch.to_dict(), "pool": pool})
    visual = method.visual
    with torch.no_grad():
        visual.positional_embedding.zero_()
        for norm in (visual.ln_pre, visual.ln_post):
            norm.bias.zero_()
        for block in visual.transformer.resblocks:
            block.ln_1.bias.zero_()
            block.ln_2.bias.zero_()
            block.attn.in_proj_bias.zero_()
            block.attn.out_proj.bias.zero_()
            block.mlp.c_proj.weight.zero_()
            block.mlp.c_proj.bias.zero_()
            if not mixing:
                block.attn.out_proj.weight.zero_()
    rows, cols = method.grid_hw
    patch, side = 5, method.arch.patch_size
    pixels = torch.zeros(1, 3, rows * side, cols * side)  # the conv has no bias: a zero patch embeds to zero
    r, c = divmod(patch, cols)
    pixels[:, :, r * side:(r + 1) * side, c * side:(c + 1) * side] = torch.randn(3, side, side,
                                                                               generator=torch.Generator().manual_seed(1))
    return method.eval(), pixels, patch


def pulled_towards(method, pixels, nudge) -> TextFeatures:
    """A 'sentence' whose embedding is the picture's global embedding after ``nudge`` changed its tokens: the
    score then grows as the tokens move that way."""
    with torch.no_grad():
        tokens = nudge(trunk(method, pixels, method.visual.transformer.resblocks, True))
        target = method.pool_image(method.project_image(method.visual.ln_post(tokens)))
    return TextFeatures(eot=target, tokens=target[:, None], mask=torch.ones(1, 1, dtype=torch.bool))


def test_gradcam_lights_the_only_patch_the_score_can_see():
    method, pixels, patch = one_patch_tower(pool="tok", mixing=False)

    def towards_the_patch(tokens):
        moved = tokens.clone()
        moved[:, 0] = moved[:, 0] + moved[:, 1 + patch]  # the class token moved along the lit patch's token
        return moved

    maps = explain(method, pixels, pulled_towards(method, pixels, towards_the_patch), GRADCAM)[0].flatten()
    assert maps[patch] > 0
    assert torch.count_nonzero(maps) == 1 and int(maps.argmax()) == patch  # every other token is zero


def test_legrad_gives_relevance_only_to_the_column_that_carries_a_value():
    method, pixels, patch = one_patch_tower(pool="avg")
    last = method.visual.transformer.resblocks[-1]

    def towards_the_patch_value(tokens):
        with torch.no_grad():
            _, _, v = (t for t in F.linear(last.ln_1(tokens), last.attn.in_proj_weight).chunk(3, dim=-1))
        return tokens + last.attn.out_proj(v[:, 1 + patch:2 + patch])  # more of the lit patch's value everywhere

    maps = explain(method, pixels, pulled_towards(method, pixels, towards_the_patch_value), LEGRAD)[0].flatten()
    assert int(maps.argmax()) == patch and maps[patch] == 1.0
    others = torch.cat([maps[:patch], maps[patch + 1:]])
    # The zero patches' values are zero in every explained block, so d score / d A[:, j] is zero for them.
    assert torch.allclose(others, torch.zeros_like(others), atol=1e-6)


def test_legrad_keeps_only_the_gradients_that_raise_the_score():
    """LeGrad sums ReLU(d score / d A): a sentence pointing away from the lit patch's value gives that column
    gradients of both signs, and only the positive ones count. Summed with their signs, the lit patch would
    fall below the zero patches and min-max would light all fifteen of them."""
    method, pixels, patch = one_patch_tower(pool="avg")
    last = method.visual.transformer.resblocks[-1]

    def towards_the_patch_value(tokens):
        with torch.no_grad():
            _, _, v = (t for t in F.linear(last.ln_1(tokens), last.attn.in_proj_weight).chunk(3, dim=-1))
        return tokens + last.attn.out_proj(v[:, 1 + patch:2 + patch])

    towards = pulled_towards(method, pixels, towards_the_patch_value)
    away = TextFeatures(eot=-towards.eot, tokens=-towards.tokens, mask=towards.mask)
    maps = explain(method, pixels, away, LEGRAD)[0].flatten()
    others = torch.cat([maps[:patch], maps[patch + 1:]])
    assert torch.count_nonzero(others) == 0 and maps[patch] == 1.0


# ---- the pieces, against independent computations --------------------------------------------------------


def test_the_block_with_attention_is_open_clips_block(clip):
    x = torch.randn(2, 1 + math.prod(clip.grid_hw), clip.arch.vision_width)
    for block in clip.visual.transformer.resblocks:
        out, attention = block_with_attention(block, x)
        torch.testing.assert_close(out, block(x), rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(attention.sum(dim=-1), torch.ones(attention.shape[:-1]))


def reference_readout(method, pixels, text, kind) -> torch.Tensor:
    """The last block's own ``nn.MultiheadAttention`` with its key projection replaced (ClearCLIP: by the query
    projection; NACLIP: its query projection by the key projection, and the Gaussian window as the additive
    mask), no residual, no FFN; cosine of the projected patches with each sentence."""
    blocks = method.visual.transformer.resblocks
    last = blocks[-1]
    x = trunk(method, pixels, blocks[:-1], True)
    width = x.shape[-1]
    attn = torch.nn.MultiheadAttention(width, last.attn.num_heads, batch_first=True)
    weight = last.attn.in_proj_weight.detach().clone()
    bias = last.attn.in_proj_bias.detach().clone()
    source, target = (0, 1) if kind == CLEARCLIP else (1, 0)  # q -> k, or k -> q
    weight[target * width:(target + 1) * width] = weight[source * width:(source + 1) * width]
    bias[target * width:(target + 1) * width] = bias[source * width:(source + 1) * width]
    with torch.no_grad():
        attn.in_proj_weight.copy_(weight)
        attn.in_proj_bias.copy_(bias)
        attn.out_proj.load_state_dict(last.attn.out_proj.state_dict())
        h = last.ln_1(x)
        mask = None if kind == CLEARCLIP else neighbourhood(method.grid_hw, x.device)
        out = attn(h, h, h, need_weights=False, attn_mask=mask)[0]
        patches = method.project_image(method.visual.ln_post(out))[0, 1:]
    return F.normalize(text.eot, dim=-1) @ F.normalize(patches, dim=-1).T


@pytest.mark.parametrize("kind", [CLEARCLIP, NACLIP])
def test_the_forward_readouts_equal_an_independent_computation(clip, kind):
    pixels, text = random_pixels(clip), text_of(clip)
    expected = reference_readout(clip, pixels, text, kind).reshape(len(SENTENCES), *clip.grid_hw)
    torch.testing.assert_close(explain(clip, pixels, text, kind), expected, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("kind", [CLEARCLIP, NACLIP])
def test_under_the_attention_pool_the_forward_readouts_compare_the_pools_values(clip, kind):
    """An attention-pooled tower's patches live where its embedding does only through the pool's values: a pool
    whose values negate the patches turns the readout's map into its negative."""
    from pool_fixtures import negating_pool_twin

    pooled = negating_pool_twin(clip)
    pixels, text = random_pixels(clip), text_of(clip)
    assert torch.allclose(explain(pooled, pixels, text, kind), -explain(clip, pixels, text, kind), atol=1e-5)


def test_naclips_window_is_a_gaussian_on_the_grid():
    window = neighbourhood((3, 4), "cpu", sigma=2.0)
    assert window.shape == (13, 13) and window[0].abs().sum() == 0 and window[:, 0].abs().sum() == 0
    assert window[1, 1] == 1.0  # a patch with itself
    assert math.isclose(float(window[1, 2]), math.exp(-1 / 8), rel_tol=1e-6)  # one step right
    assert math.isclose(float(window[1, 6]), math.exp(-2 / 8), rel_tol=1e-6)  # one step right, one down


# ---- batching, gradient state, the method's own score ---------------------------------------------------


@pytest.mark.parametrize("kind", EXPLAINER_KINDS)
def test_batching_the_sentences_gives_the_maps_drawn_one_at_a_time(clip, kind):
    pixels, text = random_pixels(clip, seed=2), text_of(clip)
    together = explain(clip, pixels, text, kind)
    for i, sentence in enumerate(SENTENCES):
        alone = explain(clip, pixels, text_of(clip, [sentence]), kind)[0]
        torch.testing.assert_close(together[i], alone, rtol=1e-4, atol=1e-5)
    assert not torch.allclose(together[0], together[1])  # the maps depend on the sentence


@pytest.mark.parametrize("kind", [GRADCAM, LEGRAD])
def test_gradient_kinds_leave_no_gradient_state_and_run_under_inference_mode(clip, kind):
    pixels, text = random_pixels(clip), text_of(clip)
    flags = {name: p.requires_grad for name, p in clip.named_parameters()}
    with torch.inference_mode():  # as the app calls every model
        maps = explain(clip, pixels, text, kind)
    assert torch.isfinite(maps).all() and maps.abs().sum() > 0
    assert all(p.grad is None for p in clip.parameters())
    assert {name: p.requires_grad for name, p in clip.named_parameters()} == flags
    assert not maps.requires_grad


def test_gradcam_differentiates_the_methods_own_score():
    finelip = FineLipMethod.example("tiny", seed=0).eval()
    pixels, text = random_pixels(finelip), text_of(finelip)
    calls = []
    own = finelip.similarity

    def spy(image, text_features):
        calls.append(len(image))
        return own(image, text_features)

    finelip.similarity = spy
    try:
        explain(finelip, pixels, text, GRADCAM)
    finally:
        del finelip.similarity
    assert calls == [len(SENTENCES)]  # FineLIP*'s score, once, for one copy of the picture per sentence


# ---- bad input ---------------------------------------------------------------------------------------


def test_bad_input_gets_a_clear_message(clip):
    from explorer.models.methods.seps import SepsMethod

    empty = TextFeatures(eot=torch.zeros(0, 32), tokens=torch.zeros(0, 1, 32), mask=torch.zeros(0, 1, dtype=bool))
    with pytest.raises(ExplainerError, match="no sentence"):
        explain(clip, random_pixels(clip), empty, GRADCAM)
    with pytest.raises(ExplainerError, match="one picture at a time"):
        explain(clip, torch.zeros(2, 3, 64, 64), text_of(clip), GRADCAM)
    with pytest.raises(ExplainerError, match="no explainer named 'rollout'"):
        explain(clip, random_pixels(clip), text_of(clip), "rollout")
    seps = SepsMethod.example("tiny")
    assert seps.explainer_kinds == () and GRADCAM not in seps.map_kinds
    with pytest.raises(ExplainerError, match="has no CLIP ViT image tower"):
        explain(seps, torch.zeros(1, 3, 32, 32), text_of(clip), LEGRAD)
    with pytest.raises(ExplorerError, match="has no map kind 'gradcam'"):
        seps.explainer_maps(torch.zeros(1, 3, 32, 32), text_of(clip), GRADCAM)


@pytest.mark.parametrize("name", ["clip", "longclip", "finelip", "mulclip", "goal", "flair", "caft"])
def test_every_explainer_of_every_method_is_drawn_through_the_public_model(name):
    """Model.sentence_maps runs under inference mode, as the app runs it: the explainers still get their
    gradients, for every CLIP-family method and its own score and features."""
    import numpy as np
    from PIL import Image

    from explorer.models.methods import get_method
    from explorer.models.model import Model

    model = Model(get_method(name).example("tiny").eval(), name=name)
    picture = Image.fromarray((np.random.default_rng(0).random((80, 120, 3)) * 255).astype("uint8"))
    for kind in EXPLAINER_KINDS:
        maps = model.sentence_maps(picture, SENTENCES[:2], kind=kind)
        assert maps.kind == kind and np.asarray(maps.maps).shape == (2, 80, 120)
        assert np.isfinite(np.asarray(maps.maps)).all(), kind


# ---- a caption change reuses the picture's trunk -----------------------------------------------------------


@pytest.mark.parametrize("kind", EXPLAINER_KINDS)
def test_a_caption_change_runs_no_block_on_the_same_picture(kind):
    """The trunk's tokens depend on the picture alone: through the public model, a second caption on the same
    picture runs none of the first block again, and gives the maps a fresh model gives (nothing stale)."""
    import numpy as np
    from PIL import Image

    import explorer

    method = ClipMethod.example("tiny", seed=0)
    model, fresh = explorer.Model(method, device="cpu"), explorer.Model(ClipMethod.example("tiny", seed=0), device="cpu")
    picture = Image.fromarray(np.random.default_rng(0).integers(0, 255, (80, 96, 3), dtype=np.uint8))
    calls = []
    # the trunk: every block for Grad-CAM; for the others the blocks before those explained (none of this tiny
    # tower's two for LeGrad), after the patch embedding, which they then never run again either
    visual = model.method.visual
    probe = visual.transformer.resblocks[0] if kind == GRADCAM else visual.conv1
    probe.register_forward_hook(lambda *_: calls.append(1))
    model.sentence_maps(picture, SENTENCES[:2], kind)
    assert calls, "the first request runs the trunk"
    calls.clear()
    again = model.sentence_maps(picture, SENTENCES[2:], kind)
    assert not calls, f"{kind}: a caption change ran the trunk {len(calls)} time(s)"
    np.testing.assert_allclose(again.grid, fresh.sentence_maps(picture, SENTENCES[2:], kind).grid, atol=1e-5)
    other = Image.fromarray(np.asarray(picture)[::-1].copy())  # another picture: the trunk runs anew
    model.sentence_maps(other, SENTENCES[2:], kind)
    assert calls


def test_each_kind_gets_its_own_trunk_on_the_same_model_and_picture():
    """The trunks of the kinds differ in depth (every block for Grad-CAM, all but the last for the forward
    readouts, before the explained blocks for LeGrad): one model drawing them in turn on one picture gives each
    the maps a fresh model gives."""
    import numpy as np
    from PIL import Image

    import explorer

    model = explorer.Model(ClipMethod.example("tiny", seed=0), device="cpu")
    picture = Image.fromarray(np.random.default_rng(1).integers(0, 255, (64, 64, 3), dtype=np.uint8))
    for kind in (GRADCAM, CLEARCLIP, NACLIP, LEGRAD, GRADCAM):
        fresh = explorer.Model(ClipMethod.example("tiny", seed=0), device="cpu")
        np.testing.assert_allclose(model.sentence_maps(picture, SENTENCES[:2], kind).grid,
                                   fresh.sentence_maps(picture, SENTENCES[:2], kind).grid, atol=1e-5, err_msg=kind)


def test_the_trunk_cache_holds_only_inside_the_models_request(clip):
    """After ``Model.sentence_maps`` returns, an explainer called directly computes its own picture's trunk
    (the model's lookup for its picture is not left set)."""
    import numpy as np
    from PIL import Image

    import explorer
    from explorer.models import explainers

    pixels, text = random_pixels(clip, seed=5), text_of(clip, SENTENCES[:2])
    before = explain(clip, pixels, text, GRADCAM)
    model = explorer.Model(ClipMethod.example("tiny", seed=0), device="cpu")
    model.sentence_maps(Image.fromarray(np.zeros((32, 32, 3), dtype=np.uint8)), SENTENCES[:2], GRADCAM)
    assert explainers._TRUNKS.get() is None
    torch.testing.assert_close(explain(clip, pixels, text, GRADCAM), before)


def seq_first(method):
    """The same tower with its blocks sequence first ([N, B, D], open_clip's ``batch_first=False``): its
    transformer still takes and gives batch first tokens."""
    method.visual.transformer.batch_first = False
    for block in method.visual.transformer.resblocks:
        block.attn.batch_first = False
    return method


@pytest.mark.parametrize("name", ["clip", "goal"])
@pytest.mark.parametrize("kind", EXPLAINER_KINDS)
def test_a_sequence_first_tower_gives_the_maps_of_the_batch_first_one(name, kind):
    from explorer.models.methods import get_method

    batch_first = get_method(name).example("tiny", seed=0).eval()
    sequence_first = seq_first(get_method(name).example("tiny", seed=0).eval())
    pixels, text = random_pixels(batch_first, seed=4), text_of(batch_first, SENTENCES[:3])
    with torch.no_grad():
        torch.testing.assert_close(sequence_first.encode_image(pixels).cls, batch_first.encode_image(pixels).cls)
    torch.testing.assert_close(explain(sequence_first, pixels, text, kind), explain(batch_first, pixels, text, kind),
                               rtol=1e-4, atol=1e-5)


class Bypass(ClipMethod):
    """Image features from the patch embedding alone: nothing passes through the tower's blocks."""

    def encode_image(self, pixels):
        from explorer.models.features import ImageFeatures

        projected = self.project_image(self.visual.ln_post(self.visual._embeds(pixels.to(self.dtype))))
        return ImageFeatures(cls=projected[:, 0], patches=projected[:, 1:], grid_hw=self.grid_hw)


def test_gradcam_says_so_when_the_features_skip_the_last_block():
    method = Bypass.example("tiny", seed=0).eval()
    with pytest.raises(ExplainerError, match="do not pass through its last ViT block"):
        explain(method, random_pixels(method), text_of(method), GRADCAM)


def test_a_replaced_tower_is_seen_by_its_own_request_only():
    """The page runs two heavy requests at once: while a Grad-CAM request replaces the tower's output, another
    request on the same model (another thread) runs the real blocks; after it, nothing is left on the modules."""
    from concurrent.futures import ThreadPoolExecutor

    from explorer.models.explainers import tower_output_replaced

    method = ClipMethod.example("tiny", seed=0).eval()
    pixels = random_pixels(method)
    with torch.no_grad():
        reference = method.encode_image(pixels).cls
        tokens = trunk(method, pixels, method.visual.transformer.resblocks, True)
        with tower_output_replaced(method.visual, torch.zeros_like(tokens), True) as called:
            with ThreadPoolExecutor(1) as pool:
                other = pool.submit(lambda: method.encode_image(pixels).cls).result()
            mine = method.encode_image(pixels).cls
    assert called[0]
    torch.testing.assert_close(other, reference)  # the other request: the real tower
    assert not torch.allclose(mine, reference)  # this request: the replaced output
    assert "forward" not in vars(method.visual.transformer) and "forward" not in vars(
        method.visual.transformer.resblocks[-1])


def test_gradcam_is_the_relu_of_the_gradient_weighted_tokens(clip):
    """Grad-CAM written out by hand on the last block's output tokens A [N, D] (Selvaraju et al.): for sentence m,
    w = mean over tokens of d(cos(image(A), t_m))/dA, map = ReLU(A @ w) over the patches. Random weights make
    A @ w negative somewhere, so a dropped ReLU (or a sign slip) shows."""
    pixels, text = random_pixels(clip), text_of(clip)
    maps = explain(clip, pixels, text, GRADCAM).flatten(1)
    visual = clip.visual
    with torch.no_grad():
        last = trunk(clip, pixels, visual.transformer.resblocks, True)[0]
    expected = []
    for m in range(len(text)):
        tokens = last.clone().requires_grad_(True)
        image = clip.pool_image(clip.project_image(visual.ln_post(tokens[None])))
        score = F.cosine_similarity(image.float(), text.eot[m:m + 1].float()).sum()
        gradient, = torch.autograd.grad(score, tokens)
        expected.append(F.relu(tokens.detach() @ gradient.mean(dim=0))[1:])
    expected = torch.stack(expected)
    assert (expected == 0).any() and (expected > 0).any()  # the ReLU has something to cut here
    torch.testing.assert_close(maps, expected, rtol=1e-4, atol=1e-6)
