"""What a method computes: features, tokenizer, preprocessing, the ``Model`` wrapper,
checkpoint formats (``io/``), shared layers and losses (``nn/``) and one module per method
(``methods/``).

open_clip and transformers are imported by the modules below; on CPU-only machines they need
torchvision's op schemas declared first (``explorer.core.compat``), so that happens here, once.
"""

from explorer.core.runtime import prepare_libraries

prepare_libraries()
