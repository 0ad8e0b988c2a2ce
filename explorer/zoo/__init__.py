"""The model zoo: manifests (``manifest``), the zoo folder and its loaded-model cache (``zoo``),
and the models built in code (``builtin``)."""

from explorer.zoo.manifest import Manifest, load_manifest
from explorer.zoo.zoo import ModelCache, Zoo, ZooEntry

__all__ = ["Manifest", "ModelCache", "Zoo", "ZooEntry", "load_manifest"]
