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

Many processes: ``worker_command(..., processes=N)`` with N > 1 builds ``python -m
torch.distributed.run --standalone --nproc_per_node N -m explorer.jobs.worker ...`` (one rank per
GPU the queue gave, or N CPU processes with Gloo). torchrun is the process the record knows (its
pid and group); it starts each rank in a session of its own, so a SIGTERM to the run's group
reaches torchrun, which forwards it to every rank (and SIGKILLs them 30 s later). Each rank
``register_rank``s itself: it dies with torchrun (``PR_SET_PDEATHSIG``), and leaves
``<run folder>/ranks/<rank>.pid`` so that ``end_ranks`` can kill and reap whatever rank outlived
torchrun (no orphan, no zombie).
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


def worker_command(run_id: str, root: str | Path, processes: int = 1, python: str | None = None,
                   zoo_root: str | None = None) -> list[str]:
    """The run process's argv: the worker module on this interpreter, under torchrun for ``processes`` > 1."""
    python = python or sys.executable
    tail = ["-m", "explorer.jobs.worker", run_id, "--root", str(root)] + (["--zoo", zoo_root] if zoo_root else [])
    if processes > 1:
        return [python, "-u", "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", str(processes),
                *tail]
    return [python, "-u", *tail]


# ---- the ranks of a torchrun run ---------------------------------------------------------------

RANKS_DIR = "ranks"
PR_SET_PDEATHSIG = 1


def rank_and_world() -> tuple[int, int]:
    """(rank, world size) of this process as torchrun set them; (0, 1) outside torchrun."""
    try:
        return int(os.environ.get("RANK", 0)), max(1, int(os.environ.get("WORLD_SIZE", 1)))
    except ValueError:
        return 0, 1


def register_rank(out_dir: str | Path, rank: int) -> None:
    """A rank under torchrun: die when torchrun dies (Linux), and leave ``ranks/<rank>.pid`` (pid and
    start time) in the run folder for ``end_ranks``."""
    parent = os.getppid()
    if sys.platform.startswith("linux"):
        try:
            ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
        except (OSError, AttributeError):
            pass
        if os.getppid() != parent:  # torchrun died before the prctl took effect
            os._exit(1)
    folder = Path(out_dir) / RANKS_DIR
    folder.mkdir(parents=True, exist_ok=True)
    scratch = folder / f".{rank}.pid.{os.getpid()}"
    scratch.write_text(f"{os.getpid()} {start_ticks(os.getpid()) or ''}\n")
    os.replace(scratch, folder / f"{rank}.pid")


def rank_processes(out_dir: str | Path) -> list[tuple[int, int | None]]:
    """(pid, start ticks) of every rank registered in the run folder (any attempt)."""
    found = []
    folder = Path(out_dir) / RANKS_DIR
    for path in sorted(folder.glob("*.pid")) if folder.is_dir() else ():
        try:
            parts = path.read_text().split()
            found.append((int(parts[0]), int(parts[1]) if len(parts) > 1 else None))
        except (OSError, ValueError, IndexError):
            continue
    return found


def end_ranks(out_dir: str | Path, timeout: float = 5.0) -> list[int]:
    """SIGKILL every registered rank still alive (each leads its own group), wait for them, and reap
    those this process adopted. Returns the pids it had to kill."""
    killed = []
    for pid, ticks in rank_processes(out_dir):
        if ticks is None or process_state(pid, ticks) != ALIVE:
            continue
        if signal_group(pid, signal.SIGKILL) or _kill(pid):
            killed.append(pid)
    deadline = time.monotonic() + timeout
    for pid, ticks in rank_processes(out_dir):
        # a rank of a dead torchrun is adopted by the nearest subreaper (maybe this process) once it ends
        while ticks is not None and process_state(pid, ticks) != GONE and time.monotonic() < deadline:
            if reap_adopted(pid) is not None:
                break
            time.sleep(0.02)
    return killed


def _kill(pid: int) -> bool:
    try:
        os.kill(pid, signal.SIGKILL)
        return True
    except (ProcessLookupError, PermissionError):
        return False


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


__all__ = ["ALIVE", "GONE", "RANKS_DIR", "ZOMBIE", "become_subreaper", "child_environment", "end_ranks",
           "group_members", "is_our_child", "kill_leftovers", "package_root", "process_state", "rank_and_world",
           "rank_processes", "reap_adopted", "register_rank", "signal_group", "spawn", "start_ticks",
           "still_our_group", "stop_group", "wait_children", "wait_gone", "worker_command"]
