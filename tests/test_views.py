"""The grounding views as library code (explorer/views): compute once, re-render from settings alone.

Models are the methods' tiny random examples (``Method.example("tiny")``), loaded through a plain
dict, so nothing here reads the zoo or ~/.cache. Where the expected pixels must be known exactly
(masks, contours, thresholds, colour ranges), the view is built around crafted maps instead.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from PIL import Image

import explorer
from explorer.grounding.flism import FlismResult
from explorer.grounding.sentence_maps import GroundingResult, MapCache
from explorer.grounding.truth import MaskError
from explorer.models.methods import get_method
from explorer.models.model import SentenceMaps
from explorer.views.maps_view import MapsView, ModelMaps, compute_maps, render_maps, resolve_kind
from explorer.views.panels import CONTOUR_EDGE_RGB, CONTOUR_RGB, PanelGrid
from explorer.views.pca_view import PcaView, compute_pca, fit_groups, render_pca
from explorer.views.pipeline import compute_view, render_view
from explorer.views.regions_view import SimilarityMatrix, compute_regions, render_regions, similarity_plot
from explorer.views.render import overlay
from explorer.views.settings import SettingsError, ViewSettings
from explorer.core.errors import ExplorerError

CAPTION = "A red cube sits on the left. A blue ball rolls to the right. A green tree stands behind."


def tiny(name: str) -> explorer.Model:
    return explorer.Model(get_method(name).example("tiny"), name=name, device="cpu")


@pytest.fixture(scope="module")
def zoo() -> dict[str, explorer.Model]:
    """Shared tiny models (tests that spy on a model build their own)."""
    return {name: tiny(name) for name in ("clip", "caft", "seps")}


def write_picture(path, width: int = 64, height: int = 48, seed: int = 0):
    pixels = (np.random.default_rng(seed).random((height, width, 3)) * 255).astype(np.uint8)
    Image.fromarray(pixels).save(path)
    return path


@pytest.fixture()
def picture(tmp_path):
    return write_picture(tmp_path / "picture.png")


class Spy:
    """Counts the calls to a bound method and passes them on."""

    def __init__(self, function):
        self.function, self.calls = function, 0

    def __call__(self, *args, **kwargs):
        self.calls += 1
        return self.function(*args, **kwargs)


def spy_on(model: explorer.Model, *names: str) -> dict[str, Spy]:
    spies = {name: Spy(getattr(model, name)) for name in names}
    for name, spy in spies.items():
        setattr(model, name, spy)  # an instance attribute wins over the class's method
    return spies


def settings(**values) -> ViewSettings:
    return ViewSettings(**{"caption": CAPTION, **values})


# ---- crafted maps ---------------------------------------------------------------------------------

H, W = 40, 60
SQUARE = (slice(10, 30), slice(20, 40))  # rows, cols of the high mode


def bimodal_map(seed: int = 0) -> np.ndarray:
    """Two clearly separated modes: ~0.2 everywhere, ~0.8 on SQUARE (noise ±0.05)."""
    rng = np.random.default_rng(seed)
    values = 0.2 + rng.uniform(-0.05, 0.05, (H, W))
    values[SQUARE] = 0.8 + rng.uniform(-0.05, 0.05, (20, 20))
    return values.astype(np.float32)


def crafted_view(maps_by_model: dict[str, np.ndarray]) -> MapsView:
    """A MapsView around given [M, H, W] maps, as compute_maps would build it (no model involved)."""
    first = next(iter(maps_by_model.values()))
    count, height, width = first.shape
    picture = Image.fromarray(np.full((height, width, 3), 100, np.uint8))
    sentences = [f"sentence {i + 1}" for i in range(count)]
    models = []
    for name, maps in maps_by_model.items():
        found = SentenceMaps(maps=maps.astype(np.float32), kind="generic", grid=maps, sentences=sentences,
                             n_cut=[0] * count)
        result = GroundingResult(image=picture, analysis=None, maps=found, model_name=name)
        models.append(ModelMaps(name=name, result=result))
    return MapsView(picture=picture, sentences=sentences, models=models)


def square_rings() -> tuple[np.ndarray, np.ndarray]:
    """The square's own border pixels, and the one-pixel frame just outside it (corners included)."""
    inside = np.zeros((H, W), bool)
    inside[SQUARE] = True
    core = np.zeros((H, W), bool)
    core[11:29, 21:39] = True
    frame = np.zeros((H, W), bool)
    frame[9:31, 19:41] = True
    return inside & ~core, frame & ~inside


# ---- re-rendering never runs a model --------------------------------------------------------------


