"""What a method's author met bringing a method in from the docs alone (issue 51), each closed:

- the scaffold declares a ``test`` extra (pytest) and its README says ``pip install -e '.[test]'`` and
  ``python -m pytest tests/``; installed so, its own tests pass;
- the kit's zoo round trip names the installed class that holds the method's name and what to do, and
  ``explorer check-method module:Class`` checks the class under a scratch name (a copy of an installed
  method passes);
- the kit catches non-finite values in maps (padding masked with -inf) and in the padding of text tokens;
- a method says its overridden score is the cosine (``cosine_score``): an export then counts no score of its
  own, and the kit checks the claim; the scaffold carries ``cosine_score`` and ``export_leaves_out``;
- the export snippet runs in explorer's own environment: ``import explorer`` guards torchvision's import, and
  the export functions make torchvision importable themselves;
- ``bench/export.py --zoo DIR`` measures any zoo.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from explorer.cli import main
from explorer.models.methods import METHODS, SOURCES, method_entries
from explorer.models.methods.base import GENERIC_MAP, cosine_matrix
from explorer.models.methods.clip import ClipMethod
from explorer.testing import check_method
from plugin_fixtures import on_path, write_dist_info  # noqa: F401  (on_path: a fixture)

REPO = Path(__file__).resolve().parents[1]


def failing(results) -> dict[str, str]:
    return {r.name: r.detail for r in results if not r.ok}


# ---- a) the scaffold's test extra and its README ----------------------------------------------------------


def test_the_scaffold_declares_a_test_extra_and_its_readme_installs_it_and_runs_pytest_with_python(tmp_path,
                                                                                                     capsys):
    assert main(["new-method", "mymethod", "--out", str(tmp_path / "pkg")]) == 0
    assert f"pip install -e '{tmp_path / 'pkg'}[test]'" in capsys.readouterr().out
    project = tomllib.loads((tmp_path / "pkg" / "pyproject.toml").read_text())["project"]
    assert "pytest>=8" in project["optional-dependencies"]["test"]
    readme = (tmp_path / "pkg" / "README.md").read_text()
    assert "`pip install -e '.[test]'`" in readme and "`python -m pytest tests/`" in readme
    assert "`pytest tests/`" not in readme  # a pytest outside explorer's environment does not find explorer
    method = (tmp_path / "pkg" / "explorer_mymethod" / "method.py").read_text()
    assert "    cosine_score = True\n" in method and '    export_leaves_out = ""\n' in method
    assert "    def score_description(cls, options=None) -> str:\n" in method  # beside cosine_score (issue 66)
    assert "`score_description`" in readme and "score_description" in (REPO / "docs" / "plugins.md").read_text()


@pytest.mark.slow
def test_the_scaffold_installs_with_its_test_extra_declared_and_its_own_tests_pass(tmp_path):
    """Installed as pip installs it (a wheel, into a folder of its own, so this environment is left as it
    is), its tests run with ``python -m pytest tests/`` and pass: the kit and the entry point."""
    package, site = tmp_path / "pkg", tmp_path / "site"
    assert main(["new-method", "mymethod", "--out", str(package)]) == 0
    install = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation",
                              "--no-index", "--target", str(site), str(package)],
                             capture_output=True, text=True, timeout=120)
    assert install.returncode == 0, install.stderr[-2000:]
    info = next(site.glob("explorer_mymethod-0.1.0.dist-info"))
    metadata = (info / "METADATA").read_text()
    assert "Provides-Extra: test" in metadata and 'Requires-Dist: pytest>=8; extra == "test"' in metadata
    assert "mymethod = explorer_mymethod.method:MymethodMethod" in (info / "entry_points.txt").read_text()
    environment = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")]),
                   "OMP_NUM_THREADS": "1"}
    environment.pop("PYTEST_XDIST_WORKER", None)
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/"], cwd=package,
                         env=environment, capture_output=True, text=True, timeout=180)
    assert run.returncode == 0 and "2 passed" in run.stdout, run.stdout[-3000:] + run.stderr[-2000:]


# ---- b) a copy of an installed method ---------------------------------------------------------------------


class CopyOfClip(ClipMethod):
    """A copy of an installed method, its name unchanged: ``clip`` belongs to the built-in ``ClipMethod``."""
    title = "Copy of CLIP"


def test_the_zoo_round_trip_names_the_class_that_holds_the_name_and_what_to_do():
    assert CopyOfClip.name == "clip" and METHODS["clip"] is ClipMethod
    results = check_method(CopyOfClip, raise_on_failure=False)
    assert set(failing(results)) == {"zoo round trip"}, [r.line() for r in results]
    detail = failing(results)["zoo round trip"]
    assert "'clip' belongs to explorer.models.methods.clip:ClipMethod" in detail
    assert "explorer check-method test_plugin_author_gaps:CopyOfClip" in detail and "scratch name" in detail
    assert "give it a name of its own" in detail and "load back as ClipMethod" in detail


def test_check_method_on_a_class_checks_it_under_a_scratch_name_so_a_copy_passes(capsys):
    method_entries()  # every method discovered first (built-ins and plugins load on first use)
    registry = dict(METHODS)
    assert main(["check-method", "test_plugin_author_gaps:CopyOfClip"]) == 0
    out = capsys.readouterr().out
    assert "11 of 11 checks pass" in out, out
    zoo = next(line for line in out.splitlines() if "zoo round trip" in line)
    assert "under the scratch name 'clip_check_" in zoo and "explorer.models.methods.clip:ClipMethod" in zoo
    assert METHODS == registry and not any("_check_" in name for name in SOURCES)  # the scratch name is gone


# ---- c) non-finite values after masking -------------------------------------------------------------------


def token_patch_cosines(image, text):
    """[M, K, P]: each token of each sentence against each patch of the first image."""
    return torch.einsum("mkd,pd->mkp", F.normalize(text.tokens.float(), dim=-1),
                        F.normalize(image.patches[0].float(), dim=-1))


class InfPaddedMap(ClipMethod):
    """A token map whose padding is masked with -inf before a mean over the tokens: -inf in the padded
    sentences' maps."""
    name, title = "kit_inf_map", "InfMap"
    native_map_kinds = ("tokens",)

    def sentence_maps(self, image, text, kind=GENERIC_MAP):
        if kind != "tokens":
            return super().sentence_maps(image, text, kind)
        rows, cols = image.grid_hw
        scores = token_patch_cosines(image, text).masked_fill(~text.mask[:, :, None], float("-inf"))
        return scores.mean(dim=1).reshape(len(text), rows, cols)


