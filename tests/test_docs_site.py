"""The documentation site builds with every link, anchor and API docstring in place, and the README stays a
front door.

``mkdocs build --strict`` (mkdocs.yml: MkDocs, mkdocs-material, mkdocstrings) fails on a broken relative link,
a missing anchor, a page left out of the navigation and a docstring mkdocstrings cannot read, so a change
that breaks the site fails here. The docs packages come with the ``test`` extra (and ``docs``).
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
README_MAX_LINES = 300


def nav_pages(nav) -> list[str]:
    """Every page file the navigation names, in order."""
    pages = []
    for entry in nav:
        value = next(iter(entry.values())) if isinstance(entry, dict) else entry
        pages.extend(nav_pages(value) if isinstance(value, list) else [value])
    return pages


def config() -> dict:
    # mkdocs.yml may hold !!python tags in other projects; this one is plain YAML
    return yaml.safe_load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"))


def test_the_readme_is_a_front_door():
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= README_MAX_LINES, f"README.md has {len(lines)} lines; move detail into docs/"
    text = "\n".join(lines)
    # the two set-up commands, as they are
    assert "pip install -c constraints.txt pip && pip install --no-compile -c constraints.txt -e . && python app.py" in text
    assert "bash scripts/test.sh" in text


def test_every_page_in_the_navigation_exists_and_every_page_is_in_it():
    cfg = config()
    docs = ROOT / cfg.get("docs_dir", "docs")
    pages = nav_pages(cfg["nav"])
    assert pages and len(pages) == len(set(pages)), pages
    missing = [page for page in pages if not (docs / page).is_file()]
    assert not missing, f"mkdocs.yml's nav names pages that do not exist: {missing}"
    excluded = tuple(line.strip().lstrip("/") for line in cfg.get("exclude_docs", "").splitlines() if line.strip())
    written = (str(p.relative_to(docs)) for p in docs.rglob("*.md"))  # data files (the gallery's inputs) excluded
    left_out = sorted(page for page in written if page not in pages and not page.startswith(excluded))
    assert not left_out, f"pages not in mkdocs.yml's nav: {left_out}"


def test_the_readme_links_into_the_docs_resolve():
    import re

    text = (ROOT / "README.md").read_text(encoding="utf-8")
    targets = {m.split("#")[0] for m in re.findall(r"\]\(([^)\s]+)\)", text) if not m.startswith(("http", "#"))}
    assert any(t.startswith("docs/") for t in targets)
    broken = sorted(t for t in targets if not (ROOT / t).exists())
    assert not broken, f"README.md links to files that do not exist: {broken}"


@pytest.mark.slow
def test_the_site_builds_strictly(tmp_path):
    if importlib.util.find_spec("mkdocs") is None or importlib.util.find_spec("mkdocstrings") is None:
        pytest.skip("mkdocs and mkdocstrings are not installed: pip install -e '.[docs]' (the test extra has them)")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}  # mkdocs-material's notice about its successor
    run = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
                         cwd=ROOT, capture_output=True, text=True, env=env, timeout=600)
    assert run.returncode == 0, f"mkdocs build --strict failed:\n{run.stdout[-4000:]}\n{run.stderr[-4000:]}"
    site = tmp_path / "site"
    assert (site / "index.html").is_file() and (site / "search" / "search_index.json").is_file()
    api = (site / "api" / "index.html").read_text(encoding="utf-8")
    # the API reference is built from the docstrings: the public names and the fields a plugin author reads
    for name in ("explorer.load", "Model", "SentenceMaps", "ImageFeatures", "TextFeatures", "TrainingBatch",
                 "Method", "check_method", "export_model", "export_leaves_out", "negative_captions"):
        assert name in api, f"the API page lacks {name}"
