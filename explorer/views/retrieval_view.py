"""Retrieval on the page, without Gradio: which dataset, whether each model has embedded it, a query's
top k per model, the Recall table, its export, and the queries each model got most wrong.

    dataset = open_dataset(SYNTHETIC)                       # made on first use: the demo models' world
    indexer.submit(store_for(model, dataset))               # the embedding runs in the background
    found = search(zoo.load, ["demo-caft"], dataset, "a red cube ...", k=10)
    gallery_items(found[0])                                 # [(thumbnail, "#1 · 0.873 · ✓ truth · A red...")]
    evaluation.add("demo-caft", *evaluate_model(model, store))
    export_results(evaluation, folder)                      # recall.csv, results.json

Picture numbers count in the dataset's own order (what the query gallery shows). Hits count in the
model's usable set (``EmbeddingStore.usable_set``: the dataset less the pictures it could not read),
which is the dataset itself unless a picture was unreadable; ``ModelSearch`` keeps that set.
The embedding, search and scoring modules (torch) are imported by the first request that needs them:
the page is built before torch is imported.
"""

from __future__ import annotations

import json
import logging
import os
import weakref
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterable, Sequence

from PIL import Image

from explorer.core import paths
from explorer.core.cache import MB, BoundedCache
from explorer.core.errors import CaptionError, ExplorerError, InputError
from explorer.core.files import copy_by_content, file_stamp, write_text_atomic
from explorer.core.images import load_image
from explorer.data import read_dataset
from explorer.data.errors import DatasetError
from explorer.data.retrieval_sets import RetrievalSet, detect, read_retrieval_set
from explorer.data.store import ensure_dataset
from explorer.evaluation.results import DEFAULT_LIMIT
from explorer.grounding.truth import save_scene_truth, truth_path
from explorer.training.demo_world import DEMO_SEED, IMAGE_SIZE
from explorer.views.settings import MAX_MODELS

if TYPE_CHECKING:
    from explorer.retrieval.embedding_store import EmbeddingStore
    from explorer.retrieval.indexing import Indexer
    from explorer.retrieval.search import SearchResult

log = logging.getLogger("explorer.views")

# The default dataset: the first 300 test scenes of the demo world (seed 0, 64 px), exactly the scenes
# `explorer eval` scores (its default --limit), so the Recall table repeats zoo_research/results/demo-eval.json.
# Writing it takes about a second; embedding it takes about 10 s per demo model on 2 cores.
SYNTHETIC = "synthetic"  # the picker's value for it
SYNTHETIC_SCENES, SYNTHETIC_SPLIT = DEFAULT_LIMIT, "test"
DEFAULT_SPLIT = "default"  # the picker's value for "the layout's own default split"
KS = (1, 5, 10)  # the Recall@K the table shows (the long-caption papers report these)
THUMB_SIDE = 192  # pixels on the long side of a gallery picture
QUERY_PICTURES = 60  # dataset pictures offered in the query gallery (any other by its number)
CAPTION_CHARS = 110  # a caption in a table cell: the rest is in the exported JSON


class NotIndexed(ExplorerError):
    """A model has not embedded the dataset (completely) yet."""


# ---- datasets ------------------------------------------------------------------------------------


def datasets_root() -> Path:
    return paths.datasets_dir()


def synthetic_root() -> Path:
    return datasets_root() / "synthetic"


def ensure_synthetic(root: Path | None = None) -> Path:
    """The default dataset's folder, written the first time (``ensure_dataset``: beside it and renamed
    into place, so a reader, or a second app, never sees half of it)."""
    return ensure_dataset(root or synthetic_root(), SYNTHETIC_SCENES, seed=DEMO_SEED, image_size=IMAGE_SIZE,
                          split_fractions={SYNTHETIC_SPLIT: 1.0}, what="the synthetic dataset")


DEMO_BUILD = "demo-build"  # the picker's value for the demo build's world


def offered_datasets() -> dict[str, Path]:
    """value -> folder of the datasets the picker offers besides the synthetic default: the demo-build world
    when there is one, and every folder under ``$EXPLORER_HOME/datasets`` that a layout reads. Values are
    names, not paths: the page (and its ``/config``) never shows the server's folders."""
    candidates = [(DEMO_BUILD, paths.demo_build_dir() / "data")]
    if datasets_root().is_dir():
        candidates += sorted((p.name, p) for p in datasets_root().iterdir()
                             if p.is_dir() and not p.name.startswith("."))
    return {value: folder for value, folder in candidates if folder != synthetic_root() and folder.is_dir()}