class InfPaddedTokens(ClipMethod):
    """Text tokens whose padding rows are -inf; its map (a max over the tokens) stays finite, so only the
    features show it."""
    name, title = "kit_inf_tokens", "InfTokens"
    native_map_kinds = ("tokens",)

    def encode_text(self, ids):
        text = super().encode_text(ids)
        text.tokens = text.tokens.masked_fill(~text.mask[:, :, None], float("-inf"))
        return text

    def sentence_maps(self, image, text, kind=GENERIC_MAP):
        if kind != "tokens":
            return super().sentence_maps(image, text, kind)
        rows, cols = image.grid_hw
        scores = token_patch_cosines(image, text.__class__(text.eot, text.tokens.nan_to_num(0.0), text.mask))
        return scores.masked_fill(~text.mask[:, :, None], -1.0).amax(dim=1).reshape(len(text), rows, cols)


def test_a_map_whose_padding_is_masked_with_minus_inf_is_caught_and_the_message_says_so():
    results = check_method(InfPaddedMap, raise_on_failure=False)
    assert set(failing(results)) == {"maps"}, [r.line() for r in results]
    detail = failing(results)["maps"]
    assert detail.startswith("tokens: ") and "-inf" in detail and "in sentence(s) 3 of 3" in detail
    assert "only sentences with padding" in detail and "never -inf" in detail
    assert InfPaddedMap.name not in METHODS


def test_text_tokens_with_minus_inf_padding_are_caught_even_when_the_maps_are_finite():
    results = check_method(InfPaddedTokens, raise_on_failure=False)
    assert "features" in failing(results), [r.line() for r in results]
    assert "maps" not in failing(results)
    assert "all at padding" in failing(results)["features"]



