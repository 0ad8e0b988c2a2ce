"""The on-disk embedding cache of one model on one dataset: embedded once, reused, extended.

    store = EmbeddingStore(model, read_retrieval_set("data/urban1k"))
    store.update(progress=print)            # embeds what is not there yet; resumable
    vectors = store.image_vectors()         # [n_images, d] unit vectors, in the set's order
    features = store.image_features([3, 7]) # the method's full ImageFeatures of those images

Layout (open formats: safetensors shards and one JSON index)::

    $EXPLORER_HOME/embeddings/<model name>-<dataset hash>/
        index.json                  what was embedded, by whom (``key``), and where
        images-000000.safetensors   every field of the method's ImageFeatures, for up to 256 pictures
        captions-000000.safetensors the global (EOT) embedding of up to 1024 captions

- Keyed: ``index.json`` holds the model key (``fingerprint.model_key``: weights hash, method, config,
  preprocessing, context length, precision), the dataset (layout, root, split) and the format
  version. A folder whose key differs (another checkpoint under the same name, an older version, a
  folder copied from elsewhere) is detected, said in ``notes``, and rebuilt: never reused.
- Incremental: a picture is known by its path under the dataset root with its size and mtime, a
  caption by its text's hash; ``update`` embeds only what is new or changed.
- Resumable and atomic: each shard is written to a temporary file and renamed, then the index is
  rewritten the same way. A kill loses at most the shard being filled; a shard the index does not
  name (the kill came between the two renames) is deleted on the next update.
- Unreadable pictures are recorded with the reason (and not retried until the file changes);
  ``usable_set`` is the dataset without them, which is what search and Recall@K run on.
- Pictures are encoded 32 at a time in the set's order, as ``explorer eval`` encodes them, so the
  synthetic world's numbers are the same from both.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

import torch
import torch.nn.functional as F
from safetensors import safe_open
from safetensors.torch import save_file

from explorer.core import paths
from explorer.core.cache import MB, BoundedCache
from explorer.core.errors import ExplorerError, ImageError
from explorer.core.files import atomic_path, exclusive_lock, file_stamp, write_text_atomic
from explorer.core.images import load_image
from explorer.core.prefetch import prefetched
from explorer.data.retrieval_sets import RetrievalSet
from explorer.data.retrieval_sets.base import Skipped
from explorer.models.features import concat_features, features_from_tensors, features_to_tensors
from explorer.retrieval.fingerprint import model_key, short_hash

FORMAT = "explorer-embeddings"
VERSION = 1
INDEX_FILE = "index.json"
IMAGE_BATCH = 32  # pictures per forward pass: explorer eval's DEFAULT_IMAGE_BATCH
CAPTION_BATCH = 64
SHARD_IMAGES = 256  # pictures per shard file: what a kill can lose at most
SHARD_CAPTIONS = 1024
UNREADABLE = "image unreadable"  # the reason a picture that could not be decoded is left out
_SHARD = re.compile(r"^(images|captions)-\d{6}\.safetensors$")

Progress = Callable[[int, int, str], None]  # (done, total, "images" | "captions")


class StoreError(ExplorerError):
    """The embedding cache cannot be used (e.g. its folder cannot be written)."""


@dataclass
class StoreStatus:
    folder: Path
    images_total: int
    images_done: int
    captions_total: int
    captions_done: int
    failed: list[Skipped] = field(default_factory=list)  # pictures that could not be read, with why
    bytes_on_disk: int = 0
    notes: list[str] = field(default_factory=list)

    @property
    def complete(self) -> bool:
        return (self.images_done + len(self.failed) >= self.images_total
                and self.captions_done >= self.captions_total)

    def line(self) -> str:
        text = (f"{self.images_done}/{self.images_total} images, {self.captions_done}/{self.captions_total} "
                f"captions embedded ({self.bytes_on_disk / MB:.1f} MB at {self.folder})")
        if self.failed:
            text += f"; {len(self.failed)} unreadable"
        return text


def embeddings_root() -> Path:
    return paths.home() / "embeddings"


class EmbeddingStore:
    def __init__(self, model, dataset: RetrievalSet, root: str | Path | None = None):
        self.model, self.dataset = model, dataset
        self.key = {"format": FORMAT, "version": VERSION, "model": model_key(model),
                    "dataset": {"layout": dataset.layout, "root": str(Path(dataset.root).resolve()),
                                "split": dataset.split}}
        name = re.sub(r"[^A-Za-z0-9._-]+", "-", getattr(model, "name", "") or model.method.name).strip("-")
        self.folder = Path(root or embeddings_root()) / f"{name}-{short_hash(self.key['dataset'])}"
        self.notes: list[str] = []
        self._index: dict | None = None
        self._index_stamp: tuple | None = None  # the index file as last read or written here
        self._usable: tuple | None = None  # (index it was made from, failures then, the usable set)
        self._shards = BoundedCache(f"embedding shards ({name})", max_bytes=256 * MB)
        self._part: tuple[int, int] | None = None  # (rank, world) inside update_part

    # ---- what is there ---------------------------------------------------------------------------

    def status(self) -> StoreStatus:
        index = self._read_index()
        images, failed = self._image_locations(index), self._failures(index)
        captions = self._caption_locations(index)
        paths = {tuple(self._item(path)): str(path) for path in self.dataset.images}
        wanted = list(paths)
        hashes = {_text_hash(c) for c in self.dataset.captions}
        size = sum(p.stat().st_size for p in self.folder.glob("*.safetensors")) if self.folder.is_dir() else 0
        return StoreStatus(
            folder=self.folder, images_total=len(wanted),
            images_done=sum(1 for item in wanted if item in images),
            captions_total=len(hashes), captions_done=len(hashes & set(captions)),
            failed=[Skipped(paths[item], failed[item]) for item in wanted if item in failed],
            bytes_on_disk=size, notes=list(self.notes))

    def index_stamp(self) -> tuple | None:
        """The cache index file's identity on disk (``file_stamp``): it changes whenever anything is added
        to the cache, here or by another store or process; None while there is none."""
        return file_stamp(self.folder / INDEX_FILE)

    def usable_set(self) -> RetrievalSet:
        """The dataset without the pictures that could not be read (each listed in ``skipped``)."""
        index = self._read_index()
        if self._usable is not None and self._usable[0] is index and len(index["failed"]) == self._usable[1]:
            return self._usable[2]
        usable = self._without_unreadable(index)
        self._usable = (index, len(index["failed"]), usable)
        return usable

    def _without_unreadable(self, index: dict) -> RetrievalSet:
        failed = self._failures(index)
        drop = {i: failed[tuple(self._item(p))] for i, p in enumerate(self.dataset.images)
                if tuple(self._item(p)) in failed}
        return self.dataset.keep_images((i for i in range(len(self.dataset.images)) if i not in drop),
                                        skipped=[Skipped(str(self.dataset.images[i]), f"{UNREADABLE}: {why}")
                                                 for i, why in drop.items()])

    def usable_index(self, n: int) -> int:
        """Picture ``n`` of the dataset (its own order, 0-based) as an index into ``usable_set()`` (what
        search and the per-query records count in); an ``ImageError`` when the dataset has no picture
        ``n`` or it could not be read when the dataset was embedded."""
        images = self.dataset.images
        if not 0 <= n < len(images):
            raise ImageError(f"there is no picture #{n}: the dataset has {len(images)} (#0 to #{len(images) - 1})")
        usable = self.usable_set()
        if usable is self.dataset:
            return n
        try:
            return usable.images.index(images[n])
        except ValueError:
            raise ImageError(f"picture #{n} ({images[n]}) could not be read when the dataset was embedded "
                             "(see `explorer index`)") from None

    # ---- embedding -------------------------------------------------------------------------------

    def update(self, progress: Progress | None = None, should_stop: Callable[[], bool] | None = None) -> StoreStatus:
        """Embed every picture and caption of the dataset that the cache does not hold yet."""
        should_stop = should_stop or (lambda: False)
        with self._locked():
            self._index = None  # another process may have added shards
            index = self._read_index(fresh_if_stale=True)
            self._remove_orphans(index)
            self._embed_images(index, progress, should_stop)
            if not should_stop():
                self._embed_captions(index, progress, should_stop)
        return self.status()

    def update_part(self, rank: int, world: int, progress: Progress | None = None,
                    should_stop: Callable[[], bool] | None = None) -> StoreStatus:
        """This process's share of ``update`` when ``world`` processes fill one cache together (torchrun).

        The set is cut in the batches ``update`` encodes (``IMAGE_BATCH`` pictures, ``CAPTION_BATCH``
        captions, in the set's order) and rank r takes batches r, r + world, ...: on an empty cache every
        picture is encoded in the same batch as by one process, so the vectors are the same. Encoding runs
        without the lock; each shard is then written under it and appended to the index as it is on disk
        then (``_write_shard``), so the ranks' shards end up in one index. The caller waits for every
        rank (a barrier) before reading: the cache is complete only once all have written."""
        if not 0 <= rank < world:
            raise ValueError(f"rank {rank} is not one of {world} processes")
        should_stop = should_stop or (lambda: False)
        with self._locked():
            self._index = None
            index = self._read_index(fresh_if_stale=True)
            self._remove_orphans(index)
            if not index["images"] and not index["captions"] and not index["failed"]:
                self._write_index(index)  # the key on disk first: a rank that reads it later finds it current
        self._part = (rank, world)
        try:
            self._embed_images(index, progress, should_stop)
            if not should_stop():
                self._embed_captions(index, progress, should_stop)
        finally:
            self._part = None
        return self.status()

    def _mine(self, position: int, batch: int) -> bool:
        """Whether item ``position`` of the set is this process's to embed (always, outside ``update_part``)."""
        return self._part is None or (position // batch) % self._part[1] == self._part[0]

    def _embed_images(self, index: dict, progress: Progress | None, should_stop) -> None:
        known = self._image_locations(index)
        failed = self._failures(index)
        todo = [(i, self._item(p)) for i, p in enumerate(self.dataset.images) if self._mine(i, IMAGE_BATCH)
                and tuple(self._item(p)) not in known and tuple(self._item(p)) not in failed]
        done, total = len(self.dataset.images) - len(todo), len(self.dataset.images)
        if progress:
            progress(done, total, "images")
        pending: list = []  # (item, features of one batch)
        batches = [todo[start:start + IMAGE_BATCH] for start in range(0, len(todo), IMAGE_BATCH)]
        for batch, (pictures, items, broken) in prefetched(batches, self._read_batch):  # next batch decoded meanwhile
            if should_stop():
                break
            index["failed"].extend(broken)
            if pictures:
                pending.append((items, self.model.encode_image(pictures)))
            if sum(len(items) for items, _ in pending) >= SHARD_IMAGES:
                self._write_image_shard(index, pending)
                pending = []
            done += len(batch)
            if progress:
                progress(done, total, "images")
        if pending:
            self._write_image_shard(index, pending)
        elif index["failed"] and self._part is None:
            self._write_index(index)
        elif index["failed"]:
            self._write_shared(index, None, {})

    def _read_batch(self, batch) -> tuple[list, list, list]:
        """(pictures, their items, failure records) of a batch of (position, item): the decode half, run ahead."""
        pictures, items, failed = [], [], []
        for i, item in batch:
            try:
                pictures.append(load_image(self.dataset.images[i]).image)
                items.append(item)
            except Exception as error:  # a corrupt or vanished picture: recorded, the rest goes on
                failed.append([*item, _reason(error)])
        return pictures, items, failed

    def _embed_captions(self, index: dict, progress: Progress | None, should_stop) -> None:
        known = set(self._caption_locations(index))
        todo, seen = [], set()
        for caption in self.dataset.captions:
            digest = _text_hash(caption)
            if digest not in seen:
                seen.add(digest)
                if digest not in known and self._mine(len(seen) - 1, CAPTION_BATCH):
                    todo.append((digest, caption))
        total = len({_text_hash(c) for c in self.dataset.captions})  # as ``status`` counts them
        done = total - len(todo)
        if progress:
            progress(done, total, "captions")
        for start in range(0, len(todo), SHARD_CAPTIONS):
            if should_stop():
                break
            chunk = todo[start:start + SHARD_CAPTIONS]
            vectors = []
            for first in range(0, len(chunk), CAPTION_BATCH):
                texts = [caption for _, caption in chunk[first:first + CAPTION_BATCH]]
                vectors.append(F.normalize(self.model.encode_text(texts).eot.float().cpu(), dim=-1))
                done += len(texts)
                if progress:
                    progress(done, total, "captions")
                if should_stop():
                    chunk = chunk[:first + CAPTION_BATCH]
                    break
            self._write_shard(index, "captions", {"global": torch.cat(vectors)}, {}, [d for d, _ in chunk])

    def _write_image_shard(self, index: dict, pending: list) -> None:
        features = concat_features([f for _, f in pending])
        tensors, metadata = features_to_tensors(features)
        self._write_shard(index, "images", tensors, metadata, [item for items, _ in pending for item in items])

    def _write_shard(self, index: dict, kind: str, tensors: dict, metadata: dict, items: list) -> None:
        if self._part is not None:
            self._write_shared(index, kind, {"tensors": tensors, "metadata": metadata, "items": items})
            return
        name = f"{kind}-{len(index[kind]):06d}.safetensors"
        with atomic_path(self.folder / name) as temporary:
            save_file(tensors, str(temporary), metadata=metadata)
        index[kind].append({"file": name, "items": items})
        self._write_index(index)

    def _write_shared(self, index: dict, kind: str | None, shard: dict) -> None:
        """``update_part``'s write: under the lock, the shard (if any) is appended to the index as another
        rank may have left it, with this rank's unreadable pictures; ``index`` (this rank's view) keeps
        only its own additions, which is all it needs to know what is left to do."""
        with self._locked():
            disk = self._read_index()
            if kind is not None:
                name = f"{kind}-{len(disk[kind]):06d}.safetensors"
                with atomic_path(self.folder / name) as temporary:
                    save_file(shard["tensors"], str(temporary), metadata=shard["metadata"])
                disk[kind].append({"file": name, "items": shard["items"]})
                if index is not disk:  # the same object while no other rank has written since
                    index[kind].append({"file": name, "items": shard["items"]})
            disk["failed"] += [entry for entry in index["failed"] if entry not in disk["failed"]]
            self._write_index(disk)

    # ---- reading ---------------------------------------------------------------------------------

    # Reading: ``indices`` count in ``usable_set()`` (the dataset less its unreadable pictures), which
    # is the dataset itself when every picture could be read.

    def image_vectors(self, indices: Sequence[int] | None = None) -> torch.Tensor:
        """[n, d] float32 unit vectors of the set's pictures (all of them, in order, or ``indices``)."""
        return F.normalize(self._gather("images", indices, ("cls",))["cls"].float(), dim=-1)

    def image_features(self, indices: Sequence[int] | None = None):
        """The method's full ``ImageFeatures`` of the set's pictures (all, in order, or ``indices``)."""
        return self._gather("images", indices, None)

    def caption_vectors(self, indices: Sequence[int] | None = None) -> torch.Tensor:
        """[n, d] float32 unit vectors of the set's captions (all, in order, or ``indices``)."""
        index = self._read_index()
        locations = self._caption_locations(index)
        captions = self.usable_set().captions
        order = range(len(captions)) if indices is None else indices
        wanted = [_text_hash(captions[i]) for i in order]
        missing = [h for h in wanted if h not in locations]
        if missing:
            raise StoreError(f"{len(missing)} captions are not embedded yet; run the indexing first")
        return self._rows("captions", [locations[h] for h in wanted], ("global",))["global"]

    def _gather(self, kind: str, indices, names):
        locations = self._image_locations(self._read_index())
        images = self.usable_set().images
        order = range(len(images)) if indices is None else indices
        wanted = []
        for i in order:
            item = tuple(self._item(images[i]))
            if item not in locations:
                raise StoreError(f"{images[i]} is not embedded yet; run the indexing first")
            wanted.append(locations[item])
        rows = self._rows(kind, wanted, names)
        return rows if names else features_from_tensors(rows, self._shard_metadata(wanted))

    def _rows(self, kind: str, locations: list[tuple[str, int]], names) -> dict[str, torch.Tensor]:
        """The rows at (shard file, row) ``locations``, in that order, of every tensor (or of ``names``)."""
        if not locations:  # none asked for: no rows, shaped as a shard's (the first one)
            shards = self._read_index()[kind]
            if not shards:
                raise StoreError(f"no {kind} are embedded yet; run the indexing first")
            return {name: tensor[:0] for name, tensor in self._shard(shards[0]["file"]).items()
                    if names is None or name in names}
        by_file: dict[str, list[int]] = {}
        for position, (file, _) in enumerate(locations):
            by_file.setdefault(file, []).append(position)
        parts: dict[str, list] = {}
        order: list[int] = []
        for file, positions in by_file.items():
            tensors = self._shard(file)
            rows = torch.as_tensor([locations[p][1] for p in positions])
            for name, tensor in tensors.items():
                if names is None or name in names:
                    parts.setdefault(name, []).append(tensor[rows])
            order += positions
        inverse = torch.empty(len(order), dtype=torch.long)
        inverse[torch.as_tensor(order, dtype=torch.long)] = torch.arange(len(order))
        if not parts:
            return {}
        return {name: torch.cat(chunks)[inverse] for name, chunks in parts.items()}

    def _shard(self, file: str) -> dict[str, torch.Tensor]:
        def read():
            with safe_open(str(self.folder / file), framework="pt") as handle:
                return {name: handle.get_tensor(name) for name in handle.keys()}
        # Keyed by the file's identity too: a shard rewritten under the same name (the folder rebuilt by
        # another store or process) is read again, never served from an earlier read.
        return self._shards.get((file, file_stamp(self.folder / file)), read)

    def _shard_metadata(self, locations) -> dict[str, str]:
        file = locations[0][0] if locations else self._read_index()["images"][0]["file"]
        with safe_open(str(self.folder / file), framework="pt") as handle:
            return handle.metadata()

    # ---- the index -------------------------------------------------------------------------------

    def _item(self, path: Path) -> list:
        """A picture's identity: its path under the dataset root, size and mtime (a changed file is new)."""
        path = Path(path)
        try:
            stat = path.stat()
            size, mtime = stat.st_size, stat.st_mtime_ns
        except OSError:
            size, mtime = -1, -1
        try:
            name = str(path.resolve().relative_to(Path(self.dataset.root).resolve()))
        except ValueError:
            name = str(path.resolve())
        return [name, size, mtime]

    @staticmethod
    def _image_locations(index: dict) -> dict[tuple, tuple[str, int]]:
        # Later shards win: a changed picture's new embedding replaces its old one.
        return {tuple(item): (shard["file"], row) for shard in index["images"]
                for row, item in enumerate(shard["items"])}

    @staticmethod
    def _caption_locations(index: dict) -> dict[str, tuple[str, int]]:
        return {digest: (shard["file"], row) for shard in index["captions"] for row, digest in enumerate(shard["items"])}

    @staticmethod
    def _failures(index: dict) -> dict[tuple, str]:
        return {tuple(entry[:3]): entry[3] for entry in index["failed"]}

    def _read_index(self, fresh_if_stale: bool = False) -> dict:
        file = self.folder / INDEX_FILE
        stamp = self.index_stamp()
        if self._index is not None and stamp == self._index_stamp:
            return self._index  # unchanged since read or written here (another store may write it too)
        self._index_stamp = stamp
        empty = {"key": self.key, "images": [], "captions": [], "failed": []}
        if stamp is None:
            self._index = empty
            return empty
        try:
            index = json.loads(file.read_text(encoding="utf-8"))
            if not isinstance(index, dict):
                raise ValueError(f"a JSON {type(index).__name__}, not an object")
            stale = index.get("key") != self.key
        except (OSError, ValueError) as error:
            index, stale = None, True
            note = f"the cache index at {file} could not be read ({error}); it is rebuilt"
            if note not in self.notes:
                self.notes.append(note)
        if stale:
            reason = _stale_reason(index.get("key") or {}, self.key, file) if index is not None else None
            if reason and reason not in self.notes:
                self.notes.append(reason)
            if fresh_if_stale:
                self._clear()
            self._index = empty
            return empty
        self._index = index
        return index

    def _write_index(self, index: dict) -> None:
        write_text_atomic(self.folder / INDEX_FILE, json.dumps(index))
        self._index, self._index_stamp = index, self.index_stamp()

    def _clear(self) -> None:
        for path in self.folder.glob("*.safetensors"):
            if _SHARD.match(path.name):
                path.unlink(missing_ok=True)
        (self.folder / INDEX_FILE).unlink(missing_ok=True)
        self._shards.clear()

    def _remove_orphans(self, index: dict) -> None:
        for temporary in self.folder.glob(".*.tmp"):  # a kill mid-write (atomic_path cleans up only on errors)
            temporary.unlink(missing_ok=True)
        named = {shard["file"] for kind in ("images", "captions") for shard in index[kind]}
        for path in self.folder.glob("*.safetensors"):
            if _SHARD.match(path.name) and path.name not in named:
                path.unlink(missing_ok=True)  # written before a kill, never indexed
                self._shards.discard(lambda key, name=path.name: key[0] == name)

    def _locked(self):
        """One writer per cache folder, across threads and processes (``flock``)."""
        return exclusive_lock(self.folder / ".lock", StoreError, f"the embedding cache at {self.folder}")


def _text_hash(text: str) -> str:
    return hashlib.blake2b(text.encode("utf-8"), digest_size=12).hexdigest()


def _reason(error: Exception) -> str:
    return " ".join(str(error).split())[:300] or type(error).__name__


def _stale_reason(found: dict, wanted: dict, file: Path) -> str:
    if found.get("format") != FORMAT or found.get("version") != VERSION:
        what = f"an older or other version ({found.get('format')} v{found.get('version')}, this is v{VERSION})"
    elif found.get("model") != wanted.get("model"):
        changed = sorted(k for k in wanted["model"] if (found.get("model") or {}).get(k) != wanted["model"][k])
        what = f"another model (differs in {', '.join(changed)})"
    else:
        what = "another dataset"
    return f"the embedding cache at {file.parent} was written by {what}: not reused, embedding again"


__all__ = ["EmbeddingStore", "StoreError", "StoreStatus", "embeddings_root"]
