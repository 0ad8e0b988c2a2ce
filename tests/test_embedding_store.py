"""The on-disk embedding cache (explorer/retrieval/embedding_store.py) and what it depends on
(explorer/retrieval/fingerprint.py; features_to_tensors / features_from_tensors).

Tiny worlds (6-12 pictures, 64 px) and the tiny / demo models. Every test has its own cache folder
(``root=tmp_path / "emb"``). Work is counted through a wrapper on ``model.encode_image``, so "embeds
nothing" and "embeds exactly those 3" are checked, not assumed.
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import fields
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from PIL import Image

from explorer.core.errors import ImageError
from explorer.core.files import file_stamp, write_text_atomic
from explorer.core.images import load_image
from explorer.data import write_dataset
from explorer.data.retrieval_sets import read_retrieval_set
from explorer.evaluation.runner import encode_images
from explorer.models.features import ImageFeatures, features_from_tensors, features_to_tensors
from explorer.models.methods.caft import CaftImageFeatures
from explorer.retrieval import embedding_store
from explorer.retrieval.embedding_store import INDEX_FILE, EmbeddingStore, StoreError
from explorer.retrieval.fingerprint import weights_hash
from explorer.zoo import Zoo
from explorer.core.errors import ExplorerError

REPO = Path(__file__).resolve().parents[1]


def load(name: str):
    """A model object of its own (a fresh zoo: nothing is shared with, or patched for, another test)."""
    return Zoo(REPO / "checkpoints").load(name)


def write_picture(path: Path, seed: int, size: int = 64) -> None:
    pixels = np.random.default_rng(seed).integers(0, 256, (size, size, 3), dtype=np.uint8)
    Image.fromarray(pixels).save(path)


def write_folder(root: Path, numbers) -> Path:
    """A plain folder dataset: ``<n>.png`` (random pixels) with ``<n>.txt`` (its caption) beside it."""
    root.mkdir(parents=True, exist_ok=True)
    for n in numbers:
        write_picture(root / f"{n}.png", seed=n)
        (root / f"{n}.txt").write_text(f"picture number {n}: a square of noise, the {n}th", encoding="utf-8")
    return root


def folder_set(root: Path):
    return read_retrieval_set(root, layout="folder")


def pictures_of(dataset) -> list:
    return [load_image(path).image for path in dataset.images]


class Counting:
    """Wraps ``model.encode_image``: counts calls and pictures; raises after ``fail_after`` calls."""

    def __init__(self, model, monkeypatch, fail_after: int | None = None):
        self.calls = self.pictures = 0
        self.fail_after = fail_after
        original = model.encode_image

        def encode(images, *args, **kwargs):
            if self.fail_after is not None and self.calls >= self.fail_after:
                raise RuntimeError("killed")
            self.calls += 1
            self.pictures += len(images)
            return original(images, *args, **kwargs)

        monkeypatch.setattr(model, "encode_image", encode)


def update_again(model, dataset, folder: Path, counter: Counting, done: int) -> EmbeddingStore:
    """A new store over the cache in ``folder``: it finds ``done`` pictures embedded, then embeds the rest
    (counted afresh by ``counter``)."""
    store = EmbeddingStore(model, dataset, root=folder)
    assert store.status().images_done == done
    counter.calls = counter.pictures = 0
    assert store.update().complete
    return store


def refuse(*args, **kwargs):
    raise AssertionError("nothing should be embedded")


def assert_same_features(got, want) -> None:
    assert type(got) is type(want)
    for f in fields(want):
        a, b = getattr(got, f.name), getattr(want, f.name)
        if torch.is_tensor(b):
            assert torch.equal(a, b), f.name
        elif isinstance(b, tuple) and b and torch.is_tensor(b[0]):
            assert isinstance(a, tuple) and len(a) == len(b), f.name
            assert all(torch.equal(x, y) for x, y in zip(a, b)), f.name
        else:
            assert a == b, f.name
    assert tuple(got.grid_hw) == tuple(want.grid_hw)


@pytest.fixture(scope="module")
def world(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("world")
    write_dataset(root, n_scenes=12, seed=0, image_size=64)
    return root


@pytest.fixture(scope="module", autouse=True)
def one_thread():
    """Tiny models: one torch thread per test worker (two workers on two cores do not fight)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture
def small_shards(monkeypatch):
    monkeypatch.setattr(embedding_store, "SHARD_IMAGES", 4)
    monkeypatch.setattr(embedding_store, "IMAGE_BATCH", 2)


