"""Text without padding on every path (issue 63, part 2): each text forward runs at its batch's longest text, and
gives what the padded run gives (fp32, max abs difference <= 1e-5, gradients too), per method and per path."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from PIL import Image

from explorer.models.batch import example_batch
from explorer.models.methods import METHODS, discover_methods
from explorer.models.model import Model
from explorer.models.tokenizer import TokenBatch, tokenize
from explorer.models.unpadded import longest, padding_kept, unpadded

discover_methods()
BUILT_IN = ("clip", "longclip", "finelip", "flair", "goal", "mulclip", "caft", "seps")
TEXTS = ["A red square.", "A small blue circle sits left of a large green triangle on a grey ground, near the top.",
         "Two stripes."]
TOLERANCE = 1e-5


def tiny(name: str):
    return METHODS[name].example("tiny", seed=0).eval()


class TowerWidths:
    """The widths [K] the text tower of a method ran at, read at its input (a forward pre-hook)."""

    def __init__(self, method):
        tower = getattr(method, "txt_enc", None) or method.transformer  # SEPS's BERT, else CLIP's text blocks
        self.widths: list[int] = []
        self.handle = tower.register_forward_pre_hook(self.record)

    def record(self, module, args):
        self.widths.append(int(args[0].shape[1]))

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.handle.remove()


def gap(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.float() - b.float()).abs().max())


def test_unpadded_cuts_after_the_longest_row_and_padding_kept_turns_it_off():
    batch = tokenize(TEXTS, 77)
    longest_row = max(batch.n_tokens)
    assert unpadded(batch.ids).shape == (3, longest_row)  # CLIP's rule: the end token (argmax)
    assert batch.unpadded().ids.shape == (3, longest_row)  # the counts' rule
    assert torch.equal(batch.unpadded().ids, batch.ids[:, :longest_row])
    assert batch.unpadded().n_tokens == batch.n_tokens
    bert_like = torch.tensor([[101, 7, 102, 0, 0], [101, 102, 0, 0, 0]])
    assert unpadded(bert_like, bert_like != 0).shape == (2, 3)
    with padding_kept():
        assert unpadded(batch.ids).shape == (3, 77)
        assert batch.unpadded().ids.shape == (3, 77)
    cut = tokenize(["word " * 100], 77)  # a text past the context keeps the whole context
    assert cut.unpadded().ids.shape == (1, 77) and longest(cut.ids) == 77


@pytest.mark.parametrize("name", BUILT_IN)
def test_text_features_trimmed_equal_padded_and_cost_the_longest_text(name):
    method = tiny(name)
    batch = method.tokenize(TEXTS)
    with torch.no_grad(), TowerWidths(method) as trimmed_run:
        trimmed = method.encode_text(batch.ids)  # padded ids in: the tower cuts them itself
    with torch.no_grad(), padding_kept(), TowerWidths(method) as padded_run:
        padded = method.encode_text(batch.ids)
    width = min(max(batch.n_tokens), batch.ids.shape[1])
    assert set(trimmed_run.widths) == {width} and set(padded_run.widths) == {batch.ids.shape[1]}
    assert trimmed.tokens.shape[1] == width
    assert gap(trimmed.eot, padded.eot) <= TOLERANCE
    kept = trimmed.mask
    assert torch.equal(kept, padded.mask[:, :width]) and not padded.mask[:, width:].any()
    assert gap(trimmed.tokens[kept], padded.tokens[:, :width][kept]) <= TOLERANCE


@pytest.mark.parametrize("name", BUILT_IN)
def test_a_batch_of_mixed_lengths_equals_each_sentence_alone(name):
    method = tiny(name)
    size = method.preprocess.image_size
    with torch.no_grad():
        image = method.encode_image(torch.randn(2, 3, size, size, generator=torch.Generator().manual_seed(0)))
        together = method.encode_text(method.tokenize(TEXTS).ids)
        scores = method.similarity(image, together)
        for i, text in enumerate(TEXTS):
            alone = method.encode_text(method.tokenize([text]).ids)
            assert gap(alone.eot[0], together.eot[i]) <= TOLERANCE
            n = alone.tokens.shape[1]
            assert gap(alone.tokens[0][alone.mask[0]], together.tokens[i, :n][together.mask[i, :n]]) <= TOLERANCE
            assert gap(method.similarity(image, alone)[:, 0], scores[:, i]) <= TOLERANCE


def _losses_and_grads(method, batch):
    torch.manual_seed(0)
    batch.extras["chunk_generator"] = torch.Generator().manual_seed(0)  # CAFT: the same chunks in both runs
    loss = sum(method.losses(batch).values())
    parameters = [p for p in method.parameters() if p.requires_grad]
    grads = torch.autograd.grad(loss, parameters, allow_unused=True)
    return loss.detach(), grads


@pytest.mark.parametrize("name", BUILT_IN)
def test_training_losses_and_gradients_trimmed_equal_padded(name):
    method = tiny(name).train()
    for module in method.modules():  # dropout's noise is drawn per position: the padded run draws more of it
        if isinstance(module, torch.nn.Dropout):
            module.p = 0.0
    batch = example_batch(method.preprocess.image_size, batch_size=2, seed=0)  # captions of 2 and 3 sentences
    with TowerWidths(method) as trimmed_run:
        loss, grads = _losses_and_grads(method, batch)
    with padding_kept():
        padded_loss, padded_grads = _losses_and_grads(method, batch)
    assert max(trimmed_run.widths) < method.context_length  # no training pass ran at the context
    assert abs(float(loss) - float(padded_loss)) <= TOLERANCE
    for grad, padded in zip(grads, padded_grads):
        assert (grad is None) == (padded is None)
        if grad is not None:  # fp32 rounding grows with the gradient's size: 1e-5 of it, at least 1e-5
            assert gap(grad, padded) <= TOLERANCE * max(1.0, float(padded.abs().max()))


def test_caft_chunks_run_at_the_longest_chunk():
    method = tiny("caft")
    caption = " ".join(TEXTS) + " A yellow star sits at the bottom right of the picture, under the circle."
    with torch.no_grad(), TowerWidths(method) as trimmed_run:
        whole, parts, mask = method.encode_long_captions([caption])
    with torch.no_grad(), padding_kept():
        padded = method.encode_long_captions([caption])
    assert max(trimmed_run.widths) < method.context_length
    assert gap(whole, padded[0]) <= TOLERANCE and gap(parts, padded[1]) <= TOLERANCE
    assert torch.equal(mask, padded[2])


@pytest.fixture(scope="module")
def picture() -> Image.Image:
    pixels = np.random.default_rng(0).integers(0, 255, (64, 64, 3), dtype=np.uint8)
    return Image.fromarray(pixels)


@pytest.mark.parametrize("name,kind", [("finelip", "late-interaction"), ("longclip", "gradcam"),
                                       ("clip", "legrad"), ("flair", "generic"), ("goal", "clearclip")])
def test_maps_and_scores_through_the_model_trimmed_equal_padded(name, kind, picture):
    """The page's path (maps, the swap probe's map pairs, scores): ``Model`` hands the method cut ids."""
    model = Model(tiny(name), name=name, device="cpu", precision="fp32")
    with TowerWidths(model.method) as trimmed_run:
        maps = model.sentence_maps(picture, TEXTS, kind=kind).grid
        scores = model.similarity([picture], TEXTS)
    with padding_kept():
        padded_maps = model.sentence_maps(picture, TEXTS, kind=kind).grid
        padded_scores = model.similarity([picture], TEXTS)
    assert max(trimmed_run.widths) == max(model.tokenize(TEXTS).n_tokens)
    assert float(np.abs(maps - padded_maps).max()) <= TOLERANCE
    assert gap(scores, padded_scores) <= TOLERANCE


def test_a_plugins_own_text_tower_gets_cut_ids_through_the_method_surface(picture):
    """A method whose ``encode_text`` does not cut ids itself still runs at the longest text: the model's
    forwards and ``score_captions`` hand it ids cut by ``TokenBatch.unpadded``."""
    seen: list[int] = []

    class Recording(METHODS["clip"]):
        def encode_text(self, ids):
            seen.append(ids.shape[1])
            return super().encode_text(ids)

    method = Recording.example("tiny", seed=0).eval()
    model = Model(method, name="recording", device="cpu", precision="fp32")
    model.encode_text(TEXTS)
    model.sentence_maps(picture, TEXTS)
    model.similarity([picture], TEXTS)
    method.losses(example_batch(method.preprocess.image_size, batch_size=2, seed=0))
    assert seen and all(width < method.context_length for width in seen), seen
    assert isinstance(model.tokenize(TEXTS).unpadded(), TokenBatch)
