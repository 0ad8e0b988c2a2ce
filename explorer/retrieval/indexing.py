"""Embedding datasets in the background, so that no request waits for it.

    indexer = Indexer()
    task = indexer.submit(EmbeddingStore(model, dataset))   # returns at once
    task.line()          # "demo-caft on synthetic (test): images 128/300"
    indexer.stop(task)   # stops between batches; what was embedded is kept (the cache resumes)

One worker thread (a daemon: quitting does not wait for it) runs one task at a time, in the order submitted (two embeddings at once would only
share the same cores); submitting a dataset that is queued or running returns the task there is.
A task that fails keeps its error for the page; the cache keeps every finished shard.
"""

from __future__ import annotations

import queue
import threading
import time
from dataclasses import dataclass, field

from explorer.retrieval.embedding_store import EmbeddingStore, StoreStatus

STATES = ("queued", "running", "done", "failed", "stopped")
KEEP_FINISHED = 64  # finished tasks remembered (their last line and status)


@dataclass
class IndexingTask:
    key: str  # the cache folder: one task per model and dataset
    title: str  # "<model> on <layout> (<split>)"
    state: str = "queued"
    phase: str = ""  # "images", "captions"
    done: int = 0
    total: int = 0
    error: str = ""
    status: StoreStatus | None = None  # when finished
    submitted: float = field(default_factory=time.time)
    finished: float | None = None
    stop_requested: threading.Event = field(default_factory=threading.Event, repr=False)

    @property
    def active(self) -> bool:
        return self.state in ("queued", "running")

    @property
    def fraction(self) -> float:
        return self.done / self.total if self.total else (1.0 if self.state == "done" else 0.0)

    def line(self) -> str:
        if self.state == "running":
            if not self.total:
                return f"{self.title}: starting"
            return f"{self.title}: embedding {self.phase} {self.done}/{self.total}"
        if self.state == "failed":
            return f"{self.title}: failed: {self.error}"
        if self.state == "done" and self.status is not None:
            return f"{self.title}: {self.status.line()}"
        return f"{self.title}: {self.state}"


class Indexer:
    def __init__(self):
        # A daemon thread, not a ThreadPoolExecutor: quitting the app must not wait for an embedding to end
        # (the cache keeps every finished shard, and the next update resumes from there).
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._tasks: dict[str, IndexingTask] = {}
        self._lock = threading.Lock()
        self._worker = threading.Thread(target=self._work, name="explorer-indexing", daemon=True)
        self._worker.start()

    def submit(self, store: EmbeddingStore) -> IndexingTask:
        """Embed what ``store`` lacks, in the background; the task already queued or running, if any."""
        key = str(store.folder)
        with self._lock:
            task = self._tasks.get(key)
            if task is not None and task.active:
                return task
            dataset = store.dataset
            task = IndexingTask(key=key, title=f"{getattr(store.model, 'name', '')} on {dataset.layout} "
                                                f"({dataset.split})")
            self._tasks[key] = task
            finished = [k for k, t in self._tasks.items() if not t.active]
            for old in finished[:-KEEP_FINISHED]:  # the page shows the latest; the rest would only grow
                del self._tasks[old]
        self._queue.put((task, store))
        return task

    def task(self, key: str) -> IndexingTask | None:
        return self._tasks.get(str(key))

    def tasks(self) -> list[IndexingTask]:
        return sorted(self._tasks.values(), key=lambda task: task.submitted)

    def stop(self, task: IndexingTask) -> None:
        task.stop_requested.set()

    def _work(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            self._run(*item)
            del item  # the store holds its model: not kept alive between tasks

    def _run(self, task: IndexingTask, store: EmbeddingStore) -> None:
        if task.stop_requested.is_set():
            task.state, task.finished = "stopped", time.time()
            return
        task.state = "running"

        def progress(done: int, total: int, phase: str) -> None:
            task.done, task.total, task.phase = done, total, phase

        try:
            task.status = store.update(progress=progress, should_stop=task.stop_requested.is_set)
            stopped = task.stop_requested.is_set() and not task.status.complete
            task.state = "stopped" if stopped else "done"
        except Exception as error:  # the page shows it; the worker goes on with the next task
            task.error = " ".join(str(error).split()) or type(error).__name__
            task.state = "failed"
        finally:
            task.finished = time.time()

    def shutdown(self, wait: bool = True) -> None:
        """Stop every task (between batches) and the worker."""
        for task in list(self._tasks.values()):
            task.stop_requested.set()
        self._queue.put(None)
        if wait:
            self._worker.join()