def test_rendering_and_a_cached_compute_never_run_the_model(picture, tmp_path):
    model = tiny("clip")
    spies = spy_on(model, "sentence_maps", "pixels", "encode_image", "encode_text")
    load = {"clip": model}.__getitem__
    cache = MapCache()
    chosen = settings(image=str(picture), models=["clip"], per_page=2)
    view = compute_maps(load, chosen, cache, truth_dir=tmp_path)  # CLIP's "native": its best explainer
    assert view.models[0].kind == "gradcam"
    assert spies["sentence_maps"].calls == 1 and spies["pixels"].calls == 1
    counts = {name: spy.calls for name, spy in spies.items()}

    changes = [dict(cmap="viridis"), dict(cmap="jet", opacity=0.9), dict(mask="both"), dict(mask="mask"),
               dict(mask="none"), dict(threshold=0.3), dict(threshold=0.7, mask="both"), dict(scale="shared"),
               dict(scale="model"), dict(page=1), dict(page=1, per_page=1, mask="both", threshold=0.5)]
    for change in changes:
        grid = render_maps(view, settings(image=str(picture), models=["clip"], **{"per_page": 2, **change}), side=32)
        assert grid.rows and all(grid.rows)
        render_view(view, settings(image=str(picture), models=["clip"], **change))  # full size too
    assert {name: spy.calls for name, spy in spies.items()} == counts

    again = compute_maps(load, settings(image=str(picture), models=["clip"], cmap="jet"), cache, truth_dir=tmp_path)
    assert {name: spy.calls for name, spy in spies.items()} == counts  # a cache hit: same maps, no model run
    assert (cache.misses, cache.hits) == (1, 1)
    assert again.models[0].maps is view.models[0].maps


def test_a_different_caption_is_a_cache_miss(picture, tmp_path):
    model = tiny("clip")
    spies = spy_on(model, "sentence_maps")
    cache = MapCache()
    compute_maps({"clip": model}.__getitem__, settings(image=str(picture), models=["clip"]), cache, tmp_path)
    compute_maps({"clip": model}.__getitem__, settings(image=str(picture), models=["clip"], caption="A cat."),
                 cache, tmp_path)
    assert spies["sentence_maps"].calls == 2 and cache.misses == 2


# ---- masks ----------------------------------------------------------------------------------------


def test_otsu_threshold_lies_between_the_modes_and_the_mask_is_the_high_region():
    view = crafted_view({"m": bimodal_map()[None]})
    model = view.models[0]
    threshold = float(model.thresholds(None)[0])
    maps = model.maps[0]
    assert maps[~_square()].max() < threshold < maps[_square()].min()
    np.testing.assert_array_equal(model.masks(None)[0], _square())


def _square() -> np.ndarray:
    mask = np.zeros((H, W), bool)
    mask[SQUARE] = True
    return mask


def test_contour_is_white_on_the_mask_edge_and_black_just_outside():
    view = crafted_view({"m": bimodal_map()[None]})
    contour = render_maps(view, ViewSettings(mask="contour"))
    bare = render_maps(view, ViewSettings(mask="none"))
    assert [len(row) for row in contour.rows] == [2] and [len(row) for row in bare.rows] == [2]
    drawn, plain = contour.rows[0][1].pixels, bare.rows[0][1].pixels
    inner, outer = square_rings()
    assert (drawn[inner] == CONTOUR_RGB).all()
    assert (drawn[outer] == CONTOUR_EDGE_RGB).all()
    rings = inner | outer
    np.testing.assert_array_equal(drawn[~rings], plain[~rings])  # nothing else changes
    # "none": the bare overlay, exactly what render.overlay draws (no contour anywhere)
    expected = np.asarray(overlay(view.picture, view.models[0].maps[0], cmap="turbo", opacity=0.55))
    np.testing.assert_array_equal(plain, expected)


def test_mask_mode_shows_the_binary_mask_only():
    view = crafted_view({"m": np.stack([bimodal_map(0), bimodal_map(1)])})
    grid = render_maps(view, ViewSettings(mask="mask"))
    assert [len(row) for row in grid.rows] == [1 + 2]  # the picture, then one panel per sentence
    for panel in grid.rows[0][1:]:
        pixels = panel.pixels
        assert set(np.unique(pixels)) == {0, 255}
        np.testing.assert_array_equal(pixels[..., 0] == 255, _square())
        assert (pixels[..., 0] == pixels[..., 1]).all() and (pixels[..., 0] == pixels[..., 2]).all()


