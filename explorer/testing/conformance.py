"""The conformance kit: does a method class fit everything the app asks of one?

    from explorer.testing import check_method
    check_method(MyMethod)               # raises AssertionError naming every failed check

    explorer check-method mymethod       # the same, one line per check, exit code 0 or 1

Every check runs on the class's tiny random model (``cls.example("tiny", seed=0)``) on the CPU: it
builds; its features have the documented shapes and dtypes, finite everywhere (padding rows of
``TextFeatures.tokens`` included); ``similarity`` is [n_images, n_texts], finite and differentiable (the
explainers take its gradient), and the cosine of ``cls`` and ``eot`` where the class says so
(``Method.cosine_score``); one pair at a time scores as the batch does; every map kind (native and
explainer) draws a map on the patch grid that is finite everywhere, for a batch of sentences of different
lengths (so padding is masked); ``config()`` / ``build()`` rebuilds the same model; the zoo's format
(safetensors + manifest) loads back bit-equal (under the class's own name, or a scratch name with
``scratch_name=True``, which ``explorer check-method module:Class`` uses);
a declared release layout goes ``released_state_dict`` -> ``detect`` -> strict load with an empty key
report; the losses are finite, reach every learnable part, and a few optimizer steps on a fixed tiny
batch lower them.
"""

from __future__ import annotations

import contextlib
import math
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

import torch

SENTENCES = ("A red cube sits on the left.", "A blue ball sits at the top.", "The floor is grey.")
N_IMAGES = 2
TRAIN_STEPS = 4
TRAIN_LR = 1e-3
PAIR_TOLERANCE = 1e-4  # one pair at a time vs the batch: float32 reductions in another order


@dataclass(frozen=True)
class CheckResult:
    """One check's outcome.

    Attributes:
        name: The check ("builds", "features", "similarity", "maps", "zoo round trip", ...).
        ok: Whether it passed (a skipped check counts as passed).
        detail: What it found, in one line (the failure's message).
        skipped: True when the check does not apply (e.g. no released layout).
        seconds: How long it took.
    """

    name: str
    ok: bool
    detail: str = ""
    skipped: bool = False
    seconds: float = 0.0

    def line(self) -> str:
        mark = "skip" if self.skipped else "ok" if self.ok else "FAIL"
        return f"{mark:4}  {self.name}" + (f": {self.detail}" if self.detail else "")


class CheckFailed(AssertionError):
    """A check's finding (the message is its one line)."""


class Skip(Exception):
    """A check that does not apply to this method (e.g. no released layout)."""


def check_method(cls, raise_on_failure: bool = True, scratch_name: bool = False) -> list[CheckResult]:
    """Run every check on ``cls``; the results in order. ``AssertionError`` listing the failures unless
    ``raise_on_failure`` is False.

    The zoo round trip loads the model back by its method's name, so it needs ``cls.name`` in the registry
    for ``cls`` itself. ``scratch_name=True`` registers the class under a unique name of its own for the
    checks instead (taken out again after): a copy of an installed method, whose name belongs to the
    installed class, is then checked as it is.

    Every check runs on the class's tiny random model (``cls.example("tiny", seed=0)``) on the CPU, about a
    second a method; a plugin's test calls it: ``check_method(MymethodMethod)``.

    Args:
        cls: The method class (a ``Method`` and ``nn.Module`` subclass).
        raise_on_failure: Raise when a check fails (a test's use); False returns the results only.
        scratch_name: Check the class under a scratch registry name (see above).

    Returns:
        One ``CheckResult`` per check, in order (after a failed "builds", nothing else runs).

    Raises:
        AssertionError: One line per failed check, when ``raise_on_failure`` is True.
    """
    results = run_checks(cls, scratch_name=scratch_name)
    failed = [r for r in results if not r.ok]
    if failed and raise_on_failure:
        raise AssertionError(f"{getattr(cls, 'name', cls)} fails {len(failed)} conformance check(s):\n"
                             + "\n".join(r.line() for r in failed))
    return results


