"""Starting, watching and stopping run processes: each run is its own process group.

    command = worker_command(run_id, jobs_root, gpus=1)  # python -u -m explorer.jobs.worker RUN_ID --root ...
    process = spawn(command, log_path, devices=[0])     # own session and process group, output to the log
    process_state(pid, start_ticks)                       # "alive", "zombie" or "gone"
    stop_group(pgid, pid, grace_s=30)                     # SIGTERM to the group, SIGKILL after the grace

- ``spawn`` starts the process in a new session (``setsid``): it leads its own process group, so a
  signal to the group reaches it and every process it started (data loader workers), and nothing
  sent to the app's group (Ctrl-C, the terminal closing) reaches it. Its stdin is /dev/null and
  its stdout and stderr are appended to the run's log. ``CUDA_VISIBLE_DEVICES`` is set to the GPUs
  the queue gave it ("" for a CPU run: it sees no GPU).
- The parent reaps: ``spawn`` hands each child to a thread that waits for it and calls
  ``on_exit(returncode, pid)`` (-N for a death by signal N), so no zombie is left while the parent
  lives. A process that outlives its parent is adopted by the nearest subreaper; a manager that
  calls ``become_subreaper()`` (Linux) adopts its runs' orphans and reaps them in ``reap_adopted``
  (plain PID 1 in some containers reaps nothing).
- A pid alone does not identify a process (pids are reused): ``process_state`` also compares the
  start time the kernel gives (``/proc/<pid>/stat``), recorded at spawn.

Many GPUs: ``worker_command(..., gpus=N)`` with N > 1 builds ``torchrun --standalone
--nproc_per_node N -m explorer.jobs.worker ...``. The training loop runs under torchrun with DDP
(``explorer.training.ddp``; tested with ``explorer train`` on 2 CPU processes), but the worker is
not rank-aware yet (every rank would write the record, evaluate and publish; rank 0 would record its
own pid over torchrun's; GOAL's pair mining would run on every rank), so the manager still refuses
such runs and this command stays untested.
"""

from __future__ import annotations

import ctypes
import errno
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Callable, Sequence

ALIVE, ZOMBIE, GONE = "alive", "zombie", "gone"
PR_SET_CHILD_SUBREAPER = 36

_children: dict[int, subprocess.Popen] = {}  # pid -> Popen of the runs this process started and still waits on
_children_lock = threading.Lock()


def package_root() -> Path:
    """The folder that holds the ``explorer`` package (put on the child's PYTHONPATH)."""
    return Path(__file__).resolve().parents[2]


def worker_command(run_id: str, root: str | Path, gpus: int = 0, python: str | None = None,
                   zoo_root: str | None = None) -> list[str]:
    """The run process's argv: the worker module on this interpreter (torchrun for gpus > 1: untested)."""
    python = python or sys.executable
    tail = ["-m", "explorer.jobs.worker", run_id, "--root", str(root)] + (["--zoo", zoo_root] if zoo_root else [])
    if gpus > 1:
        return [python, "-u", "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", str(gpus), *tail]
    return [python, "-u", *tail]


def child_environment(devices: Sequence[str] | None, extra: dict | None = None) -> dict:
    env = dict(os.environ)
    env["CUDA_VISIBLE_DEVICES"] = ",".join(str(d) for d in devices or ())
    env["PYTHONUNBUFFERED"] = "1"
    root = str(package_root())
    parts = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    env["PYTHONPATH"] = os.pathsep.join([root, *[p for p in parts if p != root]])
    env.update(extra or {})
    return env


def spawn(command: Sequence[str], log_path: str | Path, devices: Sequence[str] | None = None,
          cwd: str | Path | None = None, env: dict | None = None,
          on_exit: Callable[[int, int], None] | None = None) -> subprocess.Popen:
    """Start ``command`` as the leader of a new session and process group; the parent reaps it and calls
    ``on_exit(returncode, pid)`` (-N: killed by signal N)."""
    log_path = Path(log_path)
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab", buffering=0) as log:
        process = subprocess.Popen(list(command), stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                   cwd=str(cwd) if cwd else None, env=child_environment(devices, env),
                                   start_new_session=True, close_fds=True)
    with _children_lock:
        _children[process.pid] = process
    threading.Thread(target=_reap, args=(process, on_exit), name=f"reap-{process.pid}", daemon=True).start()
    return process


def _reap(process: subprocess.Popen, on_exit: Callable[[int, int], None] | None) -> None:
    returncode = process.wait()
    with _children_lock:
        _children.pop(process.pid, None)
    if on_exit is not None:
        try:
            on_exit(returncode, process.pid)
        except Exception as error:  # noqa: BLE001 - a thread must not die with a traceback on stderr
            print(f"explorer.jobs: recording the end of process {process.pid} failed: {error}", file=sys.stderr)


def is_our_child(pid: int) -> bool:
    """True while this process's reaper thread waits on ``pid`` (reconcile leaves it to that thread)."""
    with _children_lock:
        return pid in _children


