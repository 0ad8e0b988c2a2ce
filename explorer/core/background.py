"""Long work off the request path: one worker thread, tasks with progress, a polite stop.

    worker = BackgroundWorker("explorer-indexing")
    task = worker.submit(Task(key="demo-caft/synthetic", title="demo-caft on synthetic"), job)
    task.line()        # "demo-caft on synthetic: images 128/300"
    worker.stop(task)  # asks; the job looks at ``task.stop_requested`` between its steps

``job(task)`` runs on the worker thread, reports with ``task.progress(done, total, phase)`` and
returns its result (kept in ``task.result``). It ends ``done``, ``failed`` (the error kept for
the page), or ``stopped`` when asked to stop and it either raises ``TaskStopped`` or returns
a result that ``task.completed(result)`` says is partial. Tasks run one at a time in the order
submitted: two embeddings or two generations at once would only share the same cores. The
thread is a daemon, so quitting the app never waits for a task.
"""

from __future__ import annotations

import queue
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable

STATES = ("queued", "running", "done", "failed", "stopped")
KEEP_FINISHED = 64  # finished tasks remembered (their last line and result)


class TaskStopped(Exception):
    """Raised inside a job that noticed ``task.stop_requested`` and gave up part-way."""


@dataclass
class Task:
    key: str  # one active task per key: submitting it again returns the running one
    title: str
    state: str = "queued"
    phase: str = ""
    done: int = 0
    total: int = 0
    error: str = ""
    result: Any = None
    submitted: float = field(default_factory=time.time)
    started: float | None = None
    finished: float | None = None
    stop_requested: threading.Event = field(default_factory=threading.Event, repr=False)

    @property
    def active(self) -> bool:
        return self.state in ("queued", "running")

    @property
    def fraction(self) -> float:
        return self.done / self.total if self.total else (1.0 if self.state == "done" else 0.0)

    def progress(self, done: int, total: int, phase: str = "") -> None:
        self.done, self.total, self.phase = done, total, phase

    def completed(self, result: Any) -> bool:
        """Whether a job that returned after a stop request finished its work anyway."""
        return True

    def line(self) -> str:
        if self.state == "running":
            return f"{self.title}: {self.phase} {self.done}/{self.total}" if self.total else f"{self.title}: starting"
        if self.state == "failed":
            return f"{self.title}: failed: {self.error}"
        return f"{self.title}: {self.state}"


class BackgroundWorker:
    def __init__(self, name: str):
        # A daemon thread, not a ThreadPoolExecutor: quitting must not wait for a task to end.
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._tasks: dict[str, Task] = {}
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._work, name=name, daemon=True)
        self._thread.start()

    def submit(self, task: Task, job: Callable[[Task], Any]) -> Task:
        """Run ``job(task)`` in the background; if a task with this key is active, that one is returned."""
        with self._lock:
            running = self._tasks.get(task.key)
            if running is not None and running.active:
                return running
            self._tasks[task.key] = task
            finished = [key for key, known in self._tasks.items() if not known.active]
            for old in finished[:-KEEP_FINISHED]:  # the page shows the latest; the rest would only grow
                del self._tasks[old]
        self._queue.put((task, job))
        return task

    def task(self, key: str) -> Task | None:
        return self._tasks.get(str(key))

    def tasks(self) -> list[Task]:
        return sorted(self._tasks.values(), key=lambda task: task.submitted)

    def stop(self, task: Task) -> None:
        task.stop_requested.set()

    def _work(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            self._run(*item)
            del item  # a job holds its model: not kept alive between tasks

    @staticmethod
    def _run(task: Task, job: Callable[[Task], Any]) -> None:
        if task.stop_requested.is_set():
            task.state, task.finished = "stopped", time.time()
            return
        task.state, task.started = "running", time.time()
        try:
            task.result = job(task)
            stopped = task.stop_requested.is_set() and not task.completed(task.result)
            task.state = "stopped" if stopped else "done"
        except TaskStopped:
            task.state = "stopped"
        except Exception as error:  # the page shows it; the worker goes on with the next task
            task.error = " ".join(str(error).split()) or type(error).__name__
            task.state = "failed"
        finally:
            task.finished = time.time()

    def shutdown(self, wait: bool = True) -> None:
        """Ask every task to stop (between steps) and end the worker."""
        for task in list(self._tasks.values()):
            task.stop_requested.set()
        self._queue.put(None)
        if wait:
            self._thread.join()