# ---- 1-2: exact round trip, reuse ------------------------------------------------------------------


@pytest.mark.parametrize("name", ["tiny-untrained", "demo-clip-base", "demo-caft"])
def test_round_trip_is_exact_and_reused(world, tmp_path, monkeypatch, name):
    model = load(name)
    dataset = read_retrieval_set(world, split="train")
    assert dataset.layout == "synthetic" and len(dataset.images) >= 6
    store = EmbeddingStore(model, dataset, root=tmp_path / "emb")
    status = store.update()
    assert status.complete and status.images_done == len(dataset.images)
    assert status.captions_done == status.captions_total == len(set(dataset.captions))

    want = encode_images(model, pictures_of(dataset), 32)
    got = store.image_features()
    assert_same_features(got, want)
    if name == "demo-caft":
        assert isinstance(got, CaftImageFeatures) and isinstance(got.assignments, tuple) and got.assignments
    vectors = store.image_vectors()
    assert torch.allclose(vectors.norm(dim=-1), torch.ones(len(dataset.images)), atol=1e-5)
    assert torch.equal(vectors, F.normalize(want.cls.float(), dim=-1))
    subset = store.image_features([4, 0, 2])
    assert_same_features(subset, want[torch.as_tensor([4, 0, 2])])
    assert_same_features(store.image_features([]), want[torch.as_tensor([], dtype=torch.long)])
    assert store.image_vectors([]).shape == (0, want.cls.shape[1])

    captions = store.caption_vectors()
    expected = F.normalize(model.encode_text(list(dataset.captions)).eot.float(), dim=-1)
    assert captions.shape == expected.shape
    assert torch.allclose(captions, expected, atol=1e-5)
    assert torch.equal(store.caption_vectors([2, 0]), captions[[2, 0]])
    assert store.caption_vectors([]).shape == (0, captions.shape[1])

    # A second store object on the same model and dataset embeds nothing and reads the same.
    monkeypatch.setattr(model, "encode_image", refuse)
    monkeypatch.setattr(model, "encode_text", refuse)
    again = EmbeddingStore(model, dataset, root=tmp_path / "emb")
    assert again.folder == store.folder
    assert again.status().complete
    status = again.update()
    assert status.complete and status.notes == []
    assert torch.equal(again.image_vectors(), vectors)
    assert torch.equal(again.caption_vectors(), captions)


# ---- 3: incremental ----------------------------------------------------------------------------------


def test_update_embeds_only_new_and_changed_pictures(tmp_path, monkeypatch):
    model = load("tiny-untrained")
    root = write_folder(tmp_path / "pics", range(6))
    store = EmbeddingStore(model, folder_set(root), root=tmp_path / "emb")
    counter = Counting(model, monkeypatch)
    store.update()
    assert counter.pictures == 6
    before = store.image_vectors()

    write_folder(root, range(6, 9))
    dataset = folder_set(root)
    assert len(dataset.images) == 9
    store = update_again(model, dataset, tmp_path / "emb", counter, done=6)
    assert counter.pictures == 3
    after = store.image_vectors()
    assert torch.equal(after[:6], before)
    new = encode_images(model, pictures_of(dataset)[6:], 32)
    assert torch.equal(after[6:], F.normalize(new.cls.float(), dim=-1))

    changed = root / "2.png"
    stat = changed.stat()
    write_picture(changed, seed=1000, size=48)  # other pixels, another size
    os.utime(changed, ns=(stat.st_atime_ns, stat.st_mtime_ns + 5_000_000_000))
    assert changed.stat().st_size != stat.st_size
    dataset = folder_set(root)
    store = update_again(model, dataset, tmp_path / "emb", counter, done=8)
    assert counter.pictures == 1
    final = store.image_vectors()
    assert not torch.allclose(final[2], after[2])
    assert torch.equal(final[2:3], F.normalize(model.encode_image([load_image(changed).image]).cls.float(), dim=-1))
    keep = [i for i in range(9) if i != 2]
    assert torch.equal(final[keep], after[keep])


# ---- 4-5: kills, orphans, a torn index ---------------------------------------------------------------


