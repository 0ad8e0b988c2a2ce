"""Embedding datasets in the background, so that no request waits for it.

    indexer = Indexer()
    task = indexer.submit(EmbeddingStore(model, dataset))   # returns at once
    task.line()          # "demo-caft on synthetic (test): embedding images 128/300"
    indexer.stop(task)   # stops between batches; what was embedded is kept (the cache resumes)

The app's one indexing worker (``explorer.core.background``): one task per model and dataset,
run in the order submitted. A task that fails keeps its error for the page; the cache keeps
every finished shard.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from explorer.core.background import BackgroundWorker, Task

if TYPE_CHECKING:  # the page builds its Indexer before torch is imported
    from explorer.retrieval.embedding_store import EmbeddingStore, StoreStatus


@dataclass
class IndexingTask(Task):
    @property
    def status(self) -> StoreStatus | None:
        """The store's status when finished."""
        return self.result

    def completed(self, result: StoreStatus) -> bool:
        return result.complete

    def line(self) -> str:
        if self.state == "running" and self.total:
            return f"{self.title}: embedding {self.phase} {self.done}/{self.total}"
        if self.state == "done" and self.status is not None:
            return f"{self.title}: {self.status.line()}"
        return super().line()


class Indexer(BackgroundWorker):
    def __init__(self):
        super().__init__("explorer-indexing")

    def submit(self, store: EmbeddingStore) -> IndexingTask:
        """Embed what ``store`` lacks, in the background; the task already queued or running, if any."""
        dataset = store.dataset
        task = IndexingTask(key=str(store.folder),
                            title=f"{getattr(store.model, 'name', '')} on {dataset.layout} ({dataset.split})")
        return super().submit(task, lambda task: store.update(progress=task.progress,
                                                               should_stop=task.stop_requested.is_set))