def test_both_gives_an_overlay_with_contour_and_the_binary_mask_per_sentence():
    view = crafted_view({"m": np.stack([bimodal_map(0), bimodal_map(1), bimodal_map(2)])})
    grid = render_maps(view, ViewSettings(mask="both"))
    row = grid.rows[0]
    assert len(row) == 1 + 2 * 3
    inner, _ = square_rings()
    for s in range(3):
        overlay_panel, mask_panel = row[1 + 2 * s], row[2 + 2 * s]
        assert (overlay_panel.pixels[inner] == CONTOUR_RGB).all()
        assert set(np.unique(mask_panel.pixels)) == {0, 255}
        assert mask_panel.title == f"S{s + 1} mask"
        assert overlay_panel.title.startswith(f"S{s + 1} ")


def test_masks_follow_the_panels_when_the_preview_shrinks():
    view = crafted_view({"m": bimodal_map()[None]})
    grid = render_maps(view, ViewSettings(mask="mask"), side=30)  # 60x40 -> 30x20
    assert grid.rows[0][0].pixels.shape == (20, 30, 3)
    mask = grid.rows[0][1].pixels[..., 0] == 255
    assert mask.shape == (20, 30)
    assert mask[5:15, 10:20].all() and mask.sum() == 100  # the square, halved


def test_manual_threshold_is_a_fraction_of_each_maps_own_range():
    ramp = np.linspace(0.0, 1.0, H * W, dtype=np.float32).reshape(H, W)
    maps = np.stack([ramp, -2.0 + 8.0 * ramp, 10.0 + 0.5 * ramp])  # three different ranges
    view = crafted_view({"m": maps})
    model = view.models[0]
    for fraction in (0.0, 0.25, 0.5, 0.9):
        expected = np.array([low + fraction * (high - low) for low, high in ((0, 1), (-2, 6), (10, 10.5))])
        np.testing.assert_allclose(model.thresholds(fraction), expected, rtol=1e-5, atol=1e-6)
        np.testing.assert_array_equal(model.masks(fraction), maps > expected[:, None, None])
        rows = view.scores(fraction)
        np.testing.assert_allclose([row["threshold"] for row in rows], expected, rtol=1e-5, atol=1e-6)
    titles = [panel.title for panel in render_maps(view, ViewSettings(threshold=0.25)).rows[0][1:]]
    assert [title.split(" · ")[1] for title in titles] == ["t=0.25", "t=0", "t=10.1"]
    drawn = render_maps(view, ViewSettings(threshold=0.25, mask="mask")).rows[0][1:]
    for panel, one, threshold in zip(drawn, maps, (0.25, 0.0, 10.125)):
        np.testing.assert_array_equal(panel.pixels[..., 0] == 255, one > threshold)  # the mask drawn is manual
    assert not np.allclose(model.thresholds(None), model.thresholds(0.25))  # Otsu is something else


# ---- colour scale ---------------------------------------------------------------------------------


def test_colour_range_per_map_per_model_and_shared():
    ramp = np.linspace(0.0, 1.0, H * W, dtype=np.float32).reshape(H, W)
    view = crafted_view({"a": np.stack([ramp, 2 * ramp]), "b": np.stack([ramp - 1, 3 * ramp])})
    for m in range(2):
        for s in range(2):
            assert view.colour_range("map", m) == (None, None)
            assert view.colour_range("shared", m) == pytest.approx((-1.0, 3.0))
    assert view.colour_range("model", 0) == pytest.approx((0.0, 2.0))
    assert view.colour_range("model", 1) == pytest.approx((-1.0, 3.0))

    shared = render_maps(view, ViewSettings(scale="shared", mask="none"))
    expected = np.asarray(overlay(view.picture, view.models[0].maps[0], cmap="turbo", opacity=0.55,
                                  low=-1.0, high=3.0))
    np.testing.assert_array_equal(shared.rows[0][1].pixels, expected)  # drawn on the shared range
    own = render_maps(view, ViewSettings(scale="map", mask="none"))
    assert not np.array_equal(own.rows[0][1].pixels, expected)
    assert (shared.colorbar.low, shared.colorbar.high) == pytest.approx((-1.0, 3.0))
    assert (own.colorbar.low, own.colorbar.high) == (0.0, 1.0)


# ---- pages ----------------------------------------------------------------------------------------


