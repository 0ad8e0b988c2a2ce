"""The end-of-run warning for tests over 30 s (tests/slow_tests.py, wired in tests/conftest.py): each phase of a
test counts, a test under the limit is not named, the reason comes from its ``slow`` marker, and a warning is
all it is (the plugin writes lines; it fails nothing)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from slow_tests import REASON_KEY, SlowTests, mark_reasons


def report(nodeid: str, duration: float, reason: str | None = None):
    return SimpleNamespace(nodeid=nodeid, duration=duration, user_properties=[(REASON_KEY, reason)] if reason else [])


def test_a_test_over_the_limit_is_named_with_its_reason_and_the_phases_add_up():
    slow = SlowTests(limit_s=30)
    slow.pytest_runtest_logreport(report("t.py::a", 20.0, "starts python app.py"))  # setup: a server
    slow.pytest_runtest_logreport(report("t.py::a", 12.0, "starts python app.py"))  # call
    slow.pytest_runtest_logreport(report("t.py::b", 29.0))  # under the limit: not named
    slow.pytest_runtest_logreport(report("t.py::c", 45.0))  # no reason given
    written = []
    slow.pytest_terminal_summary(SimpleNamespace(write_line=lambda line, **style: written.append(line)))
    assert written == ["warning: t.py::c took 45 s (over 30 s): no reason recorded (add one: "
                       "@pytest.mark.slow(reason=...))",
                       "warning: t.py::a took 32 s (over 30 s): starts python app.py"]


def test_the_reason_is_the_closest_slow_markers():
    def item(marker):
        return SimpleNamespace(get_closest_marker=lambda name: marker if name == "slow" else None,
                               user_properties=[])

    items = [item(pytest.mark.slow(reason="trains two ranks").mark), item(pytest.mark.slow.mark),
             item(None), item(pytest.mark.slow("a whole soak").mark)]
    mark_reasons(items)
    assert [i.user_properties for i in items] == [[(REASON_KEY, "trains two ranks")], [], [],
                                                  [(REASON_KEY, "a whole soak")]]


def test_the_plugin_is_registered_in_the_runs_controller(pytestconfig):
    import os

    plugin = pytestconfig.pluginmanager.get_plugin("explorer-slow-tests")
    assert (plugin is None) == bool(os.environ.get("PYTEST_XDIST_WORKER"))  # a worker's reports go to it


def test_a_click_made_again_is_named_in_the_warnings_and_the_last_miss_still_fails():
    """``click_until`` (tests/page_fixtures.py): a lost click's wait is named in the run's warnings summary, so a
    slow test's extra 40 s has a cause on record; after its last try the miss fails the test as before."""
    pytest.importorskip("playwright")
    from page_fixtures import ClickAgain, click_until

    clicks, misses = [], iter([True, False])

    def answered():
        if next(misses):
            raise AssertionError("no answer yet")

    with pytest.warns(ClickAgain, match="made again after"):
        click_until(lambda: clicks.append("click"), answered)
    assert clicks == ["click", "click"]

    def never():
        raise AssertionError("never answered")

    with pytest.warns(ClickAgain), pytest.raises(AssertionError, match="never answered"):
        click_until(lambda: clicks.append("click"), never, tries=2)
    assert len(clicks) == 4
