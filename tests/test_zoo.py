"""The model zoo: manifests in a folder, their status, the model cache, and the CLI over them."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
import torch

import explorer
from explorer.core.errors import CheckpointError, ManifestError, ModelNameError
from explorer.models.architecture import ClipArchitecture
from explorer.models.io.loading import save_method
from explorer.models.methods.clip import ClipMethod, LongClipMethod
from explorer.models.model import Model
from explorer.zoo import Manifest, ModelCache, Zoo

# Small enough to write and read in a blink; a real vocabulary so text can be encoded.
SMALL_LONG = ClipArchitecture(
    embed_dim=32, image_size=32, patch_size=16, vision_width=64, vision_layers=1, vision_heads=1,
    vision_mlp_ratio=2.0, context_length=248, vocab_size=49408, text_width=32, text_layers=1,
    text_heads=1, text_mlp_ratio=2.0, quick_gelu=True,
)
SMALL_SHORT = ClipArchitecture(**{**SMALL_LONG.to_dict(), "context_length": 77})


def _write_weights(path: Path, arch: ClipArchitecture = SMALL_LONG, cls=LongClipMethod) -> Path:
    torch.manual_seed(0)
    return save_method(cls(arch), path)


@pytest.fixture(scope="module")
def saved_once(tmp_path_factory) -> Path:
    return _write_weights(tmp_path_factory.mktemp("saved") / "small-long.safetensors")


@pytest.fixture
def weights(tmp_path, saved_once) -> Path:
    """A fresh copy for each test (some tests delete or rewrite it)."""
    target = tmp_path / "files" / saved_once.name
    target.parent.mkdir()
    shutil.copyfile(saved_once, target)
    return target


@pytest.fixture
def zoo(tmp_path) -> Zoo:
    return Zoo(root=tmp_path / "zoo", device="cpu")


# ---- adding and listing -------------------------------------------------------------------------


def test_add_writes_a_manifest(zoo, weights):
    manifest = zoo.add(weights, name="x", source="test")
    path = zoo.root / "x.json"
    assert path.is_file() and manifest.path == path
    data = json.loads(path.read_text())
    assert data["name"] == "x"
    assert data["method"] == "longclip"
    assert data["architecture"] == SMALL_LONG.name
    assert data["context_length"] == 248
    assert data["format"] == "explorer (longclip)"
    assert data["source"] == "test"
    assert Path(data["weights"]) == weights.resolve()
    assert "path" not in data  # where the manifest lives is not written into it
    assert not list(zoo.root.glob("*.tmp"))  # written atomically
    again = Manifest.read(path)
    assert again.weights_path() == weights.resolve()


def test_entries_list_an_added_model_as_loading(zoo, weights):
    zoo.add(weights, name="x", source="test")
    entries = zoo.entries()
    assert [e.manifest.name for e in entries] == ["x"]
    assert entries[0].status.startswith("loads")
    assert entries[0].ok
    assert [m.name for m in zoo.manifests()] == ["x"]


def test_add_without_a_name_uses_the_file_name(zoo, weights):
    manifest = zoo.add(weights)
    assert manifest.name == "small-long"
    assert (zoo.root / "small-long.json").is_file()
    assert manifest.source  # says where it came from


def test_adding_the_same_name_twice_is_refused(zoo, weights):
    zoo.add(weights, name="x", source="test")
    before = (zoo.root / "x.json").read_text()
    with pytest.raises(ManifestError, match="already"):
        zoo.add(weights, name="x", source="other")
    assert (zoo.root / "x.json").read_text() == before


def test_adding_with_the_wrong_method_is_refused(zoo, weights):
    with pytest.raises(CheckpointError, match="not clip"):
        zoo.add(weights, name="x", method="clip")
    assert not (zoo.root / "x.json").exists()


def test_adding_a_missing_or_unreadable_file_is_refused(zoo, tmp_path):
    with pytest.raises(CheckpointError):
        zoo.add(tmp_path / "nowhere.safetensors", name="x")
    junk = tmp_path / "junk.safetensors"
    junk.write_bytes(b"\x00" * 64)
    with pytest.raises(CheckpointError):
        zoo.add(junk, name="y")
    assert zoo.entries() == []


@pytest.mark.parametrize("name", ["../escape", "sub/dir", "..\\escape"])
def test_a_name_cannot_write_outside_the_zoo(zoo, weights, name):
    with pytest.raises(ManifestError):
        zoo.add(weights, name=name)
    assert not list(zoo.root.parent.glob("*.json"))
    assert not list(zoo.root.rglob("*.json"))


@pytest.mark.parametrize("text", [
    "{not json",
    "[1, 2, 3]",
    '{"name": "n", "method": "longclip"}',
    '{"name": "n", "method": "longclip", "weights": "w.safetensors", "colour": "red"}',
    "",
], ids=["syntax", "not-an-object", "no-weights", "unknown-field", "empty"])
def test_a_malformed_manifest_is_listed_with_an_error(zoo, weights, text):
    zoo.add(weights, name="good", source="test")
    (zoo.root / "bad.json").write_text(text)
    entries = {e.manifest_path.name: e for e in zoo.entries()}
    assert set(entries) == {"bad.json", "good.json"}
    assert entries["bad.json"].manifest is None
    assert entries["bad.json"].status.startswith("error")
    assert not entries["bad.json"].ok
    assert entries["good.json"].status.startswith("loads")
    assert [m.name for m in zoo.manifests()] == ["good"]
    assert isinstance(zoo.load("good"), Model)  # the bad one does not stop the good one


def test_a_manifest_pointing_at_a_missing_file_has_an_error_status(zoo, tmp_path):
    Manifest(name="gone", method="longclip", weights=str(tmp_path / "gone.safetensors")).write(
        zoo.root / "gone.json")
    [entry] = zoo.entries()
    assert entry.manifest is not None
    assert entry.status.startswith("error")
    assert "gone.safetensors" in entry.status
    assert not entry.ok
    with pytest.raises(CheckpointError):
        zoo.load("gone")


def test_status_follows_the_weights_file(zoo, weights):
    zoo.add(weights, name="x")
    assert zoo.entries()[0].status.startswith("loads")
    weights.unlink()
    assert zoo.entries()[0].status.startswith("error")
    _write_weights(weights)
    assert zoo.entries()[0].status.startswith("loads")


def test_relative_weights_are_relative_to_the_manifest(zoo, tmp_path):
    _write_weights(zoo.root / "weights" / "rel.safetensors")
    Manifest(name="rel", method="longclip", weights="weights/rel.safetensors").write(zoo.root / "rel.json")
    [entry] = zoo.entries()
    assert entry.status.startswith("loads")
    assert zoo.load("rel").context_length == 248


def test_builtin_manifests(zoo):
    Manifest(name="t", method="longclip", weights="builtin:tiny-clip", trained=False).write(zoo.root / "t.json")
    Manifest(name="u", method="longclip", weights="builtin:no-such-model").write(zoo.root / "u.json")
    status = {e.manifest.name: e.status for e in zoo.entries()}
    assert status == {"t": "built in code", "u": "error: unknown built-in"}
    assert zoo.load("t").trained is False
    with pytest.raises(ManifestError, match="no-such-model"):
        zoo.load("u")


def test_unknown_name_is_a_manifest_error(zoo, weights):
    zoo.add(weights, name="x")
    with pytest.raises(ManifestError, match="'nope'.*x"):
        zoo.load("nope")


def test_missing_zoo_folder_lists_nothing(tmp_path):
    assert Zoo(root=tmp_path / "absent").entries() == []


def test_repository_zoo_lists_the_tiny_model(monkeypatch):
    monkeypatch.delenv("EXPLORER_CHECKPOINTS", raising=False)
    names = {e.manifest.name: e.status for e in Zoo().entries() if e.manifest is not None}
    assert names.get("tiny-untrained") == "built in code"


def test_environment_variable_sets_the_zoo(monkeypatch, tmp_path, weights):
    Zoo(root=tmp_path / "elsewhere").add(weights, name="env-model")
    monkeypatch.setenv("EXPLORER_CHECKPOINTS", str(tmp_path / "elsewhere"))
    assert [m.name for m in Zoo().manifests()] == ["env-model"]


# ---- the name rule (one for the page and the shell) ------------------------------------------------


def test_a_name_another_manifest_has_is_taken_wherever_its_file_sits(zoo, weights, tmp_path, monkeypatch):
    """The demo zoo's ``demo/longclip.json`` holds ``demo-longclip``: its file name is not the model's."""
    monkeypatch.setenv("EXPLORER_HOME", str(tmp_path / "home"))
    zoo.add(weights, name="demo-longclip")
    (zoo.root / "demo").mkdir()
    (zoo.root / "demo-longclip.json").rename(zoo.root / "demo" / "longclip.json")
    for add in (lambda: zoo.add(weights, name="demo-longclip"),
                lambda: zoo.add_upload(weights, "upload.safetensors", name="demo-longclip")):
        with pytest.raises(ModelNameError, match="'demo-longclip' is already in the zoo"):
            add()
    assert [m.name for m in zoo.manifests()] == ["demo-longclip"]
    assert not (tmp_path / "home" / "uploads").exists()  # refused before anything was kept


@pytest.mark.parametrize("name", ["n" * 101, "é" * 101, "€" * 70, "a/b", "a\\b", "tab\there", ".hidden"])
def test_a_name_too_long_or_not_a_file_name_is_refused_by_add_and_upload(zoo, weights, tmp_path, monkeypatch, name):
    monkeypatch.setenv("EXPLORER_HOME", str(tmp_path / "home"))
    with pytest.raises(ModelNameError) as refused:
        zoo.add(weights, name=name)
    with pytest.raises(ModelNameError):
        zoo.add_upload(weights, "upload.safetensors", name=name)
    message = str(refused.value)
    assert "\n" not in message and len(message) < 200
    assert "at most 100 characters" in message or "cannot be" in message
    assert zoo.manifests() == [] and not (tmp_path / "home" / "uploads").exists()


def test_a_name_of_100_characters_and_a_long_file_name_are_taken(zoo, weights, tmp_path, monkeypatch):
    monkeypatch.setenv("EXPLORER_HOME", str(tmp_path / "home"))
    assert zoo.add_upload(weights, "upload.safetensors", name="n" * 100).name == "n" * 100
    assert len(zoo.add_upload(weights, "f" * 200 + ".safetensors").name) == 100  # the default name is cut


def test_cli_models_add_refuses_a_taken_or_long_name_in_one_line(capsys, tmp_path, weights):
    root = str(tmp_path / "zoo")
    assert _run_cli(capsys, "--checkpoints", root, "models", "add", str(weights), "--name", "x")[0] == 0
    for name, words in (("x", "'x' is already in the zoo"), ("y" * 101, "at most 100 characters")):
        code, out, err = _run_cli(capsys, "--checkpoints", root, "models", "add", str(weights), "--name", name)
        assert code == 2 and err.startswith("error:") and words in err and err.count("\n") == 1, err


def test_the_models_tab_refuses_a_taken_or_long_name_with_the_name(zoo, weights, tmp_path, monkeypatch, owner):
    import gradio as gr

    from explorer.ui import models_tab

    monkeypatch.setenv("EXPLORER_HOME", str(tmp_path / "home"))
    zoo.add(weights, name="x")
    (zoo.root / "demo").mkdir()
    (zoo.root / "x.json").rename(zoo.root / "demo" / "x-model.json")  # as the demo zoo's manifests sit
    with gr.Blocks() as page:
        models_tab.build(zoo, owner)
    handlers = {fn.api_name: fn.fn for fn in page.fns.values()}
    assert "'x' is already in the zoo" in handlers["zoo_upload"](str(weights), "x", "")[0]
    assert "'x' is already in the zoo" in handlers["zoo_add"](str(weights), "x", "")[0]
    for long in ("z" * 101, "z" * 300):  # 300: once an internal OSError (the file name was too long)
        reply = handlers["zoo_upload"](str(weights), long, "")[0]
        assert "at most 100 characters" in reply and "Internal error" not in reply
    assert [m.name for m in zoo.manifests()] == ["x"]


def _safetensors_with(path: Path, **metadata: str) -> Path:
    from safetensors.torch import save_file

    save_file({"w": torch.zeros(2)}, str(path), metadata=metadata)
    return path


@pytest.mark.parametrize("metadata, words", [
    ({"explorer": "[" * 5000 + "]" * 5000}, "nests deeper than 32 levels"),
    ({"explorer": '{"a": "' + "x" * (2**20) + '"}'}, "metadata is 1,048,585 characters (at most 1,048,576)"),
    ({"explorer": "[1, 2]"}, "not a JSON object"),
    ({"explorer": "{oops"}, "not JSON"),
    ({"other": "x" * (17 * 2**20)}, "its safetensors header says it is 17 MB (at most 16 MB is read)"),
], ids=["nested", "long", "not-an-object", "not-json", "header"])
def test_safetensors_metadata_too_deep_or_too_big_is_refused_before_parsing(zoo, tmp_path, monkeypatch, owner,
                                                                             metadata, words):
    """Once "Internal error (RecursionError)" on the Models tab; the same refusal in the shell and the page."""
    import gradio as gr

    from explorer.models.io.checkpoints import stored_config
    from explorer.models.io.loading import check
    from explorer.ui import models_tab

    monkeypatch.setenv("EXPLORER_HOME", str(tmp_path / "home"))
    bad = _safetensors_with(tmp_path / "bad.safetensors", **metadata)
    with pytest.raises(CheckpointError, match=re.escape(words)):
        check(bad)
    with gr.Blocks() as page:
        models_tab.build(zoo, owner)
    handlers = {fn.api_name: fn.fn for fn in page.fns.values()}
    for reply in (handlers["zoo_upload"](str(bad), "", "")[0], handlers["zoo_add"](str(bad), "", "")[0]):
        assert words in reply and "Internal error" not in reply
    assert stored_config(bad) == {} and zoo.manifests() == []


def _run_cli(capsys, *argv) -> tuple[int, str, str]:
    from explorer.cli import main

    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


# ---- loading and the cache ----------------------------------------------------------------------


def test_zoo_load_twice_is_a_cache_hit(zoo, weights):
    zoo.add(weights, name="x")
    first = zoo.load("x")
    assert isinstance(first, Model) and first.name == "x"
    assert first.context_length == 248 and first.method_name == "longclip"
    assert zoo.load("x") is first
    assert len(zoo.cache) == 1


def test_zoo_cache_evicts_past_its_size(tmp_path, weights):
    zoo = Zoo(root=tmp_path / "zoo", cache_size=1, device="cpu")
    zoo.add(weights, name="a")
    zoo.add(_write_weights(tmp_path / "files" / "short.safetensors", SMALL_SHORT, ClipMethod), name="b")
    a = zoo.load("a")
    b = zoo.load("b")
    assert b.context_length == 77 and b.method_name == "clip"
    assert len(zoo.cache) == 1
    assert zoo.load("a") is not a  # dropped, then loaded again


def test_loaded_model_matches_the_saved_one(zoo, tmp_path):
    torch.manual_seed(0)
    original = LongClipMethod(SMALL_LONG)
    zoo.add(save_method(original, tmp_path / "m.safetensors"), name="m")
    loaded = zoo.load("m")
    for key, value in original.state_dict().items():
        assert torch.equal(loaded.method.state_dict()[key], value), key
    assert explorer.load(zoo.root / "m.json", device="cpu").name == "m"


def test_model_cache_keeps_the_most_recently_used():
    calls: list[str] = []

    def loader(name):
        def load():
            calls.append(name)
            return object()
        return load

    cache = ModelCache(capacity=2)
    a = cache.get(("a",), loader("a"))
    b = cache.get(("b",), loader("b"))
    assert cache.get(("a",), loader("a")) is a  # hit: a is now the most recent
    assert calls == ["a", "b"]
    cache.get(("c",), loader("c"))  # evicts b, the least recently used
    assert len(cache) == 2
    assert cache.keys() == [("a",), ("c",)]
    assert cache.get(("a",), loader("a")) is a
    assert calls == ["a", "b", "c"]
    assert cache.get(("b",), loader("b")) is not b  # b was dropped: loaded again
    assert calls == ["a", "b", "c", "b"]
    assert len(cache) == 2 and cache.keys() == [("a",), ("b",)]


def test_model_cache_needs_room_for_one():
    with pytest.raises(ValueError):
        ModelCache(capacity=0)


def test_a_failed_load_is_not_cached():
    cache = ModelCache(capacity=2)

    def broken():
        raise CheckpointError("no")

    with pytest.raises(CheckpointError):
        cache.get(("x",), broken)
    assert len(cache) == 0


# ---- the command line ---------------------------------------------------------------------------

cli = pytest.importorskip("explorer.cli")


def _run(capsys, *argv) -> tuple[int, str, str]:
    code = cli.main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_cli_models_add_list_and_check(capsys, tmp_path, weights):
    root = str(tmp_path / "zoo")
    code, out, err = _run(capsys, "--checkpoints", root, "models", "list")
    assert code == 0 and "no manifests" in out

    code, out, err = _run(capsys, "--checkpoints", root, "models", "add", str(weights), "--name", "x",
                          "--source", "test")
    assert code == 0, err
    assert "x" in out and "longclip" in out
    assert json.loads((tmp_path / "zoo" / "x.json").read_text())["source"] == "test"

    (tmp_path / "zoo" / "broken.json").write_text("{oops")
    code, out, err = _run(capsys, "--checkpoints", root, "models", "list")
    assert code == 0, err
    lines = out.splitlines()
    x_line = next(line for line in lines if line.startswith("x "))
    assert "longclip" in x_line and "248" in x_line and "loads" in x_line
    assert any(line.startswith("broken.json") and "error" in line for line in lines)

    code, out, err = _run(capsys, "models", "check", str(weights), "--json")
    assert code == 0, err
    report = json.loads(out)
    assert report["method"] == "longclip" and report["context_length"] == 248
    assert report["report"]["ok"] is True

    code, out, err = _run(capsys, "models", "check", str(weights))
    assert code == 0 and "longclip" in out


def test_cli_errors_are_messages_with_status_2(capsys, tmp_path, weights):
    root = str(tmp_path / "zoo")
    assert _run(capsys, "--checkpoints", root, "models", "add", str(weights), "--name", "x")[0] == 0
    code, out, err = _run(capsys, "--checkpoints", root, "models", "add", str(weights), "--name", "x")
    assert code == 2
    assert err.startswith("error:") and "already" in err
    code, out, err = _run(capsys, "models", "check", str(tmp_path / "missing.safetensors"))
    assert code == 2 and "error:" in err and "Traceback" not in err


def test_cli_without_a_command_prints_help(capsys):
    code, out, _ = _run(capsys)
    assert code == 0 and "models" in out


def test_the_models_table_says_what_score_each_model_gives(tmp_path):
    """The Models tab's score column follows a manifest's options (FLAIR's score, FineLIP's mode)."""
    from explorer.ui.models_tab import COLUMNS, zoo_table

    Manifest(name="flair-logits", method="flair", weights="missing.pt", options={"score": "logits"}).write(
        tmp_path / "flair-logits.json")
    Manifest(name="finelip-global", method="finelip", weights="missing.pt", options={"mode": "global"}).write(
        tmp_path / "finelip-global.json")
    rows = {row[0]: dict(zip(COLUMNS, row)) for row in zoo_table(Zoo(tmp_path))}
    assert rows["flair-logits"]["score"] == "logits = exp(t) x cosine + b"
    assert rows["finelip-global"]["score"] == "cosine"


def test_an_upload_is_kept_under_explorer_home_and_joins_the_zoo(zoo, weights, tmp_path, monkeypatch):
    monkeypatch.setenv("EXPLORER_HOME", str(tmp_path / "home"))
    manifest = zoo.add_upload(weights, "my model.safetensors")
    kept = Path(manifest.weights)
    assert kept.parent == tmp_path / "home" / "uploads" and kept.read_bytes() == weights.read_bytes()
    assert manifest.name == "my-model" and zoo.get("my-model").source == "uploaded as my model.safetensors"
    assert zoo.load("my-model").method_name == manifest.method
    with pytest.raises(ManifestError, match="already in the zoo"):
        zoo.add_upload(weights, "my model.safetensors")


def test_an_upload_that_would_need_unpickling_is_refused(zoo, tmp_path, monkeypatch):
    monkeypatch.setenv("EXPLORER_HOME", str(tmp_path / "home"))
    pickled = tmp_path / "model_best.pth"
    torch.save({"model": {"w": torch.zeros(2)}}, pickled)
    with pytest.raises(CheckpointError, match="only .safetensors"):
        zoo.add_upload(pickled, "model_best.pth")
    assert not (tmp_path / "home" / "uploads").exists() and zoo.manifests() == []


def test_removing_a_model_deletes_its_manifest_not_its_weights(zoo, weights):
    zoo.add(weights, name="doomed")
    zoo.load("doomed")
    path = zoo.remove("doomed")
    assert not path.exists() and weights.exists() and len(zoo.cache) == 0
    assert [m.name for m in zoo.manifests()] == []
    with pytest.raises(ManifestError):
        zoo.remove("doomed")


def test_the_memory_panel_names_every_cache_and_the_resident_size():
    from explorer.core.runtime import release_freed_memory
    from explorer.ui.memory_panel import memory_report

    report = memory_report()
    assert report.startswith("Resident memory")
    assert "sentence maps at picture size" in report and "MB of 512 MB" in report  # each cache, with its bound
    assert isinstance(release_freed_memory(), bool)


def test_removing_an_uploaded_model_deletes_its_copy_too(zoo, weights, tmp_path, monkeypatch):
    monkeypatch.setenv("EXPLORER_HOME", str(tmp_path / "home"))
    kept = Path(zoo.add_upload(weights, "up.safetensors").weights)
    zoo.remove("up")
    assert not kept.exists() and weights.exists()  # our copy goes; the user's file was never ours


def test_the_score_column_reads_the_config_stored_in_our_own_files(zoo, tmp_path):
    """A FLAIR saved with score="logits" says so without a manifest option (its file holds the config)."""
    from explorer.models.methods.flair import FlairMethod
    from explorer.ui.models_tab import COLUMNS, zoo_table

    path = save_method(FlairMethod.example("tiny", score="logits"), tmp_path / "flair-logits.safetensors")
    zoo.add(path, name="flair-logits")
    rows = {row[0]: dict(zip(COLUMNS, row)) for row in zoo_table(zoo)}
    assert rows["flair-logits"]["score"] == zoo.load("flair-logits").score_label == "logits = exp(t) x cosine + b"