def run_checks(cls, scratch_name: bool = False) -> list[CheckResult]:
    """Every check on ``cls`` (``check_method``), never raising: one ``CheckResult`` per check, in order."""
    state: dict = {"cls": cls, "scratch_name": scratch_name}
    results = []
    for name, check in CHECKS:
        start = time.perf_counter()
        try:
            detail = check(state) or ""
            result = CheckResult(name, True, detail)
        except Skip as reason:
            result = CheckResult(name, True, str(reason), skipped=True)
        except Exception as error:  # noqa: BLE001 - every finding is a line of the report
            text = " ".join(str(error).split())[:700] or type(error).__name__
            result = CheckResult(name, False, text if isinstance(error, CheckFailed) else
                                 f"{type(error).__name__}: {text}")
        results.append(CheckResult(result.name, result.ok, result.detail, result.skipped,
                                   time.perf_counter() - start))
        if name == "builds" and not result.ok:  # nothing else can run without a model
            break
    return results


def expect(condition, message: str) -> None:
    if not condition:
        raise CheckFailed(message)


# ---- the checks --------------------------------------------------------------------------------


def check_builds(state) -> str:
    from torch import nn

    from explorer.models.methods.base import Method

    cls = state["cls"]
    expect(isinstance(cls, type) and issubclass(cls, Method), "not a Method subclass")
    expect(issubclass(cls, nn.Module), "not an nn.Module")
    expect(isinstance(getattr(cls, "name", None), str) and cls.name, "has no name")
    expect(isinstance(getattr(cls, "title", None), str) and cls.title, "has no title")
    model = cls.example("tiny", seed=0).eval()
    expect(isinstance(model, cls), f"example() returned a {type(model).__name__}")
    state["model"] = model
    size = model.preprocess.image_size
    state["pixels"] = torch.randn(N_IMAGES, 3, size, size, generator=torch.Generator().manual_seed(1))
    state["ids"] = model.tokenize(list(SENTENCES)).ids
    return f"{sum(p.numel() for p in model.parameters())} parameters, {size} px, context {model.context_length}"


def check_features(state) -> str:
    from explorer.models.features import ImageFeatures, TextFeatures

    model, pixels, ids = state["model"], state["pixels"], state["ids"]
    with torch.no_grad():
        image, text = model.encode_image(pixels), model.encode_text(ids)
    expect(isinstance(image, ImageFeatures), f"encode_image returned {type(image).__name__}")
    expect(isinstance(text, TextFeatures), f"encode_text returned {type(text).__name__}")
    rows, cols = image.grid_hw
    expect(image.cls.ndim == 2 and image.cls.shape[0] == N_IMAGES, f"image cls {tuple(image.cls.shape)}")
    expect(tuple(image.patches.shape[:2]) == (N_IMAGES, rows * cols),
           f"patches {tuple(image.patches.shape)} for a {rows} x {cols} grid")
    expect(text.eot.ndim == 2 and text.eot.shape[0] == len(SENTENCES), f"text eot {tuple(text.eot.shape)}")
    expect(text.tokens.ndim == 3 and tuple(text.mask.shape) == tuple(text.tokens.shape[:2])
           and text.mask.dtype == torch.bool, f"tokens {tuple(text.tokens.shape)}, mask {tuple(text.mask.shape)} "
                                              f"{text.mask.dtype}")
    for label, tensor in (("image cls", image.cls), ("patches", image.patches), ("text eot", text.eot)):
        expect(tensor.is_floating_point() and torch.isfinite(tensor).all(), f"{label}: {tensor.dtype}, not finite "
                                                                             "floats")
    expect(text.tokens.is_floating_point(), f"text tokens: {text.tokens.dtype}, not floats")
    bad = ~torch.isfinite(text.tokens).all(dim=-1)  # [B, K]: token positions holding a nan or an inf
    if bool(bad.any()):
        at_padding = not bool((bad & text.mask).any())
        raise CheckFailed(f"text tokens: {int(bad.sum())} token position(s) hold non-finite values" + (
            ", all at padding: padding rows must stay finite (zeros, or the transformer's own states); the mask "
            "marks them, so a reduction leaves them out with it, never with -inf in the features" if at_padding
            else " at real tokens"))
    state["image"], state["text"] = image, text
    return f"grid {rows} x {cols}, image {image.cls.shape[-1]}-d, text {text.eot.shape[-1]}-d"


