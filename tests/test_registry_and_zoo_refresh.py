"""Methods are discovered, not listed; the zoo reads each manifest once and again after it changes;
a Draw decodes its picture once for all its models."""

from __future__ import annotations

import os
import sys

from PIL import Image

import explorer.models.methods as methods
from explorer.models.methods import METHODS, SOURCES, discover_methods
from explorer.zoo import Manifest, Zoo

TOY = '''
from explorer.models.methods import register
from explorer.models.methods.clip import ClipMethod


@register
class ToyMethod(ClipMethod):
    name = "toy-discovered"
    detect_priority = -100
'''


def test_a_new_method_module_is_discovered_without_editing_a_list(tmp_path, monkeypatch):
    (tmp_path / "toy_method.py").write_text(TOY)
    monkeypatch.setattr(methods, "__path__", [*methods.__path__, str(tmp_path)])
    try:
        assert "toy-discovered" in discover_methods()
        assert METHODS["toy-discovered"].__module__ == "explorer.models.methods.toy_method"
    finally:
        METHODS.pop("toy-discovered", None)
        SOURCES.pop("toy-discovered", None)  # the registry as it was: later tests list the built-ins' sources
        sys.modules.pop("explorer.models.methods.toy_method", None)


def test_every_shipped_method_is_registered():
    assert {"clip", "longclip", "finelip", "mulclip", "goal", "flair", "caft", "seps"} <= set(discover_methods())


def _manifest(root, name="toy"):
    return Manifest(name=name, method="clip", weights="builtin:tiny-clip").write(root / f"{name}.json")


def test_the_zoo_reads_a_manifest_once_and_again_after_it_changes(tmp_path, monkeypatch):
    path = _manifest(tmp_path)
    reads = []
    original = Manifest.read.__func__
    monkeypatch.setattr(Manifest, "read", classmethod(lambda cls, p: reads.append(p) or original(cls, p)))
    zoo = Zoo(tmp_path)
    for _ in range(3):
        zoo.manifests()
        zoo.get("toy")
    assert len(reads) == 1
    data = path.read_text().replace('"source": ""', '"source": "edited"')
    path.write_text(data)
    os.utime(path, ns=(path.stat().st_atime_ns, path.stat().st_mtime_ns + 10_000_000))
    assert zoo.get("toy").source == "edited" and len(reads) == 2
    _manifest(tmp_path, "second")
    assert [m.name for m in zoo.manifests()] == ["second", "toy"]  # a new file appears without a restart
    path.unlink()
    assert [m.name for m in zoo.manifests()] == ["second"]


def test_a_draw_decodes_its_picture_once_for_all_models(tmp_path, monkeypatch):
    from explorer.grounding import sentence_maps
    from explorer.views.maps_view import compute_maps
    from explorer.views.settings import ViewSettings

    photo = tmp_path / "photo.png"
    Image.new("RGB", (96, 64), (200, 30, 30)).save(photo)
    decodes = []
    original = sentence_maps.load_image
    monkeypatch.setattr(sentence_maps, "load_image",
                        lambda source, **options: decodes.append(source) or original(source, **options))
    zoo = Zoo("checkpoints")
    settings = ViewSettings(view="maps", image=str(photo), caption="A red wall. A blue sky.",
                            models=["tiny-untrained", "demo-clip-base"], kind="generic")
    view = compute_maps(zoo.load, settings, sentence_maps.MapCache())
    assert len(view.models) == 2 and len(decodes) == 1


def test_a_broken_manifest_listed_again_and_again_holds_no_growing_traceback(tmp_path):
    (tmp_path / "bad.json").write_text("{not json")
    zoo = Zoo(tmp_path)
    errors = [zoo.entries()[0].status for _ in range(50)]
    assert len(set(errors)) == 1 and errors[0].startswith("error:")
    assert all(isinstance(value, str) for _, value in zoo._read.values())  # a message, not an exception


def test_an_edited_manifest_replaces_its_loaded_model(tmp_path):
    path = _manifest(tmp_path)
    zoo = Zoo(tmp_path, device="cpu")
    first = zoo.load("toy")
    path.write_text(path.read_text().replace('"notes": ""', '"notes": "edited"'))
    second = zoo.load("toy")
    assert second is not first and len(zoo.cache) == 1
