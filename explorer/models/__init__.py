"""What a method computes: features, tokenizer, preprocessing, the ``Model`` wrapper,
checkpoint formats (``io/``), shared layers and losses (``nn/``) and one module per method
(``methods/``).

open_clip, timm, torchvision and transformers are imported by the modules below, each after
``explorer.core.runtime.prepare_libraries()``: on CPU-only machines they need torchvision's op
schemas declared first (``explorer.core.compat``). Importing this package imports nothing heavy:
the page is built from its light modules (``names``) before torch is imported.
"""
