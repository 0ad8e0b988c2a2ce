"""An evaluation task's declared options (``explorer.evaluation.tasks``) as command-line flags: the eval-*
commands take one task's, ``jobs submit-eval`` every task's (each flag once, its help naming the tasks that
read it). Values are checked by the declaration, so a bad one is one line naming what is allowed."""

from __future__ import annotations

from pathlib import Path

from explorer.evaluation.tasks.options import Option

TYPES = {"int": int, "float": float, "path": Path, "names": str, "ints": int, "text": str}


def add_task_options(parser, options: tuple[Option, ...], sweep: bool = False, helps: dict | None = None) -> None:
    """One flag per option. ``sweep``: submit-eval's spelling and no defaults (a child fills in its task's);
    ``helps``: {name: help} said instead of the declaration's."""
    for option in options:
        kwargs = {"dest": option.name, "help": (helps or {}).get(option.name, option.help)}
        if option.kind == "flag":
            kwargs["action"] = "store_false" if option.default is True else "store_true"
            kwargs["default"] = None if sweep else bool(option.default)
        else:
            kwargs.update(type=TYPES[option.kind], default=None if sweep else option.default)
            if option.kind in ("names", "ints"):  # --kind a --kind b, or --kind a b
                kwargs.update(action="extend", nargs="+")
            if option.metavar or option.choices:  # the choices are checked by the declaration: one line
                kwargs["metavar"] = option.metavar or "{" + ",".join(option.choices) + "}"
        parser.add_argument(option.submit_flag if sweep else option.command_flag, **kwargs)


def task_values(args, options: tuple[Option, ...]) -> dict:
    """The options' values in ``args``, each checked by its declaration (an ``InputError``, one line, for a bad
    one); a path as text. None for what was not given and has no default."""
    values = {}
    for option in options:
        value = getattr(args, option.name, None)
        if isinstance(value, Path):
            value = str(value)
        values[option.name] = option.checked(value)
    return values


def add_sweep_options(parser) -> None:
    """``jobs submit-eval``'s task options: every sweep task's, each flag once, its help naming who reads it."""
    from explorer.evaluation.tasks import sweep_help, sweep_options

    options = sweep_options()
    add_task_options(parser, options, sweep=True, helps={option.name: sweep_help(option.name) for option in options})


def sweep_values(args) -> dict:
    """The task options given to ``jobs submit-eval`` (paths as text; the sweep checks them)."""
    from explorer.evaluation.tasks import sweep_options

    values = {option.name: getattr(args, option.name, None) for option in sweep_options()}
    return {name: str(value) if isinstance(value, Path) else value for name, value in values.items()}


__all__ = ["add_sweep_options", "add_task_options", "sweep_values", "task_values"]
