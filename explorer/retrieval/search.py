"""One query against one model's embedded dataset: the top k, scored by the method, and where the
right answer landed.

    searcher = Searcher(model, store)              # its vector indexes are built once and kept
    result = searcher.text("a red cube left of ...", k=10)
    result = searcher.image(17, k=10)              # a picture of the dataset (its captions are the truth)
    result = searcher.image(Image.open("mine.png"))

Candidates come from the cosine of the global embeddings (``VectorIndex``); the method's own score
(``Model.similarity``) then ranks them: every candidate of a gallery up to ``rerank_all`` items
(exact), the ``shortlist`` best by cosine past that. A query that is one of the dataset's captions
(or one of its pictures) has a right answer, whose 1-based rank the result gives: among the scored
candidates, or by global cosine when it did not make the shortlist (``truth_in_shortlist`` False).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np
import torch
import torch.nn.functional as F

from explorer.core.cache import GB, BoundedCache
from explorer.core.errors import CaptionError, ImageError
from explorer.retrieval.embedding_store import EmbeddingStore, StoreError
from explorer.retrieval.vector_index import VectorIndex, top_k

DEFAULT_SHORTLIST = 100  # candidates by global cosine that the method's score re-ranks (search and Recall@K)
# Galleries up to this size are ranked entirely by the method's score, so a query's rank is the one the
# Recall table (which scores every pair) gives it. Past it, the method ranks the shortlist, and says so.
# A picture query re-encodes every candidate caption (CAFT's chunks, SEPS's tokens): 300 captions take
# 3-5 s for demo-caft on 2 CPU cores.
RERANK_ALL = 2000
RERANK_ALL_CAPTIONS = 2000


@dataclass
class Hit:
    index: int  # a picture (text query) or a caption (picture query) of ``store.usable_set()``
    score: float  # the method's score
    cosine: float  # cosine of the global embeddings
    is_truth: bool


@dataclass
class SearchResult:
    direction: str  # "t2i" (a text finds pictures) or "i2t" (a picture finds captions)
    hits: list[Hit]
    truth: list[int] = field(default_factory=list)  # the right answers, when the query has any
    truth_rank: int | None = None  # 1-based rank of the best right answer
    truth_in_shortlist: bool = True  # False: ``truth_rank`` is its global-cosine rank past the shortlist
    ranked: int = 0  # candidates the method's score ranked
    gallery: int = 0  # items searched
    score_label: str = ""
    seconds: float = 0.0
    notes: list[str] = field(default_factory=list)


class Gallery:
    """A dataset's embedded pictures and captions as two vector indexes (no model: cached apart from it)."""

    def __init__(self, store: EmbeddingStore):
        self.dataset = store.usable_set()
        self.images = VectorIndex(store.image_vectors())
        self.captions = VectorIndex(store.caption_vectors())
        self.owner = np.asarray(self.dataset.caption_image)