def test_resumes_after_a_kill_and_drops_orphan_shards(tmp_path, monkeypatch, small_shards):
    model = load("tiny-untrained")
    dataset = folder_set(write_folder(tmp_path / "pics", range(11)))
    store = EmbeddingStore(model, dataset, root=tmp_path / "emb")
    counter = Counting(model, monkeypatch, fail_after=5)  # 2 shards of 4 written, the 5th batch pending: lost
    with pytest.raises(RuntimeError, match="killed"):
        store.update()
    index = json.loads((store.folder / INDEX_FILE).read_text(encoding="utf-8"))
    named = [shard["file"] for shard in index["images"]]
    assert len(named) == 2 and all((store.folder / file).is_file() for file in named)
    assert not list(store.folder.glob(".*.tmp"))
    assert EmbeddingStore(model, dataset, root=tmp_path / "emb").status().images_done == 8

    counter.fail_after, counter.calls, counter.pictures = None, 0, 0
    store = EmbeddingStore(model, dataset, root=tmp_path / "emb")
    assert store.update().complete
    assert counter.pictures == 3
    want = encode_images(model, pictures_of(dataset), 2)  # the store's batches: 2 at a time, in order
    assert_same_features(store.image_features(), want)
    assert_same_features(store.image_features([9, 0, 5, 4]), want[torch.as_tensor([9, 0, 5, 4])])

    # A shard the index does not name (a kill between the shard's rename and the index's) goes.
    orphan = store.folder / "images-000099.safetensors"
    orphan.write_bytes(os.urandom(300))
    reader = EmbeddingStore(model, dataset, root=tmp_path / "emb")
    assert_same_features(reader.image_features(), want)  # never read
    counter.calls = 0
    assert reader.update().complete
    assert counter.calls == 0 and not orphan.exists()
    assert_same_features(EmbeddingStore(model, dataset, root=tmp_path / "emb").image_features(), want)


def test_kill_between_shard_and_index_leaves_a_readable_cache(tmp_path, monkeypatch, small_shards):
    model = load("tiny-untrained")
    dataset = folder_set(write_folder(tmp_path / "pics", range(9)))
    store = EmbeddingStore(model, dataset, root=tmp_path / "emb")
    real_write, writes = embedding_store.write_text_atomic, []

    def write_index(path, text):
        writes.append(path)
        if len(writes) == 2:
            raise RuntimeError("killed")
        return real_write(path, text)

    monkeypatch.setattr(embedding_store, "write_text_atomic", write_index)
    with pytest.raises(RuntimeError, match="killed"):
        store.update()
    monkeypatch.setattr(embedding_store, "write_text_atomic", real_write)
    assert (store.folder / "images-000001.safetensors").is_file()  # written, never indexed
    reader = EmbeddingStore(model, dataset, root=tmp_path / "emb")
    assert reader.status().images_done == 4
    counter = Counting(model, monkeypatch)
    assert reader.update().complete
    assert counter.pictures == 5
    assert_same_features(reader.image_features(), encode_images(model, pictures_of(dataset), 2))


def test_a_files_stamp_changes_when_it_is_rewritten(tmp_path):
    file = tmp_path / "index.json"
    assert file_stamp(file) is None
    write_text_atomic(file, "{}")
    first = file_stamp(file)
    assert first == file_stamp(file) and first[2] == 2
    write_text_atomic(file, "{}")  # the same text, even within one mtime tick: another file
    assert file_stamp(file) != first


@pytest.mark.parametrize("garbage", ['{"key": {"format": "explorer-emb', "[]"])
def test_torn_index_is_noted_and_rebuilt(tmp_path, monkeypatch, garbage):
    model = load("tiny-untrained")
    dataset = folder_set(write_folder(tmp_path / "pics", range(6)))
    store = EmbeddingStore(model, dataset, root=tmp_path / "emb")
    store.update()
    vectors = store.image_vectors()
    (store.folder / INDEX_FILE).write_text(garbage, encoding="utf-8")

    counter = Counting(model, monkeypatch)
    fresh = EmbeddingStore(model, dataset, root=tmp_path / "emb")
    assert not fresh.status().complete
    status = fresh.update()
    assert status.complete
    assert any("could not be read" in note for note in status.notes)
    assert len(status.notes) == 1
    assert counter.pictures == 6
    assert torch.equal(fresh.image_vectors(), vectors)
    json.loads((store.folder / INDEX_FILE).read_text(encoding="utf-8"))


# ---- 6-7: a cache written by another model, another version, other weights ---------------------------


