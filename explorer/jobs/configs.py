"""A run's settings: per-method YAML defaults (each paper's hyperparameters), then overrides.

    from explorer.jobs.configs import method_defaults, resolve_config
    method_defaults("mulclip").values["lr_new"]        # 2e-4, with .sources["lr_new"] saying where from
    config = resolve_config("mulclip", {"batch_size": 8}, max_steps=100)
    config.values, config.sources                      # every key of KEYS, and where each value came from

Layers, later ones winning: ``explorer.training.TrainConfig``'s defaults, the jobs' own defaults
(``JOB_DEFAULTS``: what a background run needs besides the loop's settings), the method's
``configs/<method>.yaml`` (``train:`` values, each with its ``sources:`` line) or, for a method
without one (a plugin's), its class's ``job_defaults`` in the same schema, the caller's
overrides, and ``max_steps``. A YAML also lists ``fixed:`` values: numbers the method's code
holds (loss weights, margins), shown with their source and the constant they live in; they are
not settings, and overriding one is an error that says so.

Keys (``KEYS``): the ``TrainConfig`` fields a run may set (``device``, ``command`` and ``name``
are the job's to set), plus

- ``size``: "tiny" or "base" (ViT-B/16, the papers' size), for a model built from scratch (an init
  sets the architecture, and a resumed run keeps its own);
- ``context_length``: text tokens (None: the method's, or the init's);
- ``allow_pickle``: trust an init file that needs unpickling;
- ``cpu_threads``: torch threads of the run process (None: on the CPU, torch's default or 1, whichever a
  short timing at the start says is faster, ``explorer.training.threads``; on GPUs torch's default);
- ``train_split``: the split trained on, when the data has splits;
- ``evaluate``, ``eval_limit``, ``eval_grounding_limit``: the final evaluation (``final_eval``).

Values given as text (from a form or ``--set key=value``) are converted to the key's type; a
value that does not convert, an unknown key or settings ``TrainConfig`` refuses raise
``JobError`` before anything is launched.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any, Mapping

import yaml

from explorer.core.errors import ConfigError
from explorer.jobs.records import JobError

CONFIG_DIR = Path(__file__).with_name("configs")
# TrainConfig fields a job sets itself, not the user.
JOB_OWNED = frozenset({"device", "command", "name"})
# TrainConfig fields a run may set, with their types (None allowed where the field allows it).
TRAIN_TYPES: dict[str, tuple[type, bool]] = {
    "epochs": (int, True), "max_steps": (int, True), "batch_size": (int, False), "lr_backbone": (float, False),
    "lr_new": (float, False), "weight_decay": (float, False), "betas": (tuple, False), "eps": (float, False),
    "warmup_steps": (int, False), "warmup_ratio": (float, False), "min_lr_ratio": (float, False),
    "accumulate": (int, False), "clip_grad_norm": (float, True), "precision": (str, False), "seed": (int, False),
    "checkpoint_every": (int, False), "keep_checkpoints": (int, False), "log_every": (int, False),
    "shuffle": (bool, False), "workers": (int, False),
}
JOB_TYPES: dict[str, tuple[type, bool]] = {
    "size": (str, False), "context_length": (int, True), "allow_pickle": (bool, False),
    "cpu_threads": (int, True), "train_split": (str, False), "evaluate": (bool, False),
    "eval_limit": (int, False), "eval_grounding_limit": (int, False),
}
JOB_DEFAULTS: dict[str, Any] = {
    "size": "base", "context_length": None, "allow_pickle": False, "cpu_threads": None, "train_split": "train",
    "evaluate": True, "eval_limit": 300, "eval_grounding_limit": 100,
    "checkpoint_every": 500,  # a background run should survive a crash with at most this many steps lost
}
JOB_DEFAULT_SOURCES = {
    "size": "explorer.jobs default: ViT-B/16, the papers' size (from-scratch runs only)",
    "checkpoint_every": "explorer.jobs default: a checkpoint every 500 steps, so a crash loses at most that",
    "eval_limit": "explorer eval's default (300 scenes)",
    "eval_grounding_limit": "explorer eval's default (100 scenes)",
}
KEYS = (*TRAIN_TYPES, *JOB_TYPES)
SIZES = ("tiny", "base")


@dataclass(frozen=True)
class MethodDefaults:
    """What ``configs/<method>.yaml`` says: values with their sources, and the method's fixed numbers."""

    method: str
    values: dict  # key -> value, for every key of KEYS
    sources: dict  # key -> where the value comes from
    fixed: dict = field(default_factory=dict)  # name -> {"value", "source", "code"?}
    notes: tuple[str, ...] = ()
    path: Path | None = None