def dataset_choices() -> list[tuple[str, str]]:
    """(label, value) for the dataset picker: the synthetic default, then ``offered_datasets`` a layout reads."""
    choices = [(f"synthetic world: {SYNTHETIC_SCENES} {SYNTHETIC_SPLIT} scenes at {IMAGE_SIZE} px "
                f"(the demo models' world)", SYNTHETIC)]
    for value, folder in offered_datasets().items():
        try:
            choices.append((f"{folder.name} ({detect(folder)})", value))
        except DatasetError:
            continue  # not a dataset: not offered
    return choices


DATASETS = BoundedCache("retrieval datasets (lists of pictures and captions)", max_items=8, max_bytes=256 * MB)


def open_dataset(choice: str | None, folder: str | None = "", split: str | None = DEFAULT_SPLIT) -> RetrievalSet:
    """The dataset picked (``SYNTHETIC``, or a path), or the folder typed (which wins when given).

    Read again when the folder changes (its own files: an index rewritten, a caption edited, a picture
    added), else reused: a large index file is not parsed on every click."""
    typed = (folder or "").strip()
    root = Path(typed).expanduser() if typed else ensure_synthetic() if choice in (None, "", SYNTHETIC) \
        else offered_datasets().get(str(choice)) or Path(choice)
    if not root.exists():
        raise DatasetError(f"no dataset at {root}: the path does not exist")
    wanted = None if split in (None, "", DEFAULT_SPLIT) else str(split).strip()
    try:
        key = (str(root.resolve()), wanted, _folder_stamp(root))
        return DATASETS.get(key, lambda: read_retrieval_set(root, wanted))
    except OSError as error:  # e.g. a folder this user may not read
        raise DatasetError(f"cannot read the dataset at {root}: {error}") from error


def _folder_stamp(root: Path) -> tuple:
    if root.is_file():
        return file_stamp(root)
    with os.scandir(root) as entries:
        return root.stat().st_mtime_ns, max((e.stat().st_mtime_ns for e in entries if e.is_file()), default=0)


def dataset_lines(dataset: RetrievalSet) -> list[str]:
    """What the page says about a dataset: its size, what was left out and why, the reader's choices."""
    lines = [dataset.summary()]
    lines += [f"left out: {item.item}: {item.reason}" for item in dataset.skipped[:3]]
    if len(dataset.skipped) > 3:
        lines.append(f"... and {len(dataset.skipped) - 3} more left out")
    return lines + list(dataset.notes)


def picture_label(dataset: RetrievalSet, index: int) -> str:
    return dataset.image_ids[index] if dataset.image_ids else Path(dataset.images[index]).stem


GALLERY_CAPTION_CHARS = 60  # a gallery label's caption start: the thumbnail's one line shows its first words


def caption_start(dataset: RetrievalSet, index: int) -> str:
    """What a gallery label names a picture by: the start of its first caption (its id when it has none), so the
    one line under a thumbnail reads "#0 · A large red cube…", not "#0 · tes…"."""
    captions = dataset.captions_of(index)
    if not captions:
        return picture_label(dataset, index)
    return shorten(dataset.captions[captions[0]], GALLERY_CAPTION_CHARS)


def query_pictures(dataset: RetrievalSet, limit: int = QUERY_PICTURES) -> list[tuple[Image.Image, str]]:
    """The first pictures of the dataset, to click as a query: (thumbnail, "#n · its caption's start")."""
    return [(thumbnail(dataset.images[n]), f"#{n} · {caption_start(dataset, n)}")
            for n in range(min(limit, len(dataset.images)))]


def caption_of(dataset: RetrievalSet, number) -> str:
    """The first caption of picture ``number`` (dataset order), e.g. to search with it as text."""
    return dataset.captions[dataset.captions_of(_picture_number(dataset, number))[0]]


def _picture_number(dataset: RetrievalSet, number) -> int:
    try:
        n = int(number)
    except (TypeError, ValueError):
        raise InputError(f"the picture number must be a whole number, not {number!r}") from None
    if not 0 <= n < len(dataset.images):
        raise InputError(f"there is no picture #{n}: the dataset has {len(dataset.images)} (#0 to "
                         f"#{len(dataset.images) - 1})")
    return n