def test_cache_of_another_model_under_the_same_name_is_rebuilt(tmp_path, monkeypatch):
    dataset = folder_set(write_folder(tmp_path / "pics", range(6)))
    x, y = load("demo-clip-base"), load("demo-flair")
    a = EmbeddingStore(x, dataset, root=tmp_path / "a")
    a.update()
    x_vectors = a.image_vectors()

    y.name = x.name  # another model under the same name: the folder is the same
    b = EmbeddingStore(y, dataset, root=tmp_path / "b")
    assert b.folder.name == a.folder.name
    shutil.copytree(a.folder, b.folder)  # a folder copied from elsewhere
    assert any("another model" in note for note in b.status().notes)
    with pytest.raises(StoreError):
        b.image_vectors()  # never read as if it were y's
    counter = Counting(y, monkeypatch)
    status = b.update()
    assert status.complete and counter.pictures == 6
    assert any("another model" in note and "method" in note for note in status.notes)
    y_vectors = F.normalize(encode_images(y, pictures_of(dataset), 32).cls.float(), dim=-1)
    assert torch.equal(b.image_vectors(), y_vectors)
    assert not torch.allclose(y_vectors, x_vectors, atol=1e-3)
    index = json.loads((b.folder / INDEX_FILE).read_text(encoding="utf-8"))
    assert index["key"]["model"]["method"] == y.method.name


def test_cache_of_another_version_is_rebuilt(tmp_path, monkeypatch):
    model = load("tiny-untrained")
    dataset = folder_set(write_folder(tmp_path / "pics", range(6)))
    store = EmbeddingStore(model, dataset, root=tmp_path / "emb")
    store.update()
    file = store.folder / INDEX_FILE
    index = json.loads(file.read_text(encoding="utf-8"))
    index["key"]["version"] = 0
    file.write_text(json.dumps(index), encoding="utf-8")

    counter = Counting(model, monkeypatch)
    again = EmbeddingStore(model, dataset, root=tmp_path / "emb")
    status = again.update()
    assert status.complete and counter.pictures == 6
    assert any("older or other version" in note for note in status.notes)
    assert json.loads(file.read_text(encoding="utf-8"))["key"]["version"] == embedding_store.VERSION


def test_changed_weights_invalidate_the_cache(tmp_path, monkeypatch):
    dataset = folder_set(write_folder(tmp_path / "pics", range(6)))
    first = load("demo-clip-base")
    store = EmbeddingStore(first, dataset, root=tmp_path / "emb")
    store.update()
    before = store.image_vectors()

    second = load("demo-clip-base")  # the same checkpoint, loaded again: same hash, cache reused
    assert second is not first and weights_hash(second) == weights_hash(first)
    counter = Counting(second, monkeypatch)
    assert EmbeddingStore(second, dataset, root=tmp_path / "emb").update().complete and counter.calls == 0
    third = load("demo-clip-base")  # ... and again, with one parameter changed
    with torch.no_grad():
        dict(third.method.named_parameters())["visual.proj"].add_(0.05)
    assert weights_hash(third) != weights_hash(first)

    counter = Counting(third, monkeypatch)
    other = EmbeddingStore(third, dataset, root=tmp_path / "emb")
    assert other.folder == store.folder
    status = other.update()
    assert status.complete and counter.pictures == 6
    assert any("another model (differs in weights)" in note for note in status.notes)
    after = other.image_vectors()
    assert not torch.allclose(after, before, atol=1e-4)
    assert torch.equal(after, F.normalize(encode_images(third, pictures_of(dataset), 32).cls.float(), dim=-1))


# ---- 8: unreadable pictures ----------------------------------------------------------------------------