def test_fifty_sentences_make_seven_pages_of_eight(picture, tmp_path, zoo):
    caption = " ".join(f"Thing number {k} is red." for k in range(1, 51))
    chosen = settings(image=str(picture), caption=caption, models=["clip", "caft"])
    view = compute_maps(zoo.__getitem__, chosen, MapCache(), truth_dir=tmp_path)
    assert len(view.sentences) == 50 and view.models[0].maps.shape[0] == 50
    assert view.pages(8) == 7
    assert list(view.page_indices(6, 8)) == [48, 49]
    last = render_maps(view, settings(image=str(picture), caption=caption, page=6))
    assert [len(row) for row in last.rows] == [1 + 2, 1 + 2]  # the picture, then sentences 49 and 50
    assert [panel.title.split(" ")[0] for panel in last.rows[0][1:]] == ["S49", "S50"]
    assert [(h.label, h.text) for h in last.headers[1:]] == [("S49", "Thing number 49 is red."),
                                                             ("S50", "Thing number 50 is red.")]
    first = render_maps(view, settings(image=str(picture), caption=caption, page=0, mask="both"))
    assert [len(row) for row in first.rows] == [1 + 16, 1 + 16]
    beyond = render_maps(view, settings(image=str(picture), caption=caption, page=99))
    assert [p.title for p in beyond.rows[0]] == [p.title for p in last.rows[0]]  # clamped to the last page


# ---- map kinds ------------------------------------------------------------------------------------


def test_kind_resolution(zoo):
    clip, caft = zoo["clip"], zoo["caft"]
    assert resolve_kind(caft, "native") == ("attention-pool", None)
    assert resolve_kind(clip, "native") == ("gradcam", None)  # no native sentence map: the best explainer
    assert resolve_kind(caft, "generic") == ("generic", None)
    assert resolve_kind(caft, "attention-pool/head-1") == ("attention-pool/head-1", None)
    kind, note = resolve_kind(clip, "attention-pool")
    assert kind == "gradcam" and "clip" in note and "'attention-pool'" in note
    kind, note = resolve_kind(caft, "late-interaction")
    assert kind == "attention-pool" and "'late-interaction'" in note


def test_compute_maps_draws_each_models_resolved_kind_and_notes_fallbacks(picture, tmp_path, zoo):
    load = zoo.__getitem__
    native = compute_maps(load, settings(image=str(picture), models=["clip", "caft"]), truth_dir=tmp_path)
    assert [m.kind for m in native.models] == ["gradcam", "attention-pool"]
    generic = compute_maps(load, settings(image=str(picture), models=["clip", "caft"], kind="generic"),
                           truth_dir=tmp_path)
    assert [m.kind for m in generic.models] == ["generic", "generic"]
    assert not np.allclose(native.models[1].maps, generic.models[1].maps)
    named = compute_maps(load, settings(image=str(picture), models=["clip", "caft"], kind="attention-pool"),
                         truth_dir=tmp_path)
    assert [m.kind for m in named.models] == ["gradcam", "attention-pool"]
    assert any("clip has no 'attention-pool' map" in note for note in named.notes)
    grid = render_maps(named, settings(image=str(picture)))
    assert grid.row_labels[1].split("\n")[:2] == ["caft", "attention-pool"]


def test_no_model_is_refused(picture, tmp_path, zoo):
    with pytest.raises(ExplorerError, match="at least one model"):
        compute_maps(zoo.__getitem__, settings(image=str(picture)), truth_dir=tmp_path)


# ---- ground truth ---------------------------------------------------------------------------------


def test_an_uploaded_label_mask_scores_each_sentence(picture, tmp_path, zoo):
    load, cache = zoo.__getitem__, MapCache()
    plain = compute_maps(load, settings(image=str(picture), models=["clip"]), cache, truth_dir=tmp_path)
    assert plain.truth is None and "IoU" not in plain.scores(None)[0]
    predicted = plain.models[0].masks(None)
    assert predicted[0].any() and not predicted[0].all()
    labels = np.zeros((48, 64), np.uint8)
    labels[~predicted[0]] = 2  # sentence 2's truth: everything sentence 1's mask leaves out
    labels[predicted[0]] = 1  # sentence 1's truth: exactly its own Otsu mask -> IoU 1, the peak inside
    mask_file = tmp_path / "labels.png"
    Image.fromarray(labels, "L").save(mask_file)

    chosen = settings(image=str(picture), models=["clip"], truth=str(mask_file))
    view = compute_maps(load, chosen, cache, truth_dir=tmp_path)
    assert cache.hits == 1  # the truth is read, the model is not run again
    assert view.truth is not None and view.truth.source == "mask file labels.png"
    rows = view.scores(None)
    assert len(rows) == 3 and all("IoU" in row and "pointing" in row for row in rows)
    assert rows[0]["IoU"] == pytest.approx(1.0) and rows[0]["pointing"] is True
    assert 0.0 <= rows[1]["IoU"] <= 1.0 and isinstance(rows[1]["pointing"], bool)
    assert rows[2]["IoU"] is None and rows[2]["pointing"] is None  # label 3 marks nothing
    assert any("sentence 3 has no ground truth" in note for note in view.notes)
    summary = view.summary(None)
    assert summary[0]["n"] == 2 and summary[0]["miou"] == pytest.approx((1.0 + rows[1]["IoU"]) / 2)

    grid = render_maps(view, chosen)
    titles = [panel.title for panel in grid.rows[0][1:]]
    assert "IoU 1.00 · hit" in titles[0]
    assert f"mIoU {summary[0]['miou']:.2f}" in grid.row_labels[0]
    assert "IoU" in titles[1] and "IoU" not in titles[2]


