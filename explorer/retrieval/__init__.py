"""Retrieval: a benchmark dataset embedded once per model, searched both ways (Recall@K over it is
``explorer.evaluation.retrieval``, a layer up).

    embedding_store   the on-disk cache of one model's embeddings of one dataset (incremental,
                      resumable, keyed by the weights, invalidated when they change)
    fingerprint       what an embedding depends on, as hashes (weights, config, preprocessing, ...)
    vector_index      global cosine top-k: exact with torch for small galleries, FAISS for large
    search            one query (a text or a picture): top k by the method's score, the truth's rank
    truncation        which captions a model's context cuts, and where
    indexing          embedding in the background, with progress (the app's worker)

Datasets are read by ``explorer.data.retrieval_sets`` (one reader per layout on disk).
"""
