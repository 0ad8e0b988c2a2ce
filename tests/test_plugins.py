"""Methods from other packages: a package registers one under the entry-point group ``explorer.methods``.

The packages here are built in the test: their files in a folder on ``sys.path`` (and on ``PYTHONPATH``,
so run processes find them too) beside a ``*.dist-info`` with their ``entry_points.txt``, which is what
``importlib.metadata`` reads for an installed package.
"""

from __future__ import annotations

import gc
import json
import os
import socket
from pathlib import Path

import pytest

from explorer.cli import main
from explorer.core.errors import CheckpointError
from explorer.models.methods import BUILT_IN, get_method, plugins
from plugin_fixtures import on_path, write_dist_info  # noqa: F401  (on_path: a fixture)
from explorer.serve.startup import start_page

TINY = {"size": "tiny", "batch_size": 4, "cpu_threads": 1, "evaluate": False}


@pytest.fixture
def my_method(tmp_path, on_path) -> str:
    """The package ``explorer new-method mymethod`` writes, as if installed: its method's name."""
    assert main(["new-method", "mymethod", "--out", str(tmp_path / "pkg")]) == 0
    write_dist_info(tmp_path / "site", "explorer-mymethod", "0.1.0",
                    {"mymethod": "explorer_mymethod.method:MymethodMethod"})
    on_path(tmp_path / "pkg", tmp_path / "site")
    return "mymethod"


def methods_json(capsys) -> dict:
    """``explorer methods --json`` by name (a loaded method first where a plugin claimed its name too)."""
    capsys.readouterr()
    assert main(["methods", "--json"]) == 0
    listed = {}
    for entry in json.loads(capsys.readouterr().out):
        listed.setdefault(entry["name"], entry)
    return listed


def test_a_plugin_is_listed_with_its_package_and_is_a_method_like_the_built_ins(my_method, capsys):
    from explorer.jobs.configs import known_methods, method_defaults
    from explorer.views.maps_view import default_kind

    listed = methods_json(capsys)
    assert listed[my_method] == {"name": "mymethod", "title": "Mymethod", "source": "explorer-mymethod 0.1.0",
                                 "loaded": True, "error": None, "class": "explorer_mymethod.method:MymethodMethod"}
    assert listed["clip"]["source"] == BUILT_IN and listed["clip"]["loaded"]
    cls = get_method(my_method)
    assert my_method in known_methods()  # the Jobs form and `explorer jobs submit` take it
    defaults = method_defaults(my_method)  # from the class's job_defaults: it has no YAML here
    assert defaults.values["batch_size"] == 32 and defaults.sources["batch_size"] == "TODO: the paper's batch"
    assert main(["check-method", my_method]) == 0  # the scaffold passes the kit as written
    assert "11 of 11 checks pass" in capsys.readouterr().out

    import explorer

    model = explorer.Model(cls.example("tiny"), name="m", device="cpu")
    assert "mymethod-map" in model.map_kinds and default_kind(model) == "mymethod-map"  # "native" draws it


@pytest.mark.slow
def test_a_plugin_trains_through_jobs_in_its_own_process_and_draws_its_maps(my_method, jobs, world, wait_for):
    from PIL import Image

    import explorer
    from explorer.zoo import Zoo

    run = jobs.submit(my_method, world, max_steps=2, gpus=0, overrides=TINY, name="plugin-run")
    run = jobs.wait(run.id, timeout=240)
    assert run.status == "done", (run.error, jobs.logs(run.id, tail=20))
    assert run.progress == (2, 2) and run.config["batch_size"] == 4
    model = Zoo(os.environ["EXPLORER_CHECKPOINTS"]).load(run.zoo_name)
    assert model.method_name == my_method and model.key_report.ok
    assert explorer.load(run.checkpoint, device="cpu").method_name == my_method
    picture = Image.new("RGB", (64, 48), (200, 40, 40))
    for kind in model.map_kinds:
        maps = model.sentence_maps(picture, ["A red square.", "The floor is grey."], kind=kind).maps
        assert maps.shape == (2, 48, 64), kind


@pytest.fixture
def broken(tmp_path, on_path):
    """A package with three entry points: one whose module fails on import, one that claims the built-in
    name "clip", and one whose class says another name than its entry point."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "broken_plugin.py").write_text("raise RuntimeError('boom at import')\n")
    (site / "clash_plugin.py").write_text(
        "from explorer.models.methods.clip import ClipFamily\n\n"
        "class ClipClash(ClipFamily):\n    name, title = 'clip', 'Not CLIP'\n\n"
        "class Misnamed(ClipFamily):\n    name, title = 'something', 'Misnamed'\n")
    write_dist_info(site, "explorer-broken", "0.3", {"broken": "broken_plugin:Method", "clip": "clash_plugin:ClipClash",
                                                     "misnamed": "clash_plugin:Misnamed"})
    on_path(site)


def test_a_broken_plugin_is_listed_with_its_error_and_takes_nothing_down(broken, capsys):
    from explorer.models.methods.clip import ClipMethod
    from explorer.ui.models_tab import methods_table

    listed = methods_json(capsys)
    assert not listed["broken"]["loaded"] and listed["broken"]["source"] == "explorer-broken 0.3"
    assert listed["broken"]["error"].startswith("RuntimeError: boom at import")
    assert not listed["misnamed"]["loaded"] and "'something'" in listed["misnamed"]["error"]
    assert get_method("clip") is ClipMethod and listed["clip"]["source"] == BUILT_IN  # the built-in keeps it
    assert main(["methods"]) == 0
    lines = capsys.readouterr().out.splitlines()
    clash = next(line for line in lines if line.startswith("clip") and "NOT LOADED" in line)
    assert "explorer-broken 0.3" in clash and "taken by built-in" in clash  # both sources named
    with pytest.raises(CheckpointError, match="'broken' \\(explorer-broken 0.3\\) did not load: RuntimeError: boom"):
        get_method("broken")  # what a zoo model of that method says when it is loaded
    from explorer.jobs import JobError
    from explorer.jobs.configs import method_defaults

    with pytest.raises(JobError, match="did not load: RuntimeError: boom"):  # the Jobs form says why too
        method_defaults("broken")
    assert main(["check-method", "broken"]) == 1
    assert "FAIL  loads: RuntimeError: boom at import" in capsys.readouterr().out
    rows = {row[0]: row for row in methods_table() if row[1] == "not loaded"}
    assert set(rows) >= {"broken", "misnamed"} and "boom at import" in rows["broken"][3]


@pytest.mark.slow
def test_the_app_serves_with_a_broken_plugin_installed(broken, isolated_home):
    import httpx

    from explorer.jobs import JobManager
    from explorer.ui.app import build_app, warm_up
    from explorer.zoo import Zoo

    zoo = Zoo(Path(__file__).resolve().parents[1] / "checkpoints")
    app = build_app(zoo, jobs=JobManager(zoo_root=zoo.root, gpu_ids=[], max_running=1, subreaper=False))
    warm_up().join(120)  # imports the methods, the broken plugin among them
    gc.unfreeze()  # the warm-up froze this worker's objects, as it does the app's: the later tests' collect again
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    start_page(app, server_name="127.0.0.1", server_port=port, prevent_thread_lock=True, quiet=True)
    try:
        http = httpx.Client(base_url=app.local_url, timeout=60)
        assert http.get("/").status_code == 200 and http.get("/config").status_code == 200
    finally:
        app.close()
    assert not next(e for e in plugins.failed() if e.name == "broken").loaded
