"""An evaluation task's options, declared once: the command line (``explorer eval-*``), ``explorer jobs
submit-eval``, the Jobs tab's sweep form and a sweep child's reading of its options are all built from these.

    Option("split_by", "the refs file, refs(<split-by>).p (default: unc; refcocog: umd)", choices=("unc", ...))

``name`` is the key in a job's options (and how the results JSON names the choice where it records it);
``flag`` the command's spelling when it is not ``--name-with-dashes``; ``sweep_flag`` submit-eval's where that
differs. ``kind`` says what a value is: text, int, float, path, flag (a switch), names or ints (lists). A
``default`` of True on a flag is spelled ``--no-...`` on the command line (it turns the option off).
``check`` refuses a value the task cannot run with, in one line (an ``ExplorerError``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping

from explorer.core.errors import InputError

KINDS = ("text", "int", "float", "path", "flag", "names", "ints")


@dataclass(frozen=True)
class Option:
    name: str
    help: str
    kind: str = "text"
    choices: tuple[str, ...] = ()
    default: Any = None  # what the task uses when the option is not given
    flag: str = ""
    sweep_flag: str = ""
    metavar: str | None = None
    minimum: float | None = None  # an int or float below it is refused
    check: Callable[[Any], Any] | None = None

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"option {self.name}: kind {self.kind!r} is none of {', '.join(KINDS)}")

    @property
    def command_flag(self) -> str:
        return self.flag or ("--no-" if self.default is True else "--") + self.name.replace("_", "-")

    @property
    def submit_flag(self) -> str:
        return self.sweep_flag or self.command_flag

    def value(self, given: Mapping) -> Any:
        """The option's value in ``given`` (a job's options), else its default."""
        value = given.get(self.name)
        return self.default if value is None or value == "" else value

    def convert(self, value) -> Any:
        """``value`` (from a job record, a form, a command) as this option's kind; ``TypeError``/``ValueError``."""
        if self.kind == "int":
            if isinstance(value, float) and not value.is_integer():
                raise ValueError(f"{value} is not a whole number")
            return int(value)
        if self.kind == "float":
            return float(value)
        if self.kind == "flag":
            if not isinstance(value, (bool, int)):
                raise TypeError("a switch: true or false")
            return bool(value)
        if self.kind in ("names", "ints"):
            items = value.split() if isinstance(value, str) else value
            if isinstance(items, bytes) or not all(str(item).strip() for item in items):
                raise TypeError("a list of names")
            return [int(item) for item in items] if self.kind == "ints" else [str(item) for item in items]
        return str(value)

    def checked(self, value) -> Any:
        """``value`` converted and checked: one line naming what is allowed for anything else."""
        if value is None or value == "":
            return None
        try:
            value = self.convert(value)
        except (TypeError, ValueError) as error:
            raise InputError(f"{self.command_flag} takes {_what(self.kind)}, not {value!r} ({error})") from None
        values = value if isinstance(value, list) else [value]
        if self.choices and any(v not in self.choices for v in values):
            raise InputError(f"unknown {self.command_flag} {value!r}; the choices are {', '.join(self.choices)}")
        if self.minimum is not None and any(v < self.minimum for v in values):
            raise InputError(f"{self.command_flag} must be at least {self.minimum:g}, not {value}")
        if self.check is not None:
            self.check(value)
        return value


def _what(kind: str) -> str:
    return {"int": "a whole number", "float": "a number", "flag": "true or false", "names": "a list of names",
            "ints": "a list of whole numbers"}.get(kind, "a text")


def checked_options(options: tuple[Option, ...], given: Mapping) -> dict:
    """``given`` (a job's or a form's options) typed and checked against ``options``; empty values left out.
    An ``InputError`` for a name none of them declares."""
    declared = {option.name: option for option in options}
    unknown = sorted(set(given) - set(declared))
    if unknown:
        raise InputError(f"unknown evaluation option {unknown[0]!r}; known: {', '.join(sorted(declared))}")
    values = {name: declared[name].checked(value) for name, value in given.items()}
    return {name: value for name, value in values.items() if value is not None}


def union(option_sets) -> tuple[Option, ...]:
    """Every option of several tasks once, by name, in the order first met (one declaration serves them all)."""
    seen: dict[str, Option] = {}
    for options in option_sets:
        for option in options:
            seen.setdefault(option.name, option)
    return tuple(seen.values())


# ---- options several tasks share (declared here once) ----------------------------------------------

SPLIT = Option("split", "the split (default: the layout's; 'all' where it has no splits)")
LIMIT = Option("limit", "only the first N pictures", kind="int", metavar="N", minimum=1)
ALLOW_PICKLE = Option("allow_pickle", "trust files that need unpickling (weights, class lists)", kind="flag")
KINDS_OPTION = Option("kinds", "map kind to score (repeat; default: every kind each model offers)", kind="names",
                      flag="--kind", metavar="K")


__all__ = ["ALLOW_PICKLE", "KINDS", "KINDS_OPTION", "LIMIT", "Option", "SPLIT", "checked_options", "union"]