def check_similarity(state) -> str:
    model, pixels, ids = state["model"], state["pixels"].clone().requires_grad_(True), state["ids"]
    scores = model.similarity(model.encode_image(pixels), model.encode_text(ids))
    expect(tuple(scores.shape) == (N_IMAGES, len(SENTENCES)), f"shape {tuple(scores.shape)}, not "
                                                              f"[{N_IMAGES}, {len(SENTENCES)}]")
    expect(torch.isfinite(scores).all(), "not finite")
    expect(scores.requires_grad, "no gradient flows to the pixels (the explainers need it)")
    if model.global_score:  # declared (``cosine_score``) or the base's: retrieval then searches cls and eot alone
        from explorer.models.methods.base import cosine_matrix

        with torch.no_grad():
            image, text = model.encode_image(state["pixels"]), model.encode_text(ids)
            cosine = cosine_matrix(image.cls, text.eot)
            gap = float((model.similarity(image, text).float() - cosine).abs().max())
        said = getattr(model, "cosine_score", None)
        expect(gap <= PAIR_TOLERANCE, f"global_score is True (cosine_score = {said}) but the score differs from the "
                                      f"cosine of cls and eot by {gap:.3g}: set cosine_score = False (retrieval then "
                                      "re-ranks with similarity, and an export is not whole)")
    # A weighted sum, not a plain one: the plain sum of a score centred over the batch has no gradient.
    weights = torch.rand(scores.shape, generator=torch.Generator().manual_seed(2))
    (scores * weights).sum().backward()
    expect(pixels.grad is not None and torch.isfinite(pixels.grad).all() and pixels.grad.abs().sum() > 0,
           "its gradient with respect to the pixels is zero or not finite")
    return score_label_warning(model)


def score_label_warning(model) -> str:
    """A warning (the check still passes) when a method with a score of its own still calls it "cosine": `eval`,
    the tables and results.json would label the method's own score as CLIP's (``Method.score_description``)."""
    if model.global_score or model.score_label.strip().lower() != "cosine":
        return ""
    return (f'warning: the score is {type(model).__name__}\'s own (cosine_score is not True) but score_description '
            'still says "cosine", so eval, the tables and results.json label it as the cosine; override the '
            'classmethod score_description(cls, options=None) to say what it is (e.g. "late-interaction '
            'token max-sim")')


def check_pairs_equal_batch(state) -> str:
    model, pixels, ids = state["model"], state["pixels"], state["ids"]
    with torch.no_grad():
        batch = model.similarity(model.encode_image(pixels), model.encode_text(ids))
        for i in range(N_IMAGES):
            image = model.encode_image(pixels[i:i + 1])
            for j in range(len(SENTENCES)):
                one = model.similarity(image, model.encode_text(ids[j:j + 1]))
                expect(tuple(one.shape) == (1, 1), f"one pair scores as {tuple(one.shape)}")
                gap = float((one[0, 0] - batch[i, j]).abs())
                expect(gap <= PAIR_TOLERANCE * max(1.0, float(batch[i, j].abs())),
                       f"image {i}, text {j}: {float(one[0, 0]):.6g} alone, {float(batch[i, j]):.6g} in the batch")
    return ""


