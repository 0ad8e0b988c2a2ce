"""SEPS: released-layout loading, strict keys, features, scores and maps, on a tiny model built here."""

from __future__ import annotations

import argparse
import math

import pytest
import torch
from PIL import Image

import explorer
from explorer.core.errors import CheckpointError, CheckpointMismatchError, UnsafeCheckpointError
from explorer.models.batch import TrainingBatch, example_batch
from explorer.models.features import ImageFeatures, TextFeatures
from explorer.models.io.checkpoints import read_checkpoint
from explorer.models.io.loading import check, load_method, save_method, save_released
from explorer.models.methods import detect_format
from explorer.models.methods.seps import (POOLER_PREFIXES, RELEASED_VIT_NAMING, SepsMethod, aggregate_kept, consensus,
                                          from_released_layout, gumbel_keep, installed_vit_naming, min_max,
                                          released_state_dict, select_patches, seps_loss_terms, top_k_mask, view_scores)
from explorer.models.nn.late_interaction import late_interaction_score  # [B] for [B, P, d]
from explorer.models.nn.late_interaction import late_interaction_score as late_interaction_batch
from explorer.core.errors import ExplorerError

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


def pixels(n=1, seed=1, size=IMAGE):
    return torch.randn(n, 3, size, size, generator=torch.Generator().manual_seed(seed))


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
        with pytest.raises(ExplorerError, match="one dense caption per caption"):
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
    method, report = load_method(path)
    assert report.ok and isinstance(method, SepsMethod)
    assert method.config() == loaded.method.config()
    x = pixels(1, seed=9)
    with torch.no_grad():
        assert torch.allclose(method.eval().encode_image(x).patches, loaded.method.encode_image(x).patches)
    dry, dry_report = load_method(path, dry_run=True)
    assert dry_report.ok and next(dry.parameters()).device.type == "meta"


def test_no_projection_when_embed_equals_width():
    config = dict(CONFIG, embed_dim=WIDTH, refiner={"dim": WIDTH, "hidden": 12, "n_out": 2})
    with torch.device("meta"):
        model = SepsMethod(**config)
    keys = model.state_dict().keys()
    assert not any(k.startswith(("img_enc.vision_proj.", "txt_enc.fc.")) for k in keys)

# ---- (5) the two scorings: selection, calibration, re-synthesis ---------------------------------------


def features(method, captions, n_images=2, seed=1):
    with torch.no_grad():
        image = method.encode_image(pixels(n_images, seed, method.preprocess.image_size))
        return image, method.encode_text(method.tokenize(captions).ids)


@pytest.fixture(scope="module")
def paper(files):
    model = tiny_model(scoring="paper")
    model.set_vocab_file(files["vocab"])
    return model


def test_official_keep_ratio_is_ceil_half_and_constant(files):
    model = tiny_model(input_size=48)  # 3 x 3 = 9 patches: ceil(9 * 0.5) = 5 kept
    model.set_vocab_file(files["vocab"])
    image, text = features(model, CAPTIONS, n_images=3)
    model.train()  # the official selection is top-k in training too
    out = model.pair_outputs(image, text, text)
    assert out.keep_sparse.shape == (3, 3, 9)
    assert torch.equal(out.keep_sparse.sum(-1), torch.full((3, 3), 5.0))
    assert torch.equal(out.keep_dense.mean(-1), torch.full((3, 3), 5 / 9))
    batch = TrainingBatch(pixels=pixels(3, size=48), captions=CAPTIONS, dense_captions=list(reversed(CAPTIONS)))
    terms = model.losses(batch)
    model.eval()
    assert set(terms) == {"hinge", "ratio"}
    assert torch.isclose(terms["ratio"], torch.tensor(2 * (5 / 9 - 0.5) ** 2)) and not terms["ratio"].requires_grad
    assert terms["hinge"].requires_grad and terms["hinge"] >= 0


