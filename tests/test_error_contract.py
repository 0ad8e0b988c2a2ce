"""One error contract (``explorer.core.errors``): what a person's input can cause is an ``ExplorerError`` whose
message says what to do; anything else is a bug, said as one ("internal error (id ...)").

- every CLI command (found in the parser, so a new one is covered) fed bad input exits 2 with an ``error:``
  line, or with argparse's usage error; never a traceback, a bare ``ValueError`` or "internal error";
- every page handler (found in the built app) called with bad values answers with a message or a refusal,
  never a raw exception or "Internal error";
- a bug is said as one, on the page and in the shell, with an id the log or the traceback carries;
- no module raises a bare ``ValueError`` for input beyond a short, reasoned allowlist (an AST scan).
"""

from __future__ import annotations

import argparse
import ast
import inspect
import logging
from pathlib import Path

import gradio as gr
import pytest

from explorer import cli
from explorer.core.errors import ExplorerError

REPO = Path(__file__).resolve().parents[1]


# ---- the command line ----------------------------------------------------------------------------------


def commands(parser: argparse.ArgumentParser, prefix: tuple[str, ...] = ()):
    """(words, parser) of every leaf command."""
    subs = [action for action in parser._actions if isinstance(action, argparse._SubParsersAction)]
    if not subs:
        yield prefix, parser
        return
    for action in subs:
        for name, sub in action.choices.items():
            yield from commands(sub, prefix + (name,))


def bad_argvs(words: tuple[str, ...], parser: argparse.ArgumentParser, tmp: Path) -> list[list[str]]:
    """Bad inputs for a command: its named cases, else a missing file for every positional and required
    option (the generic case, which covers a command added later)."""
    missing, corrupt = str(tmp / "missing" / "nothing.safetensors"), str(tmp / "corrupt.safetensors")
    bad_png, zoo = str(tmp / "corrupt.png"), str(tmp / "zoo")
    named = {
        ("app",): [["--auth", "no-password"], ["--max-caption-chars", "-3"], ["--public", "--trusted"]],
        ("models", "add"): [[missing], [corrupt]],
        ("models", "check"): [[missing], [corrupt]],
        ("train",): [["--method", "clip", "--data", missing], ["--method", "no-such-method", "--data", missing]],
        ("data", "synth"): [[str(tmp / "synth"), "--n", "-5"], [str(tmp / "synth"), "--size", "3"]],
        ("zoo", "build-demo"): [["--out", str(tmp / "demo"), "--work", str(tmp / "work"), "--device", "tpu"]],
        ("assets", "write"): [["--out", corrupt]],
        ("figure", "maps"): [[missing, "--caption", "A cat."], [bad_png, "--caption", "A cat."]],
        ("figure", "regions"): [[missing, "--caption", "A cat."], [bad_png, "--caption", "A cat."]],
        ("figure", "pca"): [[missing], [bad_png]],
        ("figure", "kinds"): [[missing, "--caption", "A cat."], [bad_png, "--caption", "A cat."]],
        ("figure", "retrieval"): [["--data", missing, "--model", "no-such-model"]],
        ("figure", "replay"): [[missing], [corrupt]],
        ("figure", "gallery"): [["--out", corrupt]],
        ("maps",): [[missing, "--caption", "A cat."], [bad_png, "--caption", "A cat."]],
        ("eval",): [["--zoo", missing, "--data", missing]],
        ("results", "table"): [["--runs", "no-such-run"]],
        ("jobs", "list"): [["--status", "no-such-status"]],
        ("methods",): [["--json", "--no-such-flag"]],
        ("check-method",): [["no.such.module:Nothing"], ["no-such-method"]],
        ("new-method",): [["not a name!", "--out", str(tmp / "scaffold")]],
        ("export",): [["--model", "no-such-model", "--format", "open_clip", "--out", str(tmp / "export")]],
    }
    if words in named:
        return [[*words, *argv] for argv in named[words]]
    argv = list(words)
    for action in parser._actions:
        if not action.option_strings and action.dest != "help":
            argv.append(missing)
        elif action.required:
            argv += [action.option_strings[0], missing]
    return [argv]