@dataclass(frozen=True)
class ResolvedConfig:
    values: dict  # every key of KEYS
    sources: dict  # key -> where its value came from ("override" for the caller's)

    def train_settings(self) -> dict:
        """The ``TrainConfig`` fields (without the job-owned ones), for ``train_from_args(**settings)``."""
        return {key: self.values[key] for key in TRAIN_TYPES}


def known_methods() -> list[str]:
    """Every method a run can train: the registry once the methods are imported; before that (a page being
    built, no torch) the built-ins' config files and the plugins' entry-point names (tests check the two agree)."""
    from explorer.models import methods
    from explorer.models.methods import plugins

    if methods.discovered():
        return sorted(methods.METHODS)
    return sorted({path.stem for path in CONFIG_DIR.glob("*.yaml")} | set(plugins.entry_point_names()))


@lru_cache(maxsize=None)
def _read_yaml(path: Path, stamp: float) -> dict:
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except yaml.YAMLError as error:
        raise JobError(f"{path} is not valid YAML ({error})") from error
    if not isinstance(data, dict):
        raise JobError(f"{path}: expected a mapping with method, train, sources, fixed")
    return data


def method_defaults(method: str) -> MethodDefaults:
    """The defaults of ``method``: TrainConfig's, then the jobs', then the method's YAML (or its class's
    ``job_defaults``)."""
    path = CONFIG_DIR / f"{method}.yaml"
    try:
        is_file = path.is_file()
    except OSError:  # a name too long to be a file: no YAML, and the method's check below says what it is
        is_file = False
    if is_file:
        data = _read_yaml(path, path.stat().st_mtime)
        if data.get("method") != method:
            raise JobError(f"{path} says method {data.get('method')!r}, not {method!r}")
    else:
        data, path = _class_defaults(method), None
    values, sources = _base_defaults()
    train = data.get("train") or {}
    unknown = sorted(set(train) - set(KEYS))
    if unknown:
        raise JobError(f"{path or method}: unknown key(s) {unknown}; known: {', '.join(KEYS)}")
    for key, value in train.items():
        values[key] = convert(key, value)
        sources[key] = str((data.get("sources") or {}).get(key) or f"{path.name if path else method} (no source given)")
    return MethodDefaults(method=method, values=values, sources=sources, fixed=dict(data.get("fixed") or {}),
                          notes=tuple(str(n) for n in data.get("notes") or ()), path=path)


def _class_defaults(method: str) -> dict:
    """A method without a config file: its class's ``job_defaults`` (a plugin's), or ``JobError``."""
    from explorer.core.errors import ExplorerError
    from explorer.models.methods import get_method, plugins

    try:
        cls = get_method(method)
    except ExplorerError as error:
        if method in plugins.entry_point_names():  # installed, but it did not load: say why
            raise JobError(str(error)) from None
        raise JobError(f"unknown method {method!r}; methods a run can train: {', '.join(known_methods())}") from None
    data = cls.job_defaults
    if not isinstance(data, Mapping):
        raise JobError(f"{method}'s job_defaults must be a mapping like explorer/jobs/configs/*.yaml, not "
                       f"{type(data).__name__}")
    return dict(data)


def _base_defaults() -> tuple[dict, dict]:
    from explorer.training.config import TrainConfig

    base = TrainConfig()
    values = {key: getattr(base, key) for key in TRAIN_TYPES}
    sources = {key: "explorer.training.TrainConfig default" for key in TRAIN_TYPES}
    for key, value in JOB_DEFAULTS.items():
        values[key] = value
        sources[key] = JOB_DEFAULT_SOURCES.get(key, "explorer.jobs default")
    return values, sources


