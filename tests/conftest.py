"""Fixtures shared by the jobs tests (``test_jobs``, ``test_cli_jobs``, ``test_ui_jobs``): a tiny world,
a run store under the test's own ``EXPLORER_HOME``, and a wait for a run to get somewhere. A test module
that defines a fixture of the same name uses its own."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest


def pytest_configure(config):
    """Under pytest-xdist (the README's command runs a worker per core) each worker computes on one thread:
    two workers each spinning torch's default pool of one thread per core would fight over the cores.

    Each worker's Gradio files go to a temp folder of its own, as each ``python app.py`` does: the pages the
    tests serve in process shared ``/tmp/gradio``, where one picture has one path, so a page stopping on one
    worker (its cleanup deletes what it wrote) deleted the picture another worker's page still showed, and that
    page's next Draw said "No image file at /tmp/gradio/.../chelsea.png".

    A process that runs tests builds each tiny random model once and the same one again from its kept weights
    (tests/example_models.py: the same model and random stream, without drawing its random start again)."""
    from explorer.serve.temp_folder import own_temp_folder

    own_temp_folder()
    collect_garbage_less_often()
    if os.environ.get("PYTEST_XDIST_WORKER") or not config.getoption("numprocesses", None):
        from example_models import remember_example_models

        remember_example_models()  # in the processes that run tests (a run's xdist controller runs none)
    if os.environ.get("PYTEST_XDIST_WORKER"):
        import torch

        os.environ["OMP_NUM_THREADS"] = "1"  # the processes a test starts inherit it
        torch.set_num_threads(1)
    else:  # the run's controller (or a run without xdist): it sees every report, so it names the slow tests
        from slow_tests import SlowTests

        config.pluginmanager.register(SlowTests(), "explorer-slow-tests")


def collect_garbage_less_often() -> None:
    """A test process holds torch, Gradio, transformers, diffusers and matplotlib at once (well over a GB of
    Python objects), and CPython's default thresholds (700, 10, 10) ran a full collection every few seconds,
    each walking all of it: 29 full collections took 15 s of a 91 s run of three modules, 17 % (session 25).
    Ten times fewer young collections and a full one only after 100 middle ones: 3.9 s, the run 78 s, the peak
    1.49 -> 1.62 GB. Reference cycles are still collected (young ones by the young collections, old ones at
    the full ones and wherever a test calls ``gc.collect()``), only later: no check depends on when."""
    import gc

    gc.set_threshold(10_000, 10, 100)


def pytest_unconfigure(config):
    from explorer.serve.temp_folder import remove_own_temp_folder

    remove_own_temp_folder()


def pytest_collection_modifyitems(items):
    """Each test's ``slow`` reason travels with its reports (tests/slow_tests.py: the end-of-run warning)."""
    from slow_tests import mark_reasons

    mark_reasons(items)


@pytest.fixture(autouse=True)
def log_limit_on_a_new_minute():
    """The log limiter is the process's (``explorer.serve.log_limit``): every test starts on a minute of its own,
    whatever the tests before it on this worker logged (a sweep of hostile calls spends a minute's lines)."""
    import sys

    limiter = sys.modules.get("explorer.serve.log_limit")
    if limiter is not None and limiter._installed:
        limiter.install().start_new_window()


@pytest.fixture(scope="module")
def world(tmp_path_factory) -> Path:
    """A 12-scene synthetic world at 64 px, written once per test module."""
    from explorer.data import write_dataset

    root = tmp_path_factory.mktemp("world")
    write_dataset(root, 12, seed=0, image_size=64)  # 10 train, 1 val, 1 test
    return root


@pytest.fixture(scope="session")
def owner(tmp_path_factory):
    """The page's rules in owner mode with every test folder allowed (``explorer.serve.access``): handler tests
    type paths under pytest's temporary folders."""
    from explorer.serve.access import Access

    return Access(roots=(tmp_path_factory.getbasetemp().resolve(),))


@pytest.fixture
def isolated_home(tmp_path, monkeypatch) -> Path:
    """``EXPLORER_HOME`` (the run store, caches) and ``EXPLORER_CHECKPOINTS`` (the zoo) under ``tmp_path``."""
    monkeypatch.setenv("EXPLORER_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("EXPLORER_CHECKPOINTS", str(tmp_path / "zoo"))
    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # run processes inherit it: two ranks on two cores
    return tmp_path / "home"


@pytest.fixture
def subreaper() -> bool:
    """Whether ``jobs`` adopts its runs' orphaned processes (a module about reaping overrides it)."""
    return False


@pytest.fixture
def jobs(isolated_home, subreaper):
    """The run store every call opens (``EXPLORER_HOME``): CPU only, two runs at once; no run of the test
    is left running after it, passed or failed."""
    from explorer.jobs import JobManager, launcher

    manager = JobManager(gpu_ids=[], max_running=2, grace_s=60, subreaper=subreaper)
    yield manager
    for run in manager.list(reconcile=False):
        if run.pgid and run.status == "running":
            launcher.signal_group(run.pgid, signal.SIGKILL)
            launcher.end_ranks(run.out_dir)  # torchrun's ranks live in sessions of their own
    launcher.wait_children(10)


def poll(condition, timeout: float = 180.0, what: str = "the condition"):
    """``condition()``'s first true value, asked every 0.1 s; an ``AssertionError`` naming ``what`` after
    ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.fixture
def wait_for():
    """``wait_for(condition, timeout=180, what=...)``: ``poll``, for a run process to get somewhere."""
    return poll


@pytest.fixture
def app_command(monkeypatch, tmp_path):
    """``explorer app ...`` parsed and checked but not served: (run(*flags) -> exit code, the keywords it would
    launch the page with)."""
    from explorer import cli
    from explorer.ui import app as app_module

    seen = {}
    monkeypatch.setattr(app_module, "launch", lambda **kwargs: seen.update(kwargs))
    monkeypatch.setenv("EXPLORER_HOME", str(tmp_path / "home"))

    def run(*flags) -> int:
        return cli.main(["app", "--checkpoints", str(tmp_path / "zoo"), *flags])

    return run, seen