@pytest.fixture
def shell(tmp_path, monkeypatch):
    """``explorer ...`` in this process, with its home, zoo and the app's launch kept under ``tmp_path``:
    (exit code, stderr)."""
    from explorer.ui import app as app_module

    monkeypatch.setenv("EXPLORER_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("EXPLORER_CHECKPOINTS", str(tmp_path / "zoo"))
    monkeypatch.setenv("EXPLORER_ASSETS", str(tmp_path / "assets"))
    monkeypatch.setattr(app_module, "launch", lambda **kwargs: None)
    (tmp_path / "corrupt.safetensors").write_bytes(b"\x08\x00\x00\x00\x00\x00\x00\x00not json")
    (tmp_path / "corrupt.png").write_bytes(b"\x89PNG\r\n\x1a\n" + b"\x00" * 64)
    (tmp_path / "zoo").mkdir()

    def run(argv: list[str], capsys) -> tuple[int, str]:
        try:
            code = cli.main(argv)
        except SystemExit as exit_:  # argparse's usage error (2) or --help (0)
            code = exit_.code
        return code, capsys.readouterr().err

    return run


@pytest.mark.slow(reason="runs every command of the CLI with each of its bad inputs")
def test_every_command_refuses_bad_input_with_a_message(shell, tmp_path, capsys):
    covered = []
    for words, parser in commands(cli._parser()):
        for argv in bad_argvs(words, parser, tmp_path):
            code, err = shell(argv, capsys)
            covered.append(" ".join(words))
            said = f"{argv}: exit {code}\n{err[-2000:]}"
            assert "Traceback" not in err and "internal error" not in err.lower(), said
            assert "ValueError" not in err, said
            if code == 0:  # handled: nothing to refuse yet (a submitted run fails later, in its own log)
                continue
            if words == ("check-method",) and code == 1:  # its own contract: the kit's report, exit 1
                continue
            assert code == 2, said
            assert err.startswith("error: ") or "usage:" in err, said
    assert {"app", "models add", "train", "figure maps", "export", "jobs show"} <= set(covered)


def test_a_bug_in_a_command_is_said_as_one(monkeypatch, capsys):
    """Not the person's input: exit 1, the traceback, and one line with an id."""
    def broken(args):
        raise ValueError("an invariant of ours broke")

    parser = cli._parser
    monkeypatch.setattr(cli, "_parser", lambda: _with_run(parser(), ("methods",), broken))
    assert cli.main(["methods"]) == 1
    err = capsys.readouterr().err
    assert "Traceback" in err and "an invariant of ours broke" in err
    assert "internal error (id " in err and "not your input" in err


def _with_run(parser, words, run):
    for found, sub in commands(parser):
        if found == words:
            sub.set_defaults(run=run)
    return parser


# ---- the page ------------------------------------------------------------------------------------------

def bad_values(component) -> list:
    """Bad values a visitor can send to ``component`` (of the kind it carries: Gradio refuses other kinds
    before a handler runs, in one line of ours, ``request_rules.GRADIO_ERROR``)."""
    if isinstance(component, (gr.State, gr.Dataset)):  # the server's own; a Dataset sends an index Gradio checks
        return [None]
    if isinstance(component, (gr.Number, gr.Slider)):
        return [None, -1, 10**9]
    if isinstance(component, gr.Checkbox):
        return [False, True]
    if isinstance(component, (gr.Dropdown, gr.CheckboxGroup, gr.Radio)):
        multi = isinstance(component, gr.CheckboxGroup) or getattr(component, "multiselect", False)
        return [[], ["no-such-model"], ["x" * 5000]] if multi else [None, "no-such-model", "x" * 5000]
    if isinstance(component, (gr.Image, gr.File)):
        return [None, "/no/such/file.png"]
    if isinstance(component, (gr.Textbox, gr.Code, gr.Markdown)):
        return ["", "   ", "x" * 5000, "/no/such/file.png", "-1"]
    return [None]


def _takes_event(fn) -> bool:
    try:
        parameters = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return False
    return any(p.default is inspect.Parameter.empty and "Data" in str(p.annotation) for p in parameters)


def _exhaust(result):
    return list(result) if inspect.isgenerator(result) else result


@pytest.fixture(scope="module")
def page(tmp_path_factory):
    from explorer.jobs import JobManager
    from explorer.serve.access import Access
    from explorer.ui.app import build_app
    from explorer.zoo import Zoo

    home = tmp_path_factory.mktemp("home")
    patch = pytest.MonkeyPatch()
    patch.setenv("EXPLORER_HOME", str(home))
    zoo = Zoo(tmp_path_factory.mktemp("zoo"))
    access = Access(roots=(tmp_path_factory.getbasetemp().resolve(),))
    try:
        yield build_app(zoo, jobs=JobManager(zoo_root=zoo.root, gpu_ids=[], max_running=1, subreaper=False),
                        access=access)
    finally:
        patch.undo()


def test_every_page_handler_answers_bad_values_with_a_message(page):
    called, breaches = 0, []
    for block_fn in page.fns.values():
        if block_fn.fn is None or _takes_event(block_fn.fn) or any(isinstance(c, gr.Dataset) for c in block_fn.inputs):
            continue  # Gradio builds the event data (a click on a table) and a Dataset's index itself
        choices = [bad_values(component) for component in block_fn.inputs]
        for round_ in range(max((len(c) for c in choices), default=1)):
            values = [c[min(round_, len(c) - 1)] for c in choices]
            where = f"{block_fn.name} ({block_fn.api_name}) given {str(values)[:80]}"
            try:
                result = _exhaust(block_fn.fn(*values))
            except (ExplorerError, gr.Error) as refusal:
                if "Internal error" in str(refusal):
                    breaches.append(f"{where}: {refusal}")
                continue
            except Exception as error:  # noqa: BLE001 - the contract's breach, named
                breaches.append(f"{where}: {type(error).__name__}: {error}")
                continue
            called += 1
            shown = str(result)
            if "Internal error" in shown or "ValueError" in shown:
                breaches.append(f"{where}: {shown[:300]}")
    assert not breaches, "\n".join(breaches)
    assert called > 20


def test_a_bug_on_the_page_is_said_as_one_with_an_id_in_the_log(caplog):
    from explorer.serve.budget import OWNER
    from explorer.serve.messages import explain
    from explorer.serve.request_rules import checked

    with caplog.at_level(logging.ERROR, logger="explorer.ui"):
        try:
            raise ValueError("an invariant of ours broke")
        except ValueError as error:
            shown = explain(error)
    assert "Internal error (id " in shown and "not your input" in shown
    assert "an invariant of ours broke" not in shown  # the details are the log's
    ident = shown.split("(id ")[1].split(")")[0]
    records = [r for r in caplog.records if ident in r.getMessage()]
    assert len(records) == 1 and records[0].exc_info is not None
    assert explain(ExplorerError("Pick a model.")) == "**Cannot do that:** Pick a model."

    def handler(text):
        if text == "mine":
            raise ExplorerError("give a caption")
        raise KeyError(text)

    wrapped = checked(handler, OWNER)
    with pytest.raises(gr.Error, match="Cannot do that: give a caption"):
        wrapped("mine")
    with pytest.raises(gr.Error, match=r"Internal error \(id [0-9a-f]{8}\)"):
        wrapped("bug")


# ---- the code: no bare ValueError for input ------------------------------------------------------------

# Modules that may still raise ValueError: each an invariant of the code itself (a caller inside explorer
# passes what it built), never what a person typed, picked or uploaded. At most this many per file.
ALLOWED = {
    "explorer/evaluation/metrics/maps.py": (9, "array shapes of the metric kernels; callers pass arrays they built"),
    "explorer/evaluation/metrics/boxes.py": (4, "box arrays and region indices the evaluators build"),
    "explorer/evaluation/metrics/classification.py": (2, "score arrays the evaluators build"),
    "explorer/evaluation/tasks/options.py": (2, "a declaration's kind (the code's); convert's signal, which "
                                                "checked() turns into an InputError"),
    "explorer/evaluation/metrics/retrieval.py": (6, "the score matrix's shape; the evaluators build it"),
    "explorer/grounding/pca.py": (8, "feature shapes of the PCA kernel; the views build them"),
    "explorer/grounding/masks.py": (3, "map shapes and values of the mask kernel; a model's maps"),
    "explorer/grounding/flism.py": (1, "the similarity matrix FLISM builds itself"),
    "explorer/models/chunking.py": (4, "chunk arithmetic; the methods pass their own sentence counts"),
    "explorer/training/optimizer.py": (6, "a method's parameter_groups() (its code; check-method reports it)"),
    "explorer/evaluation/runner.py": (1, "a method's similarity() returned the wrong shape (its code)"),
    "explorer/ui/page_load.py": (2, "the page's own wiring, refused when the app is built (never a visitor's value)"),
    "explorer/evaluation/grounding_eval.py": (1, "a method's maps and the masks disagree in shape (its code)"),
    "explorer/data/drawing.py": (3, "the synthetic world's own vocabulary"),
    "explorer/generation/clip_text_model.py": (2, "a tower explorer loaded must fit the model it builds"),
    "explorer/jobs/run_store.py": (1, "record fields the code sets"),
    "explorer/serve/host_guard.py": (1, "split_host's parse signal; every caller turns it into a refusal"),
    "explorer/training/ddp.py": (1, "the batch the loop slices per rank"),
    "explorer/retrieval/embedding_store.py": (1, "rank and world the launcher sets"),
    "explorer/retrieval/vector_index.py": (1, "vectors the store hands over"),
    "explorer/views/render.py": (1, "the views resize maps to the picture first"),
    "explorer/models/model.py": (1, "SentenceMaps built by explorer's own code"),
    "explorer/models/features.py": (1, "concatenating the parts the store read"),
    "explorer/models/methods/caft.py": (1, "CAFT's own chunk count"),
    "explorer/core/regions.py": (2, "regions and sizes explorer builds"),
    "explorer/core/cache.py": (1, "cache sizes in code"),
}


def _catches_value_error(handler: ast.ExceptHandler) -> bool:
    names = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
    return any(isinstance(name, ast.Name) and name.id in ("ValueError", "Exception") for name in names)


def bare_value_errors(source: str) -> list[int]:
    """Lines that raise ValueError, except inside a ``try`` of the same function that catches it (a parse
    step turned into a message on the spot)."""
    lines = []

    def visit(node, caught: bool):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            caught = False
        if isinstance(node, ast.Try):
            inner = caught or any(_catches_value_error(h) for h in node.handlers)
            for child in node.body:
                visit(child, inner)
            for child in [*node.handlers, *node.orelse, *node.finalbody]:
                visit(child, caught)
            return
        if isinstance(node, ast.Raise) and node.exc is not None and not caught:
            target = node.exc.func if isinstance(node.exc, ast.Call) else node.exc
            if isinstance(target, ast.Name) and target.id == "ValueError":
                lines.append(node.lineno)
        for child in ast.iter_child_nodes(node):
            visit(child, caught)

    visit(ast.parse(source), False)
    return lines


def test_no_module_raises_a_bare_value_error_for_input():
    found = {}
    for path in sorted((REPO / "explorer").rglob("*.py")):
        lines = bare_value_errors(path.read_text())
        if lines:
            found[path.relative_to(REPO).as_posix()] = lines
    over = {name: lines for name, lines in found.items() if len(lines) > ALLOWED.get(name, (0, ""))[0]}
    assert not over, ("raise an ExplorerError subclass (explorer/core/errors.py) with a message that says what "
                      f"to do, or, for an invariant of the code, add the module to ALLOWED with why: {over}")
