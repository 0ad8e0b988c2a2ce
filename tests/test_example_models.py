"""The suite's kept tiny models (tests/example_models.py) are the models a fresh build gives, and leave torch's
random stream where a fresh build leaves it: every parameter and buffer (non-persistent ones included), every
``requires_grad`` flag and the training mode, for every method (its plugins' included) and the zoo's built-in
``tiny-clip``."""

from __future__ import annotations

import torch

from example_models import KEPT, _key, remember_example_models


def first_build(function):
    """The function ``remember_example_models`` wrapped: a build as written."""
    return function.explorer_first_build


def example_of(cls):
    defining = next(klass for klass in cls.__mro__ if "example" in klass.__dict__)
    return defining.__dict__["example"].__func__


def described(model) -> dict:
    return {"parameters": {n: (p.detach().clone(), p.requires_grad) for n, p in model.named_parameters()},
            "buffers": {n: b.detach().clone() for n, b in model.named_buffers()}, "training": model.training}


def assert_same(a: dict, b: dict, name: str) -> None:
    assert a["training"] == b["training"], name
    assert a["parameters"].keys() == b["parameters"].keys() and a["buffers"].keys() == b["buffers"].keys(), name
    for key, (value, grad) in a["parameters"].items():
        other, other_grad = b["parameters"][key]
        assert grad == other_grad and torch.equal(value, other), f"{name}: {key}"
    for key, value in a["buffers"].items():
        assert torch.equal(value, b["buffers"][key]), f"{name}: buffer {key}"


def fresh_and_kept(build, args: tuple, kwargs: dict, name: str):
    """A build as written and a kept one, each from the same random state: their models and the next draws."""
    start = torch.get_rng_state()
    fresh = described(first_build(build)(*args, **kwargs))
    after_fresh = torch.rand(4)
    build(*args, **kwargs)  # the first build through the wrapper, kept (or kept already)
    assert _key(first_build(build), args, kwargs) in KEPT.items, name
    torch.set_rng_state(start)
    kept = described(build(*args, **kwargs))  # built as kept
    assert_same(fresh, kept, name)
    assert torch.equal(after_fresh, torch.rand(4)), name  # the random stream after the build goes on alike
    return fresh


def test_a_kept_build_is_the_fresh_build_and_the_random_stream_goes_on_alike():
    from explorer.models.methods import METHODS, discover_methods

    remember_example_models()
    discover_methods()
    assert len(METHODS) >= 8
    for name, cls in METHODS.items():
        fresh = fresh_and_kept(example_of(cls), (cls, "tiny"), {"seed": 7}, name)
        other = described(cls.example("tiny", seed=8))  # another seed: another model, not the kept one
        assert any(not torch.equal(v, other["parameters"][k][0]) for k, (v, _) in fresh["parameters"].items()), name


def test_the_zoos_built_in_model_kept_puts_back_the_random_state_it_found_as_its_first_build_does():
    from explorer.zoo.builtin import BUILTINS

    remember_example_models()
    torch.manual_seed(3)
    torch.rand(10)  # a random state of the test's own, before each build
    fresh_and_kept(BUILTINS["tiny-clip"], (), {"seed": 0}, "tiny-clip")
    torch.manual_seed(4)  # another state before the call: a kept build still leaves it as it found it
    before = torch.get_rng_state()
    BUILTINS["tiny-clip"](seed=0)
    assert torch.equal(torch.get_rng_state(), before)
