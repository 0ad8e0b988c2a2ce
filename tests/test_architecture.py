"""The package layout keeps its layers: imports only go down ``explorer.LAYERS``, no module is too
long to read, and no module reaches for another module's private names."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import explorer

PACKAGE = Path(explorer.__file__).parent
MAX_LINES = 600
RANK = {name: rank for rank, names in enumerate(explorer.LAYERS) for name in names}
FACADE_RANK = RANK["zoo"]  # `explorer` itself: load() reaches models and the zoo


def modules() -> list[tuple[str, Path]]:
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        found.append((name, path))
    return found


def imported(name: str, path: Path) -> list[tuple[str, list[str], int]]:
    """(module, names imported from it, line) for every import in the file, relative ones resolved."""
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    result = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            result += [(alias.name, [], node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            result.append((target, [alias.name for alias in node.names], node.lineno))
        elif isinstance(node, ast.Call) and _names_an_importer(node.func) and node.args:
            first = node.args[0]  # importlib.import_module("explorer.x") / __import__("explorer.x")
            if isinstance(first, ast.Constant) and isinstance(first.value, str):
                result.append((first.value, [], node.lineno))
            elif isinstance(first, ast.JoinedStr) and first.values and isinstance(first.values[0], ast.Constant):
                prefix = str(first.values[0].value).rstrip(".")  # f"explorer.models.methods.{name}"
                result.append((prefix, [], node.lineno))
    return result


def _names_an_importer(func: ast.expr) -> bool:
    name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
    return name in ("import_module", "__import__")


def layer_of(module: str) -> tuple[str, int] | None:
    parts = module.split(".")
    if parts[0] != "explorer":
        return None
    if len(parts) == 1:
        return "explorer", FACADE_RANK
    top = parts[1]
    if top not in RANK:
        raise AssertionError(f"{module}: the package {top!r} is in no layer; add it to explorer.LAYERS")
    return top, RANK[top]


def test_every_package_has_a_layer():
    for name, _ in modules():
        if name != "explorer":
            assert layer_of(name) is not None


def test_imports_only_go_down_the_layers():
    wrong = []
    for name, path in modules():
        if name == "explorer":
            continue
        source, rank = layer_of(name)
        for target, names, line in imported(name, path):
            if target == "explorer":  # `from explorer import x` may name a subpackage
                targets = [f"explorer.{n}" if (PACKAGE / n).exists() or (PACKAGE / f"{n}.py").exists()
                           else "explorer" for n in names]
            else:
                targets = [target]
            for each in targets:
                found = layer_of(each)
                if found is None:
                    continue
                package, target_rank = found
                if package != source and target_rank >= rank:
                    wrong.append(f"{path.relative_to(PACKAGE.parent)}:{line} ({source}) imports {each} ({package})")
    assert not wrong, "imports against the layers:\n" + "\n".join(wrong)


def test_the_check_catches_an_upward_import(tmp_path):
    """The check itself works: a models module importing the UI is reported."""
    bad = tmp_path / "bad.py"
    bad.write_text("from explorer.ui.app import build_app\nfrom ..views import settings\n"
                   "import importlib\nimportlib.import_module('explorer.jobs.queue')\n")
    found = [(t, n, line) for t, n, line in imported("explorer.models.bad", bad) if t.startswith("explorer")]
    assert [layer_of(t)[0] for t, _, _ in found] == ["ui", "views", "jobs"]
    assert all(layer_of(t)[1] > RANK["models"] for t, _, _ in found)


def test_the_servers_guards_never_import_a_tab():
    """``explorer.serve`` sits below ``explorer.ui``: the tabs ask the guards for their budget, never the reverse."""
    assert RANK["serve"] < RANK["ui"]
    serve = [(name, path) for name, path in modules() if name.split(".")[:2] == ["explorer", "serve"]]
    assert len(serve) >= 12, "the guards live in explorer/serve/"
    wrong = [f"{path.relative_to(PACKAGE.parent)}:{line} imports {target}" for name, path in serve
             for target, names, line in imported(name, path)
             if target.startswith("explorer.ui") or (target == "explorer" and "ui" in names)]
    assert not wrong, "explorer.serve imports a tab:\n" + "\n".join(wrong)


@pytest.mark.parametrize("name,path", modules(), ids=lambda v: str(v) if isinstance(v, str) else "")
def test_no_module_is_too_long(name, path):
    lines = len(path.read_text().splitlines())
    assert lines <= MAX_LINES, f"{name} has {lines} lines (at most {MAX_LINES}): split it by concept"


def test_no_private_name_is_imported_across_modules():
    wrong = []
    for name, path in modules():
        for target, names, line in imported(name, path):
            if target == "__future__":
                continue
            private = [n for n in names if n.startswith("_")]
            if target.split(".")[-1].startswith("_") and target.startswith("explorer"):
                private.append(target)
            if private:
                wrong.append(f"{path.relative_to(PACKAGE.parent)}:{line} imports {', '.join(private)} from {target}")
    assert not wrong, "private names imported across modules:\n" + "\n".join(wrong)


# ---- no code outside the methods names a built-in method ------------------------------------------

METHODS_PACKAGE = PACKAGE / "models" / "methods"
# The built-in methods' names, from their job configs (data; tests/test_jobs_units checks they are the registry's).
BUILT_IN_NAMES = frozenset(path.stem for path in (PACKAGE / "jobs" / "configs").glob("*.yaml"))


def method_name_comparisons(source: str) -> list[tuple[int, str]]:
    """(line, name) of every comparison with a built-in method's name: ``x == "goal"``, ``m in ("clip", ...)``,
    ``case "seps":``. What a method needs is asked of its class, so such a branch is a method's knowledge
    living in the wrong place."""
    def names_in(node: ast.expr) -> list[str]:
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return [node.value] if node.value in BUILT_IN_NAMES else []
        if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
            return [name for element in node.elts for name in names_in(element)]
        return []

    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare):
            found += [(node.lineno, name) for operand in (node.left, *node.comparators) for name in names_in(operand)]
        elif isinstance(node, ast.MatchValue):
            found += [(node.lineno, name) for name in names_in(node.value)]
    return found


def test_no_code_outside_the_methods_compares_against_a_method_name():
    assert {"clip", "goal", "seps"} <= BUILT_IN_NAMES
    wrong = [f"{path.relative_to(PACKAGE.parent)}:{line} compares with {name!r}"
             for _, path in modules() if METHODS_PACKAGE not in path.parents
             for line, name in method_name_comparisons(path.read_text())]
    assert not wrong, ("code that branches on a built-in method's name (ask the method's class instead: "
                       "explorer.models.methods.base.Method):\n" + "\n".join(wrong))


def test_the_name_check_catches_a_comparison():
    """The check itself works: each form of a name comparison is reported; naming one in data is not."""
    bad = ('if run.method == "goal":\n    pass\nif m in ("clip", "other"):\n    pass\n'
           'match m:\n    case "seps":\n        pass\nRUNS = {"clip": 1}\nf("finelip")\n')
    assert method_name_comparisons(bad) == [(1, "goal"), (3, "clip"), (6, "seps")]


# ---- no import cycle among explorer's modules ------------------------------------------------------


def import_graph() -> dict[str, set[str]]:
    """module -> the explorer modules it imports (at the top or inside a function: both run; not for annotations
    alone), each named by the most specific module that exists (``from explorer.views import pipeline`` is
    explorer.views.pipeline)."""
    known = {name for name, _ in modules()}
    graph: dict[str, set[str]] = {}
    for name, path in modules():
        edges, for_types = set(), type_checking_lines(path)
        for target, names, line in imported(name, path):
            if not target.startswith("explorer") or line in for_types:
                continue
            for each in [f"{target}.{n}" for n in names] or [target]:
                found = each if each in known else target
                while found not in known and "." in found:
                    found = found.rsplit(".", 1)[0]
                if found in known and found != name:
                    edges.add(found)
        graph[name] = edges
    return graph


def type_checking_lines(path: Path) -> set[int]:
    """The lines under ``if TYPE_CHECKING:``: imports for annotations only, which never run."""
    lines = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.If) and getattr(node.test, "id", getattr(node.test, "attr", "")) == "TYPE_CHECKING":
            for child in node.body:
                lines.update(range(child.lineno, (child.end_lineno or child.lineno) + 1))
    return lines


def import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                group = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    group.append(member)
                    if member == node:
                        break
                if len(group) > 1:
                    cycles.append(sorted(group))
    return cycles


def test_no_import_cycle_among_explorers_modules():
    """Modules import each other one way: a loop (a imports b, b imports a, at the top or in a function) means
    neither can be read, tested or moved without the other."""
    cycles = import_cycles(import_graph())
    assert not cycles, "import cycles:\n" + "\n".join(" <-> ".join(group) for group in cycles)


def test_the_cycle_check_catches_a_loop():
    """The check itself works: a loop of three is one group, a chain beside it is none."""
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": {"e"}, "e": set()}
    assert import_cycles(graph) == [["a", "b", "c"]]