def check_text_without_padding(state) -> str:
    """The app hands ``encode_text`` ids cut after the batch's longest text (``TokenBatch.unpadded``), so a
    caption costs its own tokens, not the context: they must give what the padded ids give."""
    from explorer.models.tokenizer import TokenBatch

    model, ids = state["model"], state["ids"]
    cut = TokenBatch(ids=ids, n_tokens=model.tokenize(list(SENTENCES)).n_tokens, n_cut=[0] * len(SENTENCES)).unpadded()
    with torch.no_grad():
        padded, trimmed = model.encode_text(ids).eot, model.encode_text(cut.ids).eot
    expect(tuple(trimmed.shape) == tuple(padded.shape), f"eot {tuple(trimmed.shape)} from ids cut to "
                                                        f"{cut.ids.shape[1]} tokens, {tuple(padded.shape)} padded")
    gap = float((trimmed.float() - padded.float()).abs().max())
    expect(gap <= PAIR_TOLERANCE, f"encode_text of ids cut after the longest text ({cut.ids.shape[1]} of "
                                  f"{ids.shape[1]} tokens) differs from the padded ids by {gap:.3g}: the app cuts "
                                  "the padding before every text forward (explorer.models.unpadded), so the tower "
                                  "must read any width up to its context (slice its position table to the ids)")
    return ""


def check_maps(state) -> str:
    model, pixels = state["model"], state["pixels"]
    with torch.no_grad():
        image, text = model.encode_image(pixels[:1]), model.encode_text(state["ids"])
    # The sentences differ in length: the shorter ones are padded in this batch (mask False there).
    rows, cols = image.grid_hw
    for kind in model.map_kinds:
        if kind in model.explainer_kinds:
            maps = model.explainer_maps(pixels[:1], text, kind)
        else:
            with torch.no_grad():
                maps = model.sentence_maps(image, text, kind)
        expect(tuple(maps.shape) == (len(SENTENCES), rows, cols), f"{kind}: {tuple(maps.shape)}, not "
                                                                   f"[{len(SENTENCES)}, {rows}, {cols}]")
        expect_finite_map(kind, maps, text)
    if model.uses_dense_caption:
        with torch.no_grad():
            dense = model.encode_text(model.tokenize([" ".join(SENTENCES)]).ids)
            for kind in (k for k in model.map_kinds if k not in model.explainer_kinds):
                maps = model.dense_caption_maps(image, text, dense, kind)
                expect(tuple(maps.shape) == (len(SENTENCES), rows, cols),
                       f"{kind} with a dense caption: {tuple(maps.shape)}, not [{len(SENTENCES)}, {rows}, {cols}]")
                expect_finite_map(f"{kind} with a dense caption", maps, text)
    return ", ".join(model.map_kinds)


def expect_finite_map(kind: str, maps: torch.Tensor, text) -> None:
    """Every value of ``maps`` [M, rows, cols] finite; else one line: how many of which, in which sentences,
    and, when only padded sentences have them, that padding masked with an infinity reached the map."""
    bad = ~torch.isfinite(maps.float())
    if not bool(bad.any()):
        return
    values = maps.float()[bad]
    counts = [(label, int(n)) for label, n in (("nan", torch.isnan(values).sum()),
                                               ("+inf", (values == math.inf).sum()),
                                               ("-inf", (values == -math.inf).sum()))]
    sentences = [i for i in range(bad.shape[0]) if bool(bad[i].any())]
    padded = [i for i in sentences if not bool(text.mask[i].all())]
    cause = (" (only sentences with padding in the batch: an infinity that masked the padding reached the map)"
             if len(padded) == len(sentences) else "")
    raise CheckFailed(f"{kind}: {int(bad.sum())} of {maps.numel()} values are not finite "
                      f"({', '.join(f'{n} {label}' for label, n in counts if n)}) in sentence(s) "
                      f"{', '.join(str(i + 1) for i in sentences)} of {bad.shape[0]}{cause}. Every value of a map "
                      "must be finite: leave padding out with the mask (a masked mean, or a masked max whose result "
                      "is finite), or fill it with a finite value, never -inf")


