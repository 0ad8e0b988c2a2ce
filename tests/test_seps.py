"""SEPS: released-layout loading, strict keys, features, scores and maps, on a tiny model built here."""

from __future__ import annotations

import argparse
import math

import pytest
import torch
from PIL import Image

import explorer
from explorer.errors import CheckpointError, CheckpointMismatchError, UnsafeCheckpointError
from explorer.models.checkpoints import read_checkpoint
from explorer.models.late_interaction import late_interaction_score
from explorer.models.loading import check, load_method, save_method
from explorer.models.methods import detect_format
from explorer.models.methods.seps import (
    RELEASED_VIT_NAMING, SepsMethod, from_released_layout, installed_vit_naming, late_interaction_batch,
    released_state_dict)

WIDTH, EMBED, IMAGE, PATCH = 64, 48, 32, 16
N_PATCHES = (IMAGE // PATCH) ** 2
VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "a", "cat", "dog", "on", "the", "mat", "red", "blue",
         "sits", "runs", "##s", ".", ","]
CONFIG = {
    "vision": {"width": WIDTH, "layers": 1, "heads": 1, "mlp": 128, "patch_size": PATCH, "image_size": IMAGE},
    "text": {"width": WIDTH, "layers": 1, "heads": 1, "mlp": 128, "vocab_size": len(VOCAB), "max_positions": 16,
             "type_vocab_size": 2},
    "embed_dim": EMBED,
    "refiner": {"dim": EMBED, "hidden": int(EMBED * 0.2), "n_out": 3},
}
CAPTIONS = ["a red cat sits on the mat.", "a blue dog runs", "the cats"]


def tiny_model(**extra) -> SepsMethod:
    torch.manual_seed(0)
    model = SepsMethod(**CONFIG, **extra).eval()
    with torch.no_grad():  # make the aggregation and scale non-trivial
        model.cross_net.aggr_net.scale.fill_(1.7)
    return model


def released_file(tmp_path, model: SepsMethod, mutate=None, name="model_best.pth"):
    state = released_state_dict(model.state_dict())
    state["txt_enc.bert.embeddings.position_ids"] = torch.arange(CONFIG["text"]["max_positions"])[None]
    if mutate is not None:
        mutate(state)
    opt = argparse.Namespace(embed_size=EMBED, sparse_ratio=0.5, aggr_ratio=0.4, num_patches=N_PATCHES)
    path = tmp_path / name
    torch.save({"model": state, "opt": opt, "epoch": 3, "best_rsum": 500.0, "Eiters": 10}, path)
    return path


@pytest.fixture(scope="module")
def reference():
    return tiny_model()


@pytest.fixture(scope="module")
def files(tmp_path_factory, reference):
    root = tmp_path_factory.mktemp("seps")
    vocab = root / "vocab.txt"
    vocab.write_text("\n".join(VOCAB) + "\n")
    return {"root": root, "vocab": vocab, "weights": released_file(root, reference)}


@pytest.fixture(scope="module")
def loaded(files):
    return explorer.load(files["weights"], device="cpu", allow_pickle=True, options={"vocab_file": str(files["vocab"])})


def pixels(n=1, seed=1):
    return torch.randn(n, 3, IMAGE, IMAGE, generator=torch.Generator().manual_seed(seed))


# ---- (1) the released layout -------------------------------------------------------------------------


def test_file_is_in_the_released_layout(files):
    raw = read_checkpoint(files["weights"], allow_pickle=True)
    keys = set(raw.tensors)
    assert "img_enc.visual_encoder.encoder.layer.0.attention.attention.query.weight" in keys
    assert "img_enc.visual_encoder.encoder.layer.0.intermediate.dense.weight" in keys
    assert "txt_enc.bert.encoder.layer.0.attention.self.query.weight" in keys
    assert {"img_enc.vision_proj.weight", "txt_enc.fc.weight", "cross_net.aggr_net.scale",
            "cross_net.aggr_net.weight.3.weight"} <= keys
    assert isinstance(raw.extras["opt"], argparse.Namespace)
    assert detect_format(raw)[0] is SepsMethod


