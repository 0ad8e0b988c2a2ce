"""Data: the synthetic long-caption world, its on-disk layout, and the benchmark datasets' readers.

- ``synthetic``: ``generate_scene`` / ``generate_scenes``, seeded scenes with known truth
  (``vocabulary`` its words, ``drawing`` its pixels, ``captions`` its text, ``scene`` the records).
- ``store``: ``write_dataset`` / ``read_dataset``, the synthetic world on disk.
- ``formats``: exporters to the DOCCI and Urban1k layouts, and ``LongCaptionRecord`` / ``read_records`` over
  the readers of ``retrieval_sets`` (one reader per layout, one detector).
"""

from __future__ import annotations

from explorer.data.errors import DatasetError
from explorer.data.formats import (LongCaptionRecord, detect_layout, export_docci, export_urban1k, read_docci,
                                   read_records, read_urban1k, synthetic_records)
from explorer.data.scene import Background, HardNegative, Scene, SceneObject, Sentence
from explorer.data.store import read_dataset, write_dataset
from explorer.data.synthetic import generate_scene, generate_scenes

__all__ = ["Background", "DatasetError", "HardNegative", "LongCaptionRecord", "Scene", "SceneObject", "Sentence",
           "detect_layout", "export_docci", "export_urban1k", "generate_scene", "generate_scenes", "read_dataset",
           "read_docci", "read_records", "read_urban1k", "synthetic_records", "write_dataset"]
