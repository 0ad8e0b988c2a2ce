#!/usr/bin/env bash
# Install everything the test suite needs on a fresh machine, then run the whole suite.
# This is the README's test command, and what CI (.ci/run) calls.
set -euo pipefail
cd "$(dirname "$0")/.."

# Debian's packages the suite drives: Chromium for the real-browser tests (Playwright never downloads a browser
# here) and nginx for the public edge's proxy test (deploy/nginx-explorer.conf).
missing=()
command -v chromium >/dev/null 2>&1 || missing+=(chromium chromium-driver)
command -v nginx >/dev/null 2>&1 || [ -x /usr/sbin/nginx ] || missing+=(nginx-light)
if [ "${#missing[@]}" -gt 0 ]; then
  if [ "$(id -u)" = 0 ]; then
    apt-get update -qq && apt-get install -y -qq "${missing[@]}" >/dev/null
  else
    echo "note: ${missing[*]} not installed and this is not root; the tests that need them will be skipped" >&2
  fi
fi

# Every install takes its versions from the lock (constraints.txt, written by scripts/lock.sh); PIP_CONSTRAINT
# also reaches the isolated environments that build the editable installs, so setuptools is pinned there too.
export PIP_CONSTRAINT="$PWD/constraints.txt"
# The lock's pip first (26.3: these installs took 41 s with Python 3.11's bundled pip 23.2, 22 s with it), then
# torch, pinned: on CPU machines it resolves to the small CPU build (see scripts/lock.sh). --no-compile: pip
# compiles every module it installs, one at a time (70 of command 1's 130 s), where Python compiles on first
# import only the ~4,200 of ~17,500 that the app and the tests import (the suite's collection: 15 s, once;
# written below).
python -m pip install -q -c constraints.txt pip
python -m pip install -q --no-compile -c constraints.txt torch
# The test extra, and the worked method plugin (docs/plugins.md, "Your own method"), installed as a user installs
# one and tested as a plugin: one resolve for both (18 s, two calls 21 s).
python -m pip install -q --no-compile -c constraints.txt -e ".[test]" -e examples/plugins/explorer-dreamlip

export GRADIO_ANALYTICS_ENABLED=False HF_HUB_DISABLE_TELEMETRY=1 HF_HUB_OFFLINE=1
# Bytecode is written (to the ignored __pycache__ folders): with PYTHONDONTWRITEBYTECODE set, as on this
# project's CI machine, every xdist worker rewrote the assertions of all 130 test modules from source (collection
# 25 s -> 15 s a worker with the cache) and every job run, CLI child and app process the suite starts compiled
# the project again.
unset PYTHONDONTWRITEBYTECODE
# One pytest-xdist worker per core (each computes on one thread: tests/conftest.py); `-n 0` runs serially.
# worksteal: a worker that runs out of tests takes the other's queued ones, so the minutes-long jobs and
# browser tests near the end do not leave one core idle.
python -m pytest -n auto --dist worksteal "$@"