def test_key_mapping_round_trips(reference):
    state = reference.state_dict()
    released = released_state_dict(state)
    prefix = "img_enc.visual_encoder."
    layer_keys = [k for k in released if k.startswith(prefix) and RELEASED_VIT_NAMING.parse(k[len(prefix):])]
    assert len(layer_keys) == 16  # q, k, v, o, fc1, fc2, 2 LayerNorms; weight and bias each
    back = from_released_layout(released)
    assert back.keys() == state.keys()
    assert all(back[k] is state[k] for k in state)
    # a no-op when the installed names already are the released ones
    assert from_released_layout(from_released_layout(released)).keys() == state.keys()
    if installed_vit_naming() == RELEASED_VIT_NAMING:
        assert released.keys() == state.keys()


def test_pickled_file_needs_the_opt_in(files):
    with pytest.raises(UnsafeCheckpointError, match="allow_pickle=True"):
        explorer.load(files["weights"], device="cpu")


def test_loads_strictly_with_the_opt_in(loaded):
    report = loaded.key_report
    assert report.ok
    assert report.format == "seps"
    assert "txt_enc.bert.embeddings.position_ids" in report.ignored
    assert loaded.method_name == "seps"
    assert loaded.context_length == CONFIG["text"]["max_positions"]
    assert loaded.method.sparse_ratio == 0.5 and loaded.method.refiner["n_out"] == 3
    assert loaded.method.architecture_name == "ViT-w64-l1/16@32 + BERT-w64-l1"


def test_check_builds_on_meta_and_reports(files):
    result = check(files["weights"], allow_pickle=True)
    assert result.method == "seps" and result.report.ok
    assert result.architecture == "ViT-w64-l1/16@32 + BERT-w64-l1"
    assert result.context_length == CONFIG["text"]["max_positions"]


# ---- (2) strictness ----------------------------------------------------------------------------------


def test_unexpected_key_is_named(tmp_path, reference):
    def add(state):
        state["cross_net.caa.conv1.weight"] = torch.zeros(3)

    path = released_file(tmp_path, reference, add)
    with pytest.raises(CheckpointMismatchError, match=r"cross_net\.caa\.conv1\.weight"):
        explorer.load(path, device="cpu", allow_pickle=True)


def test_missing_key_is_named(tmp_path, reference):
    key = "img_enc.visual_encoder.encoder.layer.0.layernorm_after.bias"

    def drop(state):
        del state[key]

    path = released_file(tmp_path, reference, drop)
    with pytest.raises(CheckpointMismatchError, match="layernorm_after.bias"):
        explorer.load(path, device="cpu", allow_pickle=True)


def test_missing_projection_is_named(tmp_path, reference):
    path = released_file(tmp_path, reference, lambda s: s.pop("txt_enc.fc.bias"))
    with pytest.raises(CheckpointMismatchError, match=r"txt_enc\.fc\.bias"):
        load_method(path, allow_pickle=True, dry_run=True)


def test_unknown_option_is_refused(files):
    with pytest.raises(CheckpointError, match="quick_gelu"):
        explorer.load(files["weights"], device="cpu", allow_pickle=True, options={"quick_gelu": True})


# ---- (3) features, scores, maps ----------------------------------------------------------------------