def test_unreadable_pictures_are_recorded_dropped_and_not_retried(tmp_path, monkeypatch):
    model = load("tiny-untrained")
    root = write_folder(tmp_path / "pics", range(6))
    (root / "2bad.png").write_bytes(np.random.default_rng(5).integers(0, 256, 500, dtype=np.uint8).tobytes())
    (root / "2bad.txt").write_text("a corrupt picture", encoding="utf-8")
    (root / "4empty.png").write_bytes(b"")
    (root / "4empty.txt").write_text("an empty picture", encoding="utf-8")
    dataset = folder_set(root)
    assert [p.name for p in dataset.images] == ["0.png", "1.png", "2.png", "2bad.png", "3.png", "4.png",
                                                "4empty.png", "5.png"]
    counter = Counting(model, monkeypatch)
    store = EmbeddingStore(model, dataset, root=tmp_path / "emb")
    status = store.update()
    assert status.complete and status.images_done == 6 and counter.pictures == 6
    assert sorted(Path(f.item).name for f in status.failed) == ["2bad.png", "4empty.png"]
    assert all(Path(f.item).is_absolute() or Path(f.item).exists() for f in status.failed)  # named as the set names it
    assert all(f.reason for f in status.failed)

    usable = store.usable_set()
    assert [p.name for p in usable.images] == ["0.png", "1.png", "2.png", "3.png", "4.png", "5.png"]
    assert "a corrupt picture" not in usable.captions and "an empty picture" not in usable.captions
    assert len(usable.captions) == 6 and list(usable.caption_image) == list(range(6))
    assert [usable.captions[i] for i in usable.caption_image] == [dataset.captions[i] for i in (0, 1, 2, 4, 5, 7)]
    unreadable = {Path(s.item).name: s.reason for s in usable.skipped if s.reason.startswith("image unreadable")}
    assert set(unreadable) == {"2bad.png", "4empty.png"}
    reader = EmbeddingStore(model, usable, root=tmp_path / "emb")
    assert reader.folder == store.folder
    vectors = reader.image_vectors()
    assert torch.equal(vectors, F.normalize(encode_images(model, pictures_of(usable), 32).cls.float(), dim=-1))
    assert torch.equal(store.image_vectors(), vectors)  # reading counts in the usable set
    assert torch.equal(store.image_vectors([3, 0]), vectors[[3, 0]])
    assert torch.equal(reader.caption_vectors(), store.caption_vectors())
    assert reader.caption_vectors().shape[0] == 6
    # a dataset picture's number, in the usable set (search and the per-query records count there)
    assert [store.usable_index(n) for n in (0, 2, 4, 7)] == [0, 2, 3, 5]
    for n, what in ((3, "could not be read"), (6, "could not be read"), (8, "no picture #8"), (-1, "no picture")):
        with pytest.raises(ImageError, match=what):
            store.usable_index(n)

    counter.calls = counter.pictures = 0
    again = EmbeddingStore(model, dataset, root=tmp_path / "emb")
    status = again.update()
    assert counter.calls == 0 and status.complete and len(status.failed) == 2

    # ... until the file changes: a repaired picture is embedded.
    write_picture(root / "2bad.png", seed=77)
    status = EmbeddingStore(model, folder_set(root), root=tmp_path / "emb").update()
    assert counter.pictures == 1 and [Path(f.item).name for f in status.failed] == ["4empty.png"]


# ---- 9-11: stopping, reading too early, progress -------------------------------------------------------


def test_stop_keeps_what_was_done_and_a_later_update_finishes(tmp_path, monkeypatch, small_shards):
    model = load("tiny-untrained")
    dataset = folder_set(write_folder(tmp_path / "pics", range(8)))
    counter = Counting(model, monkeypatch)
    store = EmbeddingStore(model, dataset, root=tmp_path / "emb")
    status = store.update(should_stop=lambda: counter.calls >= 1)
    assert 0 < status.images_done < status.images_total == 8
    assert status.images_done == 2 and not status.complete
    assert EmbeddingStore(model, dataset, root=tmp_path / "emb").status().images_done == 2

    status = EmbeddingStore(model, dataset, root=tmp_path / "emb").update()
    assert status.complete and counter.pictures == 8
    assert_same_features(store.image_features(), encode_images(model, pictures_of(dataset), 2))


def test_reading_before_indexing_says_to_index(tmp_path):
    model = load("tiny-untrained")
    store = EmbeddingStore(model, folder_set(write_folder(tmp_path / "pics", range(6))), root=tmp_path / "emb")
    for read in (store.image_vectors, store.image_features, store.caption_vectors):
        with pytest.raises(StoreError, match="run the indexing"):
            read()
    assert not store.status().complete and store.status().images_done == 0


def test_progress_reports_images_then_captions(tmp_path, monkeypatch, small_shards):
    model = load("tiny-untrained")
    dataset = folder_set(write_folder(tmp_path / "pics", range(7)))
    calls = []
    EmbeddingStore(model, dataset, root=tmp_path / "emb").update(progress=lambda *a: calls.append(a))
    kinds = [kind for _, _, kind in calls]
    images = [(d, t) for d, t, kind in calls if kind == "images"]
    captions = [(d, t) for d, t, kind in calls if kind == "captions"]
    assert images and captions
    assert kinds == ["images"] * len(images) + ["captions"] * len(captions)
    assert images[0] == (0, 7) and images[-1] == (7, 7) and len(images) > 2
    assert [d for d, _ in images] == sorted(d for d, _ in images)
    assert captions[-1] == (7, 7)


