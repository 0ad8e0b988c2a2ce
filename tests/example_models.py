"""Tiny random models built once a test process (issue 65), with the same weights and the same random stream.

A run of the suite builds a tiny random model about 1,000 times (the quick loop alone: 1,064 builds, 38 CPU s of
its workers), most of them the same (class, size, seed, options), and two thirds of a tiny build is drawing the
49,408-row token embedding's random start, twice (``nn.Embedding``'s own, then CLIP's). ``remember_example_models``
wraps the built-in ``example`` classmethods (every method class inherits one of three) and the zoo's built-in
``tiny-clip`` (the ``tiny-untrained`` model) so that:

- the first build of a (function, arguments) is the real one; its weights and torch's random state after it are
  kept;
- a later build runs the same function under ``weights_from_file()`` (the product's checkpoint path: the module
  built without drawing its random start), loads the kept weights (strict: every parameter and persistent buffer)
  and leaves torch's random state as the first build left it: an ``example`` seeds torch first, so its state after
  depends on its arguments only; ``tiny-clip`` puts back the state it found, and so does its later build.

So a test gets the model and the random stream a fresh build gives (``tests/test_example_models.py`` compares the
two, buffers included, for every built-in method); only the draws are skipped. Arguments that are not plain values
(a path object, a list) are built as usual. The kept weights are bounded in bytes (``BUDGET``): a "base" model
(ViT-B/16 sizes, ~600 MB) is never kept.
"""

from __future__ import annotations

import collections
import functools
import inspect
import threading

PLAIN = (str, int, float, bool, type(None))
BUDGET = 256 * 2**20  # bytes of kept weights a test process holds (tiny models are ~14 MB each)
LARGEST = 64 * 2**20  # a model over this is built as usual every time


class _Kept:
    """The kept builds, least recently used first, within ``BUDGET`` bytes."""

    def __init__(self):
        self.items: collections.OrderedDict = collections.OrderedDict()
        self.bytes = 0
        self.lock = threading.Lock()

    def get(self, key):
        with self.lock:
            found = self.items.get(key)
            if found is not None:
                self.items.move_to_end(key)
            return found

    def put(self, key, state: dict, random_state, size: int) -> None:
        with self.lock:
            if key in self.items:
                return
            self.items[key] = (state, random_state, size)
            self.bytes += size
            while self.bytes > BUDGET:
                _, (_, _, dropped) = self.items.popitem(last=False)
                self.bytes -= dropped


KEPT = _Kept()


def _key(function, args, kwargs):
    """(function, every argument with its default filled in), or None when one is not a plain value (a class,
    an ``example``'s first argument, counts as one)."""
    bound = inspect.signature(function).bind(*args, **kwargs)
    bound.apply_defaults()
    items = []
    for name, value in bound.arguments.items():
        if isinstance(value, dict):  # **extra
            if not all(isinstance(v, PLAIN) for v in value.values()):
                return None
            value = tuple(sorted(value.items()))
        elif not isinstance(value, (*PLAIN, type)):
            return None
        items.append((name, value))
    return (function, tuple(items))


def build_as_kept(function, args, kwargs, state: dict, random_state):
    """``function``'s build without its random start, given ``state``; then torch's random state
    ``random_state`` (None: as the build left it)."""
    import torch

    from explorer.models.io.skip_init import weights_from_file

    with weights_from_file():
        model = function(*args, **kwargs)
    model.load_state_dict(state, strict=True)
    if random_state is not None:
        torch.set_rng_state(random_state)
    return model


def remembered(function):
    """``function`` (arguments -> a new model), its first build of given arguments kept (see the module)."""
    @functools.wraps(function)
    def build(*args, **kwargs):
        import torch

        key = _key(function, args, kwargs)
        if key is None:
            return function(*args, **kwargs)
        kept = KEPT.get(key)
        if kept is not None:
            return build_as_kept(function, args, kwargs, kept[0], kept[1])
        before = torch.get_rng_state()
        model = function(*args, **kwargs)
        after = torch.get_rng_state()
        weights = model.state_dict()
        size = sum(v.numel() * v.element_size() for v in weights.values())
        if size <= LARGEST:  # measured before copying: a "base" model is not copied only to be let go
            state = {name: value.detach().clone() for name, value in weights.items()}
            KEPT.put(key, state, None if torch.equal(before, after) else after, size)
        return model

    build.explorer_first_build = function
    return build


def remember_example_models() -> None:
    """Wrap the built-in classes' ``example`` (a plugin's class that inherits one is covered by it) and the zoo's
    built-in ``tiny-clip``, once."""
    from explorer.models.methods.caft import CaftMethod
    from explorer.models.methods.clip import ClipFamily
    from explorer.models.methods.seps.method import SepsMethod
    from explorer.zoo.builtin import BUILTINS

    for cls in (ClipFamily, CaftMethod, SepsMethod):
        found = cls.__dict__["example"]
        if not hasattr(found.__func__, "explorer_first_build"):
            cls.example = classmethod(remembered(found.__func__))
    if not hasattr(BUILTINS["tiny-clip"], "explorer_first_build"):
        BUILTINS["tiny-clip"] = remembered(BUILTINS["tiny-clip"])