def test_a_mask_of_another_aspect_ratio_is_refused(picture, tmp_path, zoo):
    mask_file = tmp_path / "square.png"
    Image.fromarray(np.ones((30, 30), np.uint8), "L").save(mask_file)
    chosen = settings(image=str(picture), models=["clip"], truth=str(mask_file))
    with pytest.raises(MaskError, match="aspect ratios differ"):
        compute_maps(zoo.__getitem__, chosen, truth_dir=tmp_path)


# ---- FLISM regions --------------------------------------------------------------------------------


def test_regions_fall_back_from_a_missing_detector_and_match_flism(picture, tmp_path, monkeypatch):
    monkeypatch.delenv("EXPLORER_DETECTOR", raising=False)
    models = {"clip": tiny("clip"), "caft": tiny("caft")}
    spies = {name: spy_on(model, "encode_image", "encode_text") for name, model in models.items()}
    chosen = settings(view="regions", image=str(picture), models=["clip", "caft"],
                      detector=str(tmp_path / "no-such-yolos"))
    cache = MapCache()
    view = compute_view(models.__getitem__, chosen, cache)
    assert any("does not exist" in note and "Felzenszwalb" in note for note in view.notes)
    assert view.detector.startswith("Felzenszwalb")
    assert view.sentences == ["A red cube sits on the left.", "A blue ball rolls to the right.",
                              "A green tree stands behind."]

    grid = render_view(view, chosen)
    assert isinstance(grid, PanelGrid) and grid.row_labels == ["clip", "caft"]
    assert [len(row) for row in grid.rows] == [1, 1]
    assert grid.rows[0][0].pixels.shape == (48, 64, 3)
    assert len(grid.extras) == 2 and all(isinstance(extra, SimilarityMatrix) for extra in grid.extras)
    for result, extra, row in zip(view.results, grid.extras, grid.rows):
        assert isinstance(result, FlismResult)
        assert extra.best_pair == result.best_pair
        np.testing.assert_array_equal(extra.values, result.similarity.numpy())
        assert extra.best_region == result.best_region.tolist()
        assert extra.values.shape == (3, len(result.regions))
        assert np.unravel_index(np.argmax(extra.values), extra.values.shape) == extra.best_pair
        s, r = result.best_pair
        assert row[0].title.startswith(f"best pair: S{s + 1} <-> R{r + 1}")
    assert "Felzenszwalb" in grid.caption

    counts = {(name, method): spy.calls for name, group in spies.items() for method, spy in group.items()}
    assert all(counts.values())
    compute_regions(models.__getitem__, chosen, cache)  # the same request: cached
    render_regions(view, chosen, side=32)
    assert {(n, m): s.calls for n, g in spies.items() for m, s in g.items()} == counts


def test_regions_say_when_no_detector_is_configured(picture, monkeypatch, zoo):
    monkeypatch.delenv("EXPLORER_DETECTOR", raising=False)
    view = compute_regions(zoo.__getitem__, settings(view="regions", image=str(picture), models=["clip"]))
    assert any("no detector configured" in note for note in view.notes)


def test_similarity_plot_is_a_plotly_figure_of_heat_maps(picture, zoo):
    chosen = settings(view="regions", image=str(picture), models=["clip", "caft"])
    grid = render_regions(compute_regions(zoo.__getitem__, chosen), chosen)
    figure = similarity_plot(grid.extras)
    import plotly.graph_objects as go

    assert isinstance(figure, go.Figure)
    heatmaps = [trace for trace in figure.data if isinstance(trace, go.Heatmap)]
    assert len(heatmaps) == 2
    for trace, matrix in zip(heatmaps, grid.extras):
        np.testing.assert_allclose(np.asarray(trace.z, dtype=float), matrix.values)
        assert list(trace.y) == ["S1", "S2", "S3"]
    stars = [t for t in figure.data if isinstance(t, go.Scatter) and t.marker.symbol == "star"]
    assert len(stars) == 2