class NanEverywhere(ClipMethod):
    """A map that is nan everywhere, the unpadded (longest) sentence's too: not padding's doing."""
    name, title = "kit_nan_map", "NanMap"
    native_map_kinds = ("tokens",)

    def sentence_maps(self, image, text, kind=GENERIC_MAP):
        maps = super().sentence_maps(image, text, GENERIC_MAP)
        return maps if kind != "tokens" else torch.full_like(maps, float("nan"))


class InfDenseMap(ClipMethod):
    """Reads a dense caption (as SEPS does) and its maps with one are -inf in the first sentence; its maps
    without one are finite."""
    name, title = "kit_inf_dense", "InfDense"
    uses_dense_caption = True

    def dense_caption_maps(self, image, text, dense, kind=GENERIC_MAP):
        maps = self.sentence_maps(image, text, kind).clone()
        maps[0] = float("-inf")
        return maps


def test_a_non_finite_map_outside_the_padding_is_not_blamed_on_the_padding():
    results = check_method(NanEverywhere, raise_on_failure=False)
    assert set(failing(results)) == {"maps"}, [r.line() for r in results]
    detail = failing(results)["maps"]
    assert detail.startswith("tokens: ") and "nan" in detail and "in sentence(s) 1, 2, 3 of 3" in detail
    assert "only sentences with padding" not in detail


def test_the_maps_with_a_dense_caption_are_checked_too():
    results = check_method(InfDenseMap, raise_on_failure=False)
    assert set(failing(results)) == {"maps"}, [r.line() for r in results]
    assert "with a dense caption" in failing(results)["maps"] and "-inf" in failing(results)["maps"]
    assert InfDenseMap.name not in METHODS


# ---- d) what a method adds, for an export -----------------------------------------------------------------


class PlainCosine(ClipMethod):
    """SPARC's case: ``similarity`` overridden, and it is the plain cosine (the method adds a loss only)."""
    name, title = "kit_plain_cosine", "PlainCosine"

    def similarity(self, image, text):
        return cosine_matrix(image.cls, text.eot)


class SaysCosine(PlainCosine):
    name, title = "kit_says_cosine", "SaysCosine"
    cosine_score = True


class SaysCosineWrongly(ClipMethod):
    name, title = "kit_says_cosine_wrongly", "Wrong"
    cosine_score = True

    def similarity(self, image, text):
        return 2.0 * cosine_matrix(image.cls, text.eot)


def test_an_overridden_score_that_says_it_is_the_cosine_exports_whole_and_the_pool_is_the_backbones_to_say():
    from dataclasses import replace

    from explorer.core.errors import ExportError
    from explorer.models.export import export_scope

    arch = ClipMethod.example("tiny").arch
    plain = PlainCosine(arch)
    assert not plain.global_score and "own score" in plain.export_left_out("open_clip")
    assert "cosine_score = True" in plain.export_left_out("open_clip")
    says = SaysCosine(arch)
    assert says.global_score and says.export_left_out("open_clip") == "" == export_scope(says, "transformers")
    pooled = SaysCosine(replace(arch, pool="attn", pool_heads=1))  # trained from the demo zoo's base
    left = pooled.export_left_out("open_clip")
    assert left.startswith("the attention pooling") and "backbone's image_pool" in left and "score" not in left
    with pytest.raises(ExportError, match="attention pooling.*--backbone-only"):
        export_scope(pooled, "open_clip")


def test_the_kit_checks_a_cosine_score_claim():
    results = check_method(SaysCosineWrongly, raise_on_failure=False)
    assert set(failing(results)) == {"similarity"}, [r.line() for r in results]
    assert "set cosine_score = False" in failing(results)["similarity"]


def test_the_scaffolded_method_exports_whole_as_written(tmp_path, on_path):
    assert main(["new-method", "mymethod", "--out", str(tmp_path / "pkg")]) == 0
    write_dist_info(tmp_path / "site", "explorer-mymethod", "0.1.0",
                    {"mymethod": "explorer_mymethod.method:MymethodMethod"})
    on_path(tmp_path / "pkg", tmp_path / "site")
    from explorer.models.methods import get_method

    method = get_method("mymethod").example("tiny")
    assert method.global_score and method.export_left_out("open_clip") == ""


# ---- e) the export snippet in explorer's own environment --------------------------------------------------


