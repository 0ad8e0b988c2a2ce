"""Qualitative retrieval as a figure: chosen queries of a retrieval dataset, each model's top k in a row.

The figure Long-CLIP's, FineLIP's and GOAL's papers print. A text query (a long caption of the
dataset, by number or as text) finds pictures: each model's top k in a row with their scores, the
right picture framed. A picture query (``i2t``, by number) finds captions: the query picture first,
then the retrieved captions set as text, the right ones framed. Search is the retrieval library's
(``Searcher``: the method's own score); a model's embeddings come from its cache (made on first use).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from explorer.core.errors import ExplorerError
from explorer.core.images import load_image
from explorer.views.panels import Header, Panel, PanelGrid, fit_size
from explorer.views.settings import ViewSettings

TRUTH_FRAME = "#1a9850"  # green: the right answer
THUMB_SIDE = 512  # pixels on a retrieved picture's long side before the figure shrinks it to its panel


class QueryError(ExplorerError):
    """A query the dataset cannot answer (a number past its end, a text where a picture is needed)."""


@dataclass
class Query:
    title: str  # what the figure prints above the query's rows
    text: str = ""  # t2i: the caption searched with
    picture: int | None = None  # i2t: the dataset picture searched with (dataset order)


@dataclass
class Found:
    name: str
    result: object  # explorer.retrieval.search.SearchResult
    usable: object  # the RetrievalSet its hits count in


@dataclass
class RetrievalFigureView:
    dataset: object  # explorer.data.retrieval_sets.RetrievalSet
    direction: str
    queries: list[Query]
    found: list[list[Found]]  # per query, per model
    notes: list[str] = field(default_factory=list)


def parse_queries(dataset, queries: list[str], direction: str) -> list[Query]:
    """Each ``--query``: a number (a caption for t2i, a picture for i2t, in the dataset's order) or a text."""
    if not queries:
        raise QueryError("give at least one --query: a caption's number in the dataset, or a text")
    parsed = []
    for j, query in enumerate(queries, 1):
        query = " ".join(str(query).split())
        number = int(query) if query.isdigit() else None
        if direction == "i2t":
            if number is None:
                raise QueryError(f"an i2t query is a picture of the dataset by number (0..{len(dataset.images) - 1}), "
                                 f"not {query[:40]!r}")
            if number >= len(dataset.images):
                raise QueryError(f"there is no picture #{number}: the dataset has {len(dataset.images)}")
            label = dataset.image_ids[number] if dataset.image_ids else str(number)
            parsed.append(Query(f"Q{j}: picture #{number} ({label})", picture=number))
        elif number is not None:
            if number >= len(dataset.captions):
                raise QueryError(f"there is no caption #{number}: the dataset has {len(dataset.captions)}")
            text = dataset.captions[number]
            parsed.append(Query(f"Q{j}: {text}", text=text))
        elif query:
            parsed.append(Query(f"Q{j}: {query}", text=query))
        else:
            raise QueryError(f"query {j} is empty")
    return parsed


def open_store(model, dataset):
    """The model's embeddings of the dataset, embedding what its cache lacks (the CLI's way)."""
    from explorer.retrieval.embedding_store import EmbeddingStore

    store = EmbeddingStore(model, dataset)
    if not store.status().complete:
        store.update()
    return store


def compute_retrieval(load: Callable, settings: ViewSettings, stores: Callable = open_store,
                      dataset=None) -> RetrievalFigureView:
    """Every query against every model: ``stores(model, dataset)`` gives a model's embeddings (the page
    passes one that refuses a model that has not embedded the dataset, and the dataset it has open)."""
    from explorer.evaluation.retrieval import read_evaluation_set
    from explorer.retrieval.search import Searcher

    if not settings.data:
        raise QueryError("give the dataset: --data DIR")
    if not settings.models:
        raise QueryError("pick at least one model")
    if dataset is None:
        dataset = read_evaluation_set(settings.data, split=settings.split or None, limit=settings.limit)
    queries = parse_queries(dataset, settings.queries, settings.direction)
    found: list[list[Found]] = [[] for _ in queries]
    notes: list[str] = []
    for name in settings.models:
        model = load(name)
        store = stores(model, dataset)
        searcher = Searcher(model, store)
        for j, query in enumerate(queries):
            if query.picture is None:
                result = searcher.text(query.text, settings.k)
            else:
                result = searcher.image(store.usable_index(query.picture), settings.k)
            notes.extend(f"{name}: {note}" for note in result.notes if f"{name}: {note}" not in notes)
            found[j].append(Found(name, result, searcher.dataset))
    return RetrievalFigureView(dataset=dataset, direction=settings.direction, queries=queries, found=found,
                               notes=notes)


def _picture(path, side: int | None):
    picture = load_image(path, max_side=THUMB_SIDE).image.convert("RGB")
    return picture.resize(fit_size(picture.size, side)) if side else picture


def _truth_line(result) -> str:
    if result.truth_rank is None:
        return "no right answer known"
    return f"right answer: rank {result.truth_rank}" + ("" if result.truth_in_shortlist else " (by cosine)")


def render_retrieval(view: RetrievalFigureView, settings: ViewSettings, side: int | None = None) -> PanelGrid:
    import numpy as np

    rows, labels, titles = [], [], []
    i2t = view.direction == "i2t"
    for query, per_model in zip(view.queries, view.found):
        for m, found in enumerate(per_model):
            row = []
            if i2t:
                row.append(Panel(np.asarray(_picture(view.dataset.images[query.picture], side)), "query"))
            for hit in found.result.hits:
                score = f"{hit.score:.3f}" + (", right" if hit.is_truth else "")
                frame = TRUTH_FRAME if hit.is_truth else ""
                if i2t:
                    row.append(Panel(None, score, body=found.usable.captions[hit.index], scores=score, frame=frame))
                else:
                    pixels = np.asarray(_picture(found.usable.images[hit.index], side))
                    row.append(Panel(pixels, score, scores=score, frame=frame))
            rows.append(row)
            labels.append(f"{found.name}\n{_truth_line(found.result)}")
            titles.append(query.title if m == 0 else "")
    k = max((len(f.result.hits) for per_model in view.found for f in per_model), default=0)
    headers = ([Header("query")] if i2t else []) + [Header(f"#{r}") for r in range(1, k + 1)]
    caption = "Framed: the right answer."
    return PanelGrid(rows=rows, row_labels=labels, headers=headers, row_titles=titles, caption=caption,
                     repeat=1 if i2t else 0)


__all__ = ["RetrievalFigureView", "compute_retrieval", "parse_queries", "render_retrieval"]
