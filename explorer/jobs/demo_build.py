"""The demo-zoo build as a background process: ``explorer zoo build-demo --background`` and ``--status``.

The build runs as its own process (own session: closing the terminal or the app does not stop it) with its
output in ``<work>/build.log``; ``<work>/build.pid`` names the process that holds the work folder while a
build runs (foreground or background), so two builds never train into the same runs. A stopped build is
resumed by running the same command again (``explorer.training.demo_zoo.build_demo`` resumes).
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time
from pathlib import Path

from explorer.core.errors import ExplorerError
from explorer.jobs import launcher

LOG_FILE, PID_FILE, STATE_FILE = "build.log", "build.pid", "build-state.json"


class BuildRunningError(ExplorerError):
    """Another build holds the work folder."""


def running(work: Path) -> int | None:
    """The pid of the build that holds ``work``, or None (a pid file left by a dead build does not count)."""
    try:
        record = json.loads((Path(work) / PID_FILE).read_text())
    except (OSError, ValueError):
        return None
    alive = launcher.process_state(record.get("pid"), record.get("ticks")) == launcher.ALIVE
    return record["pid"] if alive else None


def _refuse_if_running(work: Path) -> None:
    other = running(work)
    if other is not None and other != os.getpid():
        raise BuildRunningError(f"a demo build (pid {other}) is already running in {work}; "
                                "`explorer zoo build-demo --status` shows its progress")


@contextlib.contextmanager
def holding(work: Path):
    """Hold ``work`` for this process while the build runs; refuse when another build holds it."""
    work = Path(work)
    _refuse_if_running(work)
    work.mkdir(parents=True, exist_ok=True)
    pid_file = work / PID_FILE
    pid_file.write_text(json.dumps({"pid": os.getpid(), "ticks": launcher.start_ticks(os.getpid())}))
    try:
        yield
    finally:
        with contextlib.suppress(OSError):
            if json.loads(pid_file.read_text()).get("pid") == os.getpid():
                pid_file.unlink()


def start(work: Path, argv: list[str]) -> str:
    """Start ``explorer zoo build-demo ARGV`` in the background; returns what to tell the user."""
    work = Path(work)
    _refuse_if_running(work)
    log = work / LOG_FILE
    command = [sys.executable, "-m", "explorer.cli", "zoo", "build-demo", *argv]
    process = launcher.spawn(command, log)
    time.sleep(1.0)  # a build that cannot start (bad arguments) ends at once: say so now
    if process.poll() not in (None, 0):
        raise ExplorerError(f"the demo build stopped at once (exit {process.returncode}); see {log}")
    return (f"demo build started in the background (pid {process.pid}); log: {log}\n"
            f"progress: explorer zoo build-demo --status --work {work}; "
            "run the same command again to resume it if it stops")


def status(work: Path) -> str:
    """Whether a build runs in ``work``, the runs it has finished, and the log's last line."""
    work = Path(work)
    pid = running(work)
    lines = [f"demo build in {work}: " + (f"running (pid {pid})" if pid else "not running")]
    try:
        state = json.loads((work / STATE_FILE).read_text())
    except (OSError, ValueError):
        state = {}
    for name, done in state.get("runs", {}).items():
        if done.get("finished"):
            lines.append(f"  {name}: built, {done['steps']} steps, {done['train_seconds'] / 60:.1f} min")
    spent = sum(state.get("seconds", {}).values())
    if spent:
        lines.append(f"  wall time so far: {spent / 60:.1f} min")
    log = work / LOG_FILE
    if log.exists():
        last = _last_line(log)
        if last:
            lines.append(f"  log ({log}): {last}")
    return "\n".join(lines)


def _last_line(path: Path) -> str:
    """The last non-empty line of a log, tqdm's carriage-return updates included."""
    with open(path, "rb") as f:
        f.seek(max(0, path.stat().st_size - 4096))
        tail = f.read().decode("utf-8", "replace")
    parts = [p.strip() for p in tail.replace("\r", "\n").split("\n") if p.strip()]
    return parts[-1] if parts else ""