def resolve_config(method: str, overrides: Mapping[str, Any] | None = None,
                   max_steps: int | None = None) -> ResolvedConfig:
    """The method's defaults with ``overrides`` (and ``max_steps``) applied, checked as TrainConfig checks them."""
    defaults = method_defaults(method)
    values, sources = dict(defaults.values), dict(defaults.sources)
    for key, value in (overrides or {}).items():
        if key in defaults.fixed:
            fixed = defaults.fixed[key]
            raise JobError(f"{key} = {fixed.get('value')} is fixed in {method}'s code ({fixed.get('source')}); "
                           "it is not a run setting.")
        if key in JOB_OWNED:
            raise JobError(f"{key!r} is set by the job itself (device from gpus, name from the run name)")
        if key not in KEYS:
            raise JobError(f"unknown setting {key!r} for {method}; known: {', '.join(KEYS)}")
        values[key] = convert(key, value)
        sources[key] = "override"
    if max_steps is not None:
        values["max_steps"] = convert("max_steps", max_steps)
        sources["max_steps"] = "override"
    check(values)
    return ResolvedConfig(values=values, sources=sources)


def check(values: Mapping[str, Any]) -> None:
    """Raise ``JobError`` for settings the loop would refuse (it builds a ``TrainConfig`` from them)."""
    from explorer.training.config import TrainConfig

    if values.get("size") not in SIZES:
        raise JobError(f"size must be one of {', '.join(SIZES)}, not {values.get('size')!r}")
    for key in ("eval_limit", "eval_grounding_limit"):
        if values.get(key) is not None and values[key] < 0:
            raise JobError(f"{key} must be at least 0, got {values[key]}")
    if values.get("cpu_threads") is not None and values["cpu_threads"] < 1:
        raise JobError(f"cpu_threads must be at least 1, got {values['cpu_threads']}")
    try:
        TrainConfig(**{key: values[key] for key in TRAIN_TYPES})
    except (TypeError, ValueError, ConfigError) as error:
        raise JobError(f"bad training settings: {error}") from error


def convert(key: str, value: Any) -> Any:
    """``value`` as the type of ``key`` (text from a form or a command line included)."""
    kind, nullable = TRAIN_TYPES.get(key) or JOB_TYPES.get(key) or (None, True)
    if kind is None:
        raise JobError(f"unknown setting {key!r}; known: {', '.join(KEYS)}")
    if isinstance(value, str):
        text = value.strip()
        if nullable and text.lower() in ("", "none", "null"):
            return None
        if kind is not str:
            try:
                value = yaml.safe_load(text)
            except yaml.YAMLError:
                raise JobError(f"{key}: {value!r} is not a {kind.__name__}") from None
            if kind is float and isinstance(value, str):  # YAML 1.1 reads "1e-5" as text
                value = _float(key, value)
    if value is None:
        if nullable:
            return None
        raise JobError(f"{key} needs a value ({kind.__name__})")
    try:
        if kind is bool:
            if not isinstance(value, bool):
                raise ValueError
            return value
        if kind is int:
            if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
                raise ValueError
            return int(value)
        if kind is float:
            if isinstance(value, bool):
                raise ValueError
            return float(value)
        if kind is tuple:
            if isinstance(value, str) or len(value) != 2:
                raise ValueError
            return tuple(float(v) for v in value)
        if not isinstance(value, str):
            raise ValueError
        return value
    except (TypeError, ValueError):
        what = "two numbers" if kind is tuple else "true or false" if kind is bool else f"a {kind.__name__}"
        raise JobError(f"{key} must be {what}, not {value!r}") from None


def _float(key: str, text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise JobError(f"{key} must be a float, not {text!r}") from None


def fixed_value_in_code(entry: Mapping) -> Any:
    """The value of a ``fixed:`` entry's ``code`` constant (e.g. explorer.models.methods.goal.LOCAL_WEIGHT)."""
    module, _, name = str(entry["code"]).rpartition(".")
    return getattr(importlib.import_module(module), name)


def as_plain(values: Mapping[str, Any]) -> dict:
    """JSON-ready copy (tuples as lists)."""
    return {k: list(v) if isinstance(v, tuple) else v for k, v in values.items()}


def from_plain(values: Mapping[str, Any]) -> dict:
    """A stored config back in its types (lists as tuples where the key is a pair)."""
    return {k: convert(k, v) if k in KEYS else v for k, v in values.items()}


__all__ = ["CONFIG_DIR", "JOB_DEFAULTS", "KEYS", "MethodDefaults", "ResolvedConfig", "as_plain", "check", "convert",
           "fixed_value_in_code", "from_plain", "known_methods", "method_defaults", "resolve_config"]