# ---- PCA maps -------------------------------------------------------------------------------------


def test_pca_joint_fit_is_one_colour_basis(tmp_path):
    first = write_picture(tmp_path / "one.png", seed=1)
    models = {"clip": tiny("clip"), "caft": tiny("caft")}
    spies = {name: spy_on(model, "patch_features")["patch_features"] for name, model in models.items()}
    cache = MapCache()
    same = settings(view="pca", image=str(first), images=[str(first)], models=["clip", "caft"])
    view = compute_pca(models.__getitem__, same, cache)
    assert len(view.pictures) == 2 and view.names == ["clip", "caft"]
    assert [spy.calls for spy in spies.values()] == [1, 1]  # the same picture twice: computed once per model
    rgb, explained, notes = fit_groups(view, "joint")
    assert len(notes) == 1 and "not aligned" in notes[0]  # two models in one fit: said so
    for m in range(2):
        np.testing.assert_array_equal(rgb[(m, 0)], rgb[(m, 1)])  # identical input, identical colours

    second = write_picture(tmp_path / "two.png", seed=2)
    chosen = settings(view="pca", image=str(first), images=[str(second)], models=["clip", "caft"], pca_fit="joint")
    view = compute_pca(models.__getitem__, chosen, cache)
    assert [spy.calls for spy in spies.values()] == [2, 2]
    joint, joint_explained, _ = fit_groups(view, "joint")
    per_image, per_explained, _ = fit_groups(view, "per-image")
    from explorer.grounding.pca import pca_maps

    cells = [(m, i) for m in range(2) for i in range(2)]
    features = [view.features[m][i] for m, i in cells]
    grids = [view.grids[m][i] for m, i in cells]
    expected, bases = pca_maps(features, grids, joint=True)
    for cell, one in zip(cells, expected):
        np.testing.assert_allclose(joint[cell], one, atol=1e-6)  # one basis over all four panels
        np.testing.assert_allclose(joint_explained[cell], bases[0].explained)
    alone, _ = pca_maps(features, grids, joint=False)
    for cell, one in zip(cells, alone):
        np.testing.assert_allclose(per_image[cell], one, atol=1e-6)
    assert any(not np.allclose(joint[cell], per_image[cell]) for cell in cells)

    joint_grid = render_pca(view, chosen)
    per_grid = render_pca(view, settings(view="pca", image=str(first), images=[str(second)],
                                         models=["clip", "caft"], pca_fit="per-image"))
    # the pictures first, then a row per model
    assert [len(row) for row in joint_grid.rows] == [2, 2, 2]
    assert [label.split("\n")[0] for label in joint_grid.row_labels] == ["picture", "clip", "caft"]
    np.testing.assert_array_equal(joint_grid.rows[0][1].pixels, np.asarray(Image.open(second).convert("RGB")))
    assert joint_grid.rows[1][0].pixels.shape == (48, 64, 3)
    # one basis: the explained share is the fit's, said once per row (the same number), not per panel
    assert len({label.split("\n")[1] for label in joint_grid.row_labels[1:]}) == 1
    assert all("var" in panel.title for row in per_grid.rows[1:] for panel in row)
    assert "one fit for all panels" in joint_grid.caption and "one fit per panel" in per_grid.caption
    per_model, _, _ = fit_groups(view, "per-model")  # each model across its own pictures
    expected, _ = pca_maps([view.features[0][0], view.features[0][1]], grids[:2], joint=True)
    np.testing.assert_allclose(per_model[(0, 1)], expected[1], atol=1e-6)
    assert any(not np.array_equal(a.pixels, b.pixels)
               for ra, rb in zip(joint_grid.rows[1:], per_grid.rows[1:]) for a, b in zip(ra, rb))
    assert [spy.calls for spy in spies.values()] == [2, 2]  # refitting and re-drawing ran no model


def test_pca_joint_fit_splits_by_feature_size_and_says_so():
    rng = np.random.default_rng(0)
    view = PcaView(pictures=[Image.new("RGB", (8, 8))], names=["wide", "narrow"],
                   features=[[rng.normal(size=(16, 32))], [rng.normal(size=(16, 8))]], grids=[[(4, 4)], [(4, 4)]],
                   source="features")
    rgb, _, notes = fit_groups(view, "joint")
    assert "differ in size (32, 8)" in notes[0]
    assert rgb[(0, 0)].shape == rgb[(1, 0)].shape == (4, 4, 3)


