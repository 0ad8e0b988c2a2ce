#!/usr/bin/env bash
# Install everything the test suite needs on a fresh machine, then run the whole suite.
# This is the README's test command, and what CI (.ci/run) calls.
set -euo pipefail
cd "$(dirname "$0")/.."

# Chromium for the real-browser test (Debian's package; Playwright never downloads a browser here).
if ! command -v chromium >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ]; then
    apt-get update -qq && apt-get install -y -qq chromium chromium-driver >/dev/null
  else
    echo "note: chromium is not installed and this is not root; the browser test will be skipped" >&2
  fi
fi

# Every install takes its versions from the lock (constraints.txt, written by scripts/lock.sh); PIP_CONSTRAINT
# also reaches the isolated environments that build the editable installs, so setuptools is pinned there too.
export PIP_CONSTRAINT="$PWD/constraints.txt"
# torch first, pinned: on CPU machines it resolves to the small CPU build (see scripts/lock.sh).
python -m pip install -q -c constraints.txt torch
python -m pip install -q -c constraints.txt -e ".[test]"
# The worked method plugin (docs/plugins.md, "Your own method"): installed as a user installs one, tested as a plugin.
python -m pip install -q -c constraints.txt -e examples/plugins/explorer-dreamlip

export GRADIO_ANALYTICS_ENABLED=False HF_HUB_DISABLE_TELEMETRY=1 HF_HUB_OFFLINE=1
# One pytest-xdist worker per core (each computes on one thread: tests/conftest.py); `-n 0` runs serially.
# worksteal: a worker that runs out of tests takes the other's queued ones, so the minutes-long jobs and
# browser tests near the end do not leave one core idle.
python -m pytest -n auto --dist worksteal "$@"