def check_config_round_trip(state) -> str:
    model, cls = state["model"], state["cls"]
    rebuilt = cls.build(model.config()).eval()
    rebuilt.load_state_dict(model.state_dict(), strict=True)
    _expect_same(model, rebuilt, state, exact=False)
    return ""


def check_zoo_round_trip(state) -> str:
    from explorer.models.io.loading import save_method
    from explorer.training.checkpointing import architecture_name
    from explorer.zoo import Manifest, Zoo

    from explorer.models.methods import METHODS, SOURCES

    model, cls = state["model"], state["cls"]
    key = state.get("registry_name") or model.name  # the method name the file and its manifest record
    holder = METHODS.get(model.name)
    if key == model.name and holder is not cls:
        raise CheckFailed(
            f"{model.name!r} belongs to {_where(holder)} ({SOURCES.get(model.name, 'built-in')}), not to this class "
            f"({_where(cls)}): the zoo loads a model by its method's name, so it would load back as "
            f"{getattr(holder, '__name__', holder)}. Check a copy as it is with `explorer check-method {_where(cls)}` "
            "(a scratch name; check_method(cls, scratch_name=True)); to install it beside the other, give it a name "
            "of its own (`name` and its entry point)")
    with tempfile.TemporaryDirectory(prefix="explorer-check-") as folder:
        weights = save_method(model, Path(folder) / f"{key}.safetensors", extra_metadata={"method": key})
        Manifest(name=f"check-{key}", method=key, weights=weights.name,
                 architecture=architecture_name(model), context_length=model.context_length,
                 source="explorer check-method", format=f"explorer ({key})").write(
            Path(folder) / f"check-{key}.json")
        loaded = Zoo(folder, cache_size=1, device="cpu").load(f"check-{key}")
    expect(loaded.key_report.ok, loaded.key_report.summary())
    expect(type(loaded.method) is type(model), f"loads back as {_where(type(loaded.method))}, not as "
                                               f"{_where(type(model))}")
    _expect_same(model, loaded.method, state, exact=True)
    if key == model.name:
        return "safetensors + manifest, bit-equal"
    taken = f"; {model.name!r} is {_where(holder)}'s, so this class cannot be installed beside it under that " \
            "name" if holder is not None and holder is not cls else ""
    return f"safetensors + manifest, bit-equal (under the scratch name {key!r}{taken})"


def _where(cls) -> str:
    """``module:QualifiedName`` of a class, as ``explorer check-method`` takes it."""
    return f"{getattr(cls, '__module__', '?')}:{getattr(cls, '__qualname__', cls)}"


def check_release_layout(state) -> str:
    from explorer.models.io.checkpoints import read_checkpoint
    from explorer.models.io.loading import save_released

    model, cls = state["model"], state["cls"]
    with tempfile.TemporaryDirectory(prefix="explorer-check-") as folder:
        path = save_released(model, Path(folder) / f"{model.name}-release.pt")
        raw = read_checkpoint(path, allow_pickle=True)  # written just now by this check
        fmt = cls.detect(raw.tensors, raw)
        if fmt is None:
            raise Skip("declares no released layout (detect gives None)")
        options = getattr(model, "release_load_options", lambda: {})() or None
        loaded, report = cls.from_checkpoint(raw, fmt, overrides=options)
    expect(not report.missing and not report.unexpected, f"{fmt}: {report.summary()}")
    _expect_same(model, loaded.eval(), state, exact=False)
    return f"layout {fmt!r}"


def check_losses(state) -> str:
    from explorer.models.batch import example_batch

    cls = state["cls"]
    model = cls.example("tiny", seed=0).train()
    batch = example_batch(model.preprocess.image_size, batch_size=4)
    terms = _losses(model, batch)
    expect(terms, "losses() returned no terms")
    for name, value in terms.items():
        expect(torch.is_tensor(value) and value.ndim == 0 and torch.isfinite(value), f"{name} = {value}")
    model.zero_grad()
    sum(terms.values()).backward()
    exempt = tuple(getattr(model, "parameters_without_gradient", ()))
    silent = [name for name, p in model.named_parameters()
              if p.requires_grad and not (exempt and name.startswith(exempt))
              and (p.grad is None or not torch.any(p.grad != 0))]
    expect(not silent, f"no gradient reaches {', '.join(silent[:6])}" + (" ..." if len(silent) > 6 else ""))
    return ", ".join(terms)


