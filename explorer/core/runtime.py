"""What the process needs before the heavy libraries load, in one place.

``prepare_process`` runs first thing at the app's and the CLI's start-up: no outbound
connection (Gradio analytics and Hugging Face telemetry off, the hub offline: explorer never
fetches weights) and torchvision made importable. ``prepare_libraries`` is the part a library
user needs too; ``explorer.models`` runs it when it is first imported, because open_clip,
timm and transformers cannot be imported without it on CPU-only machines (see ``compat``).
Both are idempotent and respect values the user has set.
"""

from __future__ import annotations

import os

from explorer.core import compat

OFFLINE_ENVIRONMENT = {
    "GRADIO_ANALYTICS_ENABLED": "False",
    "HF_HUB_DISABLE_TELEMETRY": "1",
    "HF_HUB_OFFLINE": "1",
}


def prepare_libraries() -> None:
    compat.ensure_torchvision_importable()


def prepare_process() -> None:
    for name, value in OFFLINE_ENVIRONMENT.items():
        os.environ.setdefault(name, value)
    prepare_libraries()
