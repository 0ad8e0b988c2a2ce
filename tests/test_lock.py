"""The lock (constraints.txt, written by scripts/lock.sh): every dependency pyproject.toml names, in the app's list and
in every extra the README's commands install, is pinned to one exact version, so a fresh machine installs what CI
tested and no new release elsewhere can change it."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LOCKED_EXTRAS = ("test", "docs")  # scripts/test.sh installs ".[test]"; mkdocs builds from ".[docs]"


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def requirement_name(requirement: str) -> str:
    return canonical(re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", requirement).group(1))


def pins() -> dict[str, str]:
    found = {}
    for line in (ROOT / "constraints.txt").read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, _, version = line.partition("==")
            assert version and ";" not in version, f"constraints.txt: {line!r} is not one exact pin"
            found[canonical(name)] = version.strip()
    return found


def named_dependencies() -> set[str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    names = {requirement_name(r) for r in project["project"]["dependencies"]}
    for extra in LOCKED_EXTRAS:
        names |= {requirement_name(r) for r in project["project"]["optional-dependencies"][extra]}
    names |= {requirement_name(r) for r in project["build-system"]["requires"]}
    return names


def test_every_dependency_pyproject_names_is_pinned_in_the_lock():
    missing = sorted(named_dependencies() - set(pins()))
    assert not missing, f"pyproject.toml names {missing}, which constraints.txt does not pin: run scripts/lock.sh"


def test_the_lock_pins_the_transitive_dependencies_too():
    locked = pins()
    # what the named packages pull in: a lock of only the names above would leave these to the day's releases
    for transitive in ("jinja2", "fastapi", "uvicorn", "huggingface-hub", "tokenizers", "markupsafe", "iniconfig"):
        assert transitive in locked, f"{transitive} is not pinned"
    assert locked["torch"] == "2.13.0", "torch stays 2.13.0 with no local tag (the CPU wheel on CPU machines)"


def test_every_install_command_uses_the_lock():
    readme = (ROOT / "README.md").read_text()
    assert "pip install -c constraints.txt pip && pip install --no-compile -c constraints.txt -e ." in readme
    test_script = (ROOT / "scripts" / "test.sh").read_text()
    installs = [line for line in test_script.splitlines() if "pip install" in line and not line.lstrip().startswith("#")]
    assert installs and all("-c constraints.txt" in line for line in installs), installs
    ci = (ROOT / ".ci" / "run").read_text()
    assert "venv" in ci and "bash scripts/test.sh" in ci
    # command 1 as the README has it: the lock's pip, then the app without pip's compile of every module
    assert "-c constraints.txt pip " in ci and "--no-compile -c constraints.txt -e ." in ci
    assert pins()["pip"] == "26.3"
