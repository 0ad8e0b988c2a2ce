"""The benchmark (explorer/evaluation/: runner, grounding_eval, baselines, results) and its report
(explorer/evaluation/report.py).

A tiny synthetic dataset (12 scenes, 64 px) is evaluated with the built-in untrained model (every
metric is there and is a share), with an oracle that knows the truth (every metric is perfect),
and with oracles that are wrong in known ways (the metrics move exactly as computed by hand). The
baselines are checked on a scene crafted pixel by pixel.
"""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from PIL import Image

from explorer.data import Background, Scene, SceneObject, Sentence, read_dataset, write_dataset
from explorer.evaluation.baselines import baselines, centre_box_mask
from explorer.evaluation.grounding_eval import native_kind, object_sentences
from explorer.evaluation.report import hard_negatives_table, results_markdown, results_table, update_readme
from explorer.evaluation.results import ATTRIBUTES, METRIC_KEYS, write_results
from explorer.evaluation.runner import evaluate_model, evaluate_zoo, in_reach, within_shared_context
from explorer.grounding.flism import crop_regions, region_proposals
from explorer.models.features import ImageFeatures, TextFeatures
from explorer.models.methods.caft import CaftMethod
from explorer.models.methods.clip import ClipMethod, LongClipMethod, example_architecture
from explorer.models.model import Model
from explorer.models.tokenizer import EOT_ID, SOT_ID, encode
from explorer.zoo import Zoo
from explorer.core.errors import ExplorerError

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def dataset(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("world")
    write_dataset(root, n_scenes=12, seed=0, image_size=64)
    return root


@pytest.fixture(scope="module")
def scenes(dataset):
    return read_dataset(dataset)  # every split: 12 scenes


@pytest.fixture(scope="module")
def untrained_result(scenes):
    model = Zoo(REPO / "checkpoints").load("tiny-untrained")
    return evaluate_model(model, scenes, grounding_limit=4, caption_chunk=5, image_batch=5)


# ---- an oracle with the Model surface ------------------------------------------------------------


class Oracle:
    """Knows every scene: its similarity is 1 for an image's own long / short caption and 0 otherwise,
    its maps are the objects' true masks, and FLISM's region embeddings are one-hot so that each
    sentence takes the region its object's box overlaps most.

    Ways to be wrong on purpose: ``greedy_image_0`` (image 0 scores 2 with every other scene's
    caption), ``prefers`` (hard negatives of these attributes score 2, above the true caption),
    ``wrong_object`` (each sentence's map is the mask of the scene's next object).
    """

    name, method_name, context_length, trained = "oracle", "oracle", 248, True

    def __init__(self, scenes, map_kinds=("generic",), greedy_image_0=False, prefers=(), wrong_object=False,
                 native=None):
        self.scenes = list(scenes)
        self.map_kinds = tuple(map_kinds)
        self.preferred_native_map = native
        self.greedy_image_0, self.prefers, self.wrong_object = greedy_image_0, set(prefers), wrong_object
        self.image_of = {s.image.tobytes(): i for i, s in enumerate(self.scenes)}
        self.owner: dict[str, int] = {}
        self.negative: dict[str, str] = {}
        for i, scene in enumerate(self.scenes):
            self.owner[scene.long_caption] = i
            self.owner[scene.short_caption] = i
            for negative in scene.hard_negatives:
                self.negative[negative.caption] = negative.attribute
        self.crops_of = {b"".join(c.tobytes() for c in crop_regions(s.image, region_proposals(s.image))): i
                         for i, s in enumerate(self.scenes)}
        self.flism_scene = None
        self.kinds_asked: list[str] = []

    def encode_image(self, images, fit="crop"):
        images = list(images)
        key = b"".join(image.tobytes() for image in images)
        if key in self.crops_of:  # FLISM's region crops, in region order
            self.flism_scene = self.scenes[self.crops_of[key]]
            cls = torch.eye(len(images), 8)
        else:
            cls = torch.zeros(len(images), 8)
            cls[:, 0] = torch.tensor([float(self.image_of[image.tobytes()]) for image in images])
        return ImageFeatures(cls=cls, patches=torch.zeros(len(images), 4, 8), grid_hw=(2, 2))

    def encode_text(self, texts):
        scene = self.flism_scene
        regions = [r.box for r in region_proposals(scene.image)]
        eot = torch.zeros(len(texts), 8)
        for row, text in enumerate(texts):
            k = next(s.objects[0] for s in object_sentences(scene) if s.text == text)
            x0, y0, x1, y1 = scene.objects[k].box
            ious = []
            for rx0, ry0, rx1, ry1 in regions:
                inter = max(0, min(x1, rx1) - max(x0, rx0)) * max(0, min(y1, ry1) - max(y0, ry0))
                ious.append(inter / ((x1 - x0) * (y1 - y0) + (rx1 - rx0) * (ry1 - ry0) - inter))
            eot[row, int(np.argmax(ious))] = 1.0
        return TextFeatures(eot=eot, tokens=eot[:, None], mask=torch.ones(len(texts), 1, dtype=torch.bool))

    def ids_read(self, texts):
        return [tuple(text.encode()) for text in texts]  # reads every character: nothing is cut

    def similarity(self, image_features, captions):
        indices = image_features.cls[:, 0].long().tolist()
        scores = torch.zeros(len(indices), len(captions))
        for row, i in enumerate(indices):
            for column, caption in enumerate(captions):
                if caption in self.owner:
                    j = self.owner[caption]
                    scores[row, column] = 1.0 if j == i else (2.0 if self.greedy_image_0 and i == 0 else 0.0)
                elif self.negative.get(caption) in self.prefers:
                    scores[row, column] = 2.0
        return scores

    def sentence_maps(self, image, sentences, kind="generic"):
        self.kinds_asked.append(kind)
        scene = self.scenes[self.image_of[image.tobytes()]]
        maps = []
        for text in sentences:
            k = next(s.objects[0] for s in object_sentences(scene) if s.text == text)
            if self.wrong_object:
                k = (k + 1) % len(scene.objects)
            maps.append(scene.mask(k).astype(np.float32))
        return SimpleNamespace(maps=np.stack(maps), kind=kind)


# ---- evaluate_model ------------------------------------------------------------------------------


def test_untrained_model_reports_every_metric_as_a_share(untrained_result, scenes):
    result = untrained_result
    assert set(result["metrics"]) == set(METRIC_KEYS)
    assert result["method"] == "longclip" and result["context_length"] == 248 and result["trained"] is False
    assert result["native_kind"] is None  # Long-CLIP offers only the generic map
    for key, value in result["metrics"].items():
        if key in ("miou_native", "pointing_native", "auroc_native", "auroc_native_others"):
            assert value is None
        else:
            assert value is not None and 0.0 <= value <= 1.0, (key, value)
    counts = result["counts"]
    assert counts["retrieval_scenes"] == 12 and counts["grounding_scenes"] == 4
    assert counts["object_sentences"] == sum(len(object_sentences(s)) for s in scenes[:4])
    assert counts["hard_negative_scenes"] == 12
    # Every map kind is scored, the explainers included; generic's entry is the flat generic metrics.
    assert list(result["map_kinds"]) == ["generic", "gradcam", "legrad", "clearclip", "naclip"]
    for kind, scores in result["map_kinds"].items():
        assert set(scores) == {"miou", "pointing", "auroc", "auroc_others"}
        assert all(value is not None and 0.0 <= value <= 1.0 for value in scores.values()), kind
    assert result["map_kinds"]["generic"]["miou"] == result["metrics"]["miou_generic"]
    json.dumps(result, allow_nan=False)  # plain JSON: no NaN, no tensors


def test_oracle_is_perfect_everywhere(scenes):
    oracle = Oracle(scenes, map_kinds=("generic", "attention-pool", "subcaption-alpha"), native="subcaption-alpha")
    result = evaluate_model(oracle, scenes, caption_chunk=5, image_batch=5)  # several chunks and batches
    metrics = result["metrics"]
    for key in METRIC_KEYS:
        assert metrics[key] == (0.0 if key.startswith("hard_negative_unseen/") else 1.0), key
    # the preferred native map is the one the model's method names, not the model's first
    assert result["native_kind"] == "subcaption-alpha"
    assert list(result["map_kinds"]) == ["generic", "subcaption-alpha", "attention-pool"]  # every kind offered
    assert all(scores["miou"] == 1.0 for scores in result["map_kinds"].values())
    assert set(oracle.kinds_asked) == {"generic", "subcaption-alpha", "attention-pool"}  # every kind is scored
    assert result["counts"]["flism_scored"] == result["counts"]["object_sentences"] > 0


def test_retrieval_directions_are_not_swapped(scenes):
    # Image 0 scores 2 with every other caption: it fails as an image query (I2T), and every other
    # caption fails as a text query (T2I) because image 0 outranks its own image.
    n = len(scenes)
    result = evaluate_model(Oracle(scenes, greedy_image_0=True), scenes, grounding_limit=0, caption_chunk=5)
    metrics = result["metrics"]
    assert metrics["long_i2t_R@1"] == pytest.approx((n - 1) / n)
    assert metrics["long_t2i_R@1"] == pytest.approx(1 / n)
    assert metrics["long_t2i_R@5"] == 1.0  # the others' own image is second: within 5
    assert metrics["long_i2t_R@5"] == pytest.approx((n - 1) / n)  # image 0's caption is last of 12
    assert metrics["short_t2i_R@1"] == pytest.approx(1 / n)


def test_hard_negatives_per_attribute_and_wrong_maps(scenes):
    oracle = Oracle(scenes, prefers={"colour"}, wrong_object=True)
    result = evaluate_model(oracle, scenes, grounding_limit=3, caption_chunk=12)  # two scenes per call
    metrics = result["metrics"]
    assert metrics["hard_negative_acc/colour"] == 0.0
    assert all(metrics[f"hard_negative_acc/{a}"] == 1.0 for a in ("shape", "size", "texture", "position"))
    assert metrics["hard_negative_acc"] == 0.0  # every scene has a colour negative that wins
    assert metrics["miou_generic"] == 0.0 and metrics["pointing_generic"] == 0.0  # another object's mask
    assert metrics["miou_native"] is None and result["native_kind"] is None
    assert native_kind(SimpleNamespace(map_kinds=("generic", "word-max", "late-interaction"),
                                       preferred_native_map="late-interaction")) == "late-interaction"
    # a preferred map the instance does not offer is no native map
    assert native_kind(SimpleNamespace(map_kinds=("generic",), preferred_native_map="late-interaction")) is None


# ---- the fair hard-negative test -----------------------------------------------------------------


class PerfectReader(Oracle):
    """The oracle reading captions as a real tiny model does (``Model.ids_read``: its tokenizer, its cut): a
    caption scores 1 on a scene's image when the model reads it as that scene's long caption, else 0. It
    tells apart every change it can read; a change past its cut reads as the caption itself and ties."""

    def __init__(self, scenes, method):
        super().__init__(scenes)
        self.model = Model(method, device="cpu")
        self.context_length = self.model.context_length

    def ids_read(self, texts):
        return self.model.ids_read(texts)

    def similarity(self, image_features, captions):
        truth = self.ids_read([self.scenes[i].long_caption for i in image_features.cls[:, 0].long().tolist()])
        read = self.ids_read(captions)
        return torch.tensor([[float(ids == own) for ids in read] for own in truth])


def tiny_clip(context: int) -> ClipMethod:
    return ClipMethod(example_architecture("tiny", context))


def first_changed_token(scene, negative) -> int:
    """The position of the change's first token (the start token is position 0), counted from the text."""
    return 1 + len(encode(scene.long_caption[:negative.start]))


def last_changed_token(scene, negative) -> int:
    """The position of the change's last token, in the caption or in the negative, whichever lies further."""
    return max(len(encode(scene.long_caption[:negative.start + len(negative.original)])),
               len(encode(negative.caption[:negative.start + len(negative.replacement)])))


@pytest.mark.parametrize("context", [24, 77])
def test_fair_test_scores_only_the_changes_within_reach(scenes, context):
    reader = PerfectReader(scenes, tiny_clip(context))
    result = evaluate_model(reader, scenes, grounding_limit=0, caption_chunk=7)
    metrics, counts = result["metrics"], result["counts"]
    # By hand, from the text: a change that starts at or past the last kept token (the cut keeps context - 1
    # tokens and an end token) is unseen; one that ends before it is read.
    unseen = {a: [] for a in ATTRIBUTES}
    full = 0
    for scene in scenes:
        reach = in_reach(reader, scene)
        for negative, within in zip(scene.hard_negatives, reach):
            if first_changed_token(scene, negative) >= context - 1:
                assert not within, (context, negative.caption)
            elif last_changed_token(scene, negative) < context - 1:
                assert within, (context, negative.caption)
            unseen[negative.attribute].append(not within)
        full += all(reach)
    assert any(any(values) for values in unseen.values())  # the cut hides some changes ...
    assert any(not all(values) for values in unseen.values())  # ... and leaves some in reach
    for attribute, left_out in unseen.items():
        assert metrics[f"hard_negative_unseen/{attribute}"] == pytest.approx(np.mean(left_out)), attribute
        # the reader tells apart every change it reads: no tie from identical inputs is left
        assert metrics[f"hard_negative_acc/{attribute}"] == (None if all(left_out) else 1.0), attribute
    assert counts["hard_negative_scenes"] == len(scenes) and counts["hard_negative_scenes_in_reach"] == full
    assert metrics["hard_negative_acc"] == (1.0 if full else None)  # over the fully reachable scenes only


class FooledPastClip(PerfectReader):
    """A long-context perfect reader, fooled by every change past CLIP's first 77 tokens (those score 2)."""

    def __init__(self, scenes, method):
        super().__init__(scenes, method)
        self.late = {n.caption for scene in scenes
                     for n, early in zip(scene.hard_negatives, within_shared_context(scene)) if not early}

    def similarity(self, image_features, captions):
        scores = super().similarity(image_features, captions)
        scores[:, [caption in self.late for caption in captions]] = 2.0
        return scores


def test_the_shared_context_test_scores_only_the_changes_within_clips_77_tokens(scenes):
    # A 248-token model reads every change; acc77 keeps those within CLIP's first 77 tokens, where this
    # reader is right, and leaves out the later ones, where it is fooled; acc counts both.
    reader = FooledPastClip(scenes, tiny_clip(248))
    assert reader.late  # some changes lie past 77 tokens ...
    metrics = evaluate_model(reader, scenes, grounding_limit=0, caption_chunk=7)["metrics"]
    early = {a: [] for a in ATTRIBUTES}
    clip = tiny_clip(77)  # one model for every read below (a tiny model is 40 ms to build; it only tokenizes here)
    for scene in scenes:
        assert all(in_reach(reader, scene))
        for negative, first in zip(scene.hard_negatives, within_shared_context(scene)):
            early[negative.attribute].append(first)
            if first:  # by hand: a change CLIP's own 77-token cut reads apart
                assert clip.ids_read([negative.caption]) != clip.ids_read([scene.long_caption])
    for attribute, firsts in early.items():
        assert metrics[f"hard_negative_acc77/{attribute}"] == (1.0 if any(firsts) else None), attribute
        assert metrics[f"hard_negative_acc/{attribute}"] == pytest.approx(np.mean(firsts)), attribute
    from explorer.evaluation.report import shared_context_table

    table = shared_context_table({"models": [{"name": "m", "context_length": 248, "metrics": metrics}]})
    assert "| m | 248 | 100.0 |" in table


class FooledByColour(PerfectReader):
    """The perfect reader, fooled by every colour change it reads: such a change scores 2, above the caption."""

    def similarity(self, image_features, captions):
        scores = super().similarity(image_features, captions)
        scores[:, [self.negative.get(caption) == "colour" for caption in captions]] = 2.0
        return scores


def test_fair_test_all_five_is_over_the_fully_reachable_scenes(scenes):
    # A scene counts in the all-five figure only when all of its changes are read, and then it fails (its
    # colour change wins); a scene whose colour change lies past the cut is left out, not counted a win.
    reader = FooledByColour(scenes, tiny_clip(77))
    within = {scene.id: in_reach(reader, scene) for scene in scenes}
    result = evaluate_model(reader, scenes, grounding_limit=0, caption_chunk=7)
    metrics, counts = result["metrics"], result["counts"]
    full = sum(all(reach) for reach in within.values())
    assert 0 < full < len(scenes)
    assert counts["hard_negative_scenes_in_reach"] == full
    assert metrics["hard_negative_acc"] == 0.0  # every fully reachable scene has a colour change that wins
    assert metrics["hard_negative_acc/colour"] == 0.0
    assert metrics["hard_negative_acc/shape"] == 1.0


def test_a_long_context_model_sees_more(scenes):
    short, long = tiny_clip(77), LongClipMethod.example("tiny")
    caft = CaftMethod.example("tiny")  # 77 tokens a chunk, but it reads every chunk of the caption
    assert (short.context_length, long.context_length, caft.context_length) == (77, 248, 77)
    unseen = {}
    for name, method in (("clip", short), ("longclip", long), ("caft", caft)):
        reader = PerfectReader(scenes, method)
        unseen[name] = sum(not within for scene in scenes for within in in_reach(reader, scene))
    assert unseen["clip"] > 0 and unseen["longclip"] == 0 and unseen["caft"] == 0


def test_ids_read_are_the_ids_the_model_scores():
    model = Model(tiny_clip(7), device="cpu")
    caption, changed = "a red square and a blue circle", "a red square and a green circle"
    first, second = model.ids_read([caption, changed])
    assert len(first) == 7 and first[0] == SOT_ID and first[-1] == EOT_ID
    assert first == second  # "blue" lies past the cut at 7 tokens (start, 5 words, end)
    image = Image.new("RGB", (64, 64), "white")
    scores = model.similarity([image], [caption, changed])
    # read alike, scored alike (to float rounding: two rows of one batch may take different BLAS paths)
    torch.testing.assert_close(scores[0, 0], scores[0, 1], rtol=0, atol=1e-6)
    short = model.ids_read(["a cube"])[0]
    assert short == (SOT_ID, *encode("a cube"), EOT_ID)  # no padding


# ---- baselines -----------------------------------------------------------------------------------


def crafted_scene() -> Scene:
    """12 x 12: object 0 fills rows 4..8, columns 4..7; object 1 fills rows 0..1 (a bar at the top)."""
    labels = np.zeros((12, 12), dtype=np.uint8)
    labels[4:9, 4:8] = 1
    labels[0:2, :] = 2
    objects = (SceneObject(0, "square", "red", "medium", "solid", "centre", (0.5, 0.55), 0.4, box=(4, 4, 8, 9)),
               SceneObject(1, "rectangle", "blue", "large", "solid", "top", (0.5, 0.08), 1.0, box=(0, 0, 12, 2)))
    sentences = (Sentence("Two shapes on plain white.", "summary", (0, 1)),
                 Sentence("A red square sits in the centre.", "object", (0,)),
                 Sentence("The red square is below the blue rectangle.", "relation", (0, 1), "below"),
                 Sentence("A blue rectangle spans the top.", "object", (1,)))
    text = " ".join(s.text for s in sentences)
    return Scene(id="crafted", image_size=12, background=Background("plain", "white"), objects=objects,
                 sentences=sentences, long_caption=text, short_caption="A red square and a blue rectangle.",
                 dense_caption=text, hard_negatives=(), _labels=labels)


def test_centre_box_baseline_matches_a_hand_computation():
    box = centre_box_mask(12, 12)
    expected = np.zeros((12, 12), dtype=bool)
    expected[4:8, 4:8] = True  # pixel centres 4.5 .. 7.5 lie in [12/3, 24/3)
    np.testing.assert_array_equal(box, expected)
    assert centre_box_mask(64, 64)[21:43, 21:43].all() and centre_box_mask(64, 64).sum() == 22 * 22

    rows = baselines([crafted_scene()])
    centre = rows["centre-box"]["metrics"]
    # object 0: box 16 px inside its 20 px -> IoU 16 / 20; object 1 (top bar) does not touch it -> 0
    assert centre["miou_generic"] == pytest.approx((16 / 20 + 0.0) / 2)
    # the 4 centre pixels (rows 5..6, cols 5..6) lie in object 0, not in object 1
    assert centre["pointing_generic"] == pytest.approx(0.5)
    # always the centre region (3, 3, 9, 9): best for object 0 (IoU 20/36 vs <= 6/50), not for the top bar
    assert centre["flism_acc"] == pytest.approx(0.5)
    assert centre["long_t2i_R@1"] is None

    uniform = rows["uniform"]["metrics"]
    assert uniform["miou_generic"] == 0.0 and uniform["pointing_generic"] == 0.0  # empty mask, peak everywhere

    chance = rows["chance"]["metrics"]
    assert chance["long_t2i_R@1"] == 1.0 and chance["long_t2i_R@5"] == 1.0  # one scene
    # object 0: 1 best region of 5; the top bar: 2 tied best (the top quadrants) of 5
    assert chance["flism_acc"] == pytest.approx((1 / 5 + 2 / 5) / 2)
    assert chance["hard_negative_acc"] is None  # the crafted scene has no negatives


# ---- evaluate_zoo, JSON, table, README -----------------------------------------------------------


def test_evaluate_zoo_runs_every_model_and_records_failures(dataset, tmp_path):
    zoo = tmp_path / "zoo"
    zoo.mkdir()
    shutil.copy(REPO / "checkpoints" / "tiny-untrained.json", zoo / "tiny-untrained.json")
    (zoo / "broken.json").write_text(json.dumps({"name": "broken", "method": "longclip",
                                                 "weights": "no-such-file.pt"}))
    results = evaluate_zoo(zoo, dataset, split="train", limit=3, progress=False, strict=True)
    assert [m["name"] for m in results["models"]] == ["tiny-untrained"]
    assert results["errors"]["broken"].startswith("load: ")
    assert results["dataset"]["retrieval_scenes"] == 3 and results["dataset"]["scenes_in_split"] == 10
    assert results["dataset"]["seed"] == 0 and results["dataset"]["image_size"] == 64
    assert set(results["baselines"]) == {"centre-box", "uniform", "chance"}
    assert set(results["models"][0]["metrics"]) == set(METRIC_KEYS)

    out = write_results(results, tmp_path / "out" / "results.json")
    loaded = json.loads(out.read_text())
    assert loaded["models"][0]["metrics"] == results["models"][0]["metrics"]
    assert not list(out.parent.glob("*.tmp"))

    table = results_table(results)
    assert "| tiny-untrained (untrained) | longclip | 248 |" in table
    assert "| broken | failed: load: " in table


def test_results_table_has_a_row_per_model_and_baseline(untrained_result):
    second = {**untrained_result, "name": "mul|clip", "method": "mulclip", "trained": True,
              "native_kind": "subcaption-alpha",
              "metrics": {**untrained_result["metrics"], "miou_native": 0.4567, "long_t2i_R@1": 0.5}}
    results = {"models": [untrained_result, second], "errors": {},
               "baselines": baselines([crafted_scene()]), "dataset": {"split": "test", "retrieval_scenes": 12}}
    table = results_table(results)
    lines = table.strip().splitlines()
    assert len(lines) == 2 + 2 + 3  # header, rule, 2 models, 3 baselines
    assert all(line.count(" | ") == lines[0].count(" | ") for line in lines[2:])  # same number of cells
    assert lines[2].startswith("| tiny-untrained (untrained) | longclip | 248 |")
    assert lines[3].startswith("| mul\\|clip | mulclip | 248 | 50.0 |")  # a '|' in a name cannot break the row
    assert "45.7 (subcaption-alpha)" in lines[3]
    assert lines[4].startswith("| baseline: centre box |") and "| 40.0 |" in lines[4]
    assert lines[5].startswith("| baseline: uniform map |") and lines[6].startswith("| chance |")
    assert results_table(untrained_result).count("\n") == 3  # one result alone: header, rule, its row
    assert table in results_markdown(results)


def test_hard_negatives_table_says_what_is_scored_and_what_is_unseen(untrained_result):
    metrics = {**untrained_result["metrics"], "hard_negative_acc": 0.5, "hard_negative_acc/colour": 0.75,
               "hard_negative_unseen/colour": 0.2, "hard_negative_acc/size": None, "hard_negative_unseen/size": 1.0}
    clip = {**untrained_result, "name": "clip-77", "context_length": 77, "metrics": metrics,
            "counts": {**untrained_result["counts"], "hard_negative_scenes_in_reach": 9}}
    chance = {"metrics": {"hard_negative_acc": 1 / 6, **{f"hard_negative_acc/{a}": 0.5 for a in ATTRIBUTES}}}
    results = {"models": [clip], "errors": {}, "baselines": {"chance": chance}, "dataset": {"split": "test"}}
    lines = hard_negatives_table(results).strip().splitlines()
    assert lines[0] == ("| model | ctx | all five (scenes) | colour | shape | size | texture | position | unseen colour "
                        "| unseen shape | unseen size | unseen texture | unseen position |")
    assert len(lines) == 4 and all(line.count(" | ") == lines[0].count(" | ") for line in lines[2:])
    assert lines[2].startswith("| clip-77 | 77 | 50.0 (9) | 75.0 |")
    assert lines[2].split(" | ")[5] == "—" and lines[2].split(" | ")[8] == "20.0" and lines[2].split(" | ")[10] == "100.0"
    assert lines[3].startswith("| chance | — | 16.7 | 50.0 |")
    markdown = results_markdown(results)
    assert hard_negatives_table(results) in markdown and "within the model's reach" in markdown


def test_update_readme_replaces_only_the_marked_section_and_is_idempotent(tmp_path):
    readme = tmp_path / "README.md"
    before = "# project\n\nintro\n\n## Evaluation\n\n<!-- eval-table:start -->\nold table\n<!-- eval-table:end -->\n"
    after_text = "\n## Later\n\nkept as it is: <!-- other:start --> x <!-- other:end -->\n"
    readme.write_text(before + after_text)
    table = "| a | b |\n|---|---|\n| 1 | 2 |\n"
    assert update_readme(readme, table) is True
    text = readme.read_text()
    assert text == before.replace("old table\n", table) + after_text
    assert update_readme(readme, table) is False  # nothing to change the second time
    assert readme.read_text() == text
    assert update_readme(readme, "| new |\n") is True
    assert "| a | b |" not in readme.read_text() and readme.read_text().endswith(after_text)
    assert not [p for p in tmp_path.iterdir() if p.name != "README.md"]  # no temporary file left


def test_update_readme_appends_a_section_when_absent_and_refuses_broken_markers(tmp_path):
    readme = tmp_path / "README.md"
    readme.write_text("# project\n\nintro\n")
    update_readme(readme, "| t |\n")
    text = readme.read_text()
    assert text == "# project\n\nintro\n\n## Evaluation\n\n<!-- eval-table:start -->\n| t |\n<!-- eval-table:end -->\n"
    update_readme(readme, "| t |\n")
    assert readme.read_text() == text  # appended once, then replaced in place

    broken = tmp_path / "BROKEN.md"
    broken.write_text("<!-- eval-table:end -->\nx\n<!-- eval-table:start -->\n")
    with pytest.raises(ExplorerError):
        update_readme(broken, "| t |\n")
    broken.write_text("<!-- eval-table:start -->\nno end\n")
    with pytest.raises(ExplorerError):
        update_readme(broken, "| t |\n")
    assert broken.read_text() == "<!-- eval-table:start -->\nno end\n"  # untouched


def test_write_results_turns_nan_into_null(tmp_path):
    out = write_results({"models": [{"metrics": {"x": float("nan"), "y": np.float32(0.5), "n": np.int64(3)}}]},
                        tmp_path / "r.json")
    loaded = json.loads(out.read_text())
    assert loaded["models"][0]["metrics"] == {"x": None, "y": 0.5, "n": 3}
    assert not math.isnan(loaded["models"][0]["metrics"]["y"])


def test_results_say_what_score_each_model_ranked_by(untrained_result):
    """The score kind is recorded per model and shown in the table's last column (FLAIR's logits and
    a cosine do not compare)."""
    assert untrained_result["score"] == "cosine"
    flair = {**untrained_result, "name": "flair-logits", "method": "flair",
             "score": "logits = exp(t) x cosine + b"}
    lines = results_table({"models": [untrained_result, flair], "errors": {}, "baselines": {}}).strip().splitlines()
    assert lines[0].endswith("| score |")
    assert lines[2].endswith("| cosine |") and lines[3].endswith("| logits = exp(t) x cosine + b |")
