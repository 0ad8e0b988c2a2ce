"""Grounding: per-sentence maps, token budgets, Otsu masks, FLISM regions, PCA, ground truth."""
