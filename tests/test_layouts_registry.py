"""Every dataset family picks its reader through one registry (explorer/data/layouts.Layouts): one module per
released layout, each with EXPECTS, matches(root) and read(root, ...), whose keyword-only parameters are the
layout's options."""

from __future__ import annotations

import pytest

from explorer.data import class_sets, grounding_sets, negatives_sets, retrieval_sets
from explorer.data.errors import DatasetError
from explorer.data.layouts import Layouts

FAMILIES = {"retrieval": retrieval_sets, "grounding": grounding_sets, "negatives": negatives_sets,
            "classes": class_sets}


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_each_family_reads_through_one_registry_of_one_module_per_layout(family):
    package = FAMILIES[family]
    registry = package.REGISTRY
    assert isinstance(registry, Layouts) and registry.names == tuple(package.LAYOUTS)
    modules = [registry.module(name) for name in registry.names]
    assert len({module.__name__ for module in modules}) == len(modules)  # CIFAR-10 and -100 each their own
    for module in modules:
        assert isinstance(module.EXPECTS, str) and callable(module.matches) and callable(module.read)


def test_a_layouts_options_are_its_readers_keywords():
    assert class_sets.REGISTRY.options("cifar100") == ("allow_pickle",)
    assert class_sets.REGISTRY.options("imagenet-o") == ("classnames", "class_set")
    assert class_sets.REGISTRY.options("folder") == ()
    assert negatives_sets.REGISTRY.module("fg-ovd").__name__.endswith(".fg_ovd")


def test_an_unknown_or_unmatched_layout_names_what_each_expects(tmp_path):
    with pytest.raises(DatasetError, match="unknown hard-negative layout 'x'; known: fg-ovd, sugarcrepe, synthetic"):
        negatives_sets.read_negatives_set(tmp_path, layout="x")
    with pytest.raises(DatasetError, match="matches no hard-negative layout. Tried: fg-ovd: "):
        negatives_sets.read_negatives_set(tmp_path)
    with pytest.raises(DatasetError, match="unknown classification layout 'cifar'"):
        class_sets.read_class_set(tmp_path, "cifar")


def test_class_folders_are_detected_by_their_names(tmp_path):
    for name, folders in {"imagenet-v2": ["0", "1", "7"], "imagenet-o": ["n01443537", "n01704323"],
                          "folder": ["red_circle", "blue_square"]}.items():
        root = tmp_path / name
        for folder in folders:
            (root / "top" / folder).mkdir(parents=True)  # as a tarball unpacks: one top folder
        assert class_sets.detect(root) == name
    (tmp_path / "c10" / "cifar-10-batches-bin").mkdir(parents=True)
    (tmp_path / "c10" / "cifar-10-batches-bin" / "test_batch.bin").write_bytes(b"")
    assert class_sets.detect(tmp_path / "c10") == "cifar10"