THUMBNAILS = BoundedCache("retrieval thumbnails", max_bytes=64 * MB)


def thumbnail(path: Path) -> Image.Image:
    """A small copy for the galleries (read with the safe reader; a grey square when unreadable)."""
    stamp = file_stamp(path)  # a rewritten picture is read again
    try:
        if stamp is not None:
            return THUMBNAILS.get((str(path), stamp), lambda: load_image(path, max_side=THUMB_SIDE).image)
    except (OSError, ExplorerError):
        pass
    return Image.new("RGB", (THUMB_SIDE // 2, THUMB_SIDE // 2), (128, 128, 128))


# ---- embedding stores and indexing -----------------------------------------------------------------

# One store per model object and dataset object, so their shard caches serve every query; a model
# reloaded by the zoo (or a dataset read again) replaces its store, which lets the old model go.
# A store holds its model, so at most one per model on the page: the models themselves are the zoo's (its
# cache holds as many), and a store's own shard cache is bounded in bytes.
STORES = BoundedCache("retrieval embedding stores", max_items=MAX_MODELS, sizeof=lambda store: 0)


def store_for(model, dataset: RetrievalSet) -> EmbeddingStore:
    name, place = getattr(model, "name", ""), (str(dataset.root), dataset.split)
    # The store holds the model and the dataset, so their ids name them for as long as the entry lives.
    key = (name, id(model), place, id(dataset))
    from explorer.retrieval.embedding_store import EmbeddingStore

    STORES.discard(lambda k: k[0] == name and k[2] == place and k != key)
    return STORES.get(key, lambda: EmbeddingStore(model, dataset))


@dataclass
class IndexLine:
    name: str
    state: str  # "ready", "not indexed", "queued", "running", "failed", "stopped", "error"
    text: str
    fraction: float = 0.0

    @property
    def active(self) -> bool:
        return self.state in ("queued", "running")


def index_lines(load: Callable, names: Sequence[str], dataset: RetrievalSet, indexer: Indexer) -> list[IndexLine]:
    """Where each model stands on the dataset: being embedded (with progress), ready, or not yet."""
    lines = []
    for name in names:
        try:
            store = store_for(load(name), dataset)
        except Exception as error:  # noqa: BLE001 - one model that does not load is said, the rest go on
            lines.append(IndexLine(name, "error", f"cannot load: {error}"))
            continue
        task = indexer.task(str(store.folder))
        if task is not None and task.state != "done":
            lines.append(task_line(name, task))
            continue
        status = store.status()
        text = status.line() + "".join(f"; {note}" for note in status.notes)
        lines.append(IndexLine(name, "ready" if status.complete else "not indexed",
                               text if status.complete else f"not indexed yet ({text})",
                               1.0 if status.complete else _share(status)))
    return lines


def task_line(name: str, task) -> IndexLine:
    """One background task as a status line (progress while it runs, the cache when done)."""
    text = task.line().split(": ", 1)[-1]
    if task.state == "running":
        text = f"{text} ({100 * task.fraction:.0f}%)" if task.total else "starting (loading the cache)"
    return IndexLine(name, task.state if task.state != "done" else "ready", text, task.fraction)


def _share(status) -> float:
    total = status.images_total + status.captions_total
    return (status.images_done + status.captions_done) / total if total else 0.0


def submit_indexing(load: Callable, names: Sequence[str], dataset: RetrievalSet, indexer: Indexer) -> list[tuple]:
    """Queue the embedding of the dataset by each model; [(name, task key)] (a model that does not load
    is skipped: ``index_lines`` says why)."""
    _check_models(names)
    if not dataset.images:
        raise DatasetError(f"{dataset.summary()}: nothing to embed")
    submitted = []
    for name in names:
        try:
            model = load(name)
        except ExplorerError:
            continue
        submitted.append((name, indexer.submit(store_for(model, dataset)).key))
    return submitted


def ready_store(model, dataset: RetrievalSet, indexer: Indexer | None = None) -> EmbeddingStore:
    """The model's store, when it has embedded the whole dataset; else ``NotIndexed`` saying where it is."""
    name = getattr(model, "name", "the model")
    store = store_for(model, dataset)
    task = indexer.task(str(store.folder)) if indexer is not None else None
    if task is not None and task.active:
        raise NotIndexed(f"{name} is still embedding the dataset ({task.phase or task.state} {task.done}/"
                         f"{task.total}); try again when the status says it is done.")
    status = store.status()
    if not status.complete:
        raise NotIndexed(f"{name} has not embedded this dataset yet ({status.images_done}/{status.images_total} "
                         f"images, {status.captions_done}/{status.captions_total} captions): click Index first.")
    return store


def _check_models(names: Sequence[str]) -> None:
    if not names:
        raise InputError("Pick at least one model.")
    if len(names) > MAX_MODELS:
        raise InputError(f"Compare at most {MAX_MODELS} models at once.")


# ---- one query, every model -------------------------------------------------------------------------


@dataclass
class ModelSearch:
    name: str
    result: SearchResult | None = None
    dataset: RetrievalSet | None = None  # the usable set that the hits' indices count in
    error: Exception | None = None  # why this model has no result (not indexed, does not load)
    notes: list[str] = field(default_factory=list)  # about the model's cache


def search(load: Callable, names: Sequence[str], dataset: RetrievalSet, query, k: int = 10,
           indexer: Indexer | None = None) -> list[ModelSearch]:
    """The top ``k`` of each model for ``query``: a text, a dataset picture's number (an int) or a PIL
    picture. A model that cannot answer (not indexed, does not load) gets its reason, not the others'."""
    _check_models(names)
    if isinstance(query, str) and not query.strip():
        raise CaptionError("The query is empty: type a caption, or pick a picture to search with.")
    if not dataset.images:
        raise DatasetError(f"{dataset.summary()}: there is nothing to search")
    if isinstance(query, int):
        query = _picture_number(dataset, query)
    k = max(1, int(k or 10))
    from explorer.retrieval.search import Searcher

    found = []
    for name in names:
        try:
            store = ready_store(load(name), dataset, indexer)
            searcher = Searcher(store.model, store)
            if isinstance(query, str):
                result = searcher.text(query, k)
            elif isinstance(query, int):
                result = searcher.image(store.usable_index(query), k)
            else:
                result = searcher.image(query, k)
            found.append(ModelSearch(name, result, searcher.dataset, notes=list(store.notes)))
        except (ExplorerError, ValueError) as error:
            found.append(ModelSearch(name, error=error))
    return found


def header_line(found: ModelSearch) -> str:
    """Model, score, where the truth landed, time and notes, in one line (Markdown)."""
    if found.result is None:
        return f"**{found.name}**: {found.error}"
    result = found.result
    parts = [f"**{found.name}**", result.score_label, truth_text(result),
             f"{result.ranked} of {result.gallery} ranked by the score", f"{result.seconds:.2f} s"]
    return " · ".join(parts) + "".join(f"\n- {note}" for note in [*result.notes, *found.notes])


def truth_text(result: SearchResult) -> str:
    if result.truth_rank is None:
        return ("no truth: the query is not one of the dataset's captions" if result.direction == "t2i"
                else "no truth: the picture is not one of the dataset's")
    if not result.truth_in_shortlist:
        return f"truth past the shortlist: rank {result.truth_rank} by global cosine"
    return f"truth at rank {result.truth_rank}"


def gallery_items(found: ModelSearch) -> list[tuple[Image.Image, str]]:
    """A text query's pictures for ``gr.Gallery``: (thumbnail, "#1 · 0.873 · ✓ truth · <caption's start>")."""
    if found.result is None or found.result.direction != "t2i":
        return []
    return [(thumbnail(found.dataset.images[hit.index]),
             f"#{rank} · {hit.score:.3f}" + (" · ✓ truth" if hit.is_truth else "")
             + f" · {caption_start(found.dataset, hit.index)}") for rank, hit in enumerate(found.result.hits, 1)]


CAPTION_COLUMNS = ["rank", "score", "truth", "caption", "its picture"]


def caption_rows(found: ModelSearch) -> list[list]:
    """A picture query's captions: rank, score, truth mark, the caption (shortened), its own picture."""
    if found.result is None or found.result.direction != "i2t":
        return []
    usable = found.dataset
    return [[rank, round(hit.score, 4), "✓ truth" if hit.is_truth else "", shorten(usable.captions[hit.index]),
             picture_label(usable, usable.caption_image[hit.index])] for rank, hit in enumerate(found.result.hits, 1)]


def shorten(text: str, limit: int = CAPTION_CHARS) -> str:
    return text if len(text) <= limit else text[:limit - 1].rstrip() + "…"


def read_upload(path) -> Image.Image:
    """An uploaded query picture, through the safe reader (a corrupt file is an ``ImageError``)."""
    if not path:
        raise InputError("Upload a picture, or pick one of the dataset's.")
    return load_image(str(path)).image


# ---- Recall@K over the dataset -----------------------------------------------------------------------

_EVALUATIONS: "weakref.WeakKeyDictionary[EmbeddingStore, dict]" = weakref.WeakKeyDictionary()


def evaluate_model(model, store: EmbeddingStore, ks: Sequence[int] = KS) -> tuple[dict, RetrievalSet]:
    """``evaluate_retrieval``'s entry and the usable set it counted in; kept with the store until its
    cache changes, so evaluating again (another model added) only runs the new model."""
    from explorer.evaluation.retrieval import evaluate_retrieval

    stamp = store.index_stamp()
    known = _EVALUATIONS.setdefault(store, {})
    if tuple(ks) not in known or known[tuple(ks)][0] != stamp:
        known[tuple(ks)] = (stamp, evaluate_retrieval(model, store, ks))
    return known[tuple(ks)][1], store.usable_set()


@dataclass
class Evaluation:
    """Recall@K of several models on one dataset, as ``explorer eval-retrieval`` writes it."""

    dataset: RetrievalSet
    ks: tuple[int, ...] = KS
    entries: dict[str, dict] = field(default_factory=dict)  # model -> evaluate_retrieval's entry
    usable: dict[str, RetrievalSet] = field(default_factory=dict)  # model -> the set its indices count in
    errors: dict[str, Exception] = field(default_factory=dict)  # model -> why it has no entry

    def add(self, name: str, entry: dict, usable: RetrievalSet) -> None:
        self.entries[name], self.usable[name] = entry, usable

    def document(self) -> dict:
        """The results file: the same keys as the CLI's (format, version, dataset, ks, models)."""
        from explorer.evaluation.retrieval import results_document

        return results_document(next(iter(self.usable.values()), self.dataset), self.ks, self.entries)


def evaluate_models(load: Callable, names: Sequence[str], dataset: RetrievalSet, indexer: Indexer | None = None,
                    ks: Sequence[int] | None = None) -> Iterable[tuple[str, Evaluation]]:
    """Evaluate each model in turn, yielding (model just done, the evaluation so far): the page fills the
    table as it goes. A model that is not indexed (or fails) is recorded in ``errors``, not waited for.
    ``ks``: what is measured and exported; by default every K of `explorer eval-retrieval` (1 ... 50)."""
    from explorer.evaluation.retrieval import DEFAULT_KS

    _check_models(names)
    evaluation = Evaluation(dataset, tuple(sorted(set(ks or DEFAULT_KS))))
    for name in names:
        try:
            store = ready_store(load(name), dataset, indexer)
            evaluation.add(name, *evaluate_model(store.model, store, evaluation.ks))
        except (ExplorerError, ValueError) as error:
            evaluation.errors[name] = error
        yield name, evaluation


RECALL_COLUMNS_END = ["T→I MedR", "I→T MedR", "RSUM", "captions cut"]


def recall_columns(ks: Sequence[int] = KS) -> list[str]:
    return ["model", "score", *(f"T→I R@{k}" for k in ks), *(f"I→T R@{k}" for k in ks), *RECALL_COLUMNS_END]


def recall_rows(evaluation: Evaluation) -> list[dict]:
    """``results_rows``: one flat row per model, the entry's values as they are (the CSV)."""
    from explorer.evaluation.retrieval import results_rows

    return results_rows(evaluation.document(), evaluation.ks) if evaluation.entries else []


def recall_table(evaluation: Evaluation) -> list[list]:
    """The page's table: R@K in percent (as papers print them), ranks, RSUM, captions cut of all."""
    table = []
    for row in recall_rows(evaluation):
        entry = evaluation.entries[row["model"]]
        shown = [k for k in KS if k in evaluation.ks]
        table.append([row["model"], row["score"], *(round(100 * row[f"t2i_R@{k}"], 1) for k in shown),
                      *(round(100 * row[f"i2t_R@{k}"], 1) for k in shown), row["t2i_median_rank"],
                      row["i2t_median_rank"], round(row["rsum"], 1),
                      f"{row['captions_cut']}/{entry['truncation']['captions']}"])
    return table


def evaluation_lines(evaluation: Evaluation) -> list[str]:
    """Under the table: how each model was scored and what its context cut, and why a model is missing."""
    lines = [f"{name}: {entry['mode']}; {entry['truncation']['summary']} ({entry['seconds']:.1f} s)"
             for name, entry in evaluation.entries.items()]
    return lines + [f"{name}: {error}" for name, error in evaluation.errors.items()]


def export_results(evaluation: Evaluation, folder: Path) -> tuple[Path, Path]:
    """The table as CSV (``results_rows``) and the whole results as JSON (per-query ranks included),
    each written atomically into ``folder``."""
    if not evaluation.entries:
        raise ExplorerError("there are no results to export: evaluate an indexed model first")
    from explorer.evaluation.retrieval import write_results_csv

    document, folder = evaluation.document(), paths.ensure(Path(folder))
    csv_file = write_results_csv(document, folder / "recall.csv", evaluation.ks)
    json_file = write_text_atomic(folder / "results.json", json.dumps(document, indent=2))
    return csv_file, json_file


# ---- the queries a model got most wrong ---------------------------------------------------------------


@dataclass
class WorstQuery:
    model: str
    direction: str  # "t2i": a caption found its picture at ``rank``; "i2t": a picture found its caption
    rank: int
    picture: Path  # the query's picture (i2t) or the picture the caption describes (t2i)
    caption: str  # the query caption (t2i) or the picture's first caption (i2t)
    picture_id: str
    top: str  # what the model put first: a picture id (t2i) or a caption (i2t)
    dataset: RetrievalSet  # the set the record counts in (for the picture's scene)


WORST_COLUMNS = ["rank", "query", "right answer", "the model's first pick"]


def model_worst_queries(evaluation: Evaluation, model: str, direction: str = "t2i", n: int = 20) -> list[WorstQuery]:
    """``worst_queries`` of ``model``'s entry (the ``n`` queries whose right answer ranked lowest, largest
    rank first), each with its picture, caption and the model's first pick read from its usable set."""
    from explorer.evaluation.retrieval import worst_queries

    entry, usable = evaluation.entries.get(model), evaluation.usable.get(model)
    if entry is None:
        raise ExplorerError(f"{model} has no results: evaluate it first")
    found = []
    for record in worst_queries(entry, direction, n):
        top = record["top"][0][0] if record["top"] else None
        if direction == "t2i":
            picture, caption = record["image"], usable.captions[record["caption"]]
            first = "" if top is None else picture_label(usable, top)
        else:
            picture, caption = record["image"], usable.captions[record["captions"][0]]
            first = "" if top is None else shorten(usable.captions[top])
        found.append(WorstQuery(model, direction, record["rank"], Path(usable.images[picture]), caption,
                                picture_label(usable, picture), first, usable))
    return found


def worst_rows(queries: Sequence[WorstQuery]) -> list[list]:
    rows = []
    for query in queries:
        if query.direction == "t2i":
            rows.append([query.rank, shorten(query.caption), query.picture_id, query.top])
        else:
            rows.append([query.rank, query.picture_id, shorten(query.caption), query.top])
    return rows


def grounding_inputs(query: WorstQuery, folder: Path, truth_folder: Path | None = None) -> tuple[str, str]:
    """(picture path, caption) for the Grounding tab. The picture is copied into ``folder`` (the page
    may serve only files from its own folders); a synthetic scene's truth is stored by its pixels in
    ``truth_folder``, so the Grounding tab scores its maps against the scene's masks."""
    target = copy_by_content(query.picture, folder)
    if truth_folder is not None and query.dataset.layout == "synthetic":
        _store_scene_truth(query, truth_folder)
    return str(target), query.caption


def _store_scene_truth(query: WorstQuery, truth_folder: Path) -> None:
    try:
        scenes = [s for s in read_dataset(query.dataset.root, query.dataset.split) if s.id == query.picture_id]
        if scenes and not truth_path(scenes[0].image, truth_folder).is_file():
            save_scene_truth(scenes[0], truth_folder)
    except (ExplorerError, OSError, ValueError) as error:  # the picture still opens, only without scores
        log.warning("could not store the truth of %s: %s", query.picture_id, error)