def test_the_export_functions_make_torchvision_importable_before_anything_else(monkeypatch, tmp_path):
    import explorer.core.runtime as runtime
    from explorer.core.errors import ExportError
    from explorer.models.export import export_model

    calls = []
    monkeypatch.setattr(runtime, "prepare_libraries", lambda: calls.append("prepared"))
    with pytest.raises(ExportError, match="export format must be one of"):
        export_model(ClipMethod.example("tiny"), "no-such-format", tmp_path / "x")
    assert calls == ["prepared"]  # called first, before the format is even looked at


@pytest.mark.slow(reason="exports a tiny CLIP both ways, then imports explorer, open_clip and transformers in a fresh "
                         "Python and reads the folders back")
def test_import_explorer_guards_torchvision_and_the_readme_export_snippet_runs_as_written(tmp_path):
    """One fresh Python for both checks (issue 65: its start and its imports of open_clip and transformers were
    most of each test's 14 s): ``import explorer`` alone imports neither torch nor torchvision and puts its guard
    first on ``sys.meta_path``; then the README's snippet reads a tiny CLIP exported both ways back, with
    open_clip (which imports torchvision: a CPU torch beside a CUDA-linked one fails there without the guard)
    and transformers imported after ``import explorer``, as a user's script does."""
    from explorer.models.export import export_model

    method = ClipMethod.example("tiny")
    export_model(method, "transformers", tmp_path / "hf")
    export_model(method, "open_clip", tmp_path / "oc")
    code = ("import sys, explorer\n"
            "from explorer.core.compat import TorchvisionGuard\n"
            "assert 'torch' not in sys.modules and 'torchvision' not in sys.modules\n"
            "assert isinstance(sys.meta_path[0], TorchvisionGuard)\n"
            "print('guarded')\n"
            # the README's snippet, as written
            "from transformers import CLIPModel, CLIPProcessor\n"
            f"model = CLIPModel.from_pretrained({str(tmp_path / 'hf')!r})\n"
            f"processor = CLIPProcessor.from_pretrained({str(tmp_path / 'hf')!r})\n"
            "import open_clip\n"
            f"model, _, preprocess = open_clip.create_model_and_transforms('local-dir:{tmp_path / 'oc'}')\n"
            f"tokenizer = open_clip.get_tokenizer('local-dir:{tmp_path / 'oc'}')\n"
            "print('read back', tokenizer(['a red cube']).shape)\n")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=240, cwd=REPO,
                         env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert run.returncode == 0 and "guarded" in run.stdout and "read back" in run.stdout, run.stderr[-3000:]


# ---- f) bench/export.py on any zoo ------------------------------------------------------------------------


def bench_export():
    spec = importlib.util.spec_from_file_location("bench_export", REPO / "bench" / "export.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
def test_bench_export_measures_any_zoo(tmp_path, capsys):
    from explorer.models.io.loading import save_method
    from explorer.models.methods import get_method
    from explorer.training.checkpointing import architecture_name
    from explorer.zoo import Manifest

    zoo = tmp_path / "zoo"
    for name in ("clip", "seps"):
        method = get_method(name).example("tiny")
        weights = save_method(method, zoo / f"tiny-{name}.safetensors")
        Manifest(name=f"tiny-{name}", method=name, weights=weights.name, architecture=architecture_name(method),
                 context_length=method.context_length).write(zoo / f"tiny-{name}.json")
    bench = bench_export()
    assert bench.main(["--zoo", str(zoo), "--scenes", "2", "--out", str(tmp_path / "rows.json")]) == 0
    rows = json.loads((tmp_path / "rows.json").read_text())
    assert [(r["model"], r["format"]) for r in rows] == [("tiny-clip", "transformers"), ("tiny-clip", "open_clip"),
                                                         ("tiny-seps", "transformers"), ("tiny-seps", "open_clip")]
    for row in rows[:2]:
        assert row["whole"] and row["synthetic"]["image"] < 1e-4 and row["photos"]["text"] < 1e-4, row
    assert all("no CLIP backbone" in row["skipped"] for row in rows[2:])
    capsys.readouterr()
    assert bench.main(["--zoo", str(zoo), "--model", "demo-clip-base"]) == 2
    error = capsys.readouterr().err
    assert "no model named 'demo-clip-base'" in error and "it has tiny-clip, tiny-seps" in error