class Searcher:
    """Searches one model's embedded dataset both ways; the vector indexes (``Gallery``) are built once
    per model and cache state and shared (``GALLERIES``)."""

    def __init__(self, model, store: EmbeddingStore, shortlist: int = DEFAULT_SHORTLIST, rerank_all: int = RERANK_ALL,
                 rerank_all_captions: int = RERANK_ALL_CAPTIONS):
        self.model, self.store = model, store
        gallery = gallery_for(store)
        self.dataset, self.images, self.captions, self.owner = (gallery.dataset, gallery.images, gallery.captions,
                                                                gallery.owner)
        self.shortlist, self.rerank_all, self.rerank_all_captions = shortlist, rerank_all, rerank_all_captions
        if not len(self.images):
            raise StoreError(f"{self.dataset.summary()}: there is nothing to search (no readable picture)")

    def text(self, text: str, k: int = 10) -> SearchResult:
        """The pictures that best match ``text``; its own picture is the truth when it is a dataset caption."""
        text = " ".join(str(text or "").split())
        if not text:
            raise CaptionError("The query is empty: type a caption, or pick a picture to search with.")
        started = time.perf_counter()
        query = F.normalize(self.model.encode_text([text]).eot.float().cpu(), dim=-1)[0]
        truth = sorted({int(self.owner[j]) for j, caption in enumerate(self.dataset.captions) if caption == text})
        candidates, cosines = self._candidates(self.images, query, self.rerank_all)
        if self.model.global_score:
            scores = cosines
        else:
            features = self.store.image_features(candidates.tolist()).to(self.model.device)
            scores = self.model.similarity(features, [text])[:, 0]
        result = self._result("t2i", candidates, scores, cosines, truth, k,
                              lambda: self.images.search(query[None], len(self.images)))
        budget = self.model.token_counter.budget(text, self.model.context_length)
        if not budget.fits and not self.model.reads_whole_caption:
            result.notes.append(f"the query is cut at {self.model.context_length} tokens: {budget.n_cut} tokens "
                                f"(from '{text[budget.cut_at_char:][:40]}...') are not read")
        result.seconds = time.perf_counter() - started
        return result

    def image(self, picture, k: int = 10) -> SearchResult:
        """The captions that best match a picture: an index into the dataset (its captions are the truth)
        or a picture of the user's (no truth)."""
        started = time.perf_counter()
        if isinstance(picture, (int, np.integer)):
            if not 0 <= int(picture) < len(self.dataset.images):
                raise ImageError(f"picture {picture} is not in the dataset (0..{len(self.dataset.images) - 1})")
            features = self.store.image_features([int(picture)])
            truth = np.flatnonzero(self.owner == int(picture)).tolist()
        else:
            features = self.model.encode_image([picture]).to("cpu")
            truth = []
        query = F.normalize(features.cls.float(), dim=-1)[0]
        candidates, cosines = self._candidates(self.captions, query, self.rerank_all_captions)
        if self.model.global_score:
            scores = cosines
        else:
            captions = [self.dataset.captions[j] for j in candidates.tolist()]
            scores = self.model.similarity(features.to(self.model.device), captions)[0]
        result = self._result("i2t", candidates, scores, cosines, truth, k,
                              lambda: self.captions.search(query[None], len(self.captions)))
        result.seconds = time.perf_counter() - started
        return result

    def _candidates(self, index: VectorIndex, query: torch.Tensor, rerank_all: int) -> tuple[torch.Tensor, torch.Tensor]:
        n = len(index) if len(index) <= rerank_all else min(self.shortlist, len(index))
        cosines, ids = index.search(query[None], n)
        found = ids[0] >= 0  # an IVF index marks places it found nothing for with -1
        return ids[0][found], cosines[0][found]

    def _result(self, direction, candidates, scores, cosines, truth, k, everything) -> SearchResult:
        scores = scores.float().cpu()
        values, order = top_k(scores[None], min(k, len(scores)))
        right = set(truth)
        hits = [Hit(index=int(candidates[o]), score=float(v), cosine=float(cosines[o]),
                    is_truth=int(candidates[o]) in right) for v, o in zip(values[0], order[0])]
        index = self.images if direction == "t2i" else self.captions
        result = SearchResult(direction=direction, hits=hits, truth=list(truth), ranked=len(candidates),
                              gallery=len(index),
                              score_label=self.model.score_label if not self.model.global_score else "cosine")
        if len(candidates) < len(index) and not self.model.global_score:
            result.notes.append(f"the method's score ranked the {len(candidates)} best of {len(index):,} by global "
                                "cosine; the Recall table scores every pair")
        if index.recall_note:
            result.notes.append(index.recall_note)
        if truth:
            mask = torch.as_tensor(np.isin(candidates.numpy(), truth))
            if mask.any():
                result.truth_rank = int(((scores >= scores[mask].max()) & ~mask).sum()) + 1
            else:  # past the shortlist: its rank by global cosine
                all_cosines, all_ids = everything()
                position = np.flatnonzero(np.isin(all_ids[0].numpy(), truth))
                result.truth_in_shortlist = False
                if len(position):
                    result.truth_rank = int(position[0]) + 1
                else:  # an IVF index returns only what its probed cells hold, and the truth was not there
                    found = int((all_ids[0] >= 0).sum())
                    result.truth_rank = found + 1
                    result.notes.append(f"the right answer is not among the {found:,} nearest that the IVF index "
                                        f"returned: its rank is {found + 1:,} or worse")
        return result


GALLERIES = BoundedCache("retrieval galleries (vector indexes)", max_items=8, max_bytes=2 * GB)


def gallery_for(store: EmbeddingStore) -> Gallery:
    """The vector indexes of ``store``'s model and dataset, kept while the cache on disk does not change."""
    stamp = store.index_stamp()
    usable = store.usable_set()  # the pictures and captions it searches: a changed dataset is a new gallery
    key = (str(store.folder), store.key["model"]["weights"], stamp, hash((usable.images, usable.captions)))
    return GALLERIES.get(key, lambda: Gallery(store))