def test_pca_of_attention_rows_works_for_clip_and_is_refused_for_seps(picture, zoo):
    chosen = settings(view="pca", image=str(picture), models=["clip"], pca_source="attention")
    view = compute_pca(zoo.__getitem__, chosen)
    vectors, grid = view.features[0][0], view.grids[0][0]
    assert vectors.shape == (grid[0] * grid[1],) * 2  # one attention row over the patches per patch
    grid = render_pca(view, chosen)
    assert "attention" in grid.caption and grid.rows[-1][0].pixels.shape == (48, 64, 3)
    with pytest.raises(ExplorerError, match="does not expose its image encoder's attention"):
        compute_pca(zoo.__getitem__, settings(view="pca", image=str(picture), models=["seps"],
                                              pca_source="attention"))


# ---- settings -------------------------------------------------------------------------------------


@pytest.mark.parametrize("bad", [dict(cmap="rainbow"), dict(opacity=1.5), dict(opacity=-0.1),
                                 dict(models=["a", "b", "c", "d", "e"]), dict(threshold=2), dict(threshold=-0.5),
                                 dict(mask="outline"), dict(scale="global"), dict(view="table"),
                                 dict(pca_source="gradients"), dict(pca_fit="both"), dict(per_page=0),
                                 dict(page=-1)])
def test_settings_refuse_bad_values(bad):
    with pytest.raises(SettingsError):
        ViewSettings(**bad)


def test_settings_round_trip_through_json(tmp_path):
    chosen = ViewSettings(view="pca", image="/a.png", caption="A cat. A dog.", models=["x", "y"], kind="generic",
                          cmap="jet", opacity=0.3, mask="both", threshold=0.4, scale="shared", page=2, per_page=3,
                          images=["/b.png"], pca_source="attention", pca_fit="per-image")
    assert ViewSettings.from_dict(json.loads(chosen.to_json())) == chosen
    path = tmp_path / "fig.png.json"
    path.write_text(chosen.to_json())
    assert ViewSettings.load(path) == chosen
    assert ViewSettings.load(path) != ViewSettings(**{**json.loads(chosen.to_json()), "cmap": "turbo"})


def test_settings_refuse_unknown_keys_and_unreadable_files(tmp_path):
    with pytest.raises(SettingsError, match="unknown settings colour"):
        ViewSettings.from_dict({"caption": "A cat.", "colour": "red"})
    broken = tmp_path / "broken.json"
    broken.write_text("{not json")
    with pytest.raises(SettingsError, match="cannot read"):
        ViewSettings.load(broken)
    listed = tmp_path / "list.json"
    listed.write_text("[1, 2]")
    with pytest.raises(SettingsError, match="settings object"):
        ViewSettings.load(listed)
    with pytest.raises(SettingsError, match="cannot read"):
        ViewSettings.load(tmp_path / "missing.json")


# ---- review fixes: duplicate names, print-resolution export, too narrow, typed JSON ---------------


def test_two_models_with_the_same_name_keep_their_own_scores():
    from explorer.grounding.truth import Truth

    first, second = bimodal_map(0)[None], np.full((1, H, W), 0.5, np.float32)
    second[0, :, :10] = 1.0  # its peak is in the left strip, outside the square
    view = crafted_view({"model": first})
    other = crafted_view({"model": second}).models[0]
    view.models.append(other)  # two rows called "model", as two files named model.safetensors would be
    truth = np.zeros((H, W), bool)
    truth[SQUARE] = True
    view.truth = Truth(masks=[truth], source="test", notes=[])
    rows = view.scores(None)
    assert [row["row"] for row in rows] == [0, 1]
    assert rows[0]["IoU"] == pytest.approx(1.0) and rows[0]["pointing"] is True
    assert rows[1]["pointing"] is False
    grid = render_maps(view, settings())
    assert "hit" in grid.rows[0][1].title and "miss" in grid.rows[1][1].title
    assert "mIoU 1.00" in grid.row_labels[0] and "mIoU 1.00" not in grid.row_labels[1]


def test_export_draws_panels_at_the_size_they_print(monkeypatch, tmp_path):
    from explorer.views import pipeline
    from explorer.views.figure_pages import write_figure_pages
    from explorer.views.figures import panel_pixels

    view = crafted_view({"a": np.stack([bimodal_map(0), bimodal_map(1)])})
    # numbered headers: panels as narrow as they go (a column per sentence, as the test's sizes assume)
    chosen = settings(width=1.5, dpi=100, header="number", layout="models-as-rows")
    sides = []
    original = pipeline.render_view
    monkeypatch.setattr(pipeline, "render_view", lambda v, s, side=None: sides.append(side) or original(v, s, side))
    write_figure_pages(view, chosen, tmp_path / "f.png")
    expected = panel_pixels(original(view, chosen), chosen.style(), 100)
    assert sides == [None, expected] and expected < W  # re-rendered smaller, outlines drawn at that size