def wait_children(timeout: float | None = None) -> bool:
    """Wait until every child this process started has been reaped; False on timeout."""
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        with _children_lock:
            if not _children:
                return True
        if deadline is not None and time.monotonic() > deadline:
            return False
        time.sleep(0.05)


def become_subreaper() -> bool:
    """Make this process adopt its orphaned descendants (Linux prctl); False where not possible."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def reap_adopted(pid: int) -> int | None:
    """Reap ``pid`` if it is an exited child of this process that no reaper thread waits on (an adopted
    orphan); its return code (-N for signal N), or None when it is not ours or still running."""
    if is_our_child(pid):
        return None
    try:
        done, status = os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        return None
    if done == 0:
        return None
    return -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)


# ---- looking at processes ----------------------------------------------------------------------


def start_ticks(pid: int) -> int | None:
    """The process's start time in clock ticks since boot (Linux), or None where unknown."""
    stat = _stat_fields(pid)
    return int(stat[19]) if stat and len(stat) > 19 else None


def _stat_fields(pid: int) -> list[str] | None:
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # the command name (field 2) is in parentheses and may hold spaces: split after its last ')'
    return text[text.rfind(")") + 2:].split()  # [state, ppid, pgrp, ...]: field 3 of stat is index 0


def process_state(pid: int | None, ticks: int | None = None) -> str:
    """"alive", "zombie" (exited, not yet reaped) or "gone"; a pid now used by another process is "gone"."""
    if not pid:
        return GONE
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return GONE
    except PermissionError:
        pass  # someone else's process: it exists
    stat = _stat_fields(pid)
    if stat is None:
        return ALIVE if not Path("/proc").is_dir() else GONE
    if ticks is not None and len(stat) > 19 and int(stat[19]) != ticks:
        return GONE
    return ZOMBIE if stat[0] in ("Z", "X") else ALIVE


def group_members(pgid: int) -> list[int]:
    """Pids of the processes in process group ``pgid`` that are not zombies (Linux /proc)."""
    found = []
    proc = Path("/proc")
    if not proc.is_dir():
        return found
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        stat = _stat_fields(int(entry.name))
        if stat and len(stat) > 2 and int(stat[2]) == pgid and stat[0] not in ("Z", "X"):
            found.append(int(entry.name))
    return found


def signal_group(pgid: int | None, sig: int) -> bool:
    """Send ``sig`` to the whole group; False when no process of it is left."""
    if not pgid:
        return False
    try:
        os.killpg(pgid, sig)
        return True
    except ProcessLookupError:
        return False
    except PermissionError as error:
        if error.errno == errno.EPERM:
            return False
        raise


def still_our_group(pgid: int | None, ticks: int | None) -> bool:
    """False when ``pgid`` now names another process's group: a live process with that pid started at
    another time than the run's leader (Linux never gives out a pid still used as a group id, so a
    group whose leader died keeps its id while any member lives)."""
    if not pgid:
        return False
    now = start_ticks(pgid)
    return now is None or ticks is None or now == ticks


def kill_leftovers(pgid: int | None, ticks: int | None) -> bool:
    """SIGKILL what is left of a run's process group (its data workers, say) once its leader is gone.
    Nothing is sent when a live process holds the leader's pid and its start time is unknown."""
    if pgid and ticks is None and start_ticks(pgid) is not None:
        return False
    return still_our_group(pgid, ticks) and signal_group(pgid, signal.SIGKILL)


def stop_group(pgid: int | None, pid: int | None, ticks: int | None = None, grace_s: float = 30.0,
               poll_s: float = 0.05) -> str:
    """SIGTERM to the group, wait up to ``grace_s`` for its leader to end, then SIGKILL whatever is left.

    Returns "exited" (it ended within the grace), "killed" (SIGKILL was needed) or "gone" (nothing ran).
    """
    if not still_our_group(pgid, ticks) or (process_state(pid, ticks) == GONE and not group_members(pgid)):
        return "gone"
    signal_group(pgid, signal.SIGTERM)
    if wait_gone(pid, ticks, grace_s, poll_s):
        kill_leftovers(pgid, ticks)  # stragglers of the group (a leader that ended leaves none normally)
        return "exited"
    kill_leftovers(pgid, ticks)
    wait_gone(pid, ticks, 10.0, poll_s)
    return "killed"


def wait_gone(pid: int | None, ticks: int | None, timeout: float, poll_s: float = 0.05) -> bool:
    """Wait until the process is no longer alive (exited: zombie or gone); False on timeout."""
    deadline = time.monotonic() + timeout
    while process_state(pid, ticks) == ALIVE:
        if time.monotonic() > deadline:
            return False
        time.sleep(poll_s)
    return True


__all__ = ["ALIVE", "GONE", "ZOMBIE", "become_subreaper", "child_environment", "group_members", "is_our_child",
           "kill_leftovers", "package_root", "process_state", "reap_adopted", "signal_group", "spawn", "start_ticks",
           "still_our_group", "stop_group", "wait_children", "wait_gone", "worker_command"]
