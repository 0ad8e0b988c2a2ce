"""Plugin packages built in a test (``test_plugins``, ``test_worked_plugin``): their files in a folder on
``sys.path`` (and ``PYTHONPATH``, for the processes a test starts) beside a ``*.dist-info`` holding their
``entry_points.txt``, which is what ``importlib.metadata`` reads for an installed package."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from explorer.models.methods import plugins

PLUGIN_MODULES = ("explorer_mymethod", "broken_plugin", "clash_plugin", "explorer_dreamlip")


def write_dist_info(site: Path, dist: str, version: str, entries: dict[str, str]) -> None:
    """What pip leaves for an installed package, as far as ``importlib.metadata`` reads it."""
    info = site / f"{dist.replace('-', '_')}-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n")
    lines = "".join(f"{name} = {target}\n" for name, target in entries.items())
    (info / "entry_points.txt").write_text(f"[{plugins.GROUP}]\n{lines}")


@pytest.fixture
def on_path(monkeypatch):
    """``on_path(folder, ...)``: the folders importable here and in the processes a test starts; the plugins
    are read again, and forgotten (with their modules) after the test."""
    modules_before = set(sys.modules)

    def add(*folders):
        for folder in folders:
            monkeypatch.syspath_prepend(str(folder))
        monkeypatch.setenv("PYTHONPATH", os.pathsep.join([*map(str, folders), os.environ.get("PYTHONPATH", "")]))
        plugins.reset_for_tests()

    yield add
    plugins.reset_for_tests()
    for name in set(sys.modules) - modules_before:
        if name.startswith(PLUGIN_MODULES):
            del sys.modules[name]