def test_a_figure_too_narrow_for_its_panels_says_how_wide_it_must_be(tmp_path):
    from explorer.views.figures import FigureError, save_figure

    view = crafted_view({"a": np.stack([bimodal_map(i) for i in range(8)])})
    grid = render_maps(view, settings(mask="both"))  # 1 + 16 panels per row
    with pytest.raises(FigureError, match=r"at least [\d.]+ in wide"):  # not even the picture and one map fit
        save_figure(grid, tmp_path / "narrow.pdf", width=0.6)
    assert not (tmp_path / "narrow.pdf").exists()


@pytest.mark.parametrize("data, message", [({"page": "2"}, "page should be int"),
                                           ({"dpi": None}, "dpi should be int"),
                                           ({"models": "clip"}, "models should be a list of strings")])
def test_settings_json_with_wrong_types_is_refused(data, message):
    with pytest.raises(SettingsError, match=message):
        ViewSettings.from_dict(data)


def test_a_map_that_does_not_depend_on_the_sentence_says_so():
    """GOAL's self-attention is image-only: its row says so on the figure and the page says why."""
    from explorer.models.model import SentenceMaps
    from explorer.ui.maps_tab import status_text
    from explorer.views.maps_view import SAME_MAP_NOTE, MapsView, ModelMaps, render_maps

    picture = Image.new("RGB", (32, 32), (120, 120, 120))
    grid = np.random.default_rng(0).random((1, 4, 4)).astype(np.float32)

    def result(maps):
        from explorer.grounding.sentence_maps import GroundingResult
        from explorer.grounding.budget import analyse_caption

        found = SentenceMaps(kind="self-attention", grid=maps, sentences=["A.", "B.", "C."], n_cut=[0, 0, 0],
                             size=(32, 32))
        return GroundingResult(image=picture, analysis=analyse_caption("A. B. C."), maps=found, model_name="m")

    same = ModelMaps(name="image-only", result=result(np.repeat(grid, 3, axis=0)))
    varied = ModelMaps(name="per-sentence", result=result(np.random.default_rng(1).random((3, 4, 4)).astype(np.float32)))
    assert same.same_for_every_sentence and not varied.same_for_every_sentence
    view = MapsView(picture=picture, sentences=["A.", "B.", "C."], models=[same, varied])
    settings = ViewSettings(view="maps", image="x.png", caption="A. B. C.", models=["image-only", "per-sentence"])
    labels = render_maps(view, settings, 64).row_labels
    assert SAME_MAP_NOTE in labels[0] and SAME_MAP_NOTE not in labels[1]
    assert "image-only" in status_text(view, settings) and SAME_MAP_NOTE in status_text(view, settings)


def test_the_maps_status_puts_each_fact_on_its_own_line():
    """The status line's facts (models and precision, the threshold) are separate lines on the page: Markdown
    joins plain newlines into one paragraph, so each ends in a hard break; notes stay a list below."""
    from explorer.grounding.budget import analyse_caption
    from explorer.grounding.sentence_maps import GroundingResult
    from explorer.models.model import SentenceMaps
    from explorer.ui.maps_tab import status_text
    from explorer.views.maps_view import MapsView, ModelMaps

    picture = Image.new("RGB", (32, 32), (120, 120, 120))
    found = SentenceMaps(kind="generic", grid=np.repeat(np.random.default_rng(0).random((1, 4, 4)).astype(np.float32),
                                                        2, axis=0), sentences=["A.", "B."], n_cut=[0, 0], size=(32, 32))
    result = GroundingResult(image=picture, analysis=analyse_caption("A. B."), maps=found, model_name="m")
    view = MapsView(picture=picture, sentences=["A.", "B."], models=[ModelMaps(name="m", result=result)])
    text = status_text(view, ViewSettings(view="maps", image="x.png", caption="A. B.", models=["m"]))
    first, second = text.split("\n")[:2]
    assert first.endswith("  ") and "computed in" in first and second.startswith("Mask threshold")
    assert "\n\n- " in text  # the same-map note: a list item after a blank line
    mixed = MapsView(picture=picture, sentences=["A.", "B."],
                     models=[ModelMaps(name="a", result=result, precision="bf16, head fp32"),
                             ModelMaps(name="b", result=result, precision="fp32")])
    assert "computed in a bf16, head fp32; b fp32" in status_text(mixed, ViewSettings(
        view="maps", image="x.png", caption="A. B.", models=["a", "b"]))
