"""`explorer methods | check-method | new-method`: the methods, built-in and plugged in.

`methods` lists every method with where it comes from (built-in, or the package and version that
registers it in the entry-point group ``explorer.methods``) and whether it loaded (a plugin that did
not is listed with its error). `check-method NAME` runs the conformance kit (``explorer.testing``):
one line per check, exit code 0 when all pass, 1 otherwise; `check-method package.module:Class` runs
it on a class that need not be installed, registered for the check under a scratch name (its own may
be an installed method's: a copy of one is checked as it is). `new-method NAME --out DIR` writes a
plugin package that works as it is (``scaffold``).
"""

from __future__ import annotations

import importlib
import json
import sys
from pathlib import Path


def add_commands(commands) -> None:
    listing = commands.add_parser("methods", help="every method, built-in or from a plugin package, and whether it "
                                                  "loaded")
    listing.add_argument("--json", action="store_true", help="print the list as JSON")
    listing.set_defaults(run=run_methods)

    check = commands.add_parser("check-method", help="run the conformance kit on a method (exit 0: it fits)")
    check.add_argument("name", help="a method's name (`explorer methods`), or package.module:Class for one not "
                                    "installed yet (checked under a scratch name, so a copy of an installed "
                                    "method is checked as it is)")
    check.set_defaults(run=run_check_method)

    new = commands.add_parser("new-method", help="write a method package (a plugin) to start from")
    new.add_argument("name", help="the method's name: lowercase letters, digits and _")
    new.add_argument("--out", type=Path, required=True, help="a new or empty folder")
    new.add_argument("--title", help="how the page names it (default: from the name)")
    new.set_defaults(run=run_new_method)


def run_methods(args) -> int:
    from explorer.models.methods import method_entries

    entries = method_entries()
    if args.json:
        print(json.dumps([entry.as_dict() for entry in entries], indent=2))
        return 0
    width = max(len(entry.name) for entry in entries)
    for entry in entries:
        status = "loaded" if entry.loaded else f"NOT LOADED: {entry.error}"
        print(f"{entry.name:<{width}}  {entry.title or '-':<10}  {entry.source:<24}  {status}")
    return 0


def run_check_method(args) -> int:
    from explorer.models.methods import METHODS, method_entries
    from explorer.testing import run_checks

    if ":" in args.name:  # "package.module:Class", a method not installed yet
        module, _, name = args.name.partition(":")
        try:
            cls = getattr(importlib.import_module(module), name)
        except Exception as error:  # noqa: BLE001 - the author's code: any failure is the first finding
            print(f"FAIL  loads: {type(error).__name__}: {error}")
            return 1
        # Under a scratch name: the class's own may belong to an installed method (this may be a copy of it).
        return _report(args.name, run_checks(cls, scratch_name=True))
    entries = {entry.name: entry for entry in method_entries() if entry.name == args.name}
    entry = entries.get(args.name)
    if entry is None or not entry.loaded:
        reason = entry.error if entry else f"no method {args.name!r}; `explorer methods` lists them"
        print(f"FAIL  loads: {reason}")
        return 1
    return _report(f"{args.name} ({entry.source}, {entry.target})", run_checks(METHODS[args.name]))


def _report(title: str, results) -> int:
    print(title)
    for result in results:
        print(result.line())
    failed = sum(not r.ok for r in results)
    print(f"{len(results) - failed} of {len(results)} checks pass" + (f"; {failed} fail" if failed else ""))
    sys.stdout.flush()
    return 1 if failed else 0


def run_new_method(args) -> int:
    from explorer.cli.scaffold import new_method

    written = new_method(args.name, args.out, args.title)
    for path in written:
        print(path)
    print(f"next: pip install -e '{args.out}[test]' && explorer check-method {args.name} "
          f"(or: cd {args.out} && python -m pytest tests/)")
    return 0
