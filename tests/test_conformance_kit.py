"""The conformance kit finds what is wrong: each check fails on a method broken in its one way, and only
there (every built-in passes it: tests/test_method_contract.py)."""

from __future__ import annotations

import pytest
import torch

from explorer.models.methods import METHODS
from explorer.models.methods.base import GENERIC_MAP, cosine_matrix
from explorer.models.methods.clip import ClipMethod
from explorer.testing import check_method


class BatchDependent(ClipMethod):
    """Scores each text against the batch's mean: one pair alone scores otherwise."""
    name, title = "kit_batch", "Batch"

    def similarity(self, image, text):
        scores = cosine_matrix(image.cls, text.eot)
        return scores - scores.mean()


class Detached(ClipMethod):
    """A score the explainers cannot take a gradient of."""
    name, title = "kit_detached", "Detached"

    def similarity(self, image, text):
        return cosine_matrix(image.cls, text.eot).detach()


class BadMap(ClipMethod):
    """A native map on the wrong grid."""
    name, title = "kit_map", "BadMap"
    native_map_kinds = ("flat",)

    def sentence_maps(self, image, text, kind=GENERIC_MAP):
        return torch.zeros(len(text), 1, 1) if kind == "flat" else super().sentence_maps(image, text, kind)


class ForgetfulConfig(ClipMethod):
    """An option that changes the score but is not in ``config()``: ``build`` cannot rebuild the model,
    and neither can the zoo (its file's metadata is the config)."""
    name, title = "kit_config", "Config"

    def __init__(self, arch, sharpen: float = 1.0):
        super().__init__(arch)
        self.sharpen = sharpen

    @classmethod
    def example(cls, size="tiny", seed=0):
        model = super().example(size, seed)
        model.sharpen = 3.0
        return model

    def similarity(self, image, text):
        return self.sharpen * cosine_matrix(image.cls, text.eot)


class Untrainable(ClipMethod):
    """Losses that no weight moves."""
    name, title = "kit_losses", "Losses"

    def losses(self, batch):
        return {"constant": self.logit_scale.detach() * 0 + 1.0}


class PaddingDependent(ClipMethod):
    """A text embedding that reads the padding: the mean of every id's embedding, the padding's too."""
    name, title = "kit_padding", "Padding"

    def encode_text(self, ids):
        features = super().encode_text(ids)
        features.eot = features.eot + self.token_embedding(ids).mean(dim=1) @ self.text_projection
        return features


@pytest.mark.parametrize("cls,failing", [
    (BatchDependent, {"pairs equal batch"}),
    (PaddingDependent, {"text without padding"}),
    (Detached, {"similarity", "maps"}),  # the gradient explainers cannot draw it either
    (BadMap, {"maps"}),
    (ForgetfulConfig, {"config round trip", "zoo round trip", "release layout"}),
    (Untrainable, {"losses", "training lowers losses"}),
])
def test_each_check_fails_on_its_own_fault(cls, failing):
    results = check_method(cls, raise_on_failure=False)
    assert {r.name for r in results if not r.ok} == failing, [r.line() for r in results]
    with pytest.raises(AssertionError, match=f"fails {len(failing)} conformance check"):
        check_method(cls)
    assert cls.name not in METHODS  # registered for the zoo check only


def test_a_class_that_is_no_method_stops_at_the_first_check():
    results = check_method(dict, raise_on_failure=False)
    assert [(r.name, r.ok) for r in results] == [("builds", False)] and "not a Method" in results[0].detail


def test_check_method_on_the_command_line_exits_1_on_a_failure_with_one_line_per_check(capsys):
    from explorer.cli import main
    from explorer.testing import CHECKS

    assert main(["check-method", "test_conformance_kit:BatchDependent"]) == 1  # a class not installed yet
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "test_conformance_kit:BatchDependent" and len(lines) == len(CHECKS) + 2
    assert "FAIL  pairs equal batch: image 0, text 0" in lines[4] and lines[-1] == "10 of 11 checks pass; 1 fail"
    assert main(["check-method", "no_such_module:Method"]) == 1
    assert capsys.readouterr().out.startswith("FAIL  loads: ModuleNotFoundError")


class OwnScoreCalledCosine(ClipMethod):
    """A score of its own (a sharpened cosine) whose class never says what it is."""
    name, title = "kit_own_score", "Own score"

    def similarity(self, image, text):
        return 2.0 * cosine_matrix(image.cls, text.eot)


class OwnScoreNamed(OwnScoreCalledCosine):
    name = "kit_own_named"

    @classmethod
    def score_description(cls, options=None):
        return "twice the cosine"


def test_the_kit_warns_when_a_method_with_its_own_score_still_calls_it_cosine():
    """Issue 66, part 7: eval and results.json would label the method's own score "cosine"; the check passes
    with a warning naming score_description, and says nothing once the class names its score."""
    from explorer.testing.conformance import score_label_warning

    warned = score_label_warning(OwnScoreCalledCosine.example("tiny", seed=0))
    assert warned.startswith("warning:") and "score_description" in warned
    assert score_label_warning(OwnScoreNamed.example("tiny", seed=0)) == ""
    assert score_label_warning(ClipMethod.example("tiny", seed=0)) == ""  # the cosine, rightly so called