def test_progress_totals_count_this_datasets_captions(tmp_path):
    """A caption edited after indexing: the totals are the dataset's, not the index's history."""
    model = load("tiny-untrained")
    root = write_folder(tmp_path / "pics", range(6))
    EmbeddingStore(model, folder_set(root), root=tmp_path / "emb").update()
    (root / "3.txt").write_text("an edited caption", encoding="utf-8")
    calls = []
    status = EmbeddingStore(model, folder_set(root), root=tmp_path / "emb").update(
        progress=lambda *a: calls.append(a))
    assert status.captions_done == status.captions_total == 6
    assert [c for c in calls if c[2] == "captions"] == [(5, 6, "captions"), (6, 6, "captions")]  # its start, its end


def test_environment_home_places_the_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("EXPLORER_HOME", str(tmp_path / "home"))
    model = load("tiny-untrained")
    store = EmbeddingStore(model, folder_set(write_folder(tmp_path / "pics", range(6))))
    assert store.folder.parent == tmp_path / "home" / "embeddings"
    assert store.update().complete and (store.folder / INDEX_FILE).is_file()


# ---- 12: stored features name explorer's classes only ---------------------------------------------------


def test_features_round_trip_and_refuse_foreign_classes():
    features = CaftImageFeatures(cls=torch.randn(2, 4), patches=torch.randn(2, 6, 4), grid_hw=(2, 3), fine=None,
                                 assignments=(torch.rand(2, 3, 6), torch.rand(2, 2, 3)))
    tensors, metadata = features_to_tensors(features)
    back = features_from_tensors(tensors, metadata)
    assert type(back) is CaftImageFeatures and back.fine is None and back.grid_hw == (2, 3)
    assert all(torch.equal(a, b) for a, b in zip(back.assignments, features.assignments))

    for name in ("builtins:dict", "os:system", "explorer.core.paths:Path", "explorer.modelsx.features:ImageFeatures"):
        with pytest.raises(ExplorerError):
            features_from_tensors(tensors, {**metadata, "class": name})
    with pytest.raises(ExplorerError):  # inside the package, but not a features class
        features_from_tensors(tensors, {**metadata, "class": "explorer.models.model:Model"})

    class Foreign(ImageFeatures):  # a features class defined outside explorer.models
        pass

    tensors, metadata = features_to_tensors(Foreign(cls=torch.zeros(1, 2), patches=torch.zeros(1, 1, 2),
                                                    grid_hw=(1, 1)))
    with pytest.raises(ExplorerError):
        features_from_tensors(tensors, metadata)


# ---- several store objects (processes) on one cache folder ----------------------------------------------


def test_a_reader_sees_what_another_store_wrote(tmp_path, monkeypatch, small_shards):
    model = load("tiny-untrained")
    root = write_folder(tmp_path / "pics", range(8))
    dataset = folder_set(root)
    reader = EmbeddingStore(model, dataset, root=tmp_path / "emb")
    with pytest.raises(StoreError):
        reader.image_vectors()
    writer = EmbeddingStore(model, dataset, root=tmp_path / "emb")
    writer.update()
    assert reader.status().complete
    assert torch.equal(reader.image_vectors(), writer.image_vectors())


def test_a_cache_rebuilt_by_another_store_is_read_afresh(tmp_path, monkeypatch, small_shards):
    """Shards rewritten under the same names (another store rebuilt the folder) are never served
    from an earlier read: a picture's vector stays its own."""
    model = load("tiny-untrained")
    root = write_folder(tmp_path / "pics", range(0, 12, 2))
    dataset = folder_set(root)
    first = EmbeddingStore(model, dataset, root=tmp_path / "emb")
    first.update()
    before = first.image_vectors()  # its shards are now held in memory

    write_folder(root, range(1, 6, 2))  # new pictures sort between the old ones
    (first.folder / INDEX_FILE).write_text("torn", encoding="utf-8")
    other = EmbeddingStore(model, folder_set(root), root=tmp_path / "emb")
    assert other.update().complete  # rebuilt: images-000000... now hold other pictures at other rows
    first.update()  # nothing to embed: the rebuilt cache holds every picture
    assert torch.equal(first.image_vectors(), before)