def test_eval_selection_keeps_exactly_the_planted_top_patches():
    scores = torch.rand(2, 3, 8, generator=torch.Generator().manual_seed(0)) * 0.5
    planted = torch.tensor([[1, 4, 6, 7], [0, 2, 3, 5]])
    for b in range(2):
        for m in range(3):
            scores[b, m, planted[(b + m) % 2]] += 0.5 + 0.01 * m  # above every other patch
    keep = select_patches(scores, 0.5, stochastic=False)
    for b in range(2):
        for m in range(3):
            assert keep[b, m].nonzero().flatten().tolist() == planted[(b + m) % 2].tolist()
    # ceil: 7 patches at ratio 0.5 keep 4; a tie keeps the earlier patch
    assert top_k_mask(torch.tensor([0.1, 0.9, 0.5, 0.5, 0.2, 0.9, 0.3]), 4).tolist() == [0, 1, 1, 1, 0, 1, 0]
    assert select_patches(torch.tensor([[0.1, 0.9, 0.5, 0.5, 0.2, 0.8, 0.3]]), 0.5, False).sum() == 4


def test_training_selection_is_a_straight_through_gumbel_sample():
    generator = torch.Generator().manual_seed(0)
    high = torch.full((2, 10), 1 - 1e-6, requires_grad=True)
    keep = gumbel_keep(high, generator=generator)
    assert torch.equal(keep.detach(), torch.ones(2, 10))  # the count is free (not top-k): the ratio loss sets it
    keep.sum().backward()
    assert high.grad is not None and torch.all(high.grad != 0)  # the soft sample's gradient
    low = torch.full((1, 6), 1e-6)
    low[0, 4] = 2e-6
    assert gumbel_keep(low, generator=generator).tolist() == [[0, 0, 0, 0, 1, 0]]  # never empty: the best kept
    mixed = gumbel_keep(torch.full((1, 4000), 0.3), generator=generator)
    assert set(mixed.unique().tolist()) <= {0.0, 1.0} and abs(mixed.mean().item() - 0.3) < 0.03  # P(keep) = s


def test_min_max_and_the_sparse_dense_mix_on_four_patches(paper):
    # four 2-d patches; the anchors' dots / d are written under each
    patches = torch.tensor([[[1.0, 0.0], [0.0, 1.0], [1.0, 1.0], [-1.0, 0.0]]])
    sparse, dense, image_global = torch.tensor([[2.0, 0.0]]), torch.tensor([[0.0, 4.0]]), torch.tensor([[1.0, 1.0]])
    s_st = view_scores(patches, sparse)  # [1, 0, 1, -1] -> [1, 1/2, 1, 0]
    s_dt = view_scores(patches, dense)  # [0, 2, 2, 0] -> [0, 1, 1, 0]
    s_im = view_scores(patches, image_global, per_image=True)  # [1/2, 1/2, 1, -1/2] -> [2/3, 2/3, 1, 0]
    torch.testing.assert_close(s_st, torch.tensor([[[1.0, 0.5, 1.0, 0.0]]]))
    torch.testing.assert_close(s_dt, torch.tensor([[[0.0, 1.0, 1.0, 0.0]]]))
    torch.testing.assert_close(s_im, torch.tensor([[[2 / 3, 2 / 3, 1.0, 0.0]]]))
    prior = torch.tensor([[0.5, 0.25, 1.0, 0.0]])
    # s_s = 0.4 s_p + 0.6 (s_st + s_im) / 2;  s_d = 0.4 s_p + 0.6 (s_dt + s_im) / 2
    torch.testing.assert_close(consensus(prior, s_st, s_im), torch.tensor([[[0.7, 0.45, 1.0, 0.0]]]))
    torch.testing.assert_close(consensus(prior, s_dt, s_im), torch.tensor([[[0.4, 0.6, 1.0, 0.0]]]))
    assert torch.equal(min_max(torch.full((1, 4), 3.0)), torch.zeros(1, 4))  # a constant row gives 0
    # the model wires E_st, E_dt, E_im = text, dense text and image global embeddings (class tokens)
    image = ImageFeatures(cls=image_global, patches=patches, grid_hw=(2, 2))
    text = TextFeatures(eot=sparse, tokens=sparse[:, None], mask=torch.ones(1, 1, dtype=torch.bool))
    dense_text = TextFeatures(eot=dense, tokens=dense[:, None], mask=torch.ones(1, 1, dtype=torch.bool))
    paper.prior_scores = lambda _: prior  # planted prior (an instance attribute shadows the method)
    try:
        s_s, s_d = paper.paper_scores(image, text, dense_text)
    finally:
        del paper.prior_scores
    torch.testing.assert_close(s_s, torch.tensor([[[0.7, 0.45, 1.0, 0.0]]]))
    torch.testing.assert_close(s_d, torch.tensor([[[0.4, 0.6, 1.0, 0.0]]]))
    with torch.no_grad():
        real = paper.prior_scores(features(paper, CAPTIONS[:1])[0])
    assert real.shape == (2, N_PATCHES) and bool(((real > 0) & (real < 1)).all())


