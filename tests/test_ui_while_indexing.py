"""Indexing a dataset never blocks another page: while the background indexer is in the middle of an
embedding (held there on purpose), the Grounding tab's Draw and a search of an already indexed model
answer, and the indexing then finishes."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from explorer.data import write_dataset
from explorer.data.retrieval_sets import read_retrieval_set
from explorer.grounding.sentence_maps import MapCache
from explorer.retrieval.embedding_store import EmbeddingStore
from explorer.retrieval.indexing import Indexer
from explorer.retrieval.search import Searcher
from explorer.ui import maps_tab
from explorer.zoo import Zoo

REPO = Path(__file__).resolve().parents[1]
DISPLAY = ["turbo", 0.5, "contour", True, 0.5, "map", 1, 8]


@pytest.fixture()
def world(tmp_path) -> Path:
    write_dataset(tmp_path / "world", n_scenes=8, seed=1, image_size=64, split_fractions=(0, 0, 1))
    return tmp_path / "world"


def test_pages_answer_while_an_embedding_is_under_way(world, tmp_path):
    zoo = Zoo(REPO / "checkpoints")
    dataset = read_retrieval_set(world, "test")
    ready = EmbeddingStore(zoo.load("demo-longclip"), dataset, root=tmp_path / "emb")
    ready.update()

    busy_model = Zoo(REPO / "checkpoints").load("demo-caft")  # its own object: patched below
    started, release = threading.Event(), threading.Event()
    encode = busy_model.encode_image

    def held(images, *args, **kwargs):  # the embedding stops here until the test lets it go
        started.set()
        assert release.wait(60), "the test never released the embedding"
        return encode(images, *args, **kwargs)

    busy_model.encode_image = held
    indexer = Indexer()
    task = indexer.submit(EmbeddingStore(busy_model, dataset, root=tmp_path / "emb"))
    assert started.wait(60) and task.state == "running"

    picture = tmp_path / "photo.png"
    Image.fromarray((np.random.default_rng(0).random((48, 64, 3)) * 255).astype(np.uint8)).save(picture)
    clock = time.perf_counter()
    view, *_ = maps_tab.draw(zoo.load, MapCache(), str(picture), "A cat. A dog.", ["demo-longclip"], "native", "",
                             None, *DISPLAY)
    result = Searcher(zoo.load("demo-longclip"), ready).text(dataset.captions[2], k=3)
    elapsed = time.perf_counter() - clock
    assert view is not None and len(view.models[0].maps) == 2  # Grounding answered
    assert result.truth_rank is not None  # Retrieval answered
    assert task.state == "running" and not release.is_set()  # ... while the embedding was still held
    release.set()
    deadline = time.time() + 120
    while task.active and time.time() < deadline:
        time.sleep(0.05)
    assert task.state == "done" and task.status.complete, task.line()
    assert elapsed < 60
    indexer.shutdown()