def check_training_lowers_losses(state) -> str:
    from explorer.models.batch import example_batch

    model = state["cls"].example("tiny", seed=0).train()
    batch = example_batch(model.preprocess.image_size, batch_size=4)
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=TRAIN_LR, weight_decay=0)
    totals = []
    for _ in range(TRAIN_STEPS + 1):
        total = sum(_losses(model, batch).values())
        totals.append(total.item())
        optimizer.zero_grad()
        total.backward()
        optimizer.step()
    expect(all(math.isfinite(total) for total in totals), f"losses {totals}")
    expect(totals[-1] < totals[0], f"{TRAIN_STEPS} AdamW steps (lr {TRAIN_LR:g}) on one batch: "
                                   f"{totals[0]:.4f} -> {totals[-1]:.4f}, not lower")
    return f"{totals[0]:.4f} -> {totals[-1]:.4f} in {TRAIN_STEPS} steps"


def _losses(model, batch) -> dict:
    torch.manual_seed(0)  # the same draws every step (sub-caption sampling, dropout): only the weights change
    return model.losses(batch)


def _expect_same(a, b, state, exact: bool) -> None:
    pixels, ids = state["pixels"], state["ids"]
    with torch.no_grad():
        mine = a.similarity(a.encode_image(pixels), a.encode_text(ids))
        theirs = b.similarity(b.encode_image(pixels), b.encode_text(b.tokenize(list(SENTENCES)).ids))
    if exact:
        expect(torch.equal(mine, theirs), f"scores differ by up to {float((mine - theirs).abs().max()):.3g}")
    else:
        expect(torch.allclose(mine, theirs, rtol=1e-5, atol=1e-5),
               f"scores differ by up to {float((mine - theirs).abs().max()):.3g}")


@contextlib.contextmanager
def registered(cls, scratch_name: bool = False) -> Iterator[str | None]:
    """``cls`` in the registry while the checks run (the zoo loads by name); the name it is under. A class
    the registry does not hold yet (a plugin's own test, before it is installed) is taken out again after.
    ``scratch_name``: under a unique name of its own instead (``<name>_check_<hex>``), whoever holds its name."""
    from explorer.models.methods import METHODS, SOURCES, discover_methods, register

    discover_methods()
    name = getattr(cls, "name", None)
    if not isinstance(name, str) or not name:
        yield None
        return
    key = f"{name}_check_{uuid.uuid4().hex[:8]}" if scratch_name else name
    added = key not in METHODS
    if added and scratch_name:
        METHODS[key], SOURCES[key] = cls, "explorer.testing (scratch name)"
    elif added:
        register(cls, source="explorer.testing")
    try:
        yield key
    finally:
        if added:
            METHODS.pop(key, None)
            SOURCES.pop(key, None)


def _with_registry(check: Callable) -> Callable:
    def run(state):
        with registered(state["cls"], state.get("scratch_name", False)) as key:
            state["registry_name"] = key
            return check(state)
    return run


CHECKS: tuple[tuple[str, Callable], ...] = (
    ("builds", check_builds),
    ("features", check_features),
    ("similarity", check_similarity),
    ("pairs equal batch", check_pairs_equal_batch),
    ("text without padding", check_text_without_padding),
    ("maps", check_maps),
    ("config round trip", check_config_round_trip),
    ("zoo round trip", _with_registry(check_zoo_round_trip)),
    ("release layout", _with_registry(check_release_layout)),
    ("losses", check_losses),
    ("training lowers losses", check_training_lowers_losses),
)