def test_resynthesis_equals_the_aggregation_on_the_kept_patches(paper):
    aggr = paper.cross_net.aggr_net
    patches = torch.randn(2, N_PATCHES, EMBED, generator=torch.Generator().manual_seed(4))
    keep = torch.tensor([[[1.0, 0, 1, 1], [0, 1, 0, 0]], [[1.0, 1, 1, 1], [0, 0, 1, 1]]])
    with torch.no_grad():
        got = aggregate_kept(aggr, patches, keep)  # [2, 2, N_c, C]
        for b in range(2):
            for m in range(2):
                expected, _ = aggr(patches[b][keep[b, m].bool()][None])
                torch.testing.assert_close(got[b, m], expected[0], atol=1e-5, rtol=1e-5)
    # a straight-through decision reaches the score through a dropped patch too
    soft = torch.tensor([[[0.9, 0.2, 0.8, 0.3]]], requires_grad=True)
    decisions = (soft > 0.5).float() + (soft - soft.detach())
    aggregate_kept(aggr, patches[:1], decisions).sum().backward()
    assert soft.grad[0, 0, 1] != 0 and soft.grad[0, 0, 3] != 0


def test_paper_scores_are_the_late_interaction_of_the_joint_tokens(paper):
    image, text = features(paper, CAPTIONS)
    _, dense = features(paper, list(reversed(CAPTIONS)))
    with torch.no_grad():
        out = paper.pair_outputs(image, text, dense)
        s_s, s_d = paper.paper_scores(image, text, dense)
        assert torch.equal(out.keep_sparse, top_k_mask(s_s, 2)) and torch.equal(out.keep_dense, top_k_mask(s_d, 2))
        aggr = paper.cross_net.aggr_net
        for i in range(2):
            for j in range(len(CAPTIONS)):
                tokens = sum(aggr(image.patches[i][keep[i, j].bool()][None])[0][0]
                             for keep in (out.keep_sparse, out.keep_dense))
                words = text.tokens[j][text.mask[j]]
                torch.testing.assert_close(out.scores[i, j], late_interaction_score(words, tokens),
                                           atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(paper.similarity_with_dense(image, text, dense), out.scores)
        # without a dense caption: the caption is its own dense text, and that is ``similarity``
        torch.testing.assert_close(paper.similarity(image, text), paper.similarity_with_dense(image, text))


def test_dense_caption_per_image(loaded, paper):
    for method in (loaded.method, paper):
        image, text = features(method, CAPTIONS)
        _, dense = features(method, ["the mat", "a red dog"])
        with torch.no_grad():
            got = method.similarity_with_dense(image, text, dense, dense_for="image")
            for i in range(2):
                expected = method.similarity_with_dense(image[i], text, dense[[i] * len(CAPTIONS)])
                torch.testing.assert_close(got[i], expected[0], atol=1e-5, rtol=1e-5)
        with pytest.raises(ExplorerError, match="one dense caption per image"):
            method.similarity_with_dense(image, text, dense[:1], dense_for="image")


# ---- (6) losses and gradients ------------------------------------------------------------------------


def test_loss_terms_equal_a_hand_computation():
    scores = torch.tensor([[0.9, 0.5, 0.8], [0.3, 0.6, 0.65], [0.2, 0.1, 0.4]])
    # image -> wrong text, hardest per row: 0.2 + 0.8 - 0.9 = 0.1; 0.2 + 0.65 - 0.6 = 0.25; row 2: 0
    # text -> wrong image, hardest per column: col 0: 0; 0.2 + 0.5 - 0.6 = 0.1; 0.2 + 0.8 - 0.4 = 0.6
    keep_sparse = torch.tensor([1.0, 1, 0, 0]).repeat(3, 3, 1)  # 0.5
    keep_dense = torch.tensor([1.0, 0, 0, 0]).repeat(3, 3, 1)  # 0.25
    keep_sparse[0, 0] = keep_dense[0, 0] = 1.0  # pair (0, 0): ratio 1
    keep_sparse[2, 1] = torch.tensor([0.0, 0, 1, 0])  # pair (2, 1): 0.5 * 0.25 + 0.5 * 0.75 = 0.5
    keep_dense[2, 1] = torch.tensor([1.0, 1, 0, 1])
    # others: 0.5 * 0.5 + 0.5 * 0.25 = 0.375; mean over the 9 pairs of (r - 0.5)^2, times 2
    terms = seps_loss_terms(scores, keep_sparse, keep_dense, target=0.5)
    assert math.isclose(terms["hinge"].item(), 0.35 + 0.7, abs_tol=1e-6)
    assert math.isclose(terms["ratio"].item(), 2 * (0.5 ** 2 + 0 + 7 * 0.125 ** 2) / 9, abs_tol=1e-7)


def _silent_parameters(model, terms):
    model.zero_grad()
    sum(terms.values()).backward()
    return [name for name, p in model.named_parameters()
            if p.requires_grad and (p.grad is None or not torch.any(p.grad != 0))]


@pytest.mark.parametrize("scoring", ["paper", "official"])
def test_gradients_reach_every_learnable_parameter(files, scoring):
    model = tiny_model(scoring=scoring)
    model.set_vocab_file(files["vocab"])
    model.train()
    batch = TrainingBatch(pixels=pixels(3, seed=7), captions=CAPTIONS, dense_captions=["the mat", "a dog", "red"])
    terms = model.losses(batch)
    assert all(t.ndim == 0 and torch.isfinite(t) for t in terms.values())
    assert _silent_parameters(model, terms) == []
    frozen = sorted(name for name, p in model.named_parameters() if not p.requires_grad)
    assert frozen and all(name.startswith(POOLER_PREFIXES) for name in frozen)  # only the unused poolers
    assert tuple(model.parameters_without_gradient) == POOLER_PREFIXES
    if scoring == "paper":
        # the hinge alone trains the prior MLP: its straight-through selection feeds the re-synthesis
        terms = model.losses(batch)
        model.zero_grad()
        terms["hinge"].backward()
        assert all(torch.any(p.grad != 0) for p in model.cross_net.score_net.parameters())
        assert terms["ratio"].requires_grad
    model.eval()


def test_losses_without_dense_captions_warn(files):
    model = tiny_model()
    model.set_vocab_file(files["vocab"])
    batch = TrainingBatch(pixels=pixels(2), captions=CAPTIONS[:2])
    with pytest.warns(UserWarning, match="own dense caption"):
        terms = model.losses(batch)
    with torch.no_grad():
        image, text = model.encode_image(batch.pixels), model.encode_text(model.tokenize(CAPTIONS[:2]).ids)
        scores = 2 * model.similarity(image, text)
    torch.testing.assert_close(terms["hinge"], seps_loss_terms(scores, *([torch.ones(1)] * 2), 0.5)["hinge"])


# ---- (7) examples and the official layout round trip -------------------------------------------------


def test_example_vocabulary_covers_the_example_batch():
    model = SepsMethod.example("tiny")
    batch = example_batch(model.preprocess.image_size, batch_size=4)
    ids = model.tokenize(batch.captions + batch.dense_captions).ids
    assert model.tokenizer.unk_token_id not in ids.tolist()[0] and not (ids == model.tokenizer.unk_token_id).any()
    assert model.preprocess.image_size == 64 and model.embed_dim == 32 and model.refiner["n_out"] == 3


def test_round_trip_in_the_official_layout(tmp_path):
    model = SepsMethod.example("tiny", seed=3).eval()
    path = save_released(model, tmp_path / "model_best.pth")
    raw = read_checkpoint(path, allow_pickle=True)
    assert "img_enc.visual_encoder.encoder.layer.1.attention.attention.query.weight" in raw.tensors
    assert not any(key.startswith("cross_net.score_net.") for key in raw.tensors)
    assert isinstance(raw.extras["opt"], argparse.Namespace) and raw.extras["opt"].sparse_ratio == 0.5
    assert {"epoch", "best_rsum", "Eiters"} <= set(raw.extras)
    loaded = explorer.load(path, device="cpu", allow_pickle=True, options=model.release_load_options())
    assert loaded.key_report.ok and loaded.method.scoring == "official"
    other = loaded.method
    image, text = features(model, CAPTIONS)
    _, dense = features(model, list(reversed(CAPTIONS)))
    with torch.no_grad():
        for a, b in ((model.similarity_with_dense(image, text, dense), other.similarity_with_dense(image, text, dense)),
                     (model.kept_masks(image[0], text, dense)[1], other.kept_masks(image[0], text, dense)[1])):
            assert torch.equal(a, b)
        features_b = features(other, CAPTIONS)
        torch.testing.assert_close(model.similarity(image, text), other.similarity(*features_b))
    # an official file has no prior MLP: the paper scoring refuses it, clearly
    with pytest.raises(CheckpointError, match=r"scoring='paper' needs the learned patch prior"):
        explorer.load(path, device="cpu", allow_pickle=True, options={"scoring": "paper"})
    with pytest.raises(CheckpointError, match="scoring must be one of"):
        explorer.load(path, device="cpu", allow_pickle=True, options={"scoring": "both"})


def test_paper_variant_round_trips_and_keeps_its_scoring(tmp_path, paper):
    path = save_released(paper, tmp_path / "paper.pth")
    loaded = explorer.load(path, device="cpu", allow_pickle=True, options=paper.release_load_options())
    assert loaded.key_report.ok and loaded.method.scoring == "paper"
    assert any("scoring = paper" in note for note in loaded.key_report.notes)
    image, text = features(paper, CAPTIONS)
    with torch.no_grad():
        assert torch.equal(paper.similarity(image, text), loaded.method.similarity(image, text))
    with pytest.raises(CheckpointError, match="prior MLP"):
        explorer.load(path, device="cpu", allow_pickle=True, options={"scoring": "official"})
    ours = save_method(paper, tmp_path / "paper.safetensors")
    assert load_method(ours)[0].scoring == "paper"
    with pytest.raises(CheckpointError, match="scoring='paper'"):
        load_method(save_method(tiny_model(), tmp_path / "official.safetensors"), overrides={"scoring": "paper"})


# ---- (8) maps ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("variant", ["official", "paper"])
def test_native_maps(loaded, paper, variant):
    method = loaded.method if variant == "official" else paper
    assert method.map_kinds == ("generic", "kept-sparse", "kept-dense", "word-max", "selection-score")
    image, text = features(method, CAPTIONS, n_images=1)
    _, dense = features(method, ["the mat sits on a red dog"])
    rows, cols = image.grid_hw
    with torch.no_grad():
        maps = {kind: method.sentence_maps(image, text, kind) for kind in method.map_kinds}
        for kind, grid in maps.items():
            assert grid.shape == (len(CAPTIONS), rows, cols), kind
        for kind in ("kept-sparse", "kept-dense"):
            assert set(maps[kind].unique().tolist()) == {0.0, 1.0}
            assert torch.equal(maps[kind].sum((1, 2)), torch.full((3,), math.ceil(N_PATCHES * 0.5)))
        assert torch.equal(maps["kept-dense"], maps["kept-sparse"])  # the sentence is its own dense caption
        assert torch.equal(method.sentence_maps(image, text, "kept-patches"), maps["kept-sparse"])
        sparse, dense_mask = method.kept_masks(image, text, dense)  # one dense caption for all sentences
        assert torch.equal(sparse, maps["kept-sparse"]) and dense_mask.shape == (3, rows, cols)
        assert torch.equal(method.dense_maps(image, text, dense, "kept-dense"), dense_mask)
        assert torch.equal(dense_mask[0], dense_mask[1])  # same dense caption, same dense selection
        # word-max: max over the word tokens ([CLS], [SEP] left out) of the leaky-ReLU cosine with each patch
        for j in range(len(CAPTIONS)):
            words = text.tokens[j][text.mask[j]][1:-1]
            cosine = torch.nn.functional.normalize(words, dim=-1) @ torch.nn.functional.normalize(
                image.patches[0], dim=-1).T
            expected = torch.where(cosine > 0, cosine, 0.1 * cosine).max(dim=0).values.reshape(rows, cols)
            torch.testing.assert_close(maps["word-max"][j], expected)
        assert method.word_maps(image, text, 0).shape == (int(text.mask[0].sum()) - 2, rows, cols)
    with pytest.raises(ExplorerError, match="no map kind"):
        method.sentence_maps(image, text, "attention")


def test_seps_counts_its_token_budget_in_word_pieces_not_clip_bpe():
    """The token budget of a SEPS model is what its BERT tokenizer makes of the caption."""
    from explorer.grounding.budget import analyse_caption
    from explorer.models.tokenizer import CLIP_TOKENS

    method = SepsMethod.example()
    caption = "A red cube sits on the left. A blue ball is on the right."
    counter = method.token_counter
    analysis = analyse_caption(caption, counter, (method.context_length,))
    assert [s.n_tokens for s in analysis.sentences] == [method.tokenize([s.text]).n_tokens[0]
                                                       for s in analysis.sentences]
    assert analysis.n_tokens == method.tokenize([caption]).n_tokens[0]
    assert counter.name != CLIP_TOKENS.name
    cut = counter.budget(caption, 8)  # [CLS] + 6 pieces + [SEP]: the cut falls inside the first sentence
    assert cut.cut_at_char is not None and 0 < cut.cut_at_char < caption.index(".")


# ---- the training recipe ------------------------------------------------------------------------------

CRAFTED_SCORES = torch.tensor([[0.9, 0.5, 0.8], [0.3, 0.6, 0.65], [0.2, 0.1, 0.4]])
# margin 0.2. Summed over every negative: image -> wrong text 0.1 + 0.25 = 0.35; text -> wrong image
# 0.1 (column 1) + 0.6 + 0.45 (column 2) = 1.15; in all 1.5. Hardest only: 0.35 + 0.1 + 0.6 = 1.05.
SUMMED_HINGE, HARDEST_HINGE = 1.5, 1.05


def _crafted_losses(model: SepsMethod, files, extras: dict) -> float:
    """``model.losses`` with its pair scores replaced by ``CRAFTED_SCORES`` (the encoders still run)."""
    from explorer.models.methods.seps.scoring import PairOutputs

    keep = torch.ones(3, 3, N_PATCHES)

    def crafted(*args, **kwargs):
        return PairOutputs(CRAFTED_SCORES, keep, keep, keep, keep)

    model.set_vocab_file(files["vocab"])
    model.pair_outputs = crafted
    batch = TrainingBatch(pixels=pixels(3, seed=7), captions=CAPTIONS, dense_captions=CAPTIONS, extras=extras)
    return model.losses(batch)["hinge"].item()


def test_official_recipe_sums_every_negative_until_the_configured_step_then_takes_the_hardest(files):
    model = tiny_model(mean_violation_steps=3)
    assert model.recipe == "official"
    for step, expected in [(0, SUMMED_HINGE), (2, SUMMED_HINGE), (3, HARDEST_HINGE), (10, HARDEST_HINGE)]:
        assert math.isclose(_crafted_losses(model, files, {"step": step, "epoch": 0}), expected, abs_tol=1e-6), step


def test_official_recipe_warms_up_for_the_first_epoch_by_default(files):
    model = tiny_model()
    assert model.mean_violation_steps is None
    assert math.isclose(_crafted_losses(model, files, {"step": 50, "epoch": 0}), SUMMED_HINGE, abs_tol=1e-6)
    assert math.isclose(_crafted_losses(model, files, {"step": 51, "epoch": 1}), HARDEST_HINGE, abs_tol=1e-6)
    # outside the training loop (no step, no epoch) the warm-up is over
    assert math.isclose(_crafted_losses(model, files, {}), HARDEST_HINGE, abs_tol=1e-6)


def test_hardest_recipe_takes_the_hardest_from_step_zero(files):
    model = tiny_model(recipe="hardest", mean_violation_steps=3)
    assert math.isclose(_crafted_losses(model, files, {"step": 0, "epoch": 0}), HARDEST_HINGE, abs_tol=1e-6)


def test_recipe_is_saved_with_the_model_and_checked():
    model = tiny_model(recipe="hardest", mean_violation_steps=7)
    config = model.config()
    assert config["recipe"] == "hardest" and config["mean_violation_steps"] == 7
    assert SepsMethod.build(config).recipe == "hardest"
    with pytest.raises(ExplorerError, match="recipe"):
        tiny_model(recipe="softest")


@pytest.mark.parametrize("recipe, flows", [("official", False), ("hardest", True)])
def test_fold_weights_pass_gradient_only_in_the_hardest_recipe(recipe, flows):
    model = tiny_model(recipe=recipe)
    torch.manual_seed(3)
    patches = torch.randn(2, N_PATCHES, EMBED)
    image = ImageFeatures(cls=torch.randn(2, EMBED), patches=patches, grid_hw=(2, 2))
    scores = torch.randn(2, N_PATCHES, requires_grad=True)
    tokens, _ = model.scorer.slim(model.cross_net.aggr_net, image, scores)
    extra = tokens[:, -1]  # the fold token: dropped patches weighted by the softmax of their scores
    extra.sum().backward()
    reached = scores.grad is not None and bool(torch.any(scores.grad != 0))
    assert reached is flows


def test_training_loop_hands_the_step_and_epoch_to_the_losses(tmp_path, files):
    from explorer.training.loop import TrainConfig, train
    from explorer.training.samples import BatchList

    model = tiny_model(mean_violation_steps=1)
    model.set_vocab_file(files["vocab"])
    seen, losses = [], model.losses

    def spy(batch):
        seen.append((batch.extras["step"], batch.extras["epoch"]))
        return losses(batch)

    model.losses = spy
    batch = TrainingBatch(pixels=pixels(3, seed=7), captions=CAPTIONS, dense_captions=CAPTIONS)
    train(model, BatchList([batch, batch]), TrainConfig(max_steps=3, lr_backbone=1e-4, lr_new=1e-4),
          tmp_path / "run", progress=False)
    assert seen == [(0, 0), (1, 0), (2, 1)]