def test_features_and_similarity_shapes(loaded):
    image = loaded.method.encode_image(pixels(2))
    assert image.patches.shape == (2, N_PATCHES, EMBED) and image.cls.shape == (2, EMBED)
    assert image.grid_hw == (IMAGE // PATCH, IMAGE // PATCH)
    sims = loaded.similarity([Image.new("RGB", (50, 30), "red"), Image.new("RGB", (20, 40), "blue")], CAPTIONS)
    assert sims.shape == (2, len(CAPTIONS)) and torch.isfinite(sims).all()
    text = loaded.encode_text(CAPTIONS)
    assert text.tokens.shape[-1] == EMBED and text.mask.dtype == torch.bool
    assert torch.equal(text.eot, text.tokens[:, 0])


def test_kept_patches_map_keeps_ceil_half(loaded, files):
    out = loaded.sentence_maps(Image.new("RGB", (40, 40), "green"), CAPTIONS[:2], kind="kept-patches")
    assert out.grid.shape == (2, IMAGE // PATCH, IMAGE // PATCH)
    assert set(out.grid.reshape(-1).tolist()) <= {0.0, 1.0}
    assert (out.grid.reshape(2, -1).sum(axis=1) == math.ceil(N_PATCHES * 0.5)).all()
    scores = loaded.sentence_maps(Image.new("RGB", (40, 40), "green"), CAPTIONS[:2], kind="selection-score")
    assert scores.grid.shape == (2, IMAGE // PATCH, IMAGE // PATCH)
    generic = loaded.sentence_maps(Image.new("RGB", (40, 40), "green"), CAPTIONS[:2])
    assert generic.grid.shape == (2, IMAGE // PATCH, IMAGE // PATCH)
    # the sparse_ratio option changes the keep count
    other = explorer.load(files["weights"], device="cpu", allow_pickle=True,
                          options={"vocab_file": str(files["vocab"]), "sparse_ratio": 0.7})
    grid = other.sentence_maps(Image.new("RGB", (40, 40), "green"), CAPTIONS[:1], kind="kept-patches").grid
    assert grid.sum() == math.ceil(N_PATCHES * 0.7)


def test_input_size_option_interpolates_the_position_table(files):
    model = explorer.load(files["weights"], device="cpu", allow_pickle=True,
                          options={"vocab_file": str(files["vocab"]), "input_size": 48})
    assert model.method.preprocess.image_size == 48
    image = model.encode_image([Image.new("RGB", (30, 60), "red")])
    assert image.patches.shape == (1, 9, EMBED) and image.grid_hw == (3, 3)
    grid = model.sentence_maps(Image.new("RGB", (30, 60), "red"), CAPTIONS[:1], kind="kept-patches").grid
    assert grid.sum() == math.ceil(9 * 0.5)
    assert any("input_size" in note for note in model.key_report.notes)


def test_similarity_is_the_official_sparse_branch(loaded):
    method = loaded.method
    with torch.no_grad():
        image = method.encode_image(pixels(2))
        text = method.encode_text(loaded.tokenize(CAPTIONS).ids)
        sims = method.similarity(image, text)
        for j in range(len(CAPTIONS)):
            words = text.tokens[j][text.mask[j]]
            mean_patch = torch.nn.functional.normalize(image.patches.mean(1), dim=-1)
            mean_word = torch.nn.functional.normalize(words.mean(0), dim=-1)
            for i in range(2):
                patches = image.patches[i]
                normed = torch.nn.functional.normalize(patches, dim=-1)
                score = normed @ mean_patch[i] + normed @ mean_word
                order = score.argsort(descending=True)
                n_keep = math.ceil(N_PATCHES * 0.5)
                kept, dropped = patches[order[:n_keep]], patches[order[n_keep:]]
                extra = (score[order[n_keep:]].softmax(0)[:, None] * dropped).sum(0)
                refined, _ = method.cross_net.aggr_net(kept[None])
                tokens = torch.cat([image.cls[i][None], refined[0], extra[None]])
                assert torch.allclose(sims[i, j], late_interaction_score(words, tokens), atol=1e-5)
        both = method.similarity_with_dense(image, text)
        assert torch.allclose(both, 2 * sims)
        dense = method.encode_text(loaded.tokenize(list(reversed(CAPTIONS))).ids)
        assert torch.allclose(method.similarity_with_dense(image, text, dense),
                              sims + method.similarity(image, dense))
        with pytest.raises(ValueError, match="one dense caption per caption"):
            method.similarity_with_dense(image, text, dense[:1])


def test_batched_late_interaction_matches_the_shared_one():
    torch.manual_seed(3)
    words, images = torch.randn(5, 8), torch.randn(3, 7, 8)
    batch = late_interaction_batch(words, images)
    assert torch.allclose(batch, torch.stack([late_interaction_score(words, v) for v in images]), atol=1e-6)


# ---- (4) numerics ------------------------------------------------------------------------------------


def test_image_features_equal_a_hand_computation(loaded, reference):
    x = pixels(2, seed=5)
    with torch.no_grad():
        hidden = reference.img_enc.visual_encoder(pixel_values=x).last_hidden_state
        proj = reference.img_enc.vision_proj
        expected = hidden @ proj.weight.T + proj.bias
        got = loaded.method.encode_image(x)
    assert torch.allclose(got.cls, expected[:, 0], atol=1e-5)
    assert torch.allclose(got.patches, expected[:, 1:], atol=1e-5)


def test_text_features_equal_a_hand_computation(loaded, reference):
    batch = loaded.tokenize(CAPTIONS)
    with torch.no_grad():
        got = loaded.method.encode_text(batch.ids)
        mask = batch.ids != 0
        hidden = reference.txt_enc.bert(input_ids=batch.ids, attention_mask=mask.long()).last_hidden_state
        fc = reference.txt_enc.fc
        expected = hidden @ fc.weight.T + fc.bias
    length = got.tokens.shape[1]
    assert torch.allclose(got.tokens[got.mask], expected[:, :length][mask[:, :length]], atol=1e-5)
    assert torch.allclose(got.eot, expected[:, 0], atol=1e-5)


# ---- inputs ------------------------------------------------------------------------------------------


def test_tokenize_is_bert_wordpiece(loaded):
    batch = loaded.tokenize(["A cat on the mats.", "a " * 30])
    ids = batch.ids
    assert ids.shape == (2, CONFIG["text"]["max_positions"])
    assert ids[0, :8].tolist() == [2, 5, 6, 8, 9, 10, 15, 16] and ids[0, 8] == 3 and (ids[0, 9:] == 0).all()
    assert batch.n_tokens == [9, 32] and batch.n_cut == [0, 16]
    assert ids[1, -1] == 3 and ids[1, 0] == 2


def test_tokenize_without_vocab_says_what_to_set(files):
    model = explorer.load(files["weights"], device="cpu", allow_pickle=True)
    with pytest.raises(CheckpointError, match='"vocab_file"'):
        model.tokenize(["a cat"])


def test_preprocess_squashes_for_scores_too(loaded):
    image = Image.new("RGB", (64, 32), "white")
    image.paste((0, 0, 0), (0, 0, 16, 32))  # a black band on the left quarter
    crop = loaded.method.preprocess([image], fit="crop")
    squash = loaded.method.preprocess([image], fit="squash")
    assert crop.shape == (1, 3, IMAGE, IMAGE) and torch.equal(crop, squash)
    assert squash[0, 0, :, 0].mean() < squash[0, 0, :, -1].mean()  # the band is still there: no crop


def test_safetensors_round_trip(tmp_path, loaded):
    path = save_method(loaded.method, tmp_path / "seps.safetensors")
    method, report, _ = load_method(path)
    assert report.ok and isinstance(method, SepsMethod)
    assert method.config() == loaded.method.config()
    x = pixels(1, seed=9)
    with torch.no_grad():
        assert torch.allclose(method.eval().encode_image(x).patches, loaded.method.encode_image(x).patches)
    dry, dry_report, _ = load_method(path, dry_run=True)
    assert dry_report.ok and next(dry.parameters()).device.type == "meta"


def test_no_projection_when_embed_equals_width():
    config = dict(CONFIG, embed_dim=WIDTH, refiner={"dim": WIDTH, "hidden": 12, "n_out": 2})
    with torch.device("meta"):
        model = SepsMethod(**config)
    keys = model.state_dict().keys()
    assert not any(k.startswith(("img_enc.vision_proj.", "txt_enc.fc.")) for k in keys)


def test_losses_are_not_there_yet(reference):
    with pytest.raises(NotImplementedError):
        reference.losses({})
