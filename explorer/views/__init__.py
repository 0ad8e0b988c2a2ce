"""The grounding views (sentence maps, FLISM regions, PCA maps, map kinds side by side) and the
retrieval figure, as plain library code.

Every view is two steps: ``compute_view`` runs the models (cached), ``render_view`` turns the
result into a ``PanelGrid`` from display settings alone. The page previews the grid
(``panels.compose``); ``explorer.views.figures.save_figure`` writes it for a paper, in the look
``figure_style`` sets (fonts, presets); the CLI does both from a ``ViewSettings`` JSON (``pipeline``).

This package imports nothing on its own, so the CLI can read settings without loading torch.
"""
