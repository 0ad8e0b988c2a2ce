"""The suite says when it creeps back (issue 65): any test whose setup, call and teardown together took more
than ``LIMIT_S`` seconds is named in a warning line at the end of the run, with the reason it needs that long
where its ``slow`` marker gives one (``@pytest.mark.slow(reason="...")``, on the test or its module). A warning,
not a failure: the machine is shared and timings are noisy. ``tests/conftest.py`` wires it into pytest; under
pytest-xdist the controller receives every worker's reports, so one list covers the whole run."""

from __future__ import annotations

import os
from collections import defaultdict

import pytest

LIMIT_S = float(os.environ.get("EXPLORER_SLOW_TEST_S", "30"))
REASON_KEY = "slow_reason"  # carried in a report's user_properties, which pytest-xdist sends to the controller


def mark_reasons(items) -> None:
    """Each item's ``slow`` reason into its ``user_properties``, so its reports carry it (to the controller too)."""
    for item in items:
        marker = item.get_closest_marker("slow")
        reason = marker and (marker.kwargs.get("reason") or (marker.args[0] if marker.args else None))
        if reason:
            item.user_properties.append((REASON_KEY, str(reason)))


class SlowTests:
    """A pytest plugin: seconds per test (its phases summed) and the reason it gave, from pytest's reports; the
    warning lines in the terminal summary."""

    def __init__(self, limit_s: float = LIMIT_S):
        self.limit_s = limit_s
        self.seconds: dict[str, float] = defaultdict(float)
        self.reasons: dict[str, str] = {}

    def pytest_runtest_logreport(self, report) -> None:
        self.seconds[report.nodeid] += report.duration
        for key, value in getattr(report, "user_properties", ()):
            if key == REASON_KEY:
                self.reasons[report.nodeid] = value

    def over(self) -> list[tuple[float, str]]:
        """(seconds, test) of each test past the limit, the slowest first."""
        return sorted(((s, node) for node, s in self.seconds.items() if s > self.limit_s), reverse=True)

    def lines(self) -> list[str]:
        return [f"warning: {node} took {seconds:.0f} s (over {self.limit_s:g} s): "
                f"{self.reasons.get(node, 'no reason recorded (add one: @pytest.mark.slow(reason=...))')}"
                for seconds, node in self.over()]

    @pytest.hookimpl(trylast=True)  # after pytest's own slowest-durations list: the run's last lines
    def pytest_terminal_summary(self, terminalreporter) -> None:
        for line in self.lines():
            terminalreporter.write_line(line, yellow=True)
